"""``EnvWorkerGroup``: EnvWorker actors in a placement group, driven from the trainer.

One job: the trainer's handle on many workers: create them, split each call by rank, gather, revive.

Data is split by worker rank and results are concatenated **worker-major**: rows
``[r*k:(r+1)*k]`` of a step belong to worker ``r`` (``k = num_envs`` for a step,
``num_envs * stage_num`` for a reset, itself stage-major within the worker).

Calls return a :class:`GroupFuture` at once; ``.get()`` waits and concatenates.
A worker that died raises :class:`~envfleet.errors.WorkerDiedError` naming its
rank, node and cause; with ``max_restarts > 0`` the group recreates it in the same
bundle, re-runs init and the last reset, and the failed step reports its envs as
truncated with ``sim_restarted`` set. Workers found dead in one call (a lost node's)
are recreated together; their bundles move to surviving nodes that satisfy the
placement (Ray moves them), and when none can take them within ``restart_timeout_s``
the error names the ranks, the node and the cause (docs/cluster.md).

Where workers may run: ``resources`` (custom Ray resources per bundle, e.g.
``{"sim": 1}``) and ``labels`` (node labels); see :mod:`envfleet_ray.runtime.placement`.

Steps to a worker on the driver's node take the local lane (:mod:`envfleet_ray.runtime.lane`)
instead of Ray's task path; pass ``local_lane=False`` to send everything through Ray.
Steps to another node that holds two or more workers take one Ray call to that node's
relay (:mod:`envfleet_ray.runtime.relay`), which reaches its workers over their local lanes;
pass ``node_relay=False`` to call each of them through Ray.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import ray
from omegaconf import DictConfig
from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError, RayTaskError
from ray.util.placement_group import remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from envfleet.config import as_config
from envfleet.dataproto import DataProto
from envfleet.errors import InvalidInputError, WorkerDiedError

from .first_ready import FirstReadyGroup
from .futures import GroupFuture, unwrap_task_error
from .lane import LaneClosed
from .metrics import merge_metrics
from .placement import PlacementError, alive_nodes, bundle_shape, check_feasible, describe_nodes, raylet_answers, reserve, wait_placed
from .recovery import chunk_of, concat_harmonized, dead_error
from .routes import DEAD_WORKER_ERRORS, Routes, via_ray
from .worker import EnvWorker

__all__ = ["EnvWorkerGroup", "GroupFuture", "concat_harmonized"]  # GroupFuture: see envfleet_ray.runtime.futures

log = logging.getLogger(__name__)


class EnvWorkerGroup:
    """``num_workers`` EnvWorker actors, one placement-group bundle each.

    :param config: a config from :func:`envfleet.load_config`, passed to the workers as it is (a dict or
        a YAML path is loaded here).
    :param num_workers: how many EnvWorker actors.
    :param cpus_per_worker: CPUs reserved per worker (its bundle).
    :param gpus_per_worker: GPUs reserved per worker (0 by default).
    :param max_restarts: how many times in total the group recreates a dead worker.
    :param strategy: placement strategy of the bundles (PACK, SPREAD, STRICT_SPREAD).
    :param placement_timeout_s: how long to wait for the cluster to grant the bundles.
    :param local_lane: send steps to workers on the driver's node over a local lane
        (:mod:`envfleet_ray.runtime.lane`) rather than through Ray's task path.
    :param resources: extra Ray resources in each worker's bundle (``{"sim": 1}``): the
        workers then run only on nodes that offer them.
    :param memory_per_worker: bytes of Ray ``memory`` reserved per worker (None: none).
    :param labels: node labels every worker's node must carry (Ray's ``bundle_label_selector``).
    :param check_placement: fail at once when no alive node set could hold the bundles
        (off when an autoscaler will add nodes; ``placement_timeout_s`` still bounds the wait).
    :param restart_timeout_s: how long recreating dead workers may wait for a node that
        satisfies the placement (None: ``placement_timeout_s``).
    :param node_relay: step the workers of another node that holds two or more of them
        through one relay actor there (:mod:`envfleet_ray.runtime.relay`): one Ray call per node.
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
        resources: Mapping[str, float] | None = None,
        memory_per_worker: float | None = None,
        labels: Mapping[str, str] | None = None,
        check_placement: bool = True,
        restart_timeout_s: float | None = None,
        node_relay: bool = True,
    ) -> None:
        if not ray.is_initialized():
            raise RuntimeError("EnvWorkerGroup needs Ray: call envfleet_ray.init_ray() (or ray.init()) first")
        if num_workers < 1:
            raise InvalidInputError(f"num_workers must be >= 1, got {num_workers}")
        config = as_config(config)  # loaded once here, or at the caller's edge; the workers get it as it is
        self.cfg = config
        self.num_workers = int(num_workers)
        self.stage_num = int(config.rollout.pipeline_stage_num)
        self.num_envs = int(config.train.num_envs)
        # Read once (an OmegaConf lookup per step is not free); null: each step's actions set it.
        chunk = config.actor.model.num_action_chunks
        self._chunk: int | None = None if chunk is None else int(chunk)
        self.max_restarts = int(max_restarts)
        self.restarts = 0
        self._restart_causes: list[dict[str, Any]] = []  # worker deaths since the last finish_rollout
        #: One entry per recovery: ``ranks``, ``nodes`` (their old node ids), ``at`` (time.time() when
        #: Ray had declared them dead) and ``recreate_s`` (recreating, init and the last reset).
        self.recoveries: list[dict[str, Any]] = []
        self._cpus = float(cpus_per_worker)
        self._gpus = float(gpus_per_worker)
        try:
            self.bundle = bundle_shape(self._cpus, self._gpus, memory_per_worker, resources)
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from None
        self.labels = dict(labels or {})
        self.strategy = strategy
        self._restart_timeout_s = float(placement_timeout_s if restart_timeout_s is None else restart_timeout_s)
        self._pg = reserve([self.bundle] * self.num_workers, strategy, self.labels, placement_timeout_s, check=check_placement)
        self._actor_cls = ray.remote(EnvWorker)
        self.workers: list[Any] = [self._create(rank) for rank in range(self.num_workers)]
        try:
            self.nodes: list[dict[str, Any]] = self._node_infos()
        except BaseException:
            self.shutdown()
            raise
        self._initialized: set[str] = set()
        self._last_reset: dict[str, DataProto] = {}
        self.routes = Routes(self.workers, self.nodes, self.stage_num, local_lane, node_relay, self._restart_timeout_s)
        self.routes.attach(range(self.num_workers))

    # ------------------------------------------------------------------ actors
    def _create(self, rank: int) -> Any:
        extra = {k: v for k, v in self.bundle.items() if k not in ("CPU", "GPU", "memory")}
        return self._actor_cls.options(
            num_cpus=self._cpus,
            num_gpus=self._gpus,
            # The actor asks for its whole bundle, so nothing else of the group's fits beside it.
            **({"resources": extra} if extra else {}),
            **({"memory": self.bundle["memory"]} if "memory" in self.bundle else {}),
            max_concurrency=self.stage_num + 4,
            scheduling_strategy=PlacementGroupSchedulingStrategy(self._pg, placement_group_bundle_index=rank),
            name=None,
        ).remote(self.cfg, rank)

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
            ray.get(probe.remote(self.cfg, rank), timeout=300)
        except RayTaskError as err:
            return unwrap_task_error(err)
        except Exception:
            pass
        return exc

    @property
    def lane_ranks(self) -> list[int]:
        """The ranks whose steps take the local lane."""
        return self.routes.lane_ranks

    @property
    def relay_ranks(self) -> dict[str, list[int]]:
        """Node id -> the ranks whose steps go through that node's relay."""
        return self.routes.relay_ranks

    def relay_info(self) -> list[dict[str, Any]]:
        """Node id and pid of each relay the group holds (for tests and the doctor)."""
        return self.routes.relay_info()

    def _confirm_dead(self, dead: Mapping[int, BaseException]) -> dict[int, BaseException]:
        """Ray's account of each death: a dropped connection (``ActorUnavailableError``, a closed
        lane) comes before Ray has declared the worker, or its node, dead.

        Until it has, the worker's bundle still counts as placed on the lost node, and a
        worker recreated in it would land there. So ask each such worker again until Ray
        answers ``ActorDiedError`` (with its cause: the node died, OOM, ...), bounded by
        ``restart_timeout_s``; a worker that answers was only cut off and is recreated too.
        """
        out = dict(dead)
        pending = {r for r, e in dead.items() if isinstance(e, (ActorUnavailableError, LaneClosed))}
        deadline = time.monotonic() + self._restart_timeout_s
        while pending and time.monotonic() < deadline:
            refs = {r: self.workers[r].node_info.remote() for r in pending}
            for rank, ref in refs.items():
                try:
                    ray.get(ref, timeout=max(0.1, deadline - time.monotonic()))
                    pending.discard(rank)
                except ActorUnavailableError:
                    continue
                except DEAD_WORKER_ERRORS as exc:
                    out[rank] = exc
                    pending.discard(rank)
                except GetTimeoutError:
                    pass
            if pending:
                time.sleep(0.2)
        return out

    def _dead_error(self, dead: Mapping[int, BaseException], why: str = "") -> WorkerDiedError:
        try:
            records = {n["NodeID"]: n for n in alive_nodes()}
            # a node still listed alive whose raylet does not answer is lost: Ray has yet to say so
            mine = {self.nodes[r].get("node_id") for r in dead if r < len(self.nodes)}
            alive: set[str] | None = {i for i, n in records.items() if i not in mine or raylet_answers(n)}
        except Exception:  # Ray itself is gone: say what is known
            alive = None
        if why and alive is not None:
            # A lost node's other workers, not yet found dead by a call, go down with the group too.
            lost = {self.nodes[r].get("node_id") for r in dead if r < len(self.nodes)} - alive
            mates = [r for r, info in enumerate(self.nodes) if r not in dead and info.get("node_id") in lost]
            if mates:
                why += f"; ranks {mates} ran on the same lost node"
        return dead_error(dead, self.nodes, why, alive)

    def _revive(self, dead: Mapping[int, BaseException]) -> None:
        """Recreate the workers ``dead``, all at once, re-run init and the last reset; or raise WorkerDiedError."""
        dead = self._confirm_dead(dead)
        t0, at = time.perf_counter(), time.time()
        ranks = sorted(dead)
        first = dead[ranks[0]]
        old = sorted({str(self.nodes[r].get("node_id")) for r in ranks if r < len(self.nodes)})
        left = self.max_restarts - self.restarts
        if len(ranks) > left:
            raise self._dead_error(dead, f"max_restarts={self.max_restarts} allows {max(left, 0)} more") from first
        self.restarts += len(ranks)
        for rank in ranks:
            self._restart_causes.append(
                {"rank": rank, "stage": None, "cause": f"EnvWorker died: {self._dead_error({rank: dead[rank]})}", "time": time.time()}
            )
        log.warning("%s; recreating %d worker(s) (%d/%d restarts)", self._dead_error(dead), len(ranks), self.restarts, self.max_restarts)
        for rank in ranks:
            try:
                ray.kill(self.workers[rank], no_restart=True)
            except Exception:
                pass
        self.routes.detach(ranks)
        # The bundles of a lost node: Ray moves them to alive nodes that satisfy the
        # placement. Wait for that, bounded, rather than leave the actors pending for ever.
        try:
            check_feasible(self.bundle, 1, "PACK", self.labels, what="recreating them")
            unplaced = wait_placed(self._pg, ranks, self._restart_timeout_s)
        except PlacementError as exc:
            raise self._dead_error(dead, f"no surviving node can take their bundles: {exc}") from first
        if unplaced:
            raise self._dead_error(
                dead,
                f"no surviving node took the bundles of ranks {unplaced} ({self.bundle}) within {self._restart_timeout_s:g} s; "
                f"nodes: {describe_nodes()}",
            ) from first
        for rank in ranks:
            self.workers[rank] = self._create(rank)
        try:
            for rank, info in zip(ranks, self._node_infos(ranks)):
                self.nodes[rank] = info
            calls = []
            for rank in ranks:
                worker = self.workers[rank]
                if "worker" in self._initialized:
                    calls.append(worker.init_worker.remote())
                for mode in ("train", "val"):
                    if f"sim:{mode}" in self._initialized:
                        calls.append(worker.init_simulator.remote(mode))
            ray.get(calls)
            resets = []
            for data in self._last_reset.values():
                parts = data.chunk(self.num_workers)
                resets += [self.workers[rank].reset_envs_to_state_ids.remote(parts[rank]) for rank in ranks]
            ray.get(resets)
        except DEAD_WORKER_ERRORS as exc:
            raise self._dead_error(dead, f"recreating them failed: {type(exc).__name__}: {exc}") from exc
        self.routes.attach(ranks)
        self.recoveries.append({"ranks": ranks, "nodes": old, "at": at, "recreate_s": time.perf_counter() - t0})

    # ------------------------------------------------------------------ broadcast
    def _broadcast(self, method: str, *args: Any) -> GroupFuture:
        calls = [via_ray(getattr(w, method).remote(*args)) for w in self.workers]

        def on_dead(dead: dict[int, BaseException]) -> dict[int, Any]:
            raise self._dead_error(dead) from next(iter(dead.values()))

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
                first = first or self._dead_error({rank: exc})
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
        calls = [via_ray(w.reset_envs_to_state_ids.remote(p)) for w, p in zip(self.workers, parts)]

        def on_dead(dead: dict[int, BaseException]) -> dict[int, DataProto]:
            self._revive(dead)
            refs = {rank: self.workers[rank].reset_envs_to_state_ids.remote(parts[rank]) for rank in dead}
            return dict(zip(refs, ray.get(list(refs.values()))))

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
        calls = self.routes.send(stage, parts)

        def on_dead(dead: dict[int, BaseException]) -> dict[int, DataProto]:
            self._revive(dead)
            n = chunk if chunk is not None else chunk_of(data)  # a null num_action_chunks: this step's own
            refs = {rank: self.workers[rank].restart_step_result.remote(int(stage), n, mode) for rank in dead}
            return dict(zip(refs, ray.get(list(refs.values()))))

        return GroupFuture(calls, concat_harmonized, on_dead)

    def first_ready(self, stage_id: int = 0, mode: str = "train") -> FirstReadyGroup:
        """First-ready stepping of one stage over every worker (:mod:`envfleet_ray.runtime.first_ready`)."""
        return FirstReadyGroup(self, stage_id, mode)

    # ------------------------------------------------------------------ teardown
    def shutdown(self) -> None:
        """Close every worker (their simulators and shared memory) and free the placement group."""
        routes = getattr(self, "routes", None)  # None: the constructor failed before the routes were built
        if routes is not None:
            routes.close()
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

    def close(self) -> None:
        """Close every worker (the same as :meth:`shutdown`, under the name the worker and the faces use)."""
        self.shutdown()

    def __enter__(self) -> EnvWorkerGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def _build_worker(config: Any, rank: int) -> None:
    """Build an EnvWorker and close it: what a worker's actor does first, as a task whose error Ray keeps."""
    EnvWorker(config, rank).close()
