"""Routes: how a group's step reaches each worker, one object per worker rank.

One job: carrying a group's calls to its workers and their answers back (transport, not policy).

A step reaches a worker one of three ways, and each is a :class:`Route` with the same small
interface: :meth:`Route.send` a part and get a :class:`Share` back, whose :meth:`Share.result`
gives the worker's answer or raises why it failed.

- :class:`RayRoute`: a Ray actor call (the worker is on another node, or lanes are off);
- :class:`LaneRoute`: the local lane (:mod:`envfleet_ray.runtime.lane`) to a worker on the driver's node;
- :class:`RelayRoute`: its node's relay (:mod:`envfleet_ray.runtime.relay`), one Ray call per node for
  every worker the relay carries.

:class:`Routes` holds the route of every rank, builds it when a worker is attached (created or
recreated), and takes it down when the worker goes. The group decides what to call and what a
death means; this module only carries the calls (transport apart from policy, as RLlib's
``FaultTolerantActorManager`` and core's ``ShardCalls`` keep them).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, GetTimeoutError, RayActorError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from .lane import LANE_METHOD, LaneCall, LaneClient, LaneClosed
from .placement import alive_nodes
from .relay import NodeRelay, RelayOutcome

__all__ = [
    "DEAD_WORKER_ERRORS",
    "ClosedShare",
    "LaneRoute",
    "LaneShare",
    "RayResult",
    "RayRoute",
    "RayShare",
    "RelayRoute",
    "RelayShare",
    "Route",
    "Routes",
    "Share",
    "via_ray",
]

log = logging.getLogger(__name__)

#: What Ray raises for a call on a worker that is gone.
DEAD_WORKER_ERRORS = (RayActorError, ActorDiedError, ActorUnavailableError)


class RayResult:
    """An object ref, read once: the future reads many together, a share reads its own if that failed."""

    def __init__(self, ref: ray.ObjectRef) -> None:
        self.ref = ref
        self.done = False
        self._value: Any = None

    def set(self, value: Any) -> None:
        """Keep the value a joint ``ray.get`` read."""
        self._value, self.done = value, True

    def get(self, timeout: float | None) -> Any:
        """The value; raises what ``ray.get`` raises."""
        if not self.done:
            self.set(ray.get(self.ref, timeout=timeout))
        return self._value


class Share(Protocol):
    """One worker's share of a group call."""

    def ray_results(self) -> list[RayResult]:
        """The Ray results it waits on (the future reads them all with one ``ray.get``)."""

    def ready(self) -> bool:
        """Whether the part that is not a Ray result has answered (does not wait)."""

    def result(self, timeout: float | None) -> Any:
        """The worker's answer; raises what the worker raised, or why it is gone
        (:data:`DEAD_WORKER_ERRORS`, :class:`~envfleet_ray.runtime.lane.LaneClosed`)."""


class RayShare:
    """A share sent as a Ray actor call."""

    def __init__(self, result: RayResult) -> None:
        self._result = result

    def ray_results(self) -> list[RayResult]:
        return [self._result]

    def ready(self) -> bool:
        return True

    def result(self, timeout: float | None) -> Any:
        return self._result.get(timeout)


def via_ray(ref: ray.ObjectRef) -> RayShare:
    """The share of a Ray actor call that returned ``ref``."""
    return RayShare(RayResult(ref))


class LaneShare:
    """A share sent over the local lane."""

    def __init__(self, call: LaneCall, rank: int) -> None:
        self._call = call
        self._rank = rank

    def ray_results(self) -> list[RayResult]:
        return []

    def ready(self) -> bool:
        return self._call.ready()

    def result(self, timeout: float | None) -> Any:
        try:
            return self._call.result(timeout)
        except TimeoutError as exc:
            raise GetTimeoutError(f"worker {self._rank}: {exc}") from None


class ClosedShare:
    """A share that could not be sent: the worker's lane was closed, so the worker is gone."""

    def __init__(self, error: LaneClosed) -> None:
        self._error = error

    def ray_results(self) -> list[RayResult]:
        return []

    def ready(self) -> bool:
        return True

    def result(self, timeout: float | None) -> Any:
        raise self._error


class RelayCall:
    """One relay's step call, shared by the workers it carries; its reply is read once."""

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id
        self.reply: RayResult | None = None  # set when the call is sent

    def outcome(self, rank: int, timeout: float | None) -> RelayOutcome:
        """Worker ``rank``'s answer; :class:`LaneClosed` for every rank when the relay itself is gone."""
        assert self.reply is not None, "the relay call was never sent"
        try:
            outcomes: list[RelayOutcome] = self.reply.get(timeout)
        except DEAD_WORKER_ERRORS as exc:
            # The relay's node is lost (or the relay alone died): each worker's own
            # fate is asked of Ray by the group, as for a closed lane.
            short = (str(exc).strip().splitlines() or [""])[0]
            raise LaneClosed(f"the relay on node {self.node_id[:8]} is gone: {type(exc).__name__}: {short}") from None
        return next(o for o in outcomes if o.rank == rank)


