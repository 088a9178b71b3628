"""``EnvWorker``: one group of simulators per pipeline stage, behind verl's env-worker API.

One job: verl's env-worker API over one manager per pipeline stage.

A plain class: it runs in-process for tests and debugging, and becomes a Ray actor
with ``ray.remote(EnvWorker)`` (see :class:`~envfleet_ray.runtime.group.EnvWorkerGroup`).
The backend is found in the plugin registry by ``train.simulator_type``; this
package imports no backend by name.

Calls for different stages may run at the same time (a threaded actor); calls for
the same stage run one after another (a lock per stage).

>>> worker = EnvWorker(cfg)                       # doctest: +SKIP
>>> worker.init_worker(); worker.init_simulator() # doctest: +SKIP
>>> out = worker.env_interact_step(DataProto.from_dict(non_tensors={"actions": acts}, meta_info={"stage_id": 0}))  # doctest: +SKIP
"""

from __future__ import annotations

import collections
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from omegaconf import DictConfig

from envfleet import ProcessEnvManager
from envfleet.config import as_config
from envfleet.dataproto import DataProto
from envfleet.env import ObservationSpec, ResetResult
from envfleet.episodes import restarted_rows
from envfleet.errors import InvalidInputError, SimulatorStoppedError
from envfleet.fingerprint import fingerprint, protocol
from envfleet.options import Mode
from envfleet.plugins import get_backend
from envfleet.remote import build_manager

from . import ready_calls
from .batch import OBS_KEYS, create_env_batch_dataproto, env_batch_dataproto, put_tensor_cpu
from .lane import LaneServer
from .metrics import EpisodeMetrics, group_rows
from .stages import StageState
from .startup import stage_status

# Imports inside functions: Ray loads only where it is used: an EnvWorker runs in process, without Ray, for
# tests and debugging.

__all__ = ["EnvWorker", "put_tensor_cpu", "create_env_batch_dataproto", "env_batch_dataproto", "OBS_KEYS"]

log = logging.getLogger(__name__)


