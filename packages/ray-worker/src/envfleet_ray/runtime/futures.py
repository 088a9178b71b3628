"""``GroupFuture``: the pending result of a call on every worker of a group.

Each worker's share of a call is a :class:`~envfleet_ray.runtime.routes.Share`, made by the route
that sent it (:mod:`envfleet_ray.runtime.routes`): the future does not know how a share travelled.
It reads every Ray result of the call with one ``ray.get``, then asks each share for its
worker's answer. The future is :attr:`FutureState.PENDING` until :meth:`GroupFuture.get` has
combined every share, then :attr:`FutureState.DONE`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import Enum
from typing import Any

import ray
from ray.exceptions import RayTaskError

from .lane import LaneClosed
from .routes import DEAD_WORKER_ERRORS, RayResult, Share

__all__ = ["DEAD_WORKER_ERRORS", "FutureState", "GroupFuture", "unwrap_task_error"]


def unwrap_task_error(exc: RayTaskError) -> BaseException:
    """The worker's own exception inside Ray's wrapper (or the wrapper, if it holds none)."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


class FutureState(Enum):
    """Where a :class:`GroupFuture` stands."""

    PENDING = "pending"  #: some answers may still be on their way
    DONE = "done"  #: every answer is in and combined; ``get()`` returns the same value again


class GroupFuture:
    """The pending result of a group call; :meth:`get` waits, checks and combines.

    :param shares: one :class:`~envfleet_ray.runtime.routes.Share` per worker, by rank.
    :param finish: combines the workers' results into the call's result.
    :param on_dead: ``{rank: error}`` for every worker found gone in this call (all of
        them at once, so that the workers of a lost node are recreated together):
        returns ``{rank: stand-in result}`` or raises.
    """

    def __init__(
        self,
        shares: Sequence[Share],
        finish: Callable[[list[Any]], Any],
        on_dead: Callable[[dict[int, BaseException]], dict[int, Any]],
    ) -> None:
        self._shares = list(shares)
        self._finish = finish
        self._on_dead = on_dead
        self._value: Any = None
        self.state = FutureState.PENDING

    def get(self, timeout: float | None = None) -> Any:
        """Wait for every worker and return the combined result."""
        if self.state is FutureState.DONE:
            return self._value
        pending = self._pending()
        # One ray.get for every Ray result of the call: with many workers, a get per worker costs
        # the driver a round trip into Ray's core worker each. Only when one of them failed does
        # each share read its own, to tell which.
        if pending:
            try:
                for result, value in zip(pending, ray.get([r.ref for r in pending], timeout=timeout)):
                    result.set(value)
            except (*DEAD_WORKER_ERRORS, RayTaskError):
                pass
        results: list[Any] = [None] * len(self._shares)
        dead: dict[int, BaseException] = {}
        for rank, share in enumerate(self._shares):
            try:
                results[rank] = share.result(timeout)
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
        if not all(share.ready() for share in self._shares):
            return False
        refs = [r.ref for r in self._pending()]
        if not refs:
            return True
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)  # one wait for all of them
        return len(done) == len(refs)

    def _pending(self) -> list[RayResult]:
        """The distinct Ray results of the shares not read yet (a relay's reply serves several shares)."""
        seen: dict[int, RayResult] = {}
        for share in self._shares:
            for result in share.ray_results():
                if not result.done:
                    seen.setdefault(id(result), result)
        return list(seen.values())
