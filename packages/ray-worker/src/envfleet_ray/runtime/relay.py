"""The node relay: one Ray call per node for a step, fanned out to that node's workers over local lanes.

A step through Ray costs the driver one actor call per worker, 0.7-1.0 ms of its CPU
each on this machine (docs/benchmarks.md, "A fleet of workers on a Ray cluster"): at
64 workers that, not the simulators, bounds the step. For every other node that holds
two or more of its workers, :class:`~envfleet_ray.runtime.group.EnvWorkerGroup` starts one
:class:`NodeRelay` actor there (no CPU reserved, pinned to the node). A step then costs
the driver one Ray call per such node; the relay hands each worker its part over the
worker's local lane (:mod:`envfleet_ray.runtime.lane`), the same road a worker on the driver's
own node takes, and returns every worker's answer in one reply.

What a relay answers for each rank is a :class:`RelayOutcome`: the worker's result, the
exception the worker raised (re-raised on the driver as it is), or that its lane closed
(the worker's process is gone; the group asks Ray why, as for any dead worker). A
relay that is itself gone (its node was lost) counts as a closed lane for every rank it
carried. Ray still creates, places, watches and restarts the workers; resets and the
other calls go to the workers through Ray, as before.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .lane import LANE_METHOD, LaneClient, LaneClosed

# Imports inside functions: Ray loads inside the relay's actor, where it runs.

__all__ = ["NodeRelay", "RelayOutcome"]


@dataclass(frozen=True)
class RelayOutcome:
    """One worker's answer to a relayed step."""

    rank: int
    value: Any = None  #: the worker's result
    error: BaseException | None = None  #: what the worker raised
    closed: str | None = None  #: why its lane closed: the worker is gone


class NodeRelay:
    """Runs on one node; holds a lane to each of the group's workers there."""

    def __init__(self) -> None:
        self._lanes: dict[int, LaneClient] = {}

    def where(self) -> dict[str, Any]:
        """The relay's node id and pid."""
        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}

    def attach(self, rank: int, address: str, token: bytes, stages: int) -> str | None:
        """Open the lanes of worker ``rank`` (one per stage); None on success, else why not."""
        self.detach(rank)
        lane = LaneClient(address, token)
        try:
            for stage in range(stages):
                lane.connect(stage)
        except OSError as exc:
            lane.close()
            return f"{type(exc).__name__}: {exc}"
        self._lanes[rank] = lane
        return None

    def detach(self, rank: int) -> None:
        """Close worker ``rank``'s lanes (it was recreated, or the group is closing)."""
        lane = self._lanes.pop(rank, None)
        if lane is not None:
            lane.close()

    def step(self, stage: int, parts: Sequence[tuple[int, Any]]) -> list[RelayOutcome]:
        """``env_interact_step`` of stage ``stage`` on each ``(rank, data)``: sent to all, then read in turn."""
        pending: list[tuple[int, Any]] = []
        for rank, data in parts:
            lane = self._lanes.get(rank)
            if lane is None:
                pending.append((rank, f"the relay holds no lane to worker {rank}"))
                continue
            try:
                pending.append((rank, lane.call(stage, LANE_METHOD, data)))
            except LaneClosed as exc:
                pending.append((rank, str(exc)))
        out = []
        for rank, call in pending:
            if isinstance(call, str):
                out.append(RelayOutcome(rank, closed=call))
                continue
            try:
                out.append(RelayOutcome(rank, value=call.result()))
            except LaneClosed as exc:
                out.append(RelayOutcome(rank, closed=str(exc)))
            except Exception as exc:
                out.append(RelayOutcome(rank, error=exc))
        return out

    def close(self) -> None:
        """Close every lane. Safe to call twice."""
        for rank in list(self._lanes):
            self.detach(rank)
