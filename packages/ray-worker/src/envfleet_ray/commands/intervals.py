"""Success rates with 95% confidence intervals, and the table cells that show them.

The score intervals of ``envfleet compare`` and ``envfleet report``: Wilson's interval of one
rate, and Newcombe's hybrid score interval of the difference of two (Newcombe 1998, method 10),
which, unlike the Wald interval, stays inside [-1, 1] and behaves at rates of 0 and 1. The
cells are shared by every table that prints them (per task, per perturbation family), so
they read alike.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["wilson", "newcombe", "rate_cell", "diff_cell", "group_counts"]

_Z95 = 1.959963984540054


def wilson(k: int, n: int, z: float = _Z95) -> tuple[float, float]:
    """The Wilson score interval of a rate of ``k`` in ``n`` (``(0, 1)`` for ``n = 0``)."""
    if n <= 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def newcombe(k_a: int, n_a: int, k_b: int, n_b: int, z: float = _Z95) -> tuple[float, float]:
    """Newcombe's hybrid score interval of the difference of rates ``k_b/n_b - k_a/n_a``."""
    pa, pb = (k_a / n_a if n_a else 0.0), (k_b / n_b if n_b else 0.0)
    la, ua = wilson(k_a, n_a, z)
    lb, ub = wilson(k_b, n_b, z)
    d = pb - pa
    lower = d - math.sqrt((pb - lb) ** 2 + (ua - pa) ** 2)
    upper = d + math.sqrt((ub - pb) ** 2 + (pa - la) ** 2)
    return max(-1.0, lower), min(1.0, upper)


def rate_cell(k: int | None, n: int | None) -> str:
    """``k/n rate [Wilson 95% interval]`` in 27 columns; ``-`` when a side has no count."""
    if k is None or n is None:
        return f"{'-':>27}"
    lo, hi = wilson(k, n)
    rate = k / n if n else 0.0
    return f"{k:>4}/{n:<4} {rate:>5.2f} [{lo:.2f}, {hi:.2f}]"


def diff_cell(ka: int | None, na: int | None, kb: int | None, nb: int | None) -> str:
    """``B - A [Newcombe 95% interval]`` in 22 columns; ``-`` when a side has no episodes."""
    if ka is None or na is None or kb is None or nb is None or not na or not nb:
        return f"{'-':>22}"
    lo, hi = newcombe(ka, na, kb, nb)
    return f"{kb / nb - ka / na:>+6.2f} [{lo:+.2f}, {hi:+.2f}]"


def group_counts(per_task: Mapping[Any, Mapping[str, Any]], key: str = "successes") -> dict[str, tuple[int, int]]:
    """``{group: (k, n)}``: the per-task rows that carry a ``group`` (a backend's grouping of its tasks,
    e.g. LIBERO-plus's perturbation dimension), summed per group in the order groups first appear."""
    out: dict[str, tuple[int, int]] = {}
    for row in per_task.values():
        group = row.get("group")
        if group is None:
            continue
        k, n = out.get(str(group), (0, 0))
        out[str(group)] = (k + int(row.get(key, 0)), n + int(row["episodes"]))
    return out
