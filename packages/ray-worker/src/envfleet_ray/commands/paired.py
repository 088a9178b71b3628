"""Paired comparison of two recorded runs over the same fixed initial states (``envfleet compare``'s paired test).

Two runs are paired when their recorded episodes (``train.record``) cover the same initial
states: the same (task id, state id) pairs, each as often, and the same seed. Episode ``k`` of
a state in run A is then paired with episode ``k`` of that state in run B, and McNemar's exact
test (a two-sided binomial test on the discordant pairs, ``b`` = A succeeded and B failed,
``c`` = A failed and B succeeded, ``p = min(1, 2 P[X <= min(b, c)])`` with ``X ~ Bin(b + c, 1/2)``)
says whether the two policies differ on those states. Pairing removes the variation between
initial states from the comparison, so it is more sensitive than two independent rates.
"""

from __future__ import annotations

import collections
import math
import os
from typing import Any

# Imports inside functions: recording's readers (pyarrow) load only when two runs have recorded datasets to
# pair.

__all__ = ["mcnemar_exact", "episode_outcomes", "paired_lines"]


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value of ``b`` and ``c`` discordant pairs (1.0 when there are none)."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2**n
    return min(1.0, 2 * tail)


def episode_outcomes(run_dir: str, metric: str) -> dict[tuple[int, int, int], bool] | None:
    """``(task id, state id, occurrence) -> success`` of every recorded episode of the run; None when nothing was recorded.

    Episodes cut by a simulator restart are left out (their outcome is not the policy's).
    """
    from envfleet.recording import find_datasets, read_episodes

    roots = find_datasets(os.path.join(run_dir, "datasets"))
    if not roots:
        return None
    seen: collections.Counter[tuple[int, int]] = collections.Counter()
    out = {}
    rows = sorted(
        (r for root in roots for r in read_episodes(root) if not r.get("envfleet/sim_restarted")),
        key=lambda r: (r["envfleet/rank"], r["envfleet/stage"], r["episode_index"]),
    )
    for row in rows:
        state = (int(row["envfleet/task_id"]), int(row["envfleet/state_id"]))
        out[(*state, seen[state])] = bool(row.get(f"envfleet/{metric}", False))
        seen[state] += 1
    return out


def paired_lines(run_a: str, run_b: str, seed_a: Any, seed_b: Any, metric: str) -> list[str]:
    """What ``envfleet compare`` prints about pairing: the paired test, or why the runs are not paired."""
    if not (os.path.isdir(run_a) and os.path.isdir(run_b)):
        return ["paired test: not run (pass run folders with recorded datasets, train.record.format=lerobot)"]
    a, b = episode_outcomes(run_a, metric), episode_outcomes(run_b, metric)
    if a is None or b is None:
        return ["paired test: not run (a run has no recorded episodes; record with train.record.format=lerobot)"]
    if seed_a != seed_b:
        return [f"paired test: not run (seeds differ: {seed_a} and {seed_b}); the intervals above are of independent rates"]
    if set(a) != set(b):
        only = len(set(a) ^ set(b))
        return [f"paired test: not run ({only} episode(s) have no partner over the same task and state id); independent rates above"]
    both = sum(a[k] and b[k] for k in a)
    neither = sum(not a[k] and not b[k] for k in a)
    b_only_a = sum(a[k] and not b[k] for k in a)
    c_only_b = sum(b[k] and not a[k] for k in a)
    p = mcnemar_exact(b_only_a, c_only_b)
    return [
        f"paired: {len(a)} episodes over the same initial states (task id, state id, seed {seed_a}), metric {metric}",
        f"  both succeeded {both}, neither {neither}, only A {b_only_a}, only B {c_only_b}",
        f"  McNemar's exact test on the {b_only_a + c_only_b} discordant pairs: two-sided p = {p:.4g}",
    ]
