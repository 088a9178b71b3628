"""The TorchRL face on a gymnasium env's own spaces, as TorchRL's own ``GymEnv`` presents them (one env's specs
equal to ``GymEnv(id)``'s): TorchRL's ``check_env_specs`` with one-hot and categorical actions, its collector with a
random policy, a nested Dict observation with a MultiDiscrete action, a Discrete observation; malformed one-hot
actions are refused; ``spaces="flat"`` keeps envfleet's layout."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from tensordict import TensorDict
from torchrl.collectors import SyncDataCollector
from torchrl.data import Unbounded
from torchrl.envs import GymEnv
from torchrl.envs.utils import check_env_specs

import tests.gymnasium_backend.fixture_envs  # noqa: F401  (registers envfleet_test/*: GymEnv makes them here)
from envfleet.errors import InvalidInputError
from envfleet.torchrl import make_env

from ..gymnasium_backend.common import FIXTURES, gym_cfg

SPACES_ID = f"{FIXTURES}:envfleet_test/Spaces-v0"


def _leaves(spec: Any, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    return {(key,) if isinstance(key, str) else tuple(key): leaf for key, leaf in spec.items(include_nested=True, leaves_only=True)}


def _same_specs_as_gymenv(env: Any, gym_env: GymEnv) -> None:
    """One env's observation and action specs are GymEnv's (the Composite's device aside)."""
    ours, theirs = _leaves(env.observation_spec[0]), _leaves(gym_env.observation_spec)
    assert set(ours) == set(theirs)
    for key, spec in theirs.items():
        assert ours[key] == spec.to("cpu"), f"{key}: {ours[key]} against GymEnv's {spec}"
    assert env.action_spec[0] == gym_env.action_spec


@pytest.mark.parametrize("categorical", [False, True], ids=["one-hot", "categorical"])
@pytest.mark.parametrize("chunk", [1, 4], ids=["step-action", "chunks-of-4"])
def test_cartpole_passes_check_env_specs_with_its_own_specs(chunk: int, categorical: bool, no_leaks: None) -> None:
    env = make_env(
        gym_cfg("CartPole-v1", chunk=chunk, num_envs=2), step="action" if chunk == 1 else "chunk", categorical_action_encoding=categorical
    )
    try:
        assert set(env.observation_spec.keys()) == {"observation"}
        if chunk == 1:
            gym_env = GymEnv("CartPole-v1", categorical_action_encoding=categorical)
            _same_specs_as_gymenv(env, gym_env)
            gym_env.close()
        else:
            assert env.action_spec.shape == ((2, chunk) if categorical else (2, chunk, 2))
        check_env_specs(env)
        td = env.rollout(6, break_when_any_done=False)
        action = td["action"]
        if categorical:
            assert action.dtype == torch.int64 and set(action.unique().tolist()) <= {0, 1}
        else:
            assert (action.sum(-1) == 1).all()
    finally:
        env.close()


def test_sync_data_collector_runs_a_random_policy(no_leaks: None) -> None:
    env = make_env(gym_cfg("CartPole-v1", chunk=1, num_envs=2), step="action")
    try:
        collector = SyncDataCollector(env, policy=None, frames_per_batch=64, total_frames=256)
        batches = list(collector)
        collector.shutdown()
        assert len(batches) == 4
        for batch in batches:
            assert batch["next", "observation"].shape == (2, 32, 4) and batch["action"].shape == (2, 32, 2)
        dones = torch.cat([b["next", "done"] for b in batches], dim=1)
        assert dones.any(), "random CartPole episodes end within 128 steps, and the collector resets them"
        assert (torch.cat([b["next", "reward"] for b in batches], dim=1) == 1).all()
    finally:
        env.close()


def test_a_nested_dict_observation_and_a_multidiscrete_action(no_leaks: None) -> None:
    kwargs = {"action": "multidiscrete", "obs": "dict"}
    env = make_env(gym_cfg(SPACES_ID, chunk=1, num_envs=2, kwargs=kwargs), step="action")
    try:
        gym_env = GymEnv("envfleet_test/Spaces-v0", **kwargs)
        _same_specs_as_gymenv(env, gym_env)
        gym_env.close()
        assert set(_leaves(env.observation_spec[0])) == {("echo",), ("inner", "t"), ("inner", "flags"), ("grid",)}
        check_env_specs(env)
        td = env.reset()
        td["action"] = env.action_spec.rand()
        out = env.step(td)["next"]
        parts = torch.split(td["action"], [3, 2], dim=-1)
        sent = torch.stack([p.argmax(-1) for p in parts], dim=-1) + torch.tensor([1, -1])  # MultiDiscrete([3, 2], start=[1, -1])
        assert torch.equal(out["echo"], sent.to(torch.float32)), "the env got the one-hot action as its own integers"
        assert out["inner", "flags"].dtype == torch.int8 and out["inner", "t"].shape == (2, 100)
    finally:
        env.close()


@pytest.mark.parametrize("categorical", [False, True], ids=["one-hot", "categorical"])
def test_a_discrete_observation(categorical: bool, no_leaks: None) -> None:
    env = make_env(gym_cfg("FrozenLake-v1", chunk=1, num_envs=2), step="action", categorical_action_encoding=categorical)
    try:
        gym_env = GymEnv("FrozenLake-v1", categorical_action_encoding=categorical)
        _same_specs_as_gymenv(env, gym_env)
        gym_env.close()
        start = env.reset()["observation"]  # FrozenLake starts in cell 0
        if categorical:
            assert start.tolist() == [0, 0]
        else:
            assert start.tolist() == [[1] + [0] * 15] * 2
        check_env_specs(env)
    finally:
        env.close()


def test_a_malformed_one_hot_action_is_refused(no_leaks: None) -> None:
    env = make_env(gym_cfg("CartPole-v1", chunk=1, num_envs=2), step="action")
    try:
        td = env.reset()
        td["action"] = torch.tensor([[1, 0], [1, 1]])
        with pytest.raises(InvalidInputError, match=r"action\[1\] is \[1, 1\]: a one-hot action \(OneHot\) has exactly one 1"):
            env.step(td)
        td = TensorDict({"action": torch.tensor([[0, 1], [1, 0]])}, batch_size=[2])
        assert env.step(td)["next", "reward"].tolist() == [[1.0], [1.0]], "the env runs on after the refusal"
    finally:
        env.close()


def test_flat_keeps_envfleets_layout(no_leaks: None) -> None:
    env = make_env(gym_cfg("CartPole-v1", chunk=3, num_envs=2), spaces="flat")
    try:
        assert env.own is None and set(env.observation_spec.keys()) == {"state"}
        assert env.action_spec.shape == (2, 3, 1) and env.action_spec.dtype == torch.float32
        assert isinstance(env.observation_spec["state"], Unbounded)
        td = env.reset()
        td["action"] = torch.ones(2, 3, 1)  # whole numbers: the env's Discrete(2) takes them as rows
        assert env.step(td)["next", "state"].shape == (2, 4)
    finally:
        env.close()
