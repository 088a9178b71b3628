"""``train.gymnasium.envs_per_process``: how many envs share a shard process, and ``auto``'s choice.

``auto`` (the default) weighs one call's cost both ways, from the step time the spec probe measured
(:func:`envfleet_gymnasium.child.step_seconds`, cached with the rest of its answer):

- in the caller's process (``train.in_process``), as gymnasium's ``SyncVectorEnv``: every env's
  sub-steps one after the other, ``num_envs * chunk * step``;
- in shard processes, one per core: ``ceil(num_envs / cores) * chunk * step`` plus
  :data:`ROUND_TRIP_S`, what a call to the shards costs beyond the steps (the command, the wake-ups,
  the replies), measured on the zero-cost env (docs/benchmarks.md).

The cheaper one is the layout; a tie goes to the caller's process. An env whose probe could not time
a step (a step that raised) runs in shard processes, one per core, and ``envfleet doctor`` says so. A
number is that many envs per process, as before; ``train.in_process`` set either way overrides ``auto``.

>>> Choice.of(num_envs=2, chunk=8, step_s=10e-6, cores=2).in_process
True
>>> Choice.of(num_envs=16, chunk=8, step_s=60e-6, cores=2).per_process
8
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from .probe import probe

__all__ = ["ROUND_TRIP_S", "Choice", "cores", "choose"]

#: What one call to shard processes costs beyond the envs' own steps, in seconds (docs/benchmarks.md).
ROUND_TRIP_S = 350e-6


def cores() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class Choice:
    """Where ``auto`` runs a stage's envs: in the caller's process, or else ``per_process`` envs a shard process
    (also the layout of ``train.in_process: false``); and why."""

    in_process: bool
    per_process: int
    why: str

    @classmethod
    def of(cls, num_envs: int, chunk: int | None, step_s: float | None, cores: int) -> Choice:
        """The choice for ``num_envs`` envs stepped ``chunk`` sub-steps a call (``None``: taken as 1), one step
        costing ``step_s`` seconds (``None``: not timed), on ``cores`` cores."""
        processes = max(1, min(num_envs, cores))
        per = math.ceil(num_envs / processes)
        if step_s is None:
            return cls(False, per, f"the spec probe could not time a step: {processes} shard processes, one per core")
        k = chunk or 1
        here = num_envs * k * step_s
        there = per * k * step_s + ROUND_TRIP_S
        figures = (
            f"a step takes {step_s * 1e6:.1f} us: a call of {k} sub-steps on {num_envs} envs costs {here * 1e3:.2f} ms in the "
            f"caller's process, {there * 1e3:.2f} ms in {processes} shard processes"
        )
        if here <= there:
            return cls(True, per, f"{figures}: in the caller's process")
        return cls(False, per, f"{figures}: in shard processes, {per} envs each")


def choose(cfg: Any, num_envs: int, chunk: int | None) -> Choice:
    """``auto``'s choice for env section ``cfg`` (the probe's step time; see the module doc)."""
    return Choice.of(num_envs, chunk, probe(cfg).get("step_s"), cores())
