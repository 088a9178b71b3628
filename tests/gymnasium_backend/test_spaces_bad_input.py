"""Spaces as bad input: an observation space envfleet cannot carry is a ConfigError naming the entry, its space and
what is carried (never a KeyError: a MultiDiscrete observation is carried); an action not of the env's own action
space's form is an InvalidInputError before any env steps; a backend whose declared spaces are not what its manager
carries is a PluginContractError; and the layouts that are envfleet's own declare no spaces."""

from __future__ import annotations

import dataclasses
import re

import gymnasium
import numpy as np
import pytest
import torch

from envfleet.config import load_config
from envfleet.errors import ConfigError, InvalidInputError, PluginContractError
from envfleet.gym import make_vector_env
from envfleet.plugins import get_backend
from envfleet.sb3 import make_vec_env
from envfleet_gymnasium.spaces import native_spaces

from ..conftest import child_pids, pid_alive
from .common import FIXTURES, PIXEL_PENDULUM, gym_cfg, gym_train

SPACES_ID = f"{FIXTURES}:envfleet_test/Spaces-v0"
REFUSED_ID = f"{FIXTURES}:envfleet_test/Refused-v0"


def test_a_multidiscrete_observation_is_carried(no_leaks: None) -> None:
    """The issue's case: ``ConfigError: backend 'gymnasium' rejects section 'train': KeyError: 'shape'``."""
    cfg = gym_cfg(SPACES_ID, chunk=1, kwargs={"obs": "multidiscrete", "action": "discrete"})
    spec = get_backend("gymnasium").checked_observation_spec(cfg.train, 2)
    assert {k: (v.shape, v.dtype) for k, v in spec.items()} == {"state": ((2,), "int64")}
    face = make_vector_env(cfg, step="action")
    try:
        assert face.single_observation_space == gymnasium.spaces.MultiDiscrete([3, 4])
        obs, _ = face.reset(seed=0)
        assert obs.shape == (2, 2) and face.observation_space.contains(obs)
    finally:
        face.close()


REFUSED = {
    "graph": r"Graph\(",
    "sequence": r"Sequence\(Discrete\(3\)",
    "oneof": r"OneOf\(",
    "tuple_dict": r"Dict\('a': Box.*a Tuple holding a Dict",
}


@pytest.mark.parametrize("obs", list(REFUSED))
def test_a_space_envfleet_cannot_carry_is_refused_by_name(obs: str, no_leaks: None) -> None:
    before = child_pids()
    with pytest.raises(ConfigError) as info:
        load_config(data={"train": gym_train(REFUSED_ID, kwargs={"obs": obs})})
    text = str(info.value)
    entry = "odd.1" if obs == "tuple_dict" else "odd"
    assert f"observation entry '{entry}' is" in text, text
    assert re.search(REFUSED[obs], text), text
    assert "envfleet carries" in text and "Box" in text and "MultiDiscrete" in text, text
    assert "KeyError" not in text and not isinstance(info.value, KeyError)
    assert not [p for p in child_pids() - before if pid_alive(p)], "the probe left a process running"


def test_left_out_it_is_carried_and_the_layout_is_envfleets() -> None:
    cfg = load_config(data={"train": gym_train(REFUSED_ID, kwargs={"obs": "graph"}, state_keys=["pos"])})
    assert set(get_backend("gymnasium").checked_observation_spec(cfg.train, 2)) == {"pos"}
    assert native_spaces(cfg.train) is None, "a filtered observation is not the env's own"


def test_only_the_envs_own_layout_declares_spaces() -> None:
    own = native_spaces(gym_cfg("CartPole-v1").train)
    assert own is not None
    assert own["observation"]["key"] == "state" and np.float32(own["observation"]["low"][0]) == np.float32(-4.8)
    assert own["action"]["type"] == "Discrete" and own["action"]["n"] == 2
    assert native_spaces(gym_cfg("Pendulum-v1", render="rgb_array").train) is None, "render()'s frame"
    assert native_spaces(gym_cfg(PIXEL_PENDULUM).train) is None, "an image in the observation"
    assert native_spaces(gym_cfg("CartPole-v1", state_keys={"obs": "state"}).train) is None, "a renamed key"
    nested = native_spaces(gym_cfg(SPACES_ID, kwargs={"obs": "dict"}).train)
    assert nested is not None
    inner = dict(dict(nested["observation"]["spaces"])["inner"]["spaces"])
    assert inner["t"]["key"] == "inner.t", "a nested entry is carried under its path"
    rescaled = native_spaces(gym_cfg("Pendulum-v1", rescale_actions=True).train)
    assert rescaled is not None and (rescaled["action"]["low"], rescaled["action"]["high"]) == (-1.0, 1.0)


