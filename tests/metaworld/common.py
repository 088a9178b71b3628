"""Shared settings of the MetaWorld tests: the simulator's venv and a small config."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from typing import Any

import numpy as np

#: The MetaWorld venv's interpreter, built by ``nox -s tests-metaworld`` with ``envfleet venv metaworld``.
SIM_PYTHON_ENV = "ENVFLEET_METAWORLD_PYTHON"
SIZE = 64
CHUNK = 4
DIRECT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "direct.py")


def sim_python() -> str:
    """The MetaWorld venv's Python (the tests are collected only when it is set)."""
    return os.environ[SIM_PYTHON_ENV]


def metaworld_train(**extra: Any) -> dict[str, Any]:
    """A ``train`` section running MetaWorld shards in its own venv, 64x64 images."""
    return {
        "simulator_type": "metaworld",
        "task_suite_name": "mt50",
        "simulator_python": sim_python(),
        "init_params": {"camera_heights": SIZE, "camera_widths": SIZE},
        **extra,
    }


def moving_actions(seed: int, chunks: int) -> np.ndarray:
    """``[chunks, CHUNK, 4]`` float32 actions that move the arm and the gripper."""
    return np.random.default_rng(seed).uniform(-1, 1, size=(chunks, CHUNK, 4)).astype(np.float32)


def direct_run(episodes: list[dict[str, Any]], *, seed: int = 42, settle: int = 0, flip: bool = True) -> list[dict[str, np.ndarray]]:
    """Run plain MetaWorld in its venv (tests/metaworld/direct.py): per episode, frames and states after the reset and each chunk.

    Each episode is ``{"task": name, "variation": i, "actions": [chunks, CHUNK, 4]}``.
    """
    with tempfile.TemporaryDirectory() as tmp:
        spec = []
        for k, ep in enumerate(episodes):
            path = os.path.join(tmp, f"actions{k}.npy")
            np.save(path, ep["actions"])
            spec.append({"task": ep["task"], "variation": ep["variation"], "actions": path})
        out = os.path.join(tmp, "out.npz")
        args = {"episodes": spec, "seed": seed, "settle": settle, "flip": flip, "size": SIZE, "out": out}
        subprocess.run([sim_python(), DIRECT, json.dumps(args)], check=True, timeout=600, env={**os.environ, "PYTHONPATH": ""})
        with np.load(out) as data:
            return [{"images": data[f"images{k}"], "states": data[f"states{k}"]} for k in range(len(episodes))]