class EnvWorker:
    """One worker's simulators: a :class:`~envfleet.shards.manager.ProcessEnvManager` per stage.

    :param config: a config from :func:`envfleet.load_config` (taken as it is), or a plain dict in
        the same layout or a path to a YAML file (loaded here).
    :param rank: this worker's rank in its group (seeds, video paths, messages).
    """

    def __init__(self, config: DictConfig | Mapping[str, Any] | str, rank: int = 0) -> None:
        config = as_config(config)  # a loaded config is taken as it is, never loaded again
        self.cfg = config
        self.rank = int(rank)
        self.stage_num = int(config.rollout.pipeline_stage_num)
        self.num_envs = int(config.train.num_envs)
        self.simulator_type = str(config.train.simulator_type)
        self._stages: dict[str, list[StageState]] = {}  # mode -> one state per stage
        self._stage_locks = [threading.Lock() for _ in range(self.stage_num)]
        self._init_lock = threading.Lock()
        self._metrics: dict[str, EpisodeMetrics] = collections.defaultdict(EpisodeMetrics)
        self._last_reset: dict[str, DataProto] = {}
        self._pool = ThreadPoolExecutor(max_workers=max(self.stage_num, 1), thread_name_prefix=f"envfleet-w{rank}")
        self._lane: Any = None

    # ------------------------------------------------------------------ lifecycle
    def init_worker(self) -> None:
        """Build one EnvManager per stage for ``train.simulator_type`` (no process starts yet)."""
        with self._init_lock:
            self._ensure_managers("train")

    def _ensure_managers(self, mode: str) -> list[ProcessEnvManager]:
        mode = self._mode(mode=mode)
        if mode not in self._stages:
            self._stages[mode] = [
                # A RemoteEnvManager when {mode}.remote.address is set: the same surface as ProcessEnvManager.
                StageState(build_manager(self.cfg, stage_id=s, rank=self.rank, mode=mode))  # type: ignore[arg-type]
                for s in range(self.stage_num)
            ]
        return [stage.manager for stage in self._stages[mode]]

    def init_simulator(self, mode: str = "train") -> None:
        """Start every stage's simulator processes (all stages at once)."""
        with self._init_lock:
            managers = self._ensure_managers(mode)
            list(self._pool.map(lambda m: m.start_simulator(), managers))

    def startup_status(self, mode: str = "train") -> list[list[dict[str, Any]]]:
        """What each stage's shards are doing while they start, per stage (:mod:`envfleet_ray.runtime.startup`)."""
        return [stage_status(stage.manager) for stage in list(self._stages.get(mode, []))]

    def stop_simulator(self, mode: str = "train") -> None:
        """Offload: save state and free every stage's processes (see ProcessEnvManager.stop_simulator)."""
        for stage in self._stages.get(mode, []):
            stage.manager.stop_simulator()

    def open_lane(self) -> tuple[str, bytes]:
        """Serve ``env_interact_step`` on a local lane (see :mod:`envfleet_ray.runtime.lane`); returns its address and token.

        The group calls this through Ray when the worker runs on the driver's node.
        """
        with self._init_lock:
            if self._lane is None:
                self._lane = LaneServer(self)
            return self._lane.address, self._lane.token

    def close(self) -> None:
        """Stop every simulator process and free shared memory. Safe to call twice."""
        if self._lane is not None:
            self._lane.close()
        for stages in self._stages.values():
            for stage in stages:
                stage.manager.close()
        self._pool.shutdown(wait=False)

    def node_info(self) -> dict[str, Any]:
        """Where this worker runs: host name, IP, pid and shard pids (for messages and tests)."""
        try:
            import ray

            node_id = ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
            ip = ray.util.get_node_ip_address() if ray.is_initialized() else "127.0.0.1"
        except Exception:
            node_id, ip = None, "127.0.0.1"
        return {
            "rank": self.rank,
            "hostname": socket.gethostname(),
            "ip": ip,
            "node_id": node_id,
            "pid": os.getpid(),
            "shard_pids": {mode: [stage.manager.shard_pids() for stage in stages] for mode, stages in self._stages.items()},
        }

    # ------------------------------------------------------------------ verl's env-worker API
    def _stage(self, data: DataProto) -> int:
        if "stage_id" not in data.meta_info:
            raise InvalidInputError(f"meta_info['stage_id'] is missing: expected an int in [0, {self.stage_num})")
        stage = data.meta_info["stage_id"]
        if isinstance(stage, (bool, np.bool_)) or not isinstance(stage, (int, np.integer)):
            raise InvalidInputError(
                f"meta_info['stage_id'] must be an int in [0, {self.stage_num}), got {stage!r} ({type(stage).__name__})"
            )
        if not 0 <= int(stage) < self.stage_num:
            raise InvalidInputError(f"meta_info['stage_id'] is {int(stage)}, out of range: this worker has stages 0..{self.stage_num - 1}")
        return int(stage)

    def _mode(self, data: DataProto | None = None, mode: str | None = None) -> str:
        value = mode or (data.meta_info.get("mode", "train") if data is not None else "train")
        try:
            return str(Mode.check(value))
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from None

    def _running_stages(self, mode: str) -> list[StageState]:
        stages = self._stages.get(mode)
        if stages is None:
            raise SimulatorStoppedError(f"worker {self.rank}: call init_worker() and init_simulator({mode!r}) first")
        return stages

    def _running_managers(self, mode: str) -> list[ProcessEnvManager]:
        return [stage.manager for stage in self._running_stages(mode)]

    def env_interact_step(self, data: DataProto) -> DataProto:
        """Step one stage with ``data.non_tensor_batch["actions"]`` ``[n, chunk, action_dim]`` (and, with
        ``train.execution.delay: caller``, ``non_tensor_batch["delays"]`` ``[n]``: each env's delay in sub-steps).

        ``data.meta_info["stage_id"]`` picks the stage; the result is
        :func:`~envfleet_ray.runtime.batch.env_batch_dataproto` of the chunk (every observation key
        the backend declares, verl's ``full_image`` / ``wrist_image`` / ``state`` among them),
        with ``meta_info == {"stage_id": stage_id}``.
        """
        t0 = time.perf_counter()
        if not isinstance(data, DataProto):
            raise InvalidInputError(f"env_interact_step takes a DataProto, got {type(data).__name__}")
        stage = self._stage(data)
        mode = self._mode(data)
        if "actions" in data.non_tensor_batch:
            actions: Any = data.non_tensor_batch["actions"]
        elif data.batch is not None and "actions" in data.batch.keys():
            actions = data.batch["actions"]
        else:
            raise InvalidInputError("the DataProto has no 'actions' (expected non_tensor_batch['actions'] [n, chunk, action_dim])")
        if isinstance(actions, np.ndarray) and actions.dtype == object:
            try:
                actions = np.stack(list(actions)).astype(np.float32)
            except (ValueError, TypeError) as exc:
                raise InvalidInputError(f"actions is an object array that does not stack into [n, chunk, action_dim]: {exc}") from None
        delays = data.non_tensor_batch.get("delays")  # train.execution.delay: caller (see envfleet.execution)
        if delays is None and data.batch is not None and "delays" in data.batch.keys():
            delays = data.batch["delays"]
        state = self._running_stages(mode)[stage]
        manager = state.manager
        with self._stage_locks[stage]:
            m0 = manager.stats.wall_s
            result = manager.chunk_step(actions, delays)
            inner = manager.stats.wall_s - m0
        out = env_batch_dataproto(
            result.obs, result.task_descriptions, result.rewards, result.terminations, result.truncations, result.infos, {"stage_id": stage}
        )
        metrics = self._metrics[mode]
        running = state.running if state.running is not None else result.task_descriptions
        state.running = list(result.task_descriptions)
        went = result.infos.get("reset_state_id")
        if went is not None:
            state.used_ids.update(int(i) for i in np.asarray(went) if i >= 0)
        metrics.add_step(result.infos, running, manager.num_envs, result.rewards.shape[1])
        metrics.worker_s += time.perf_counter() - t0 - inner
        return out

    def send_chunk(self, data: DataProto) -> None:
        """First-ready: start a chunk for ``env_ids`` of stage ``meta_info["stage_id"]`` (:mod:`~envfleet_ray.runtime.ready_calls`)."""
        ready_calls.send_chunk(self, data)

    def recv_chunk(
        self, stage_id: int, min_ready: int, timeout_s: float | None = None, max_ready: int | None = None, mode: str = "train"
    ) -> DataProto:
        """First-ready: the results of the first envs of a stage done, an ``env_ids`` column naming each row's env."""
        return ready_calls.recv_chunk(self, stage_id, min_ready, timeout_s, max_ready, mode)

    def reset_envs_to_state_ids(self, data: DataProto) -> DataProto:
        """Reset every stage: ``state_ids`` (and optional ``task_ids``) of length ``num_envs * stage_num``.

        Stage ``s`` gets rows ``[s*num_envs:(s+1)*num_envs]``; the result is concatenated stage-major.
        """
        if not isinstance(data, DataProto):
            raise InvalidInputError(f"reset_envs_to_state_ids takes a DataProto, got {type(data).__name__}")
        mode = self._mode(data)
        stages = self._running_stages(mode)
        managers = [stage.manager for stage in stages]
        expected = self.num_envs * self.stage_num
        if "state_ids" not in data.non_tensor_batch and (data.batch is None or "state_ids" not in data.batch.keys()):
            raise InvalidInputError(
                f"the DataProto has no 'state_ids' (expected {expected} ids: num_envs={self.num_envs} x stages={self.stage_num})"
            )
        state_ids = _column(data, "state_ids")
        task_ids = _column(data, "task_ids") if _has(data, "task_ids") else None
        if len(state_ids) != expected:
            raise InvalidInputError(
                f"state_ids has {len(state_ids)} entries, expected num_envs * stage_num = {self.num_envs} * {self.stage_num} = {expected}"
            )
        if task_ids is not None and len(task_ids) != expected:
            raise InvalidInputError(f"task_ids has {len(task_ids)} entries, expected {expected} (one per state id)")
        n = self.num_envs
        # Validate every stage's slice before touching any simulator.
        for s, m in enumerate(managers):
            m.check_reset_ids(state_ids[s * n : (s + 1) * n], None if task_ids is None else task_ids[s * n : (s + 1) * n])

        def reset(s: int) -> ResetResult:
            with self._stage_locks[s]:
                return managers[s].reset_envs_to_state_ids(
                    state_ids[s * n : (s + 1) * n], None if task_ids is None else task_ids[s * n : (s + 1) * n]
                )

        results = list(self._pool.map(reset, range(self.stage_num)))
        parts = []
        for s, r in enumerate(results):
            stages[s].running = list(r.task_descriptions)
            stages[s].used_ids.update(int(i) for i in np.asarray(state_ids[s * n : (s + 1) * n]))
            z = np.zeros((n, 0))
            part = env_batch_dataproto(r.obs, r.task_descriptions, z.astype(np.float32), z.astype(bool), z.astype(bool), r.infos)
            part.non_tensor_batch["stage_id"] = np.full(n, s, dtype=np.int64)
            parts.append(part)
        out = DataProto.concat(parts)
        self._last_reset[mode] = out
        return out

    def reset_some_envs(self, stage_id: int, env_ids: np.ndarray, state_ids: np.ndarray, mode: str = "train") -> DataProto:
        """Reset envs ``env_ids`` of one stage to ``state_ids``; the stage's other envs keep their episodes.

        For a trainer that picks the states of finished envs itself (verl-vla's auto-reset
        from a filtered pool). Returns every env of the stage's observations, as
        :meth:`reset_envs_to_state_ids` does for one stage.
        """
        state = self._running_stages(self._mode(mode=mode))[stage_id]
        with self._stage_locks[stage_id]:
            r = state.manager.reset_some_envs(env_ids, state_ids)
        state.running = list(r.task_descriptions)
        state.used_ids.update(int(i) for i in np.asarray(state_ids))
        z = np.zeros((self.num_envs, 0))
        return env_batch_dataproto(
            r.obs, r.task_descriptions, z.astype(np.float32), z.astype(bool), z.astype(bool), r.infos, {"stage_id": stage_id}
        )

    def observation_spec(self, mode: str = "train") -> ObservationSpec:
        """The backend's observation spec (name -> ``ArraySpec``): the observation columns of every result."""
        return dict(self._running_managers(self._mode(mode=mode))[0].obs_spec)

    def get_all_state_ids(self, mode: str = "train") -> np.ndarray:
        """Every state id the backend can reset to."""
        return self._running_managers(self._mode(mode=mode))[0].get_all_state_ids()

    def get_state_task_ids(self, mode: str = "train") -> np.ndarray:
        """The task id of each of :meth:`get_all_state_ids`."""
        return self._running_managers(self._mode(mode=mode))[0].get_state_task_ids()

    def restart_step_result(self, stage_id: int, chunk: int, mode: str = "train") -> DataProto:
        """What a step returns for this worker after the group rebuilt it: the last reset's
        observations of ``stage_id`` (every key of the backend's observation spec), zero
        rewards, truncation at the last sub-step and ``sim_restarted`` True."""
        last = self._last_reset.get(mode)
        if last is None:
            raise SimulatorStoppedError(f"worker {self.rank}: no reset to report after a restart")
        n = self.num_envs
        part = last.slice(stage_id * n, (stage_id + 1) * n)
        assert part.batch is not None
        # The spec's keys, not the batch's: the last reset's batch holds its infos beside the observations.
        spec = self.observation_spec(mode)
        missing = [k for k in spec if k not in part.batch.keys()]
        if missing:
            raise SimulatorStoppedError(f"worker {self.rank}: the last reset of stage {stage_id} lacks observation(s) {missing}")
        obs = {k: part.batch[k] for k in spec}
        rows = restarted_rows(n, chunk)
        infos = {"sim_restarted": np.ones(n, dtype=bool), "worker_restarted": np.ones(n, dtype=bool)}
        descriptions = list(part.non_tensor_batch["task_descriptions"])
        return env_batch_dataproto(obs, descriptions, rows.rewards, rows.terminations, rows.truncations, infos, {"stage_id": stage_id})

    def finish_rollout(self, mode: str = "train") -> dict[str, Any]:
        """Flush videos (``stage_{i}`` subdirectories) and return the rollout's metrics since the last call.

        ``per_task``: task id -> :meth:`~envfleet_ray.runtime.metrics.TaskStats.as_dict` (description,
        episodes, successes and success_rate at any step, successes_at_end and
        success_at_end_rate, successful_at_reset, mean_return, mean_length, and ``group`` where
        the backend groups its tasks, e.g. LIBERO-plus's dimension); ``per_group``: those rows
        summed per group (:func:`~envfleet_ray.runtime.metrics.group_rows`); ``warnings``
        (e.g. episodes already successful at reset); ``protocol``, ``state_ids_used`` and
        ``fingerprint`` (:mod:`envfleet.fingerprint`; each video also gets a ``.json`` sidecar
        with its stage's fingerprint); ``sim_restarts``; ``restart_causes``: one entry per
        simulator restart since the last call (rank, stage, shard, envs, cause, exit code or
        signal, the simulator's last output lines, time); ``time``: seconds inside the
        simulators, in transfer (messaging and copies) and in the worker; ``videos``.
        """
        mode = self._mode(mode=mode)
        stages = self._stages.get(mode, [])
        managers = [stage.manager for stage in stages]
        parts = self._protocol(mode, managers)
        used = [stage.take_used_ids() for stage in stages]
        videos = self._flush_videos(managers, parts, used)
        datasets = self._flush_datasets(managers, parts, used)
        metrics = self._metrics.pop(mode, EpisodeMetrics())
        per_task = self._with_groups(mode, metrics.per_task_dict())
        all_used = set().union(*used)
        return {
            "rank": self.rank,
            "mode": mode,
            "per_task": per_task,
            "per_group": group_rows(per_task),
            "episodes": sum(r["episodes"] for r in per_task.values()),
            "successes": sum(r["successes"] for r in per_task.values()),
            "env_steps": metrics.env_steps,
            "chunks": metrics.chunks,
            "execution": metrics.execution,
            "sim_restarts": sum(m.stats.restarts for m in managers),
            "restart_causes": [cause for stage in stages for cause in stage.new_restart_causes(self.rank)],
            "warnings": self._reset_warnings(per_task),
            "protocol": parts,
            "state_ids_used": sorted(all_used),
            "fingerprint": fingerprint(parts, all_used),
            "time": {
                "simulator_s": sum(m.stats.sim_s for m in managers),
                "transfer_s": sum(m.stats.transfer_s for m in managers),
                "worker_s": metrics.worker_s,
            },
            "videos": videos,
            **({"datasets": datasets} if datasets else {}),
        }

    def _flush_videos(self, managers: list[ProcessEnvManager], parts: dict[str, Any], used: list[set[int]]) -> list[str]:
        """Flush each stage's video to ``stage_{i}``, each with a ``.json`` sidecar of its stage's fingerprint; wait for them."""
        videos: list[str] = []
        for s, m in enumerate(managers):
            with self._stage_locks[s]:
                paths = m.flush_video(f"stage_{s}")
            sidecar = {"rank": self.rank, "stage": s, "fingerprint": fingerprint(parts, used[s])}
            for path in paths:
                with open(os.path.splitext(path)[0] + ".json", "w") as fh:
                    json.dump({"video": os.path.basename(path), **sidecar}, fh, indent=2, default=str)
            videos += paths
        for m in managers:
            m.wait_video()
        return videos

    def _flush_datasets(self, managers: list[ProcessEnvManager], parts: dict[str, Any], used: list[set[int]]) -> list[dict[str, Any]]:
        """Wait for each stage's recorded episodes (train.record) to be written, with its stage's protocol and fingerprint."""
        out = []
        for s, m in enumerate(managers):
            with self._stage_locks[s]:
                done = m.flush_dataset({"protocol": parts, "fingerprint": fingerprint(parts, used[s])})
            if done is not None:
                out.append(done)
        return out

    def _with_groups(self, mode: str, per_task: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
        """Each task's row with its ``group``, where the backend groups its tasks (``BackendSpec.task_groups``)."""
        section = self.cfg[mode]
        try:
            groups = get_backend(str(section.simulator_type)).task_groups
        except KeyError:  # a remote stage's backend need not be installed beside the worker
            return per_task
        if groups is not None:
            of = groups(section)
            for task, row in per_task.items():
                row["group"] = of.get(int(task))
        return per_task

    def _reset_warnings(self, per_task: dict[Any, dict[str, Any]]) -> list[str]:
        """One warning per task with episodes already successful at reset (logged, and returned)."""
        warnings = [
            f"task {task}: {row['successful_at_reset']} of {row['episodes']} episodes were already successful at reset "
            "(their initial state passes the success check; success rates count them)"
            for task, row in per_task.items()
            if row["successful_at_reset"]
        ]
        for warning in warnings:
            log.warning("worker %d: %s", self.rank, warning)
        return warnings

    def _protocol(self, mode: str, managers: list[ProcessEnvManager]) -> dict[str, Any]:
        """This mode's protocol (see :mod:`envfleet.fingerprint`), its renderer asked of stage 0's first shard."""
        renderer: dict[str, str] = {}
        if managers and managers[0].running:
            try:
                with self._stage_locks[0]:
                    renderer = managers[0].renderer_info()
            except Exception as exc:  # a renderer we cannot describe is part of the record too
                renderer = {"error": f"{type(exc).__name__}: {exc}"}
        section = self.cfg[mode]
        if managers and hasattr(managers[0], "protocol"):  # a remote stage: the server's backend, versions and renderer
            with self._stage_locks[0]:
                return dict(managers[0].protocol())
        return protocol(section, get_backend(str(section.simulator_type)), renderer)

    def __del__(self) -> None:  # the managers clean up on GC too; this makes it prompt
        try:
            self.close()
        except Exception:
            pass


def _has(data: DataProto, key: str) -> bool:
    return key in data.non_tensor_batch or (data.batch is not None and key in data.batch.keys())


def _column(data: DataProto, key: str) -> np.ndarray:
    if key in data.non_tensor_batch:
        return np.asarray(data.non_tensor_batch[key])
    assert data.batch is not None
    return data.batch[key].cpu().numpy()