def _face(action: str, step: str = "action", chunk: int = 1):
    return make_vector_env(gym_cfg(SPACES_ID, chunk=chunk, num_envs=2, kwargs={"action": action, "obs": "box"}), step=step)


BAD_ACTIONS = [
    ("discrete", np.array([0.7, 1.0]), r"actions for the action space Discrete\(3, start=1\) are integers .*got dtype float64, e.g. 0.7"),
    ("discrete", np.array([1, 4]), r"actions\[1\] is 4, outside the action space Discrete\(3, start=1\): it takes 1..3 there"),
    ("discrete", np.array([[1], [2]]), r"actions must have shape \[2\] .*got \[2, 1\]"),
    ("multidiscrete", np.array([[1, 0], [0, 0]]), r"actions\[1, 0\] is 0, outside the action space MultiDiscrete.*it takes 1..3 there"),
    ("multibinary", np.array([[0, 1, 2, 0], [0, 0, 0, 0]]), r"actions\[0, 2\] is 2, outside .*MultiBinary\(4\).*0..1"),
    ("box", np.array([[True, False], [False, True]]), r"actions for the action space Box.* are numbers, got dtype bool"),
    ("discrete", torch.tensor([1.5, 2.0]), r"are integers .*got dtype float32"),
]


@pytest.mark.parametrize("action,actions,match", BAD_ACTIONS, ids=[f"{a}-{m[:20]}" for a, _, m in BAD_ACTIONS])
def test_an_action_not_of_the_envs_form_reaches_no_env(action: str, actions: object, match: str, no_leaks: None) -> None:
    face = _face(action)
    try:
        obs, _ = face.reset(seed=0)
        with pytest.raises(InvalidInputError, match=match):
            face.step(actions)
        good = face.action_space.sample()
        after, *_ = face.step(good)
        np.testing.assert_array_equal(after[:, 0], obs[:, 0] + 1, err_msg="one step since the reset: the bad one reached no env")
    finally:
        face.close()


def test_a_bad_action_in_a_chunk_names_the_env_and_the_sub_step(no_leaks: None) -> None:
    face = _face("discrete", step="chunk", chunk=3)
    try:
        face.reset(seed=0)
        actions = np.ones((2, 3), np.int64)
        actions[1, 2] = 0
        with pytest.raises(
            InvalidInputError, match=r"actions\[1, 2\] is 0, outside .*a chunk of 3 actions of the env's Discrete\(3, start=1\)"
        ):
            face.step(actions)
    finally:
        face.close()


def test_sb3_refuses_a_continuous_action_for_a_discrete_env(no_leaks: None) -> None:
    venv = make_vec_env(gym_cfg("CartPole-v1", chunk=1, num_envs=2), step="action")
    try:
        venv.reset()
        with pytest.raises(InvalidInputError, match=r"actions must have shape \[2\] .*the env's own Discrete\(2\).*got \[2, 1\]"):
            venv.step(np.array([[0.7], [0.2]], np.float32))
        with pytest.raises(InvalidInputError, match="are integers"):
            venv.step(np.array([0.7, 0.2], np.float32))
    finally:
        venv.close()


def test_declared_spaces_that_are_not_what_the_manager_carries(no_leaks: None) -> None:
    real = get_backend("gymnasium")
    wrong_obs = {"type": "Box", "shape": [5], "dtype": "float32", "low": -1.0, "high": 1.0}
    wrong_action = {"type": "MultiDiscrete", "nvec": [2, 2, 2], "start": [0, 0, 0], "dtype": "int64"}
    cases = [
        ({"observation": wrong_obs, "action": {"type": "Discrete", "n": 2}}, r"observation space as \{'state': ArraySpec\(shape=\(5,\)"),
        (
            {"observation": {**wrong_obs, "shape": [4]}, "action": wrong_action},
            r"action space .*3 values an action.*manager's actions have 1",
        ),
        ({"observation": {"type": "Text"}, "action": {"type": "Discrete", "n": 2}}, r"observation space holds Text"),
    ]
    for declared, match in cases:
        backend = dataclasses.replace(real, spaces=lambda cfg, declared=declared: declared)
        before = child_pids()
        with pytest.raises(PluginContractError, match=match):
            make_vector_env(gym_cfg("CartPole-v1", chunk=1), step="action", backend=backend)
        assert not [p for p in child_pids() - before if pid_alive(p)], "the manager was closed"
