"""The TorchRL face's specs and tensordicts carry every observation key the backend declares (the toy's ``depth``)."""

from __future__ import annotations

import torch
from torchrl.envs.utils import check_env_specs

from envfleet.torchrl import make_env

from .test_env import toy_cfg


def test_depth_is_in_the_specs_and_the_rollout(no_leaks) -> None:
    env = make_env(toy_cfg(num_envs=2, envs_per_process=2, depth="float32", side_camera=True))
    try:
        assert env.observation_spec["depth"].shape == (2, 16, 16) and env.observation_spec["depth"].dtype == torch.float32
        assert env.observation_spec["side_image"].dtype == torch.uint8
        check_env_specs(env)  # TorchRL's own check: every spec'd key, shape and dtype in reset and step
        rollout = env.rollout(2)  # max_episode_steps = 2 chunks: both steps of one episode
        assert rollout["next", "depth"].shape == (2, 2, 16, 16)
        assert not torch.equal(rollout["next", "depth"][:, 0], rollout["next", "depth"][:, -1])
    finally:
        env.close()
