"""LeRobot's ALOHA insertion (gym-aloha 0.1.5, dm_control 1.0.41, MuJoCo 3.8.1) in its own venv, driven from a worker
in the main venv (MuJoCo 3.17): bit for bit gymnasium's SyncVectorEnv over it, its camera in the observation; and a
rollout recorded as a LeRobot dataset."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

from envfleet import ProcessEnvManager
from envfleet.config import load_config

from .cases import ALOHA, direct_run, overrides, train
from .conftest import ROOT

SEEDS = [0, 17]
CHUNK, CHUNKS = 8, 2


def test_aloha_matches_sync_vector_env(no_leaks: None) -> None:
    n = len(SEEDS)
    cfg = load_config(
        data={"train": train(ALOHA, num_envs=n, gymnasium={"seeds": SEEDS}), "actor": {"model": {"num_action_chunks": CHUNK}}}
    )
    assert cfg.actor.model.action_dim == 14
    actions = (np.random.default_rng(1).uniform(-1, 1, (CHUNKS, n, CHUNK, 14)) * 0.3).astype(np.float32)
    ref = direct_run(ALOHA, SEEDS, actions)
    with ProcessEnvManager(cfg) as mgr:
        assert mgr.obs_spec["top"].shape == (480, 640, 3) and mgr.obs_spec["state"].shape == (14,)
        results = [mgr.reset_envs_to_state_ids(np.arange(n))]
        results += [mgr.chunk_step(actions[c]) for c in range(CHUNKS)]
    for j, res in enumerate(results):
        np.testing.assert_array_equal(res.obs["state"], ref[f"{j}/agent_pos"], err_msg=f"agent_pos after chunk {j}")
        np.testing.assert_array_equal(res.obs["top"], ref[f"{j}/pixels.top"], err_msg=f"top camera after chunk {j}")
    assert not np.array_equal(results[0].obs["state"], results[-1].obs["state"]), "the arms did not move"
    assert not np.array_equal(results[0].obs["top"][0], results[0].obs["top"][1]), "two seeds gave one start"


def test_aloha_rollout_records_a_lerobot_dataset(tmp_path) -> None:
    out = tmp_path / "run"
    env = {**os.environ, "RAY_ADDRESS": "", "PYTHONPATH": ROOT}
    cmd = [sys.executable, "-m", "envfleet_ray.cli", "rollout", "--steps", "2", "--no-progress", "--out", str(out), "--policy", "zero"]
    cmd += [*overrides(ALOHA), "train.num_envs=2", "actor.model.num_action_chunks=8", "train.max_episode_steps=8"]
    cmd += ["train.record.format=lerobot", "train.auto_reset=true"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] >= 2 and summary["sim_restarts"] == 0
    fp = summary["fingerprint"]["gymnasium"]
    assert fp["env_packages"] == {"gym-aloha": "0.1.5"} and fp["render_last"].startswith("nothing to skip")
    (dataset,) = summary["datasets"]
    info = json.loads(open(os.path.join(dataset["root"], "meta", "info.json")).read())
    assert {"observation.images.top", "observation.state", "action"} <= set(info["features"])