class RelayShare:
    """A worker's share of a :class:`RelayCall`."""

    def __init__(self, call: RelayCall, rank: int) -> None:
        self._call = call
        self._rank = rank

    def ray_results(self) -> list[RayResult]:
        return [] if self._call.reply is None else [self._call.reply]

    def ready(self) -> bool:
        return True

    def result(self, timeout: float | None) -> Any:
        outcome = self._call.outcome(self._rank, timeout)
        if outcome.closed is not None:
            raise LaneClosed(outcome.closed)
        if outcome.error is not None:
            raise outcome.error
        return outcome.value


class Route(Protocol):
    """How one worker's steps reach it."""

    rank: int

    def send(self, stage: int, part: Any) -> Share:
        """Start ``env_interact_step(part)`` on the worker's stage ``stage``; returns at once."""

    def close(self) -> None:
        """Release what the route holds (a lane's sockets). Safe to call twice."""


class RayRoute:
    """Steps as Ray actor calls."""

    def __init__(self, rank: int, worker: Any) -> None:
        self.rank = rank
        self._worker = worker

    def send(self, stage: int, part: Any) -> Share:
        return via_ray(self._worker.env_interact_step.remote(part))

    def close(self) -> None:
        pass


class LaneRoute:
    """Steps over the local lane of a worker on the driver's node."""

    def __init__(self, rank: int, lane: LaneClient) -> None:
        self.rank = rank
        self.lane = lane

    def send(self, stage: int, part: Any) -> Share:
        try:
            return LaneShare(self.lane.call(stage, LANE_METHOD, part), self.rank)
        except LaneClosed as exc:
            return ClosedShare(exc)  # the worker is gone: the group handles it as a dead worker

    def close(self) -> None:
        self.lane.close()


class _RelayBatch:
    """The parts of one step for one relay, sent as one call once every route has added its own."""

    def __init__(self, relay: Any, node_id: str) -> None:
        self.relay = relay
        self.node_id = node_id
        self._parts: list[tuple[int, Any]] = []
        self._call = RelayCall(node_id)
        self._stage = 0

    def add(self, stage: int, rank: int, part: Any) -> RelayShare:
        self._stage = stage
        self._parts.append((rank, part))
        return RelayShare(self._call, rank)

    def flush(self) -> None:
        if self._parts:
            self._call.reply = RayResult(self.relay.step.remote(self._stage, self._parts))
            self._parts, self._call = [], RelayCall(self.node_id)


class RelayRoute:
    """Steps through the relay on the worker's node, batched with the other workers it carries."""

    def __init__(self, rank: int, batch: _RelayBatch) -> None:
        self.rank = rank
        self.batch = batch

    @property
    def node_id(self) -> str:
        """The node of the relay (and of the worker)."""
        return self.batch.node_id

    def send(self, stage: int, part: Any) -> Share:
        return self.batch.add(stage, self.rank, part)

    def close(self) -> None:
        try:
            self.batch.relay.detach.remote(self.rank)  # a relay that is gone ignores it
        except Exception:
            pass


