"""First-ready stepping on LIBERO: each env's episode, an auto-reset in the middle included, is the
lockstep one bit for bit (observations, images, rewards, flags, infos)."""

from __future__ import annotations

from typing import Any

import numpy as np

from envfleet.config import load_config

from ..core.test_first_ready import assert_same_episodes, first_ready_episodes, lockstep_episodes

CHUNK = 8
ROUNDS = 4
NUM_ENVS = 2


def _config() -> Any:
    train = {
        "simulator_type": "libero",
        "task_suite_name": "libero_spatial",
        "num_envs": NUM_ENVS,
        "max_episode_steps": 2 * CHUNK,  # every env auto-resets after its second chunk
        "auto_reset": True,
        "init_params": {"camera_heights": 64, "camera_widths": 64},
        "libero": {"envs_per_process": 1},
    }
    return load_config(data={"train": train, "actor": {"model": {"num_action_chunks": CHUNK, "action_dim": 7}}})


def test_first_ready_is_lockstep_per_env_across_an_auto_reset(no_leaks: None) -> None:
    rng = np.random.default_rng(3)
    arm = rng.uniform(-1.0, 1.0, size=(ROUNDS, NUM_ENVS, CHUNK, 6))
    gripper = np.sign(rng.uniform(-1.0, 1.0, size=(ROUNDS, NUM_ENVS, CHUNK, 1)))
    acts = np.concatenate([arm, gripper], axis=-1).astype(np.float32)
    cfg = _config()
    lock = lockstep_episodes(cfg, NUM_ENVS, acts)
    ready, _ = first_ready_episodes(cfg, NUM_ENVS, acts, min_ready=1)
    assert_same_episodes(lock, ready)
    resets = [k for k, row in enumerate(ready[0]) if row["info.reset_state_id"] >= 0]
    assert resets == [1, 3], resets  # the auto-resets happened, mid-run
    assert any(row["obs.full_image"].any() for row in ready[0])
