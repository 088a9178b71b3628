"""An ``envfleet rollout`` in the main venv, from the tests of LeRobot's venv.

LeRobot needs Python 3.12 and its own pins; LIBERO and Ray run in the main venv (Python 3.11), whose
python ``nox -s tests-lerobot`` passes as ``ENVFLEET_MAIN_PYTHON``. The rollout runs there as a user
runs it, with the seeded random policy that logs what it saw and sent
(``tests.recording.logging_policy``), so that the tests here can compare a dataset with it.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

__all__ = ["REPO", "main_venv_rollout"]


def main_venv_rollout(out: Path, steps: int, overrides: Sequence[str]) -> tuple[subprocess.CompletedProcess[str], dict]:
    """Run ``envfleet rollout --steps STEPS --out OUT`` with ``overrides`` in the main venv; its process and summary.

    The policy's log goes to ``OUT/policy-log``. A failed rollout fails the test with its last output.
    """
    python = os.environ.get("ENVFLEET_MAIN_PYTHON")
    if not python or not os.path.exists(python):
        pytest.fail(
            f"ENVFLEET_MAIN_PYTHON is {python!r}: expected the python of a venv with envfleet-ray and envfleet-libero (nox -s tests-lerobot sets it)"
        )
    env = {
        **os.environ,
        "RAY_ADDRESS": "",
        "ENVFLEET_TEST_POLICY_LOG": str(out / "policy-log"),
        "PYTHONPATH": str(REPO),
        "MUJOCO_GL": "egl",
        "PYOPENGL_PLATFORM": "egl",
        "PATH": os.pathsep.join([os.path.dirname(python), os.environ.get("PATH", "")]),
        "VIRTUAL_ENV": os.path.dirname(os.path.dirname(python)),
    }
    cmd = [python, "-m", "envfleet_ray.cli", "rollout", "--steps", str(steps), "--no-progress", "--workers", "1", "--out", str(out)]
    cmd += ["--policy", "tests.recording.logging_policy:logging_random", *overrides]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc, json.loads((out / "summary.json").read_text())
