"""LeRobot's PushT (gym-pusht 0.1.8) in its own venv, driven from a worker in the main venv: bit for bit gymnasium's
SyncVectorEnv over it, the frame rendered at the read sub-step only; and a rollout recorded as a LeRobot dataset."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

from envfleet import ProcessEnvManager
from envfleet.config import load_config

from .cases import PUSHT, direct_run, overrides, train
from .conftest import ROOT

SEEDS = [3, 1000, 7]
CHUNK, CHUNKS = 8, 3


def test_pusht_matches_sync_vector_env(no_leaks: None) -> None:
    n = len(SEEDS)
    cfg = load_config(
        data={"train": train(PUSHT, num_envs=n, gymnasium={"seeds": SEEDS}), "actor": {"model": {"num_action_chunks": CHUNK}}}
    )
    assert cfg.actor.model.action_dim == 2
    # In [-1, 1], rescaled onto PushT's [0, 512] box by the backend; the reference gets the rescaled values.
    actions = np.random.default_rng(0).uniform(-1, 1, (CHUNKS, n, CHUNK, 2)).astype(np.float32)
    scaled = (0.0 + (actions.astype(np.float64) + 1.0) * 0.5 * 512.0).astype(np.float32)
    ref = direct_run(PUSHT, SEEDS, scaled)
    with ProcessEnvManager(cfg) as mgr:
        assert set(mgr.obs_spec) == {"state", "environment_state", "full_image"}
        results = [mgr.reset_envs_to_state_ids(np.arange(n))]
        results += [mgr.chunk_step(actions[c]) for c in range(CHUNKS)]
    for j, res in enumerate(results):
        np.testing.assert_array_equal(res.obs["state"], ref[f"{j}/agent_pos"], err_msg=f"agent_pos after chunk {j}")
        np.testing.assert_array_equal(res.obs["environment_state"], ref[f"{j}/environment_state"])
        np.testing.assert_array_equal(res.obs["full_image"], ref[f"{j}/render"], err_msg=f"frame after chunk {j}")
    rewards = np.concatenate([r.rewards for r in results[1:]], axis=1)
    np.testing.assert_array_equal(rewards, ref["rewards"].astype(np.float32))
    assert not np.array_equal(results[0].obs["full_image"], results[-1].obs["full_image"]), "nothing moved"


def test_pusht_rollout_records_a_lerobot_dataset(tmp_path) -> None:
    out = tmp_path / "run"
    env = {**os.environ, "RAY_ADDRESS": "", "PYTHONPATH": ROOT}
    cmd = [sys.executable, "-m", "envfleet_ray.cli", "rollout", "--steps", "5", "--no-progress", "--out", str(out), "--policy", "random"]
    cmd += [*overrides(PUSHT), "train.num_envs=2", "actor.model.num_action_chunks=8", "train.max_episode_steps=16"]
    cmd += ["train.record.format=lerobot", "train.auto_reset=true"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] >= 4 and summary["sim_restarts"] == 0
    assert summary["fingerprint"]["gymnasium"]["env_packages"] == {"gym-pusht": "0.1.8"}
    (dataset,) = summary["datasets"]
    info = json.loads(open(os.path.join(dataset["root"], "meta", "info.json")).read())
    assert {"observation.images.full_image", "observation.state", "action"} <= set(info["features"])
