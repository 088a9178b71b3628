"""gymnasium's own vector wrappers over the face."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.wrappers import vector as vw

from envfleet.gym import make_vector_env

from .common import CHUNK, steer, toy_cfg


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"], ids=["next-step", "same-step"])
def test_record_episode_statistics_counts_every_episode(mode: str, no_leaks) -> None:
    env = vw.RecordEpisodeStatistics(make_vector_env(toy_cfg(max_steps=2 * CHUNK), autoreset_mode=mode))
    try:
        obs, _ = env.reset(seed=0)
        lengths = []
        for _ in range(6):
            obs, _, _, _, infos = env.step(steer(obs))
            if "episode" in infos:
                done = infos["_episode"]
                lengths += infos["episode"]["l"][done].tolist()
        # Every episode lasts at most 2 steps (chunks); gymnasium counts VectorEnv steps.
        assert lengths and all(1 <= n <= 2 for n in lengths)
        assert len(env.return_queue) == len(lengths)
    finally:
        env.close()


def test_normalize_observation_over_the_state(no_leaks) -> None:
    base = make_vector_env(toy_cfg())
    env = vw.NormalizeObservation(vw.FlattenObservation(vw.FilterObservation(base, ["state"])))
    try:
        obs, _ = env.reset(seed=0)
        assert obs.shape == (3, 8)
        for _ in range(5):
            obs, *_ = env.step(np.random.default_rng(0).uniform(-1, 1, env.action_space.shape).astype(np.float32))
        assert np.isfinite(obs).all() and env.obs_rms.count > 5
    finally:
        env.close()


def test_dict_info_to_list(no_leaks) -> None:
    env = vw.DictInfoToList(make_vector_env(toy_cfg()))
    try:
        _, infos = env.reset(seed=0)
        assert isinstance(infos, list) and len(infos) == 3 and "state_id" in infos[0]
        _, _, _, _, infos = env.step(np.zeros(env.action_space.shape, np.float32))
        assert infos[2]["episode_length"] == CHUNK
    finally:
        env.close()
