"""``reset_some_envs``: some envs of a stage start new episodes, the others run on (toy backend)."""

from __future__ import annotations

import numpy as np
import pytest

from envfleet import ProcessEnvManager
from envfleet.config import load_config
from envfleet.env import EnvContext
from envfleet.errors import InvalidInputError
from envfleet_toy.env import ToyEnv

from .test_manager import actions, make_cfg


@pytest.fixture(params=[1, 2], ids=["one-env-per-shard", "two-envs-per-shard"])
def manager(request, no_leaks):
    mgr = ProcessEnvManager(make_cfg(envs_per_process=request.param))
    mgr.start_simulator()
    yield mgr
    mgr.close()


def test_reset_some_matches_the_env_run_alone(manager) -> None:
    cfg = make_cfg()
    solo = ToyEnv(cfg.train, EnvContext(num_envs=4, action_dim=7, num_action_chunks=4))
    first = np.array([0, 5, 10, 15])
    manager.reset_envs_to_state_ids(first)
    solo.reset_envs_to_state_ids(first)
    manager.chunk_step(actions(seed=1))
    solo.chunk_step(actions(seed=1))
    got = manager.reset_some_envs([3, 0], [7, 8])
    want = solo.reset_some_envs(np.array([3, 0]), np.array([7, 8]))
    for key in want.obs:
        np.testing.assert_array_equal(got.obs[key], want.obs[key], err_msg=key)
    assert got.infos["state_id"].tolist() == [8, 5, 10, 7]
    assert got.task_descriptions == want.task_descriptions
    step, ref = manager.chunk_step(actions(seed=2)), solo.chunk_step(actions(seed=2))
    np.testing.assert_array_equal(step.obs["state"], ref.obs["state"])
    assert step.infos["episode_length"].tolist() == [4, 8, 8, 4]
    # No env at all: nothing changes, the observations are the current ones.
    none = manager.reset_some_envs([], [])
    np.testing.assert_array_equal(none.obs["state"], step.obs["state"])


def test_a_restarted_shard_comes_back_at_its_newest_states(no_leaks) -> None:
    cfg = load_config(
        overrides=["train.simulator_type=toy", "train.num_envs=4", "actor.model.num_action_chunks=4", "train.max_restarts=3"]
        + ["train.toy.envs_per_process=2", "train.toy.exit_on_step=1"]
    )
    mgr = ProcessEnvManager(cfg)
    mgr.start_simulator()
    try:
        mgr.reset_envs_to_state_ids(np.array([0, 1, 2, 3]))
        mgr.chunk_step(actions())
        mgr.reset_some_envs([1], [9])
        out = mgr.chunk_step(actions())  # every shard exits in this chunk and is rebuilt
        assert out.infos["sim_restarted"].all()
        assert out.infos["state_id"].tolist() == [0, 9, 2, 3]
    finally:
        mgr.close()


@pytest.mark.parametrize(
    ("env_ids", "state_ids", "match"),
    [
        ([4], [0], "out of range"),
        ([1, 1], [0, 0], "distinct"),
        ([0, 1], [0], r"state_ids must have shape \(2,\)"),
        ([0], [999], "999"),
        ([[0]], [0], "1-D"),
    ],
    ids=["env-range", "repeated", "length", "state", "ndim"],
)
def test_bad_reset_some_inputs(manager, env_ids, state_ids, match) -> None:
    manager.reset_envs_to_state_ids(np.arange(4))
    with pytest.raises(InvalidInputError, match=match):
        manager.reset_some_envs(env_ids, state_ids)
    manager.chunk_step(actions())  # still usable


def test_reset_some_needs_a_full_reset_first(manager) -> None:
    with pytest.raises(RuntimeError, match="reset every env once"):
        manager.reset_some_envs([0], [0])
