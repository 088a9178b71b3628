"""``EnvWorkerGroup``: EnvWorker actors in a placement group, driven from the trainer.

Data is split by worker rank and results are concatenated **worker-major**: rows
``[r*k:(r+1)*k]`` of a step belong to worker ``r`` (``k = num_envs`` for a step,
``num_envs * stage_num`` for a reset, itself stage-major within the worker).

Calls return a :class:`GroupFuture` at once; ``.get()`` waits and concatenates.
A worker that died raises :class:`~envfleet.errors.WorkerDiedError` naming its
rank, node and cause; with ``max_restarts > 0`` the group recreates it in the same
bundle, re-runs init and the last reset, and the failed step reports its envs as
truncated with ``sim_restarted`` set.

Steps to a worker on the driver's node take the local lane (:mod:`envfleet_ray.lane`)
instead of Ray's task path; pass ``local_lane=False`` to send everything through Ray.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import ray
from omegaconf import DictConfig, OmegaConf
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from envfleet.config import load_config
from envfleet.dataproto import DataProto
from envfleet.errors import InvalidInputError, WorkerDiedError

from .futures import DEAD_WORKER_ERRORS, GroupFuture, WorkerCall, unwrap_task_error
from .lane import LaneClient, LaneClosed
from .metrics import merge_metrics
from .worker import EnvWorker

__all__ = ["EnvWorkerGroup", "GroupFuture"]  # GroupFuture: see envfleet_ray.futures

log = logging.getLogger(__name__)


class EnvWorkerGroup:
    """``num_workers`` EnvWorker actors, one placement-group bundle each.

    :param config: a config from :func:`envfleet.load_config` (or a dict / YAML path).
    :param num_workers: how many EnvWorker actors.
    :param cpus_per_worker: CPUs reserved per worker (its bundle).
    :param gpus_per_worker: GPUs reserved per worker (0 by default).
    :param max_restarts: how many times in total the group recreates a dead worker.
    :param strategy: placement strategy of the bundles (PACK, SPREAD, STRICT_SPREAD).
    :param placement_timeout_s: how long to wait for the cluster to grant the bundles.
    :param local_lane: send steps to workers on the driver's node over a local lane
        (:mod:`envfleet_ray.lane`) rather than through Ray's task path.
    """

    def __init__(
        self,
        config: DictConfig | dict[str, Any] | str,
        num_workers: int = 1,
        cpus_per_worker: float = 1.0,
        gpus_per_worker: float = 0.0,
        max_restarts: int = 0,
        strategy: str = "PACK",
        placement_timeout_s: float = 120.0,
        local_lane: bool = True,
    ) -> None:
        if not ray.is_initialized():
            raise RuntimeError("EnvWorkerGroup needs Ray: call envfleet_ray.init_ray() (or ray.init()) first")
        if num_workers < 1:
            raise InvalidInputError(f"num_workers must be >= 1, got {num_workers}")
        if isinstance(config, str):
            config = load_config(config)
        elif not isinstance(config, DictConfig):
            config = load_config(data=config)
        self.cfg = config
        self.num_workers = int(num_workers)
        self.stage_num = int(config.rollout.pipeline_stage_num)
        self.num_envs = int(config.train.num_envs)
        self._chunk = int(config.actor.model.num_action_chunks)  # read once: an OmegaConf lookup per step is not free
        self.max_restarts = int(max_restarts)
        self.restarts = 0
        self._restart_causes: list[dict[str, Any]] = []  # worker deaths since the last finish_rollout
        self._cpus = float(cpus_per_worker)
        self._gpus = float(gpus_per_worker)
        self._cfg_container = OmegaConf.to_container(config, resolve=True)
        bundles = [{"CPU": self._cpus, **({"GPU": self._gpus} if self._gpus else {})} for _ in range(self.num_workers)]
        self._pg = placement_group(bundles, strategy=strategy)
        try:
            ray.get(self._pg.ready(), timeout=placement_timeout_s)
        except GetTimeoutError:
            remove_placement_group(self._pg)
            raise RuntimeError(
                f"the cluster could not grant {self.num_workers} bundles of {bundles[0]} within {placement_timeout_s:g} s "
                f"(available: {ray.available_resources()}); lower cpus_per_worker or num_workers"
            ) from None
        self._lanes: list[LaneClient | None] = []
        self._actor_cls = ray.remote(EnvWorker)
        self.workers: list[Any] = [self._create(rank) for rank in range(self.num_workers)]
        try:
            self.nodes: list[dict[str, Any]] = self._node_infos()
        except BaseException:
            self.shutdown()
            raise
        self._initialized: set[str] = set()
        self._last_reset: dict[str, DataProto] = {}
        self._local_lane = bool(local_lane)
        self._lanes = [self._open_lane(rank) for rank in range(self.num_workers)]

    # ------------------------------------------------------------------ actors
    def _create(self, rank: int) -> Any:
        return self._actor_cls.options(
            num_cpus=self._cpus,
            num_gpus=self._gpus,
            max_concurrency=self.stage_num + 4,
            scheduling_strategy=PlacementGroupSchedulingStrategy(self._pg, placement_group_bundle_index=rank),
            name=None,
        ).remote(self._cfg_container, rank)

    def _node_infos(self, ranks: Sequence[int] | None = None) -> list[dict[str, Any]]:
        """Where each of ``ranks`` (all workers by default) runs; raises the error a worker's constructor raised."""
        ranks = range(self.num_workers) if ranks is None else ranks
        refs = [self.workers[rank].node_info.remote() for rank in ranks]
        infos = []
        for rank, ref in zip(ranks, refs):
            try:
                infos.append(ray.get(ref))
            except RayActorError as exc:
                raise self._constructor_error(rank, exc) from exc
        return infos

    def _constructor_error(self, rank: int, exc: RayActorError) -> BaseException:
        """The exception a worker's constructor raised (ConfigError, ImportError, ...), not Ray's ActorDiedError.

        Ray keeps only the text of a constructor's error, so the constructor is run again
        as a task in the worker's bundle, where the error is returned as itself.
        """
        if not exc.actor_init_failed:
            return exc
        probe = ray.remote(_build_worker).options(
            num_cpus=0, scheduling_strategy=PlacementGroupSchedulingStrategy(self._pg, placement_group_bundle_index=rank)
        )
        try:
            ray.get(probe.remote(self._cfg_container, rank), timeout=300)
        except RayTaskError as err:
            return unwrap_task_error(err)
        except Exception:
            pass
        return exc

    def _open_lane(self, rank: int) -> LaneClient | None:
        if not self._local_lane or self.nodes[rank].get("node_id") != ray.get_runtime_context().get_node_id():
            return None
        address, token = ray.get(self.workers[rank].open_lane.remote())
        lane = LaneClient(address, token)
        try:
            for stage in range(self.stage_num):
                lane.connect(stage)
        except OSError as exc:  # e.g. the driver sits in another network namespace (Ray Client)
            log.info("worker %d: no local lane (%s); its steps go through Ray", rank, exc)
            lane.close()
            return None
        return lane

    def _close_lane(self, rank: int) -> None:
        lane = self._lanes[rank]
        self._lanes[rank] = None
        if lane is not None:
            lane.close()

    @property
    def lane_ranks(self) -> list[int]:
        """The ranks whose steps take the local lane."""
        return [rank for rank, lane in enumerate(self._lanes) if lane is not None]

    def _death_cause(self, rank: int, exc: BaseException) -> BaseException:
        """Why a worker's lane closed: Ray's account of the actor's death when it has one."""
        if not isinstance(exc, LaneClosed):
            return exc
        try:
            ray.get(self.workers[rank].node_info.remote(), timeout=30)
        except DEAD_WORKER_ERRORS as dead:
            return dead
        except Exception:
            pass
        return exc

    def _dead_error(self, rank: int, exc: BaseException) -> WorkerDiedError:
        node = self.nodes[rank] if rank < len(self.nodes) else {}
        cause = str(exc).strip().splitlines()
        short = next(
            (line for line in cause if "cause" in line.lower() or "died" in line.lower()), cause[0] if cause else type(exc).__name__
        )
        return WorkerDiedError(
            f"EnvWorker rank {rank} on node {node.get('ip', '?')} ({node.get('hostname', '?')}, pid {node.get('pid', '?')}) died: "
            f"{type(exc).__name__}: {short.strip()}"
        )

    def _revive(self, rank: int, exc: BaseException) -> None:
        """Recreate a dead worker, re-run init and the last reset; or raise WorkerDiedError."""
        err = self._dead_error(rank, exc)
        if self.restarts >= self.max_restarts:
            raise err from exc
        self.restarts += 1
        self._restart_causes.append({"rank": rank, "stage": None, "cause": f"EnvWorker died: {err}", "time": time.time()})
        log.warning("%s; recreating it (%d/%d)", err, self.restarts, self.max_restarts)
        try:
            ray.kill(self.workers[rank], no_restart=True)
        except Exception:
            pass
        self._close_lane(rank)
        worker = self._create(rank)
        self.workers[rank] = worker
        calls = []
        if "worker" in self._initialized:
            calls.append(worker.init_worker.remote())
        for mode in ("train", "val"):
            if f"sim:{mode}" in self._initialized:
                calls.append(worker.init_simulator.remote(mode))
        self.nodes[rank] = self._node_infos([rank])[0]
        ray.get(calls)
        self._lanes[rank] = self._open_lane(rank)
        for data in self._last_reset.values():
            part = data.chunk(self.num_workers)[rank]
            ray.get(worker.reset_envs_to_state_ids.remote(part))

    # ------------------------------------------------------------------ broadcast
    def _broadcast(self, method: str, *args: Any) -> GroupFuture:
        calls = [WorkerCall.via_ray(getattr(w, method).remote(*args)) for w in self.workers]

        def on_dead(rank: int, exc: BaseException) -> Any:
            raise self._dead_error(rank, exc) from exc

        return GroupFuture(calls, lambda results: results, on_dead)

    def init_worker(self) -> None:
        """Build every worker's EnvManagers."""
        self._broadcast("init_worker").get()
        self._initialized.add("worker")

    def init_simulator(self, mode: str = "train") -> None:
        """Start every worker's simulator processes."""
        self._broadcast("init_simulator", mode).get()
        self._initialized.add(f"sim:{mode}")

    def _ask_any(self, method: str, *args: Any) -> Any:
        """Ask the first worker that answers; raise WorkerDiedError if none does."""
        first: BaseException | None = None
        for rank, worker in enumerate(self.workers):
            try:
                return ray.get(getattr(worker, method).remote(*args))
            except DEAD_WORKER_ERRORS as exc:
                first = first or self._dead_error(rank, exc)
            except RayTaskError as exc:
                raise unwrap_task_error(exc) from exc
        raise first or RuntimeError("the group has no workers")

    def get_all_state_ids(self, mode: str = "train") -> np.ndarray:
        """Every state id the backend can reset to (from the first live worker)."""
        return self._ask_any("get_all_state_ids", mode)  # type: ignore[no-any-return]

    def get_state_task_ids(self, mode: str = "train") -> np.ndarray:
        """The task id of each state id (from the first live worker)."""
        return self._ask_any("get_state_task_ids", mode)  # type: ignore[no-any-return]

    def finish_rollout(self, mode: str = "train") -> dict[str, Any]:
        """Flush videos and collect every worker's metrics; returns ``{"workers": [...], "total": {...}}``.

        ``total["restart_causes"]`` lists every simulator restart and every recreated worker
        (``stage`` None) since the last call, with its cause.
        """
        per_worker = self._broadcast("finish_rollout", mode).get()
        total = merge_metrics(per_worker)
        total["restart_causes"] = self._restart_causes + total["restart_causes"]
        self._restart_causes = []
        return {"workers": per_worker, "total": total, "worker_restarts": self.restarts}

    def node_info(self) -> list[dict[str, Any]]:
        """Where each worker runs."""
        return self._broadcast("node_info").get()  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ dispatch
    def reset_envs_to_state_ids(self, data: DataProto) -> GroupFuture:
        """Reset all workers: ``len(data) == num_workers * stage_num * num_envs``, worker-major."""
        expected = self.num_workers * self.stage_num * self.num_envs
        if len(data) != expected:
            raise InvalidInputError(
                f"reset data has {len(data)} rows, expected num_workers * stage_num * num_envs = "
                f"{self.num_workers} * {self.stage_num} * {self.num_envs} = {expected}"
            )
        mode = str(data.meta_info.get("mode", "train"))
        parts = [data] if self.num_workers == 1 else data.chunk(self.num_workers)
        calls = [WorkerCall.via_ray(w.reset_envs_to_state_ids.remote(p)) for w, p in zip(self.workers, parts)]

        def on_dead(rank: int, exc: BaseException) -> DataProto:
            self._revive(rank, exc)
            return ray.get(self.workers[rank].reset_envs_to_state_ids.remote(parts[rank]))  # type: ignore[no-any-return]

        def finish(results: list[DataProto]) -> DataProto:
            self._last_reset[mode] = data
            return DataProto.concat(results)

        return GroupFuture(calls, finish, on_dead)

    def env_interact_step(self, data: DataProto) -> GroupFuture:
        """Step one stage on every worker: ``len(data) == num_workers * num_envs``, worker-major."""
        expected = self.num_workers * self.num_envs
        if len(data) != expected:
            raise InvalidInputError(
                f"step data has {len(data)} rows, expected num_workers * num_envs = {self.num_workers} * {self.num_envs} = {expected}"
            )
        if "stage_id" not in data.meta_info:
            raise InvalidInputError(f"meta_info['stage_id'] is missing: expected an int in [0, {self.stage_num})")
        stage = data.meta_info["stage_id"]
        mode = str(data.meta_info.get("mode", "train"))
        chunk = self._chunk
        parts = [data] if self.num_workers == 1 else data.chunk(self.num_workers)
        calls: list[WorkerCall] = []
        for w, lane, p in zip(self.workers, self._lanes, parts):
            if lane is None:
                calls.append(WorkerCall.via_ray(w.env_interact_step.remote(p)))
                continue
            try:
                calls.append(WorkerCall.via_lane(lane.call(stage, "env_interact_step", p)))
            except LaneClosed as exc:
                calls.append(WorkerCall.lane_closed(exc))  # the worker is gone: get() handles it as a dead worker

        def on_dead(rank: int, exc: BaseException) -> DataProto:
            exc = self._death_cause(rank, exc)
            self._revive(rank, exc)
            return ray.get(self.workers[rank].restart_step_result.remote(int(stage), chunk, mode))  # type: ignore[no-any-return]

        return GroupFuture(calls, concat_harmonized, on_dead)

    # ------------------------------------------------------------------ teardown
    def shutdown(self) -> None:
        """Close every worker (their simulators and shared memory) and free the placement group."""
        for rank in range(len(self._lanes)):
            self._close_lane(rank)
        try:
            ray.get([w.close.remote() for w in self.workers], timeout=60)
        except Exception:
            pass
        for w in self.workers:
            try:
                ray.kill(w, no_restart=True)
            except Exception:
                pass
        self.workers = []
        try:
            remove_placement_group(self._pg)
        except Exception:
            pass

    def __enter__(self) -> EnvWorkerGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def _build_worker(config: Any, rank: int) -> None:
    """Build an EnvWorker and close it: what a worker's actor does first, as a task whose error Ray keeps."""
    EnvWorker(config, rank).close()


def concat_harmonized(parts: Sequence[DataProto]) -> DataProto:
    """Concatenate step results; keys missing from a part (a rebuilt worker) are filled with zeros / -1."""
    if len(parts) == 1:
        return parts[0]
    tensor_keys: dict[str, Any] = {}
    nt_keys: dict[str, Any] = {}
    for p in parts:
        if p.batch is not None:
            for k in p.batch.keys():
                tensor_keys.setdefault(str(k), p.batch[k])
        for k, v in p.non_tensor_batch.items():
            nt_keys.setdefault(k, v)
    import torch

    for p in parts:
        n = len(p)
        for k, ref in tensor_keys.items():
            if p.batch is None or k not in p.batch.keys():
                fill = -1 if not ref.dtype.is_floating_point and ref.dtype != torch.bool else 0
                p.batch[k] = torch.full((n, *ref.shape[1:]), fill, dtype=ref.dtype)  # type: ignore[index]
        for k, ref in nt_keys.items():
            if k not in p.non_tensor_batch:
                p.non_tensor_batch[k] = np.zeros((n, *ref.shape[1:]), dtype=ref.dtype)
    return DataProto.concat(parts)
