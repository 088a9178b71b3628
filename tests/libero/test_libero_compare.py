"""``envfleet compare`` on real LIBERO-PRO runs made by ``envfleet rollout``.

Three short rollouts of ``libero_goal_task``: A and B differ only in the seed (they
compare), A and C only in the settle steps (refused, naming ``settle_steps``; compared
with ``--allow settle_steps``, which the header then shows).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

COMMON = [
    "--steps",
    "1",
    "--policy",
    "zero",
    "--no-progress",
    "train.simulator_type=libero",
    "train.task_suite_name=libero_goal_task",
    "train.num_envs=1",
    "train.max_episode_steps=2",
    "actor.model.num_action_chunks=2",
    "train.init_params.camera_heights=64",
    "train.init_params.camera_widths=64",
]


def envfleet(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAY_ADDRESS": "", "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    return subprocess.run([sys.executable, "-m", "envfleet_ray.cli", *args], capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, local_ray: dict[str, object]) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runs")
    variants = {"a": ["train.seed=1"], "b": ["train.seed=2"], "c": ["train.seed=1", "train.settle_steps=15"]}
    # The three rollouts join one local Ray (as on a cluster, --address) instead of each starting its own:
    # what is compared is the runs' summaries, which do not depend on who started Ray.
    for name, extra in variants.items():
        out = envfleet("rollout", "--address", str(local_ray["address"]), "--out", str(root / name), *COMMON, *extra)
        assert out.returncode == 0, out.stderr[-3000:]
    return {name: root / name for name in variants}


def test_runs_that_differ_only_in_seed_compare(runs: dict[str, Path]) -> None:
    out = envfleet("compare", str(runs["a"]), str(runs["b"] / "summary.json"))
    assert out.returncode == 0, out.stdout + out.stderr
    a = json.loads((runs["a"] / "summary.json").read_text())
    b = json.loads((runs["b"] / "summary.json").read_text())
    assert a["fingerprint"]["hash"] != b["fingerprint"]["hash"], "the seed is part of the fingerprint"
    assert f"fingerprint {a['fingerprint']['hash']}, seed 1" in out.stdout and "seed 2" in out.stdout
    assert "open the bottom drawer of the cabinet" in out.stdout, "the table names the task by the instruction shown"
    assert "allowed to differ" not in out.stdout


def test_runs_that_differ_in_settle_steps_are_refused_naming_the_field(runs: dict[str, Path]) -> None:
    out = envfleet("compare", str(runs["a"]), str(runs["c"]))
    assert out.returncode == 1, out.stdout + out.stderr
    differing = [line for line in out.stdout.splitlines() if line.startswith("  differs:")]
    assert differing == ["  differs: settle_steps: A 10 | B 15"], out.stdout


def test_allow_compares_anyway_and_shows_the_field(runs: dict[str, Path]) -> None:
    out = envfleet("compare", str(runs["a"]), str(runs["c"]), "--allow", "settle_steps")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "allowed to differ: settle_steps: A 10 | B 15" in out.stdout
    lines = out.stdout.splitlines()
    assert any(line.lstrip().startswith("all") for line in lines), out.stdout  # the table's total row
    assert any(line.startswith("paired test: not run") for line in lines), out.stdout  # summaries alone: nothing to pair
