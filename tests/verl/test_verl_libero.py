"""A short real LIBERO rollout through verl's trainer machinery: 1 worker x 2 stages x 1 env,
libero_spatial, driven in verl's EnvLoop order."""

from __future__ import annotations

import numpy as np
import pytest
import ray

from envfleet_ray import init_ray

from .roles import build_roles, drive_in_envloop_order, verl_config

CHUNK, SIZE = 8, 96


@pytest.fixture(scope="module")
def libero_roles():
    init_ray(num_cpus=4)
    train = {
        "simulator_type": "libero",
        "task_suite_name": "libero_spatial",
        "num_envs": 1,
        "max_episode_steps": 64,
        "init_params": {
            "camera_depths": False,
            "camera_heights": SIZE,
            "camera_widths": SIZE,
            "camera_names": ["agentview", "robot0_eye_in_hand"],
        },
    }
    env_wg, rollout_wg = build_roles(verl_config(train, stages=2, chunk=CHUNK), env_workers=1)
    env_wg.init_worker()
    env_wg.init_simulator()
    yield env_wg, rollout_wg
    env_wg.close()
    ray.shutdown()


def test_libero_rollout_through_verl(libero_roles) -> None:
    env_wg, rollout_wg = libero_roles
    ids = env_wg.get_all_state_ids()[0]
    task_of = env_wg.get_state_task_ids()[0]
    chosen = np.array([ids[task_of == 0][0], ids[task_of == 1][0]])  # stage 0: task 0, stage 1: task 1
    history = drive_in_envloop_order(env_wg, rollout_wg, chosen, task_of[chosen], rounds=2)
    for stage in range(2):
        obs = history[-1][stage]
        assert tuple(obs.batch["full_image"].shape) == (1, SIZE, SIZE, 3)
        assert tuple(obs.batch["state"].shape) == (1, 8)
        # A rendered scene, not a blank buffer.
        assert obs.batch["full_image"].float().std() > 10 and obs.batch["wrist_image"].float().std() > 10
    d0, d1 = (history[0][s].non_tensor_batch["task_descriptions"][0] for s in range(2))
    assert d0 != d1 and d0.startswith("pick up the black bowl")
    metrics = env_wg.finish_rollout()
    assert metrics[0]["chunks"] == 4 and metrics[0]["env_steps"] == 4 * CHUNK
