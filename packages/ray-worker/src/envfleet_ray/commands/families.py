"""``envfleet compare``'s rows per LIBERO-PRO perturbation family.

LIBERO-PRO perturbs each of LIBERO's four 10-task suites (``libero_spatial``, ``libero_object``,
``libero_goal``, ``libero_10``) in four ways, each a suite named with a suffix
(see ``envfleet_libero.suites``): ``_lan`` (the instruction reworded), ``_object`` (the objects'
appearance), ``_swap`` (the objects' positions exchanged), ``_task`` (a new task). A run covers
one suite, so a study of a policy pair is one pair of runs per suite; :func:`family_lines` sums
the pairs' per-task counts by family into one row each (Wilson intervals, B - A with Newcombe's
interval). A run of LIBERO's own suites, or of any other suite or backend, is in family ``none``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .intervals import diff_cell, rate_cell

__all__ = ["FAMILIES", "suite_family", "family_counts", "family_lines"]

#: LIBERO-PRO's perturbation families, by suite suffix; ``none`` for every other suite.
FAMILIES: tuple[str, ...] = ("lan", "object", "swap", "task")
_BASES = ("spatial", "object", "goal", "10")  # the LIBERO suites LIBERO-PRO perturbs


def suite_family(suite: Any) -> str:
    """The perturbation family of suite ``suite``: ``lan``, ``object``, ``swap``, ``task``, or ``none``.

    >>> suite_family("libero_goal_swap"), suite_family("libero_object"), suite_family("libero_object_object")
    ('swap', 'none', 'object')
    """
    name = str(suite or "")
    for base in _BASES:
        for family in FAMILIES:
            if name == f"libero_{base}_{family}":
                return family
    return "none"


def _suite(summary: Mapping[str, Any]) -> Any:
    return (summary.get("fingerprint") or {}).get("task_suite_name")


def family_counts(pairs: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]], key: str) -> dict[str, dict[str, Any]]:
    """Per family, the successes (``key``) and episodes of runs A and B summed over ``pairs`` of summaries,
    and the suites they came from. Each pair is one suite measured by both runs."""
    out: dict[str, dict[str, Any]] = {}
    for a, b in pairs:
        row = out.setdefault(suite_family(_suite(a)), {"ka": 0, "na": 0, "kb": 0, "nb": 0, "suites": []})
        for side, summary in (("a", a), ("b", b)):
            for task in summary["per_task"].values():
                row[f"k{side}"] += int(task[key])
                row[f"n{side}"] += int(task["episodes"])
        if _suite(a) not in row["suites"]:
            row["suites"].append(_suite(a))
    return dict(sorted(out.items(), key=lambda kv: (kv[0] == "none", kv[0])))


def family_lines(pairs: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]], key: str) -> list[str]:
    """The table of :func:`family_counts`: one row per family, with the suites it sums."""
    lines = [f"per perturbation family (LIBERO-PRO suite suffix), {key} summed over {len(pairs)} suite(s):"]
    lines.append(f"{'family':>7}  {'A: k/n rate [95% CI]':>27}  {'B: k/n rate [95% CI]':>27}  {'B - A [95% CI]':>22}  suites")
    for family, r in family_counts(pairs, key).items():
        suites = ", ".join(str(s) for s in r["suites"])
        lines.append(
            f"{family:>7}  {rate_cell(r['ka'], r['na'])}  {rate_cell(r['kb'], r['nb'])}  {diff_cell(r['ka'], r['na'], r['kb'], r['nb'])}  {suites}"
        )
    return lines
