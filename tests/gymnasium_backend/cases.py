"""LeRobot's PushT and ALOHA as gymnasium cases: their configs, each in its venv (``nox -s tests-gymnasium`` builds
them and names their interpreters), and gymnasium's own SyncVectorEnv over them in that venv (direct.py)."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from typing import Any

import numpy as np

DIRECT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "direct.py")

#: LeRobot's PushT with its state and keypoints in the observation and the frame from render(), at 96x96.
PUSHT = {
    "python_env": "ENVFLEET_PUSHT_PYTHON",
    "gymnasium": {
        "id": "gym_pusht/PushT-v0",
        "render": "rgb_array",
        "kwargs": {"obs_type": "environment_state_agent_pos", "visualization_width": 96, "visualization_height": 96},
        "state_keys": {"state": "agent_pos", "environment_state": "environment_state"},
        "rescale_actions": True,
    },
}
#: LeRobot's ALOHA insertion: the top camera (640x480) in the observation, joint positions as the state.
ALOHA = {
    "python_env": "ENVFLEET_ALOHA_PYTHON",
    "gymnasium": {
        "id": "gym_aloha/AlohaInsertion-v0",
        "kwargs": {"obs_type": "pixels_agent_pos"},
        "image_keys": {"top": "pixels.top"},
        "state_keys": {"state": "agent_pos"},
    },
}


def sim_python(case: dict[str, Any]) -> str:
    return os.environ[case["python_env"]]


def train(case: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """The case's ``train`` section, its shards under its venv's Python."""
    section = {k: v for k, v in case["gymnasium"].items()}
    section.update(extra.pop("gymnasium", {}))
    return {"simulator_type": "gymnasium", "simulator_python": sim_python(case), "gymnasium": section, **extra}


def overrides(case: dict[str, Any]) -> list[str]:
    """The case as ``key=value`` overrides (for ``envfleet rollout``)."""
    out = ["train.simulator_type=gymnasium", f"train.simulator_python={sim_python(case)}"]
    for key, value in case["gymnasium"].items():
        out.append(f"train.gymnasium.{key}={json.dumps(value)}")
    return out


def direct_run(case: dict[str, Any], seeds: list[int], actions: np.ndarray) -> dict[str, np.ndarray]:
    """SyncVectorEnv over the case in its venv: ``actions`` ``[chunks, n, chunk, dim]`` in the env's own units."""
    g = case["gymnasium"]
    with tempfile.TemporaryDirectory() as tmp:
        np.save(os.path.join(tmp, "actions.npy"), actions)
        args = {
            "id": g["id"],
            "kwargs": g.get("kwargs", {}),
            "render": g.get("render") == "rgb_array",
            "seeds": seeds,
            "actions": os.path.join(tmp, "actions.npy"),
            "out": os.path.join(tmp, "out.npz"),
        }
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        subprocess.run([sim_python(case), DIRECT, json.dumps(args)], check=True, timeout=900, env=env)
        with np.load(args["out"]) as data:
            return {k: data[k] for k in data.files}
