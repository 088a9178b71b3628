"""LeRobot 0.6.1 over the gymnasium backend's PushT and ALOHA, each in its venv (``ENVFLEET_PUSHT_PYTHON``,
``ENVFLEET_ALOHA_PYTHON``, which ``nox -s tests-lerobot`` builds as tests-gymnasium does): LeRobot's own
``LeRobotDataset`` loads what an ``envfleet rollout`` of each recorded (in the main venv, ``ENVFLEET_MAIN_PYTHON``),
and its env factory reaches them through ``--env.type=envfleet``."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from lerobot.datasets.lerobot_dataset import LeRobotDataset
from lerobot.envs import close_envs, preprocess_observation
from lerobot.envs.factory import make_env, make_env_config
from lerobot.utils.import_utils import register_third_party_plugins

from tests.gymnasium_backend.cases import ALOHA, PUSHT, overrides

REPO = Path(__file__).resolve().parents[2]
CASES = {"pusht": (PUSHT, "full_image", (96, 96, 3), 2), "aloha": (ALOHA, "top", (480, 640, 3), 14)}


def _python(name: str) -> str:
    python = os.environ.get(name)
    if not python or not os.path.exists(python):
        pytest.fail(f"{name} is {python!r}: expected the python of a venv (nox -s tests-lerobot sets it)")
    return python


@pytest.fixture(scope="module", params=sorted(CASES))
def recorded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, dict]:
    """`envfleet rollout` of the case in the main venv, its shards in the case's venv, recorded as LeRobot datasets."""
    case = CASES[request.param][0]
    _python(case["python_env"])
    python = _python("ENVFLEET_MAIN_PYTHON")
    out = tmp_path_factory.mktemp(request.param) / "run"
    env = {
        **os.environ,
        "RAY_ADDRESS": "",
        "PYTHONPATH": str(REPO),
        "MUJOCO_GL": "egl",
        "PYOPENGL_PLATFORM": "egl",
        "PATH": os.pathsep.join([os.path.dirname(python), os.environ.get("PATH", "")]),
        "VIRTUAL_ENV": os.path.dirname(os.path.dirname(python)),
    }
    steps = "4" if request.param == "pusht" else "2"
    cmd = [python, "-m", "envfleet_ray.cli", "rollout", "--steps", steps, "--no-progress", "--workers", "1", "--out", str(out)]
    cmd += ["--policy", "random", *overrides(case), "train.num_envs=2", "actor.model.num_action_chunks=8", "train.max_episode_steps=16"]
    cmd += ["train.record.format=lerobot", "train.auto_reset=true"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return request.param, out, json.loads((out / "summary.json").read_text())


def test_lerobot_loads_the_recorded_dataset(recorded: tuple[str, Path, dict]) -> None:
    name, _, summary = recorded
    _, camera, shape, dim = CASES[name]
    assert summary["backend"] == "gymnasium" and summary["episodes"] >= 1 and summary["sim_restarts"] == 0
    (dataset,) = summary["datasets"]
    ds = LeRobotDataset(f"envfleet/{name}", root=dataset["root"], video_backend="pyav")
    assert {f"observation.images.{camera}", "observation.state", "action"} <= set(ds.meta.features)
    assert ds.num_episodes == dataset["episodes"] and ds.num_frames == dataset["frames"]
    first = ds[0]
    assert tuple(first[f"observation.images.{camera}"].shape) == (shape[2], shape[0], shape[1])
    assert first["action"].shape[-1] == 8 * dim  # one frame per chunk: the chunk's 8 actions
    assert first["task"] == summary["per_task"]["0"]["description"]
    row = ds.meta.episodes[0]
    assert row["length"] == 2 and bool(ds[row["dataset_from_index"] + 1]["next.done"])  # 16 sub-steps in chunks of 8


@pytest.mark.parametrize("name", sorted(CASES))
def test_lerobots_env_factory_reaches_the_case(name: str) -> None:
    case, camera, shape, dim = CASES[name]
    _python(case["python_env"])
    register_third_party_plugins()
    extra = [o for o in overrides(case) if not o.startswith("train.simulator_type=")]
    cfg = make_env_config("envfleet", backend="gymnasium", episode_length=16, n_action_steps=8, overrides=extra)
    envs = make_env(cfg, n_envs=2)
    try:
        (suite,) = envs.values()
        env = suite[0]
        obs, _ = env.reset(seed=[0, 1])
        assert obs["pixels"][camera if camera != "full_image" else "image"].shape == (2, *shape)
        assert obs["agent_pos"].shape[0] == 2
        lerobot_obs = preprocess_observation(obs)
        assert "observation.state" in lerobot_obs
        for _ in range(8):
            _, reward, terminated, truncated, _ = env.step(np.zeros((2, dim), np.float32))
        assert reward.shape == (2,) and terminated.shape == (2,) and truncated.shape == (2,)
    finally:
        close_envs(envs)
