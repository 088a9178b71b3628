"""verl-vla's env worker with envfleet inside: ``EnvWorker(config, role)`` with verl-vla's ``cluster.env``.

One job: verl-vla's env-worker contract over envfleet's worker; the only module that imports verl-vla.

verl-vla's ``TrainCluster`` builds its Env role as
``RayClassWithInitArgs(cls=ray.remote(EnvWorker), config=<EnvTrainConfig>, role="env")``
in a ``RayWorkerGroup``, and its ``EnvLoop`` drives it. This class has that
constructor, those methods, dispatch modes and blocking flags:

- ``init_worker``: one-to-all; starts one envfleet manager per stage for each mode
  of ``env_worker.modes`` (``train``, ``eval``);
- ``reset_env(mode=, reset_eval=)``: non-blocking; the env chooses the states
  (:class:`~envfleet.states.ResetPlan`); with ``auto_reset`` it returns the
  latest observations instead of resetting (unless ``reset_eval``);
- ``env_interact_step(data, mode=)``: non-blocking; ``action`` ``[n, T, D]``;
- ``get_eval_benchmark_size``, ``finish_rollout``, ``pop_lerobot_dataset``, ``record``,
  ``replay_episode``, ``close``: one-to-all.

The data methods are coroutines that run the step in a thread, so two stages of one
worker step at the same time. :func:`use_envfleet` puts this class where verl-vla's
``TrainCluster`` looks for its env worker, with no edit of verl-vla (a Ray
``worker_process_setup_hook``). Config mapping: :mod:`envfleet_ray.verl_vla_config`.

This is the only module of envfleet that imports verl-vla, and only for
:data:`SimulatorConfig` (verl-vla's typed config checks the simulator section's class).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from envfleet.dataproto import DataProto
from envfleet.errors import InvalidInputError
from envfleet.execution import RESULT_KEYS
from envfleet.states import ResetPlan

from .runtime.worker import EnvWorker as FleetWorker
from .verl_vla_config import VerlVlaSettings, read_config
from .verl_vla_record import RankDatasetPopper

try:
    from verl.protocol import DataProto as VerlDataProto
    from verl.single_controller.base import Worker
    from verl.single_controller.base.decorator import Dispatch, make_nd_compute_dataproto_dispatch_fn, register
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(f"envfleet_ray.verl_vla needs verl 0.7.1's single controller and DataProto ({exc}): pip install verl==0.7.1") from exc

# Imports inside functions: verl-vla is optional: it loads only in use_envfleet, inside verl-vla's own
# processes.

__all__ = ["EnvWorker", "MESH", "extra_observations", "use_envfleet", "dispatch_reset_env", "dispatch_env_interact_step", "collect_env"]

MESH = "env"  # the dispatch mesh of the data methods, as in verl-vla's env worker
_FLEET_MODE = {"train": "train", "eval": "val"}  # verl-vla's mode names -> envfleet's


def dispatch_reset_env(worker_group: Any, *args: Any, **kwargs: Any) -> Any:
    """``reset_env(mode="train", reset_eval=False)`` on every worker: the request travels in ``meta_info``."""
    mode = kwargs.pop("mode", "train")
    reset_eval = kwargs.pop("reset_eval", False)
    if args or kwargs:
        raise InvalidInputError(f"reset_env takes only mode= and reset_eval=, got {len(args)} positional and {sorted(kwargs)}")
    request = VerlDataProto.from_dict(meta_info={"mode": mode, "reset_eval": reset_eval})
    return make_nd_compute_dataproto_dispatch_fn(MESH)["dispatch_fn"](worker_group, request)


def dispatch_env_interact_step(worker_group: Any, *args: Any, **kwargs: Any) -> Any:
    """``env_interact_step(data, mode="train")``: ``data`` split by rank, ``mode`` to every worker."""
    mode = kwargs.pop("mode", "train")
    all_args, all_kwargs = make_nd_compute_dataproto_dispatch_fn(MESH)["dispatch_fn"](worker_group, *args, **kwargs)
    all_kwargs["mode"] = [mode] * worker_group.world_size
    return all_args, all_kwargs


def collect_env(worker_group: Any, *args: Any, **kwargs: Any) -> Any:
    """The workers' DataProtos concatenated, worker by worker."""
    return make_nd_compute_dataproto_dispatch_fn(MESH)["collect_fn"](worker_group, *args, **kwargs)


