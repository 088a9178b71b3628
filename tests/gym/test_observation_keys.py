"""The gymnasium face hands out every observation key the backend declares (the toy's ``depth``)."""

from __future__ import annotations

import numpy as np
import pytest

from envfleet.gym import make_vector_env

from .common import CHUNK, toy_cfg


@pytest.mark.parametrize("dtype", ["uint8", "float32"])
def test_depth_is_in_the_spaces_and_the_observations(dtype: str, no_leaks) -> None:
    env = make_vector_env(toy_cfg(num_envs=2, **{"toy.depth": dtype}), autoreset_mode="SameStep")
    try:
        space = env.single_observation_space["depth"]
        assert space.shape == (16, 16) and space.dtype == np.dtype(dtype)
        assert env.observation_space["depth"].shape == (2, 16, 16)
        obs, _ = env.reset(seed=0)
        assert obs["depth"].dtype == np.dtype(dtype) and obs["depth"].shape == (2, 16, 16)
        assert env.observation_space.contains(obs), "the reset's observations are outside observation_space"
        for _ in range(5):  # max_episode_steps 12 = 4 chunks of 3: an auto-reset on the way
            obs, _, _, _, infos = env.step(np.full((2, CHUNK, 7), 0.5, np.float32))
            assert env.observation_space.contains(obs)
            if "final_obs" in infos:
                final = infos["final_obs"][infos["_final_obs"]][0]
                assert final["depth"].shape == (16, 16) and final["depth"].dtype == np.dtype(dtype)
        assert obs["depth"][0].min() != obs["depth"][0].max()
    finally:
        env.close()
