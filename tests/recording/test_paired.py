"""``envfleet compare`` on two recorded runs over the same initial states: McNemar's exact test on the pairs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from envfleet_ray.commands.paired import episode_outcomes, mcnemar_exact

TOY = [
    "train.simulator_type=toy",
    "train.num_envs=2",
    "rollout.pipeline_stage_num=2",
    "actor.model.num_action_chunks=4",
    "train.max_episode_steps=8",
    "train.ignore_terminations=true",  # every episode lasts 8 steps whatever the policy does: the same states in both runs
    "train.init_params.camera_heights=24",
    "train.init_params.camera_widths=24",
    "train.record.format=lerobot",
]


def envfleet(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAY_ADDRESS": ""}
    return subprocess.run([sys.executable, "-m", "envfleet_ray.cli", *args], capture_output=True, text=True, timeout=600, env=env)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("paired")
    variants = {"a": ("zero", []), "b": ("random", []), "c": ("random", ["train.max_episode_steps=12"])}
    for name, (policy, extra) in variants.items():
        out = envfleet("rollout", "--steps", "6", "--no-progress", "--policy", policy, "--out", str(root / name), *TOY, *extra)
        assert out.returncode == 0, out.stderr[-3000:]
    return {name: root / name for name in variants}


def test_mcnemar_exact_matches_the_binomial_tail() -> None:
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(0, 5) == pytest.approx(2 / 32)
    assert mcnemar_exact(9, 1) == pytest.approx(2 * 11 / 1024)
    assert mcnemar_exact(3, 3) == 1.0


def test_runs_over_the_same_states_get_the_paired_test(runs: dict[str, Path]) -> None:
    out = envfleet("compare", str(runs["a"]), str(runs["b"]))
    assert out.returncode == 0, out.stdout + out.stderr
    a, b = episode_outcomes(str(runs["a"]), "success_once"), episode_outcomes(str(runs["b"]), "success_once")
    assert a is not None and b is not None and set(a) == set(b) and len(a) == 12
    only_a, only_b = sum(a[k] and not b[k] for k in a), sum(b[k] and not a[k] for k in a)
    assert f"paired: {len(a)} episodes over the same initial states" in out.stdout
    assert f"only A {only_a}, only B {only_b}" in out.stdout
    assert (
        f"McNemar's exact test on the {only_a + only_b} discordant pairs: two-sided p = {mcnemar_exact(only_a, only_b):.4g}" in out.stdout
    )
    assert "Newcombe" in out.stdout


def test_runs_with_other_protocols_are_still_refused(runs: dict[str, Path]) -> None:
    out = envfleet("compare", str(runs["a"]), str(runs["c"]))
    assert out.returncode == 1 and "max_episode_steps" in out.stdout and "McNemar" not in out.stdout
