"""``GroupFuture``: the pending result of a call on every worker of a group.

Each worker's share of a call is one :class:`WorkerCall`, whose :class:`Route`
says how it was sent and so how to wait for it: through Ray (an object ref), over
the local lane (a :class:`~envfleet_ray.lane.LaneCall`), through its node's relay
(a :class:`RelayShare` of one relay call, :mod:`envfleet_ray.relay`), or not at
all, because the worker's lane was already closed (then the worker is treated as
dead when the result is read). The future itself is :attr:`FutureState.PENDING` until
:meth:`GroupFuture.get` has combined every share, then :attr:`FutureState.DONE`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, GetTimeoutError, RayActorError, RayTaskError

from .lane import LaneCall, LaneClosed
from .relay import RelayOutcome

__all__ = ["DEAD_WORKER_ERRORS", "FutureState", "GroupFuture", "RelayCall", "RelayShare", "Route", "WorkerCall", "unwrap_task_error"]

#: What Ray raises for a call on a worker that is gone.
DEAD_WORKER_ERRORS = (RayActorError, ActorDiedError, ActorUnavailableError)


def unwrap_task_error(exc: RayTaskError) -> BaseException:
    """The worker's own exception inside Ray's wrapper (or the wrapper, if it holds none)."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


class Route(Enum):
    """How one worker's share of a call was sent."""

    RAY = "ray"  #: a Ray actor call: wait on its object ref
    LANE = "lane"  #: over the local lane: wait on its LaneCall
    LANE_CLOSED = "lane_closed"  #: not sent, the lane was closed: the worker is gone
    RELAY = "relay"  #: through its node's relay: wait on the relay's one reply


class RelayCall:
    """One relay's step call, shared by the workers it carries; read once."""

    def __init__(self, ref: ray.ObjectRef, node_id: str) -> None:
        self.ref = ref
        self.node_id = node_id
        self._outcomes: dict[int, RelayOutcome] | None = None
        self._lost: LaneClosed | None = None

    def settle(self, outcomes: list[RelayOutcome]) -> None:
        """Keep the relay's reply (read by the future's one ``ray.get``)."""
        self._outcomes = {o.rank: o for o in outcomes}

    def outcome(self, rank: int, timeout: float | None) -> RelayOutcome:
        """Worker ``rank``'s answer; :class:`LaneClosed` for every rank when the relay itself is gone."""
        if self._outcomes is None and self._lost is None:
            try:
                self.settle(ray.get(self.ref, timeout=timeout))
            except DEAD_WORKER_ERRORS as exc:
                # The relay's node is lost (or the relay alone died): each worker's own
                # fate is asked of Ray by the group, as for a closed lane.
                short = (str(exc).strip().splitlines() or [""])[0]
                self._lost = LaneClosed(f"the relay on node {self.node_id[:8]} is gone: {type(exc).__name__}: {short}")
        if self._lost is not None:
            raise self._lost
        assert self._outcomes is not None
        return self._outcomes[rank]


@dataclass(frozen=True)
class RelayShare:
    """A worker's share of a :class:`RelayCall`."""

    call: RelayCall
    rank: int

    def result(self, timeout: float | None) -> Any:
        """The worker's result; raises what it raised, or :class:`LaneClosed` when it is gone."""
        outcome = self.call.outcome(self.rank, timeout)
        if outcome.closed is not None:
            raise LaneClosed(outcome.closed)
        if outcome.error is not None:
            raise outcome.error
        return outcome.value