def extra_observations(spec: Mapping[str, Any], batch: Any) -> dict[str, Any]:
    """The backend's observations beyond verl-vla's three, in LeRobot's naming: a camera image
    (uint8 ``[H, W, 3]``) ``key`` as ``observation.images.<key>``, any other array as
    ``observation.<key>``, each with its shape and dtype."""
    out: dict[str, Any] = {}
    for key, arr in spec.items():
        if key in ("full_image", "wrist_image", "state"):
            continue
        image = np.dtype(arr.dtype) == np.uint8 and len(arr.shape) == 3 and arr.shape[-1] == 3
        name = f"observation.images.{key}" if image else f"observation.{key}"
        if name in ("observation.images.image", "observation.images.wrist_image", "observation.state"):
            raise InvalidInputError(
                f"the backend's observation {key!r} would become verl-vla's {name!r}, which full_image, wrist_image or state fills: "
                "the backend must name it otherwise"
            )
        out[name] = batch[key]
    return out


_DATA = {"dispatch_fn": dispatch_reset_env, "collect_fn": collect_env}
_STEP = {"dispatch_fn": dispatch_env_interact_step, "collect_fn": collect_env}


class EnvWorker(Worker):  # type: ignore[misc]
    """verl-vla's env worker with envfleet inside.

    :param config: verl-vla's ``cluster.env`` (``EnvTrainConfig``, or a mapping in its layout:
        ``env_loop`` and ``env_worker``).
    :param role: the role name verl-vla's ``TrainCluster`` passes (``"env"``).

    The envfleet worker is :attr:`worker`; its rank is verl's rank.
    """

    def __init__(self, config: Any, role: str | None = None) -> None:
        Worker.__init__(self)
        self.cfg = config
        self.role = role
        self.settings: VerlVlaSettings = read_config(config)
        self.stage_num = self.settings.stage_num
        self.num_envs = self.settings.num_envs
        self.worker = FleetWorker(self.settings.fleet_config, rank=self.rank)
        self._plans: dict[tuple[str, int], ResetPlan] = {}
        self._rows: dict[tuple[str, int], np.ndarray] = {}  # (mode, stage) -> the state id each env runs
        self._latest: dict[tuple[str, int], Any] = {}  # (mode, stage) -> the latest observations, reset keys
        self._popper: RankDatasetPopper | None = None  # pop_lerobot_dataset's, built on first use
        self._latency_steps = 0  # log_step_latency's count of sub-steps
        self._register_dispatch_collect_info(MESH, dp_rank=self.rank, is_collect=True)

    # ------------------------------------------------------------------ lifecycle
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_worker(self) -> None:
        """Build and start one envfleet manager per stage for each of ``env_worker.modes``."""
        self.worker.init_worker()
        for mode in self.settings.modes:
            self.worker.init_simulator(_FLEET_MODE[mode])
            ids = self.worker.get_all_state_ids(_FLEET_MODE[mode])
            tasks = self.worker.get_state_task_ids(_FLEET_MODE[mode])
            for stage in range(self.stage_num):
                self._plans[(mode, stage)] = ResetPlan(
                    ids,
                    tasks,
                    **self.settings.filters,
                    seed=self.settings.seed,
                    process=self.rank * self.stage_num + stage,
                    processes=self.world_size * self.stage_num,
                    num_envs=self.num_envs,
                )

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def node_info(self) -> dict[str, Any]:
        """Where this worker runs: host, pid and its simulator processes (see :meth:`envfleet_ray.runtime.worker.EnvWorker.node_info`)."""
        return self.worker.node_info()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def close(self) -> None:
        """Stop every simulator process and free shared memory. Safe to call twice."""
        self.worker.close()

    # ------------------------------------------------------------------ data
    def _mode(self, mode: Any) -> str:
        if mode not in ("train", "eval"):
            raise InvalidInputError(f"mode must be 'train' or 'eval', got {mode!r}")
        if mode not in self.settings.modes:
            raise InvalidInputError(f"mode {mode!r} is not started: env_worker.modes is {list(self.settings.modes)}; add {mode!r} to it")
        return str(mode)

    @register(dispatch_mode=_DATA, blocking=False)
    async def reset_env(self, data: Any) -> Any:
        """Reset every stage to states the env chooses; rows stage by stage.

        Keys: ``observation.images.image``, ``observation.images.wrist_image`` (when the
        backend has one), ``observation.state``, and the backend's other observations
        (:func:`extra_observations`); non-tensors ``task``, ``task_id``,
        ``eval_episode_id`` (the benchmark case, -1 in train).
        """
        return await asyncio.to_thread(self._reset_env, data)

    def _reset_env(self, data: Any) -> Any:
        meta = getattr(data, "meta_info", None)
        if not isinstance(meta, dict):
            raise InvalidInputError(f"reset_env takes a DataProto with meta_info {{mode, reset_eval}}, got {type(data).__name__}")
        mode = self._mode(meta.get("mode", "train"))
        reset_eval = meta.get("reset_eval", False)
        if not isinstance(reset_eval, (bool, np.bool_)):
            raise InvalidInputError(f"reset_eval must be a bool, got {reset_eval!r}")
        stages = range(self.stage_num)
        if self.settings.auto_reset and not reset_eval and all((mode, s) in self._latest for s in stages):
            return VerlDataProto.concat([self._latest[(mode, s)] for s in stages])
        chosen, cases = [], []
        for s in stages:
            plan = self._plans[(mode, s)]
            if mode == "eval":
                if reset_eval:
                    plan.rewind()
                ids, case = plan.next_eval(self.num_envs)
            else:
                ids = plan.next_train(self.num_envs)
                case = np.full(self.num_envs, -1, dtype=np.int64)
            chosen.append(ids)
            cases.append(case)
        request = DataProto.from_dict(non_tensors={"state_ids": np.concatenate(chosen)}, meta_info={"mode": _FLEET_MODE[mode]})
        result = self.worker.reset_envs_to_state_ids(request)
        n, parts = self.num_envs, []
        for s in stages:
            part = result.slice(s * n, (s + 1) * n)
            self._rows[(mode, s)] = chosen[s]
            self._latest[(mode, s)] = self._observations(mode, s, part)
            parts.append(self._latest[(mode, s)])
        return VerlDataProto.concat(parts)

    @register(dispatch_mode=_STEP, blocking=False)
    async def env_interact_step(self, data: Any, mode: str = "train") -> Any:
        """Step stage ``data.meta_info["stage_id"]`` with ``action`` ``[n, T, D]`` (a tensor, or the
        non-tensor ``action`` as a fallback).

        Keys: ``obs.`` + the reset's keys (the observation after the chunk; with
        ``auto_reset``, an ended episode's replacement and its ``obs.task_id`` /
        ``obs.eval_episode_id``), ``next.reward``, ``next.terminated``, ``next.truncated``,
        ``next.success`` (each ``[n, T]``).
        """
        return await asyncio.to_thread(self._step, data, mode)

    def _step(self, data: Any, mode: str) -> Any:
        mode = self._mode(mode)
        if not isinstance(data, VerlDataProto):
            raise InvalidInputError(f"env_interact_step takes a verl DataProto, got {type(data).__name__}")
        if data.batch is not None and "action" in data.batch.keys():
            action = data.batch["action"]
        elif "action" in data.non_tensor_batch:
            action = data.non_tensor_batch["action"]
        else:
            raise InvalidInputError("the DataProto has no 'action' (expected a tensor 'action' [n, T, action_dim], or a non-tensor one)")
        if isinstance(action, np.ndarray) and action.dtype == object:
            try:
                action = np.stack(list(action))
            except (ValueError, TypeError) as exc:
                raise InvalidInputError(f"the non-tensor 'action' does not stack into [n, T, action_dim]: {exc}") from None
        action = action.detach().cpu().numpy() if isinstance(action, torch.Tensor) else np.asarray(action)
        if "stage_id" not in data.meta_info:
            raise InvalidInputError(f"meta_info['stage_id'] is missing: expected an int in [0, {self.stage_num})")
        stage = data.meta_info["stage_id"]
        request = DataProto.from_dict(non_tensors={"actions": action}, meta_info={"stage_id": stage, "mode": _FLEET_MODE[mode]})
        in_range = isinstance(stage, (int, np.integer)) and not isinstance(stage, bool) and 0 <= stage < self.stage_num
        if in_range and (mode, int(stage)) not in self._rows:
            raise InvalidInputError(f"stage {stage} of mode {mode!r} has not been reset: call reset_env(mode={mode!r}) first")
        t0 = time.perf_counter()
        result = self.worker.env_interact_step(request)
        stage = int(stage)
        batch = result.batch
        assert batch is not None
        if self.settings.log_step_latency:
            self._log_latency(mode, stage, batch, time.perf_counter() - t0)
        terminated, truncated = batch["terminations"].bool(), batch["truncations"].bool()
        observed = result
        if self.settings.auto_reset:
            observed = self._auto_reset(mode, stage, (terminated | truncated).any(dim=1).numpy(), result)
        latest = self._observations(mode, stage, observed)
        self._latest[(mode, stage)] = latest
        # The per-sub-step success, apart from terminations (which may include failures).
        success = batch["success"].bool() if "success" in batch.keys() and batch["success"].shape == terminated.shape else terminated
        tensors = {f"obs.{k}": v for k, v in latest.batch.items()}
        flags = {"next.reward": batch["rews"].float(), "next.terminated": terminated, "next.truncated": truncated, "next.success": success}
        if self.settings.realtime:
            # verl-vla's async results are [n, T] for a call of T actions: the horizon's sub-steps, padded or folded.
            flags = {key: _to_call_length(value, action.shape[1]) for key, value in flags.items()}
            tensors.update({f"next.{key}": batch[key] for key in RESULT_KEYS})
        tensors.update(flags)
        non_tensors = {f"obs.{k}": v for k, v in latest.non_tensor_batch.items()}
        return VerlDataProto.from_dict(tensors=tensors, non_tensors=non_tensors)

    def _log_latency(self, mode: str, stage: int, batch: Any, call_s: float) -> None:
        """verl-vla's ``log_step_latency`` lines, one per sub-step: under the wall clock each sub-step's own time
        (from ``substep_t``), otherwise the call's time shared out over its sub-steps."""
        steps = int(batch["rews"].shape[1])
        if "substep_t" in batch.keys():
            starts = batch["substep_t"][0].double().numpy()
            each = np.diff(starts, append=starts[-1] + (starts[-1] - starts[0]) / max(steps - 1, 1)) * 1000.0
        else:
            each = np.full(steps, call_s * 1000.0 / max(steps, 1))
        name = self.settings.fleet_config["train"]["simulator_type"]
        for ms in each:
            self._latency_steps += 1
            print(
                f"[step-latency] rank={self.rank} stage={stage} env={name} step={self._latency_steps} num_envs={self.num_envs} "
                f"env_step_ms={ms:.2f} teleop_publish_ms=0.00 record_ms=0.00 total_ms={ms:.2f}",
                flush=True,
            )

    def _auto_reset(self, mode: str, stage: int, done: np.ndarray, result: DataProto) -> DataProto:
        """Reset the envs whose episode ended in the chunk to states drawn as verl-vla's env does:
        train from the filtered pool, eval the next cases of this stage's share. Returns the
        stage's observations after it (``result`` itself when no env ended)."""
        ended = np.flatnonzero(done)
        if ended.size == 0:
            return result
        plan = self._plans[(mode, stage)]
        ids = plan.next_eval(ended.size)[0] if mode == "eval" else plan.next_train(ended.size)
        rows = self._rows[(mode, stage)].copy()
        rows[ended] = ids
        fresh = self.worker.reset_some_envs(stage, ended, ids, _FLEET_MODE[mode])
        self._rows[(mode, stage)] = rows
        return fresh

    def _observations(self, mode: str, stage: int, part: DataProto) -> Any:
        """verl-vla's observation keys of one stage's rows."""
        batch = part.batch
        assert batch is not None
        tensors = {"observation.images.image": batch["full_image"]}
        if "wrist_image" in batch.keys():
            tensors["observation.images.wrist_image"] = batch["wrist_image"]
        tensors["observation.state"] = batch["state"].to(self.settings.state_dtype)
        tensors.update(extra_observations(self.worker.observation_spec(_FLEET_MODE[mode]), batch))
        rows = self._rows[(mode, stage)]
        plan = self._plans[(mode, stage)]
        cases = plan.case_of(rows) if mode == "eval" else np.full(len(rows), -1, dtype=np.int64)
        task = np.empty(len(rows), dtype=object)
        task[:] = list(part.non_tensor_batch["task_descriptions"])
        non_tensors = {"task": task, "task_id": plan.task_of(rows), "eval_episode_id": cases}
        return VerlDataProto.from_dict(tensors=tensors, non_tensors=non_tensors)

    # ------------------------------------------------------------------ one-to-all
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def get_eval_benchmark_size(self) -> int:
        """The number of cases of the eval benchmark (the filtered pool)."""
        mode = "eval" if "eval" in self.settings.modes else "train"
        return int(self._plans[(mode, 0)].benchmark.size)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    async def finish_rollout(self) -> dict[str, Any]:
        """Flush videos; returns envfleet's metrics of each started mode since the last call
        (see :meth:`envfleet_ray.runtime.worker.EnvWorker.finish_rollout`)."""
        modes = list(self.settings.modes)
        return {mode: await asyncio.to_thread(self.worker.finish_rollout, _FLEET_MODE[mode]) for mode in modes}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def pop_lerobot_dataset(self) -> dict[str, str] | None:
        """This rank's episodes recorded since the last call, as verl-vla's per-rank LeRobot dataset:
        ``{"root", "repo_id"}`` (``{recorder.lerobot.root}/{repo_id}_rank_{rank}``), or None when
        verl-vla's LeRobot recorder is off or nothing new was recorded. Call it after ``finish_rollout``
        (which waits for the writer), as verl-vla's ``TrainCluster`` does."""
        lerobot = self.settings.lerobot
        if lerobot is None:
            return None
        if self._popper is None:
            record_dir = str(self.settings.fleet_config["train"]["record"]["dir"])
            self._popper = RankDatasetPopper(record_dir, self.rank, lerobot["root"], lerobot["repo_id"])
        return self._popper.pop()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def record(self) -> None:
        """verl-vla's ``record()`` drives one episode from a teleoperation device and records it;
        envfleet serves no teleoperation (``teleop.enable`` is refused), so this is an error.
        Policy episodes are recorded with ``recorder.recorders: [lerobot]`` (see :meth:`pop_lerobot_dataset`)."""
        raise NotImplementedError(
            "record() runs a teleoperated episode in verl-vla, and envfleet's env worker serves no teleoperation; "
            "policy episodes are recorded with env_worker.recorder.recorders: [lerobot] and handed out by pop_lerobot_dataset(); "
            "use verl-vla's own EnvWorker for teleoperated recording"
        )

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def replay_episode(self, episode: dict[str, Any]) -> None:
        """Dataset replay is verl-vla's own; envfleet does not serve it."""
        raise NotImplementedError("envfleet's env worker does not serve episode replay; use verl-vla's own EnvWorker for it")


