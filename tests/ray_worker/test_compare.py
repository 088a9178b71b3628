"""``envfleet compare``: the interval arithmetic against published values, and its refusals.

The runs compared on the real benchmark are in tests/libero/test_libero_compare.py; here
the statistics are checked against Newcombe (1998) and the gate against fingerprints
that differ field by field.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from envfleet.errors import InvalidInputError
from envfleet_ray.commands.compare import compare, differences, flatten
from envfleet_ray.commands.intervals import newcombe, wilson


def test_wilson_and_newcombe_match_newcombes_worked_examples() -> None:
    # Newcombe, Statistics in Medicine 17 (1998): 81/263 (single-proportion paper, method 3) and
    # 56/70 - 48/80 (difference paper, table II, method 10).
    assert wilson(81, 263) == pytest.approx((0.2553, 0.3662), abs=5e-5)
    assert newcombe(48, 80, 56, 70) == pytest.approx((0.0524, 0.3339), abs=5e-5)
    lo, hi = wilson(0, 10)
    assert lo == 0.0 and 0.27 < hi < 0.28
    assert newcombe(10, 10, 0, 10)[0] >= -1.0 and newcombe(0, 10, 10, 10)[1] <= 1.0


def _summary(**fingerprint: object) -> dict:
    fp = {"backend": "toy", "seed": 1, "settle_steps": 10, "packages": {"mujoco": "3.3"}, "state_ids": {"count": 4}, "hash": "x"}
    fp.update(fingerprint)
    rows = {"0": {"episodes": 10, "successes": 6, "successes_at_end": 5, "description": "reach"}}
    return {"policy": "zero", "per_task": rows, "fingerprint": fp}


def test_flatten_and_differences_leave_sampled_fields_out() -> None:
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": 2}) == {"a.b": 1, "a.c": [1, 2], "d": 2}
    a, b = _summary()["fingerprint"], _summary(seed=2, hash="y", state_ids={"count": 9}, packages={"mujoco": "3.4"})["fingerprint"]
    assert differences(a, b) == {"packages.mujoco": ("3.3", "3.4")}


def test_compare_refuses_naming_each_field_and_allows_on_request() -> None:
    a, b = _summary(), _summary(settle_steps=15, packages={"mujoco": "3.4"})
    code, lines = compare(a, b)
    assert code == 1
    assert "  differs: settle_steps: A 10 | B 15" in lines and "  differs: packages.mujoco: A 3.3 | B 3.4" in lines
    code, lines = compare(a, b, allow=["settle_steps", "packages"])
    assert code == 0 and "allowed to differ: settle_steps: A 10 | B 15" in lines
    code, lines = compare(a, b, allow=["settle_steps"])
    assert code == 1 and not any("settle_steps" in line for line in lines if line.startswith("  differs"))
    with pytest.raises(InvalidInputError, match="--allow 'settle_step' names no fingerprint field"):
        compare(a, b, allow=["settle_step"])


def test_compare_metric_picks_the_count() -> None:
    _, once = compare(_summary(), _summary())
    _, end = compare(_summary(), _summary(), metric="success_at_end")
    assert any(line.strip().startswith("0") and "6/10" in line for line in once)
    assert any(line.strip().startswith("0") and "5/10" in line for line in end)


def test_command_exit_codes(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "summary.json").write_text(json.dumps(_summary()))
    (tmp_path / "b.json").write_text(json.dumps(_summary(settle_steps=15)))

    def envfleet(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "envfleet_ray.cli", "compare", *args], capture_output=True, text=True, timeout=120)

    out = envfleet(str(tmp_path / "a"), str(tmp_path / "b.json"))
    assert out.returncode == 1 and "differs: settle_steps: A 10 | B 15" in out.stdout
    out = envfleet(str(tmp_path / "a"), str(tmp_path / "b.json"), "--allow", "settle_steps")
    assert out.returncode == 0, out.stderr
    out = envfleet(str(tmp_path / "a"), str(tmp_path / "missing"))
    assert out.returncode == 2 and "is neither a summary.json nor a run folder" in out.stderr