@dataclass(frozen=True)
class WorkerCall:
    """One worker's share of a group call."""

    route: Route
    ref: Any = None  #: RAY: the ObjectRef; LANE: the LaneCall
    closed: LaneClosed | None = None  #: LANE_CLOSED: why the lane was closed

    @classmethod
    def via_ray(cls, ref: ray.ObjectRef) -> WorkerCall:
        """A call sent through Ray."""
        return cls(Route.RAY, ref)

    @classmethod
    def via_lane(cls, call: LaneCall) -> WorkerCall:
        """A call sent over the local lane."""
        return cls(Route.LANE, call)

    @classmethod
    def via_relay(cls, call: RelayCall, rank: int) -> WorkerCall:
        """A call sent through its node's relay."""
        return cls(Route.RELAY, RelayShare(call, rank))

    @classmethod
    def lane_closed(cls, error: LaneClosed) -> WorkerCall:
        """A call that could not be sent: the worker's lane was closed."""
        return cls(Route.LANE_CLOSED, closed=error)

    def result(self, rank: int, timeout: float | None) -> Any:
        """Wait for the worker's answer; raise what the worker raised, or why it is gone."""
        if self.route is Route.LANE:
            try:
                return self.ref.result(timeout)
            except TimeoutError as exc:
                raise GetTimeoutError(f"worker {rank}: {exc}") from None
        if self.route is Route.LANE_CLOSED:
            assert self.closed is not None
            raise self.closed
        if self.route is Route.RELAY:
            return self.ref.result(timeout)
        return ray.get(self.ref, timeout=timeout)


class FutureState(Enum):
    """Where a :class:`GroupFuture` stands."""

    PENDING = "pending"  #: some answers may still be on their way
    DONE = "done"  #: every answer is in and combined; ``get()`` returns the same value again


class GroupFuture:
    """The pending result of a group call; :meth:`get` waits, checks and combines.

    :param calls: one :class:`WorkerCall` per worker, by rank.
    :param finish: combines the workers' results into the call's result.
    :param on_dead: ``{rank: error}`` for every worker found gone in this call (all of
        them at once, so that the workers of a lost node are recreated together):
        returns ``{rank: stand-in result}`` or raises.
    """

    def __init__(
        self,
        calls: list[WorkerCall],
        finish: Callable[[list[Any]], Any],
        on_dead: Callable[[dict[int, BaseException]], dict[int, Any]],
    ) -> None:
        self._calls = calls
        self._finish = finish
        self._on_dead = on_dead
        self._value: Any = None
        self.state = FutureState.PENDING

    def get(self, timeout: float | None = None) -> Any:
        """Wait for every worker and return the combined result."""
        if self.state is FutureState.DONE:
            return self._value
        results: list[Any] = [None] * len(self._calls)
        dead: dict[int, BaseException] = {}
        via_ray = [rank for rank, call in enumerate(self._calls) if call.route is Route.RAY]
        relays = self._relay_calls()
        # One ray.get for every Ray-routed share and relay reply: with many workers, a get per
        # worker costs the driver a round trip into Ray's core worker each. Only when one of
        # them failed are they read one by one, to tell which.
        if via_ray or relays:
            try:
                values = ray.get([self._calls[rank].ref for rank in via_ray] + [r.ref for r in relays], timeout=timeout)
                for rank, value in zip(via_ray, values):
                    results[rank] = value
                for relay, value in zip(relays, values[len(via_ray) :]):
                    relay.settle(value)
                via_ray = []
            except (*DEAD_WORKER_ERRORS, RayTaskError):
                pass
        for rank, call in enumerate(self._calls):
            if call.route is Route.RAY and rank not in via_ray:
                continue
            try:
                results[rank] = call.result(rank, timeout)
            except (*DEAD_WORKER_ERRORS, LaneClosed) as exc:
                dead[rank] = exc
            except RayTaskError as exc:
                # The worker's own exception (InvalidInputError, EnvFleetSimulatorError, ...), not
                # Ray's wrapper, so that callers catch what the worker raised and read its message.
                raise unwrap_task_error(exc) from exc
        if dead:
            for rank, value in self._on_dead(dead).items():
                results[rank] = value
        self._value = self._finish(results)
        self.state = FutureState.DONE
        return self._value

    def ready(self) -> bool:
        """True when every worker has answered (does not wait)."""
        if self.state is FutureState.DONE:
            return True
        if not all(call.ref.ready() for call in self._calls if call.route is Route.LANE):
            return False
        refs = [call.ref for call in self._calls if call.route is Route.RAY] + [r.ref for r in self._relay_calls()]
        if not refs:
            return True
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)  # one wait for all of them
        return len(done) == len(refs)

    def _relay_calls(self) -> list[RelayCall]:
        """The distinct relay calls among the shares, in rank order of their first share."""
        seen: dict[int, RelayCall] = {}
        for call in self._calls:
            if call.route is Route.RELAY:
                seen.setdefault(id(call.ref.call), call.ref.call)
        return list(seen.values())
