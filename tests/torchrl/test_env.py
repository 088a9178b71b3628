"""The TorchRL face on the toy and on real LIBERO: TorchRL's own spec check, rollouts and collector."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torchrl.collectors import SyncDataCollector
from torchrl.envs.utils import check_env_specs

from envfleet.config import load_config
from envfleet.errors import InvalidInputError
from envfleet.torchrl import make_env

from ..conftest import own_segments, pid_alive

CHUNK = 3


def toy_cfg(num_envs: int = 3, max_steps: int = 2 * CHUNK, **toy: object):
    return load_config(
        overrides=[
            "train.simulator_type=toy",
            f"train.num_envs={num_envs}",
            f"actor.model.num_action_chunks={CHUNK}",
            f"train.max_episode_steps={max_steps}",
            "train.init_params.camera_heights=16",
            "train.init_params.camera_widths=16",
            *[f"train.toy.{k}={v}" for k, v in toy.items()],
        ]
    )


@pytest.fixture
def env(no_leaks):
    e = make_env(toy_cfg(envs_per_process=3))
    yield e
    e.close()


def test_check_env_specs(env) -> None:
    assert env.batch_size == torch.Size([3])
    assert set(env.observation_spec.keys()) == {"full_image", "wrist_image", "state"}
    assert env.observation_spec["full_image"].dtype == torch.uint8
    assert env.action_spec.shape == torch.Size([3, CHUNK, 7])
    assert set(env.done_spec.keys()) == {"done", "terminated", "truncated"}
    check_env_specs(env)


def test_rollout_with_partial_resets(env) -> None:
    env.set_seed(0)
    # Episodes last 2 chunks; break_when_any_done=False makes TorchRL reset done envs through "_reset".
    td = env.rollout(5, break_when_any_done=False)
    assert td.batch_size == torch.Size([3, 5])
    done = td["next", "truncated"].squeeze(-1)
    assert done[:, 1].all() and done[:, 3].all() and not done[:, [0, 2, 4]].any()
    # After each reset the episode starts again: the first state of a new episode is a fresh start.
    assert not torch.equal(td["state"][:, 2], td["next", "state"][:, 1])


def test_partial_reset_keeps_the_other_envs(env) -> None:
    first = env.reset(TensorDict({"state_ids": torch.tensor([1, 2, 3])}, batch_size=[3]))
    stepped = env.step(first.set("action", env.action_spec.rand()))["next"]
    again = env.reset(
        TensorDict({"_reset": torch.tensor([[False], [True], [False]]), "state_ids": torch.tensor([0, 9, 0])}, batch_size=[3])
    )
    assert not torch.equal(again["state"][1], first["state"][1])  # env 1 starts at state 9
    # A zero action moves nothing: envs 0 and 2 are where their episodes were, env 1 at state 9's start.
    still = env.step(again.set("action", torch.zeros(3, CHUNK, 7)))["next"]
    assert torch.equal(still["state"][[0, 2]], stepped["state"][[0, 2]])
    assert torch.equal(still["state"][1], again["state"][1])
    fresh = env.manager.reset_envs_to_state_ids(np.array([9, 9, 9]))  # the same backend, whole-stage reset to state 9
    np.testing.assert_array_equal(again["state"][1].numpy(), fresh.obs["state"][1])


def test_sync_data_collector(env) -> None:
    collector = SyncDataCollector(env, policy=None, frames_per_batch=12, total_frames=24)
    batches = [batch for batch in collector]
    collector.shutdown()
    assert len(batches) == 2 and all(b.numel() == 12 for b in batches)
    assert batches[0]["next", "reward"].shape[-1] == 1


def test_bad_action_is_clear_and_leaves_the_env_usable(env) -> None:
    td = env.reset()
    with pytest.raises(InvalidInputError, match="finite"):
        env.step(td.set("action", torch.full((3, CHUNK, 7), float("nan"))))
    env.step(td.set("action", torch.zeros(3, CHUNK, 7)))


def test_crash_is_reported_as_truncated_and_close_is_safe_twice(no_leaks) -> None:
    e = make_env(toy_cfg(envs_per_process=1, exit_on_step=1))
    td = e.reset()
    pids = e.manager.shard_pids()
    td = e.step(td.set("action", torch.zeros(3, CHUNK, 7)))
    td = e.step(td["next"].set("action", torch.zeros(3, CHUNK, 7)))["next"]
    assert td["truncated"].all() and td["done"].all()
    e.close()
    e.close()
    assert not any(pid_alive(p) for p in pids + e.manager.shard_pids() if p) and not own_segments()


def test_libero_check_env_specs_and_rollout(no_leaks) -> None:
    cfg = load_config(
        overrides=[
            "train.simulator_type=libero",
            "train.task_suite_name=libero_spatial",
            "train.num_envs=2",
            "train.init_params.camera_heights=64",
            "train.init_params.camera_widths=64",
            "actor.model.num_action_chunks=4",
        ]
    )
    e = make_env(cfg)
    try:
        check_env_specs(e)
        td = e.rollout(2)
        assert td["next", "full_image"].shape == torch.Size([2, 2, 64, 64, 3]) and td["next", "full_image"].dtype == torch.uint8
        assert td["next", "state"].shape == torch.Size([2, 2, 8])
        collector = SyncDataCollector(e, policy=None, frames_per_batch=2, total_frames=2)
        (batch,) = list(collector)
        collector.shutdown()
        assert batch["next", "wrist_image"].float().std() > 0
    finally:
        e.close()
