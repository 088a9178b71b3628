"""The conformance suite catches real bugs: each is planted in the toy (``train.toy.planted_bug``)
and the suite, run as a plugin author runs it, must fail the test that names it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

SUITE = """
from envfleet.testing import EnvConformance


class TestPlanted(EnvConformance):
    config_data = {{"train": {{"simulator_type": "toy", "num_envs": 2, "toy": {{"planted_bug": "{bug}"}}}}}}
    config_overrides = ["actor.model.num_action_chunks=4"]
"""


def run_suite(tmp_path, bug: str) -> str:
    path = tmp_path / f"test_planted_{bug}.py"
    path.write_text(textwrap.dedent(SUITE.format(bug=bug)))
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", str(path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
        env={k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"},
    )
    assert out.returncode != 0, f"the suite passed a toy with {bug!r}:\n{out.stdout[-3000:]}"
    return out.stdout


@pytest.mark.parametrize(
    ("bug", "failed", "message"),
    [
        ("black_images", ["test_images_are_rendered_scenes"], "is one flat colour (0)"),
        ("render_last_differs", ["test_render_last_equals_render_all"], "render last != render all"),
        ("own_spec_differs", ["test_reset_matches_spec", "test_chunk_step_matches_spec"], "make the two agree"),
    ],
    ids=["black-images", "render-last-differs", "own-spec-differs"],
)
def test_the_suite_fails_a_planted_bug(tmp_path, bug, failed, message) -> None:
    report = run_suite(tmp_path, bug)
    for name in failed:
        assert f"TestPlanted::{name}" in report, report[-3000:]
    assert message in report, report[-3000:]


def test_a_sound_toy_passes_with_auto_reset_in_its_config(tmp_path) -> None:
    path = tmp_path / "test_auto.py"
    path.write_text(
        textwrap.dedent(
            """
            from envfleet.testing import EnvConformance


            class TestAuto(EnvConformance):
                config_data = {"train": {"simulator_type": "toy", "num_envs": 2, "auto_reset": True}}
                config_overrides = ["actor.model.num_action_chunks=4"]
            """
        )
    )
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-3000:]
