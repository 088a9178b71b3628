"""The gymnasium face on the toy: spaces, reset options, infos, render, restarts, bad inputs, close."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import VectorEnv

from envfleet.env import EnvContext
from envfleet.errors import ConfigError, InvalidInputError
from envfleet.gym import make_vector_env
from envfleet_toy.env import ToyEnv

from ..conftest import own_segments, pid_alive
from .common import CHUNK, steer, toy_cfg


@pytest.fixture
def face(no_leaks):
    env = make_vector_env(toy_cfg(), render_mode="rgb_array")
    yield env
    env.close()


def test_spaces_and_metadata(face) -> None:
    assert isinstance(face, VectorEnv) and face.num_envs == 3
    single = face.single_observation_space
    assert set(single.spaces) == {"full_image", "wrist_image", "state"}  # every key of the backend's spec
    assert single["full_image"] == gym.spaces.Box(0, 255, (16, 16, 3), np.uint8)
    assert single["state"].shape == (8,) and single["state"].dtype == np.float32
    assert face.observation_space["full_image"].shape == (3, 16, 16, 3)
    assert face.single_action_space.shape == (CHUNK, 7) and face.action_space.shape == (3, CHUNK, 7)
    assert face.metadata["render_modes"] == ["rgb_array"] and face.metadata["render_fps"] > 0
    obs, _ = face.reset(seed=0)
    assert face.observation_space.contains(obs)
    obs, rew, term, trunc, _ = face.step(face.action_space.sample())
    assert face.observation_space.contains(obs)
    assert rew.shape == (3,) and term.dtype == np.bool_ and trunc.dtype == np.bool_


def test_infos_are_arrays_with_masks(face) -> None:
    _, infos = face.reset(seed=0)
    for key in ("state_id", "task_description"):
        assert infos[key].shape == (3,) and infos[f"_{key}"].all()
    assert infos["task_description"][0].startswith("reach the")
    _, rew, _, _, infos = face.step(np.zeros(face.action_space.shape, np.float32))
    for key in ("success_once", "is_success", "episode_length", "sim_restarted", "task_id"):
        assert infos[key].shape == (3,) and infos[f"_{key}"].all(), key
    assert infos["chunk_rewards"].shape == (3, CHUNK) and infos["chunk_truncations"].dtype == np.bool_
    np.testing.assert_array_equal(infos["chunk_rewards"].sum(axis=1), rew)
    assert (infos["episode_length"] == CHUNK).all()


def test_state_ids_option_and_partial_reset(face) -> None:
    obs, infos = face.reset(options={"state_ids": np.array([4, 11, 27])})
    assert infos["state_id"].tolist() == [4, 11, 27]
    solo = ToyEnv(face.config.train, EnvContext(num_envs=3, action_dim=7, num_action_chunks=CHUNK))
    expected = solo.reset_envs_to_state_ids(np.array([4, 11, 27]))
    for key in obs:
        np.testing.assert_array_equal(obs[key], expected.obs[key])
    moved, *_ = face.step(steer(obs))
    mask = np.array([False, True, False])
    obs2, infos2 = face.reset(options={"reset_mask": mask, "state_ids": [20]})
    assert infos2["_state_id"].tolist() == mask.tolist() and infos2["state_id"][1] == 20
    again = solo.reset_envs_to_state_ids(np.array([4, 20, 27]))
    np.testing.assert_array_equal(obs2["state"][1], again.obs["state"][1])  # env 1 is at its new start
    np.testing.assert_array_equal(obs2["state"][[0, 2]], moved["state"][[0, 2]])  # the others kept their episodes
    _, _, _, _, infos3 = face.step(np.zeros(face.action_space.shape, np.float32))
    assert infos3["episode_length"].tolist() == [2 * CHUNK, CHUNK, 2 * CHUNK]
    # task ids are checked against the state ids
    with pytest.raises(InvalidInputError, match="does not match state id"):
        face.reset(options={"state_ids": [0, 1, 2], "task_ids": [0, 0, 2]})
    face.step(np.zeros(face.action_space.shape, np.float32))  # still usable


def test_seed_makes_resets_repeatable(face) -> None:
    _, a = face.reset(seed=3)
    _, b = face.reset(seed=3)
    _, c = face.reset(seed=4)
    assert a["state_id"].tolist() == b["state_id"].tolist() != c["state_id"].tolist()


def test_render_hands_out_the_images_already_returned(face) -> None:
    obs, _ = face.reset(seed=0)
    frames = face.render()
    assert len(frames) == 3
    np.testing.assert_array_equal(np.stack(frames), obs["full_image"])
    obs, *_ = face.step(steer(obs))
    np.testing.assert_array_equal(np.stack(face.render()), obs["full_image"])


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda e: e.step(np.zeros((3, 7), np.float32)), InvalidInputError, r"actions must have shape \[3, 3, 7\]"),
        (lambda e: e.step(np.full((3, CHUNK, 7), np.nan, np.float32)), InvalidInputError, "finite"),
        (lambda e: e.reset(options={"state_ids": [0, 1, 999]}), InvalidInputError, "999"),
        (lambda e: e.reset(options={"state_ids": [0, 1]}), InvalidInputError, "one id per env"),
        (lambda e: e.reset(options={"reset_mask": [True, False, True]}), TypeError, "numpy bool array"),
        (lambda e: e.reset(options={"reset_mask": np.zeros(3, bool)}), ValueError, "at least one env"),
        (lambda e: e.reset(options={"reset_mask": np.ones(2, bool)}), ValueError, r"shape \(3,\)"),
        (lambda e: e.reset(options={"state_id": [0, 1, 2]}), ValueError, "unknown reset option"),
        (lambda e: e.reset(seed="7"), TypeError, "seed must be an int"),
    ],
    ids=["shape", "nan", "unknown-state", "ids-length", "mask-list", "mask-empty", "mask-shape", "option-typo", "seed-type"],
)
def test_bad_inputs_are_clear_and_leave_the_env_usable(face, make, error, match) -> None:
    face.reset(seed=0)
    with pytest.raises(error, match=match):
        make(face)
    obs, *_ = face.step(np.zeros(face.action_space.shape, np.float32))
    assert face.observation_space.contains(obs)


def test_step_before_reset_and_bad_options(no_leaks) -> None:
    env = make_vector_env(toy_cfg())
    try:
        with pytest.raises(gym.error.ResetNeeded, match="reset"):
            env.step(np.zeros(env.action_space.shape, np.float32))
        with pytest.raises(ValueError, match="first reset"):
            env.reset(options={"reset_mask": np.array([True, False, False])})
    finally:
        env.close()
    with pytest.raises(ValueError, match="autoreset_mode must be"):
        make_vector_env(toy_cfg(), autoreset_mode="sometimes")
    with pytest.raises(ValueError, match="step must be one of"):
        make_vector_env(toy_cfg(), step="frame")
    with pytest.raises(ConfigError, match="auto_reset"):
        make_vector_env(toy_cfg(auto_reset=True))
    with pytest.raises(ConfigError, match="YAML path, a dict or a DictConfig"):
        make_vector_env(42)


def test_per_action_steps(no_leaks) -> None:
    env = make_vector_env(toy_cfg(), step="action")
    try:
        assert env.single_action_space.shape == (7,)
        env.reset(seed=0)
        _, _, _, _, infos = env.step(np.zeros((3, 7), np.float32))
        assert infos["chunk_rewards"].shape == (3, 1) and (infos["episode_length"] == 1).all()
    finally:
        env.close()


def test_close_is_safe_twice_and_frees_everything(no_leaks) -> None:
    env = make_vector_env(toy_cfg(envs_per_process=1))
    env.reset(seed=0)
    pids = env.manager.shard_pids()
    assert len(pids) == 3 and all(pid_alive(p) for p in pids)
    env.close()
    env.close()
    assert env.closed and not any(pid_alive(p) for p in pids)
    assert not own_segments()
    with pytest.raises(gym.error.ClosedEnvironmentError):
        env.reset()


def test_a_crashed_shard_is_restarted_and_reported_as_truncated(no_leaks) -> None:
    # exit_on_step=1: every shard process exits inside its second chunk, as a crashing simulator does.
    cfg = toy_cfg(envs_per_process=1, max_restarts=5, **{"toy.exit_on_step": 1})
    env = make_vector_env(cfg, autoreset_mode="NextStep")
    try:
        obs, infos = env.reset(options={"state_ids": [3, 4, 5]})
        old = env.manager.shard_pids()
        env.step(steer(obs))
        obs, rew, term, trunc, infos = env.step(steer(obs))
        assert infos["sim_restarted"].all() and infos["_sim_restarted"].all()
        assert trunc.all() and (rew == 0).all()
        assert all(not pid_alive(p) for p in old) and all(pid_alive(p) for p in env.manager.shard_pids())
        obs, rew, term, trunc, infos = env.step(steer(obs))  # the next step resets them, as gymnasium's next-step mode does
        assert not (term | trunc).any() and infos["_state_id"].all()
    finally:
        env.close()


def test_importing_the_face_without_gymnasium_names_the_extra() -> None:
    import subprocess
    import sys

    code = "import sys; sys.modules['gymnasium'] = None\ntry:\n    import envfleet.gym\nexcept ImportError as e:\n    print(type(e).__name__, e)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("MissingExtraError") and "pip install 'envfleet[gym]'" in out
