"""Reset to the same state ids, step with the same actions: bit for bit what gymnasium's own SyncVectorEnv gives
over the same env and seeds, step for step, for an env that renders (Pendulum, ``render: rgb_array``) and one
with its images in the observation (Pendulum with its frame in it); and CartPole's terminations."""

from __future__ import annotations

import importlib

import gymnasium
import numpy as np
import pytest
from gymnasium.vector import SyncVectorEnv

from envfleet import ProcessEnvManager

from .common import PIXEL_PENDULUM, box_actions, gym_cfg

SEEDS = [11, 23, 5, 42]
STATE_IDS = np.array([2, 0, 3])  # seeds 5, 11, 42
STEPS = 24


def sync_env(env_id: str, n: int, **make: object) -> SyncVectorEnv:
    """gymnasium's SyncVectorEnv over ``gymnasium.make(id, **make)``, as a user builds it."""
    module, sep, name = env_id.partition(":")
    if sep:
        importlib.import_module(module)
    else:
        name = env_id
    return SyncVectorEnv([lambda: gymnasium.make(name, **make) for _ in range(n)])


def _frames(envs: SyncVectorEnv) -> np.ndarray:
    return np.stack(envs.call("render"))


@pytest.mark.parametrize(
    "chunk,per_process",
    [(1, 1), (8, 1), (8, 3), (8, 0)],
    ids=["every-step", "chunks-of-8", "chunks-of-8-one-process", "chunks-of-8-in-the-caller"],
)
def test_pendulum_rendering_matches_sync_vector_env(chunk: int, per_process: int, no_leaks: None) -> None:
    n = len(STATE_IDS)
    ref = sync_env("Pendulum-v1", n, render_mode="rgb_array")
    layout = {"train_in_process": True} if per_process == 0 else {"envs_per_process": per_process, "train_in_process": False}
    cfg = gym_cfg("Pendulum-v1", chunk=chunk, num_envs=n, render="rgb_array", seeds=SEEDS, **layout)
    actions = box_actions(0, n, STEPS, 1, scale=2.0)
    try:
        with ProcessEnvManager(cfg) as mgr:
            first = mgr.reset_envs_to_state_ids(STATE_IDS)
            obs, _ = ref.reset(seed=[SEEDS[k] for k in STATE_IDS])
            np.testing.assert_array_equal(first.obs["state"], obs)
            np.testing.assert_array_equal(first.obs["full_image"], _frames(ref))
            for c in range(STEPS // chunk):
                mine = mgr.chunk_step(actions[:, c * chunk : (c + 1) * chunk])
                for k in range(chunk):
                    obs, reward, term, trunc, _ = ref.step(actions[:, c * chunk + k])
                    np.testing.assert_array_equal(mine.rewards[:, k], reward.astype(np.float32), err_msg=f"chunk {c} sub-step {k}")
                    np.testing.assert_array_equal(mine.terminations[:, k], term)
                    np.testing.assert_array_equal(mine.truncations[:, k], trunc)
                np.testing.assert_array_equal(mine.obs["state"], obs, err_msg=f"state after chunk {c}")
                np.testing.assert_array_equal(mine.obs["full_image"], _frames(ref), err_msg=f"frame after chunk {c}")
            assert not np.array_equal(first.obs["full_image"], mine.obs["full_image"]), "the pendulum did not move"
    finally:
        ref.close()


@pytest.mark.parametrize("chunk", [1, 8], ids=["every-step", "chunks-of-8"])
def test_images_in_the_observation_match_sync_vector_env(chunk: int, no_leaks: None) -> None:
    n = len(STATE_IDS)
    ref = sync_env(PIXEL_PENDULUM, n)
    cfg = gym_cfg(PIXEL_PENDULUM, chunk=chunk, num_envs=n, seeds=SEEDS)
    actions = box_actions(1, n, STEPS, 1, scale=2.0)
    try:
        with ProcessEnvManager(cfg) as mgr:
            assert set(mgr.obs_spec) == {"state", "pixels"}
            first = mgr.reset_envs_to_state_ids(STATE_IDS)
            obs, _ = ref.reset(seed=[SEEDS[k] for k in STATE_IDS])
            for key in ("state", "pixels"):
                np.testing.assert_array_equal(first.obs[key], obs[key])
            for c in range(STEPS // chunk):
                mine = mgr.chunk_step(actions[:, c * chunk : (c + 1) * chunk])
                for k in range(chunk):
                    obs, reward, *_ = ref.step(actions[:, c * chunk + k])
                    np.testing.assert_array_equal(mine.rewards[:, k], reward.astype(np.float32))
                for key in ("state", "pixels"):
                    assert mine.obs[key].dtype == obs[key].dtype
                    np.testing.assert_array_equal(mine.obs[key], obs[key], err_msg=f"{key} after chunk {c}")
    finally:
        ref.close()


def test_a_discrete_observation_matches_sync_vector_env(no_leaks: None) -> None:
    """FrozenLake: a Discrete observation (one int64 per env) and a Discrete action space, two envs in one process."""
    n = 2
    ref = sync_env("FrozenLake-v1", n)
    cfg = gym_cfg("FrozenLake-v1", chunk=1, num_envs=n, seeds=SEEDS, envs_per_process=2)
    moves = np.random.default_rng(3).integers(0, 4, (n, 12))
    try:
        with ProcessEnvManager(cfg) as mgr:
            assert mgr.obs_spec["state"].shape == () and mgr.obs_spec["state"].dtype == "int64"
            first = mgr.reset_envs_to_state_ids(np.array([0, 1]))
            obs, _ = ref.reset(seed=SEEDS[:2])
            np.testing.assert_array_equal(first.obs["state"], obs)
            live = np.ones(n, dtype=bool)
            for t in range(moves.shape[1]):
                mine = mgr.chunk_step(moves[:, t].astype(np.float32).reshape(n, 1, 1))
                obs, _, term, trunc, _ = ref.step(moves[:, t])
                np.testing.assert_array_equal(mine.obs["state"][live], obs[live], err_msg=f"step {t}")
                live &= ~(term | trunc)
    finally:
        ref.close()


@pytest.mark.parametrize("in_process", [True, False], ids=["in-the-caller", "in-processes"])
def test_cartpole_terminations_match_sync_vector_env(in_process: bool, no_leaks: None) -> None:
    """A Discrete action space and gymnasium's own terminations: envfleet ends each episode where gymnasium does,
    its envs in the caller's process or in shard processes."""
    n = len(STATE_IDS)
    ref = sync_env("CartPole-v1", n)
    cfg = gym_cfg("CartPole-v1", chunk=1, num_envs=n, seeds=SEEDS, train_in_process=in_process)
    assert cfg.actor.model.action_dim == 1
    push = np.ones((n, 1, 1), dtype=np.float32)  # always right: the pole falls within a few dozen steps
    try:
        with ProcessEnvManager(cfg) as mgr:
            assert mgr.in_process is in_process and (mgr.shard_pids() == [None]) is in_process
            mgr.reset_envs_to_state_ids(STATE_IDS)
            obs, _ = ref.reset(seed=[SEEDS[k] for k in STATE_IDS])
            live = np.ones(n, dtype=bool)
            for t in range(100):
                mine = mgr.chunk_step(push)
                obs, reward, term, _, _ = ref.step(np.ones(n, dtype=np.int64))
                np.testing.assert_array_equal(mine.obs["state"][live], obs[live], err_msg=f"step {t}")
                np.testing.assert_array_equal(mine.terminations[live, 0], term[live], err_msg=f"step {t}")
                np.testing.assert_array_equal(mine.rewards[live, 0], reward[live].astype(np.float32))
                live &= ~term
                if not live.any():
                    break
            assert not live.any(), "the poles did not fall"
            lengths = mine.infos["episode_length"]
            assert len(set(lengths.tolist())) > 1, "every episode had the same length: the seeds made no difference"
            assert not mine.infos["success_once"].any()  # CartPole reports no is_success: its terminations are failures
    finally:
        ref.close()