class Routes:
    """The route of every worker rank: built when a worker is attached, dropped when it goes.

    :param workers: the group's actors, by rank (the list itself: a recreated worker replaces its entry).
    :param nodes: each rank's ``node_info()`` (the list itself, likewise).
    :param stage_num: stages per worker (a lane opens one connection per stage).
    :param local_lane: use the local lane for workers on the driver's node.
    :param node_relay: use a relay for another node that holds two or more workers.
    :param relay_timeout_s: how long a new relay may take to start.
    """

    def __init__(
        self,
        workers: list[Any],
        nodes: list[dict[str, Any]],
        stage_num: int,
        local_lane: bool = True,
        node_relay: bool = True,
        relay_timeout_s: float = 120.0,
    ) -> None:
        self._workers = workers
        self._nodes = nodes
        self.stage_num = int(stage_num)
        self.local_lane = bool(local_lane)
        self.node_relay = bool(node_relay)
        self.relay_timeout_s = float(relay_timeout_s)
        self.routes: list[Route] = [RayRoute(rank, worker) for rank, worker in enumerate(workers)]
        self._batches: dict[str, _RelayBatch] = {}  # node id -> its relay's batch

    # ------------------------------------------------------------------ stepping
    def send(self, stage: int, parts: Sequence[Any]) -> list[Share]:
        """Start one stage's step on every worker (``parts[rank]`` each); returns their shares at once."""
        shares = [route.send(stage, part) for route, part in zip(self.routes, parts)]
        for batch in self._batches.values():
            batch.flush()
        return shares

    # ------------------------------------------------------------------ attaching
    def attach(self, ranks: Sequence[int]) -> None:
        """Build the routes of ``ranks`` (created or recreated workers): a lane, a relay, or Ray."""
        for rank in ranks:
            self.routes[rank].close()
            self.routes[rank] = self._lane_route(rank) or RayRoute(rank, self._workers[rank])
        self._attach_relays(ranks)

    def detach(self, ranks: Sequence[int]) -> None:
        """Take ``ranks`` (dead workers) off their routes; a relay whose node is no longer alive is dropped."""
        for rank in ranks:
            self.routes[rank].close()
            self.routes[rank] = RayRoute(rank, self._workers[rank])
        try:
            alive = {n["NodeID"] for n in alive_nodes()}
        except Exception:
            return
        for node in [n for n in self._batches if n not in alive]:
            batch = self._batches.pop(node)
            for rank, route in enumerate(self.routes):
                if isinstance(route, RelayRoute) and route.batch is batch:
                    self.routes[rank] = RayRoute(rank, self._workers[rank])
            _kill(batch.relay)

    def close(self) -> None:
        """Close every lane and stop every relay. Safe to call twice."""
        for rank, route in enumerate(self.routes):
            if isinstance(route, LaneRoute):
                route.close()
            self.routes[rank] = RayRoute(rank, self._workers[rank])
        for batch in self._batches.values():
            _kill(batch.relay)
        self._batches = {}

    def _lane_route(self, rank: int) -> LaneRoute | None:
        if not self.local_lane or self._nodes[rank].get("node_id") != ray.get_runtime_context().get_node_id():
            return None
        address, token = ray.get(self._workers[rank].open_lane.remote())
        lane = LaneClient(address, token)
        try:
            for stage in range(self.stage_num):
                lane.connect(stage)
        except OSError as exc:  # e.g. the driver sits in another network namespace (Ray Client)
            log.info("worker %d: no local lane (%s); its steps go through Ray", rank, exc)
            lane.close()
            return None
        return LaneRoute(rank, lane)

    def _attach_relays(self, ranks: Sequence[int]) -> None:
        """Route ``ranks`` through their node's relay where that node holds two or more workers."""
        if not self.node_relay:
            return
        here = ray.get_runtime_context().get_node_id()
        count: dict[Any, int] = {}
        for info in self._nodes:
            count[info.get("node_id")] = count.get(info.get("node_id"), 0) + 1
        wanted = [
            rank
            for rank in ranks
            if isinstance(self.routes[rank], RayRoute)
            and self._nodes[rank].get("node_id") not in (here, None)
            and (count[self._nodes[rank]["node_id"]] >= 2 or self._nodes[rank]["node_id"] in self._batches)
        ]
        if not wanted:
            return
        lanes = ray.get([self._workers[rank].open_lane.remote() for rank in wanted])
        attached = {}
        for rank, (address, token) in zip(wanted, lanes):
            node = self._nodes[rank]["node_id"]
            batch = self._relay_on(node)
            if batch is not None:
                attached[rank] = (batch, batch.relay.attach.remote(rank, address, token, self.stage_num))
        for rank, (batch, ref) in attached.items():
            try:
                why = ray.get(ref)
            except DEAD_WORKER_ERRORS as exc:
                why = f"the relay died: {type(exc).__name__}"
            if why is None:
                self.routes[rank] = RelayRoute(rank, batch)
            else:  # the worker's steps go through Ray
                log.info("worker %d: no relay on node %s (%s); its steps go through Ray", rank, batch.node_id[:8], why)

    def _relay_on(self, node: str) -> _RelayBatch | None:
        """The relay on ``node``, started now if needed; None when it cannot start there."""
        if node in self._batches:
            return self._batches[node]
        relay: Any = (
            ray.remote(NodeRelay)
            .options(num_cpus=0, max_concurrency=self.stage_num + 4, scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
            .remote()
        )
        try:
            ray.get(relay.where.remote(), timeout=self.relay_timeout_s)
        except Exception as exc:  # the node went away meanwhile: its workers go through Ray
            log.info("no relay on node %s: %s: %s", node[:8], type(exc).__name__, exc)
            _kill(relay)
            return None
        self._batches[node] = batch = _RelayBatch(relay, node)
        return batch

    # ------------------------------------------------------------------ what goes where
    @property
    def lane_ranks(self) -> list[int]:
        """The ranks whose steps take the local lane."""
        return [rank for rank, route in enumerate(self.routes) if isinstance(route, LaneRoute)]

    @property
    def relay_ranks(self) -> dict[str, list[int]]:
        """Node id -> the ranks whose steps go through that node's relay."""
        out: dict[str, list[int]] = {}
        for rank, route in enumerate(self.routes):
            if isinstance(route, RelayRoute):
                out.setdefault(route.node_id, []).append(rank)
        return out

    def relay_info(self) -> list[dict[str, Any]]:
        """Node id and pid of each relay (for tests and the doctor)."""
        return list(ray.get([batch.relay.where.remote() for batch in self._batches.values()]))

    def bypass_relays(self) -> Callable[[], None]:
        """Send the relays' ranks through Ray until the returned function is called (benchmarks compare the two)."""
        saved = {rank: route for rank, route in enumerate(self.routes) if isinstance(route, RelayRoute)}
        for rank in saved:
            self.routes[rank] = RayRoute(rank, self._workers[rank])

        def restore() -> None:
            for rank, route in saved.items():
                self.routes[rank] = route

        return restore


def _kill(actor: Any) -> None:
    try:
        ray.kill(actor, no_restart=True)
    except Exception:
        pass
