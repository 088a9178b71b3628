"""``envfleet compare``'s rows per LIBERO-PRO perturbation family: one pair of summaries per suite,
summed by the suite's suffix (``_lan``, ``_object``, ``_swap``, ``_task``; ``none`` otherwise)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from envfleet_ray.commands.families import FAMILIES, family_counts, family_lines, suite_family
from envfleet_ray.commands.intervals import wilson


def _summary(suite: str, *counts: tuple[int, int]) -> dict:
    fp = {"backend": "libero", "task_suite_name": suite, "seed": 1, "state_ids": {"count": 4}, "hash": suite}
    rows = {str(t): {"episodes": n, "successes": k, "successes_at_end": k, "description": f"t{t}"} for t, (k, n) in enumerate(counts)}
    return {"policy": "p", "per_task": rows, "fingerprint": fp}


def test_suite_family_matches_the_libero_backends_suites() -> None:
    suites = pytest.importorskip("envfleet_libero.suites")
    for suite in suites.SUITES:
        pro = suite.count("_") == 2 and suite.rsplit("_", 1)[1] in suites.PERTURBATIONS and not suite.startswith("libero_plus_")
        expected = suite.rsplit("_", 1)[1] if pro else "none"
        assert suite_family(suite) == expected, suite
    # LIBERO-plus's suites are reported per dimension, not as LIBERO-PRO families, whatever their last word.
    assert suite_family("libero_plus_object") == "none"
    assert set(FAMILIES) == set(suites.PERTURBATIONS)
    assert suite_family("libero_object") == "none" and suite_family("libero_object_object") == "object"
    assert suite_family(None) == "none" and suite_family("libero_goal_with_mug") == "none"


def test_pairs_are_summed_per_family() -> None:
    pairs = [
        (_summary("libero_goal_swap", (3, 10), (1, 10)), _summary("libero_goal_swap", (5, 10), (2, 10))),
        (_summary("libero_10_swap", (0, 5)), _summary("libero_10_swap", (4, 5))),
        (_summary("libero_goal_lan", (7, 10)), _summary("libero_goal_lan", (6, 10))),
        (_summary("libero_goal", (9, 10)), _summary("libero_goal", (9, 10))),
    ]
    counts = family_counts(pairs, "successes")
    assert list(counts) == ["lan", "swap", "none"]
    assert counts["swap"] == {"ka": 4, "na": 25, "kb": 11, "nb": 25, "suites": ["libero_goal_swap", "libero_10_swap"]}
    assert counts["lan"] == {"ka": 7, "na": 10, "kb": 6, "nb": 10, "suites": ["libero_goal_lan"]}
    lines = family_lines(pairs, "successes")
    swap = next(line for line in lines if line.strip().startswith("swap"))
    lo, hi = wilson(4, 25)
    assert "4/25" in swap and f"[{lo:.2f}, {hi:.2f}]" in swap and "+0.28" in swap and "libero_goal_swap, libero_10_swap" in swap


def test_command_with_one_pair_names_its_family_and_several_pairs_sum(tmp_path: Path) -> None:
    files = {}
    for name, summary in {
        "a_swap": _summary("libero_spatial_swap", (2, 4)),
        "b_swap": _summary("libero_spatial_swap", (4, 4)),
        "a_task": _summary("libero_spatial_task", (1, 4)),
        "b_task": _summary("libero_spatial_task", (0, 4)),
    }.items():
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(json.dumps(summary))

    def envfleet(*names: str) -> subprocess.CompletedProcess[str]:
        args = [str(files[n]) for n in names]
        return subprocess.run([sys.executable, "-m", "envfleet_ray.cli", "compare", *args], capture_output=True, text=True, timeout=120)

    one = envfleet("a_swap", "b_swap")
    assert one.returncode == 0, one.stderr
    family = one.stdout.split("per perturbation family")[1].splitlines()
    assert [line.split()[0] for line in family[2:] if line.strip()] == ["swap"]
    both = envfleet("a_swap", "b_swap", "a_task", "b_task")
    assert both.returncode == 0, both.stderr
    assert both.stdout.count("== ") == 2 and "suite libero_spatial_task" in both.stdout
    rows = {line.split()[0]: line for line in both.stdout.split("per perturbation family")[1].splitlines()[2:] if line.strip()}
    assert set(rows) == {"swap", "task"} and "1/4" in rows["task"] and "0/4" in rows["task"]
    odd = envfleet("a_swap", "b_swap", "a_task")
    assert odd.returncode == 2 and "in pairs" in odd.stderr