def use_envfleet() -> None:
    """Make verl-vla's ``TrainCluster`` build envfleet's env worker: a Ray ``worker_process_setup_hook``.

    Ray runs it in every worker process before any task, so the Ray task in which
    verl-vla's workflows build their ``TrainCluster`` sees this class as
    ``verl_vla.train_cluster.cluster.EnvWorker``; verl-vla itself is not edited::

        vvla-eval ... +ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=envfleet_ray.verl_vla.use_envfleet
    """
    import verl_vla.train_cluster.cluster as cluster

    cluster.EnvWorker = EnvWorker  # type: ignore[misc]


def _simulator_config_class() -> type:
    """verl-vla's ``SimulatorConfig`` widened to every envfleet backend (see :data:`SimulatorConfig`)."""
    from dataclasses import dataclass, field

    from verl_vla.workers.env.config import SimulatorConfig as VerlVlaSimulatorConfig

    @dataclass
    class SimulatorConfig(VerlVlaSimulatorConfig):  # type: ignore[misc,valid-type]
        """verl-vla's simulator section naming any envfleet backend.

        ``simulator_type``: ``libero`` (read from the ``libero`` section, as verl-vla's own)
        or any envfleet backend name; ``envfleet``: keys of envfleet's ``train`` section
        (for example ``{toy: {num_tasks: 2}}``, ``settle_action: zeros``); ``seed``,
        ``task_ids``, ``num_trials_per_task``, ``specific_reset_id``: the reset pool of a
        backend other than LIBERO (LIBERO's come from its section).
        """

        envfleet: dict[str, Any] = field(default_factory=dict)
        seed: int = 42
        task_ids: list[int] | None = None
        num_trials_per_task: int | None = None
        specific_reset_id: int | None = None

        def __post_init__(self) -> None:
            # verl-vla's check admits its own three names only; the backend's name is checked
            # against envfleet's registry when the worker reads the config.
            name = self.simulator_type
            object.__setattr__(self, "simulator_type", "libero")
            super().__post_init__()
            object.__setattr__(self, "simulator_type", name)

    return SimulatorConfig


def __getattr__(name: str) -> Any:
    # Built on first use: verl-vla's typed config accepts only subclasses of its own
    # SimulatorConfig, and verl-vla is needed for nothing else here.
    if name == "SimulatorConfig":
        cls = _simulator_config_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _to_call_length(values: torch.Tensor, length: int) -> torch.Tensor:
    """``[n, H]`` per-sub-step values as ``[n, length]``: padded (zeros, False) when ``H < length``; when the
    interpolation made ``H`` longer, sub-step ``h`` counted in column ``h * length // H`` (rewards summed, flags or'ed)."""
    n, steps = values.shape[0], values.shape[1]
    if steps == length:
        return values
    if steps < length:
        out = torch.zeros((n, length), dtype=values.dtype)
        out[:, :steps] = values
        return out
    column = torch.arange(steps) * length // steps
    summed = torch.zeros((n, length), dtype=torch.float32).index_add_(1, column, values.float())
    return summed if values.dtype.is_floating_point else summed > 0
