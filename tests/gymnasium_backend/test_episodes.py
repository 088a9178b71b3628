"""gymnasium's episode semantics through envfleet: terminated and truncated as the env says them, success from
its info key, auto-reset, and a crash, a hang or an exception inside the env recovered as for any shard."""

from __future__ import annotations

import numpy as np
import pytest

from envfleet import ProcessEnvManager
from envfleet.errors import EnvFleetSimulatorError

from .common import SCRIPTED, gym_cfg

ZERO = np.zeros((2, 4, 2), dtype=np.float32)


def _run(mgr: ProcessEnvManager, chunks: int) -> list:
    mgr.reset_envs_to_state_ids(np.array([0, 1]))
    return [mgr.chunk_step(ZERO) for _ in range(chunks)]


def test_terminated_truncated_and_success_are_the_envs(no_leaks: None) -> None:
    # Env 0's episode: success without an end at step 3, terminated with success at 6. Env 1 (its own kwargs are
    # the same; seeds differ): the same script. The TimeLimit is 50 and envfleet's horizon 40: neither ends these.
    cfg = gym_cfg(SCRIPTED, num_envs=2, seeds=[1, 2], kwargs={"succeed_at": 3, "terminate_at": 6}, train_max_episode_steps=40)
    with ProcessEnvManager(cfg) as mgr:
        first, second = _run(mgr, 2)
    assert not first.terminations.any() and not first.truncations.any()  # success at 3 ends nothing
    assert first.infos["success_once"].all()
    np.testing.assert_array_equal(first.infos["success"][0], [False, False, True, False])
    assert second.terminations[:, 1].all() and not second.terminations[:, 0].any()  # step 6 = chunk 2, sub-step 1
    assert second.terminations[:, 2:].all()  # a finished env keeps its flag
    np.testing.assert_array_equal(second.infos["episode_length"], [6, 6])  # and is not stepped again
    # The env's own rewards (t / 10), scaled by reward_coef (1): 0.1 .. 0.6, nothing after the end.
    np.testing.assert_allclose(np.concatenate([first.rewards[0], second.rewards[0]]), [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0, 0], rtol=1e-6)


def test_the_envs_truncation_and_envfleets_horizon(no_leaks: None) -> None:
    cfg = gym_cfg(SCRIPTED, num_envs=2, seeds=[1, 2], kwargs={"truncate_at": 3}, train_max_episode_steps=40)
    with ProcessEnvManager(cfg) as mgr:
        (out,) = _run(mgr, 1)
    np.testing.assert_array_equal(out.truncations[0], [False, False, True, True])
    assert not out.terminations.any()
    cfg = gym_cfg(SCRIPTED, num_envs=2, seeds=[1, 2], train_max_episode_steps=5)  # envfleet's horizon, shorter than the TimeLimit
    with ProcessEnvManager(cfg) as mgr:
        _, out = _run(mgr, 2)
    np.testing.assert_array_equal(out.truncations[0], [True, True, True, True])
    np.testing.assert_array_equal(out.infos["episode_length"], [5, 5])
    cfg = gym_cfg(SCRIPTED, num_envs=2, seeds=[1, 2], max_episode_steps=2)  # gymnasium's TimeLimit, and the horizon with it
    with ProcessEnvManager(cfg) as mgr:
        (out,) = _run(mgr, 1)
    np.testing.assert_array_equal(out.truncations[0], [False, True, True, True])


def test_success_from_another_info_key(no_leaks: None) -> None:
    cfg = gym_cfg(SCRIPTED, num_envs=2, seeds=[1, 2], success_key="no_such_key", kwargs={"terminate_at": 2})
    with ProcessEnvManager(cfg) as mgr:
        (out,) = _run(mgr, 1)
    assert out.terminations[:, 1].all() and not out.infos["success_once"].any()  # terminated, not a success by that key


def test_auto_reset_starts_the_next_state_ids_episode(no_leaks: None) -> None:
    cfg = gym_cfg(SCRIPTED, num_envs=2, seeds=[10, 20, 30], kwargs={"terminate_at": 2}, train_auto_reset=True)
    with ProcessEnvManager(cfg) as mgr:
        (out,) = _run(mgr, 1)
        went = out.infos["reset_state_id"]
        assert (went >= 0).all() and out.infos["episode_ended"].all()
        np.testing.assert_array_equal(out.obs["state"][:, 0], [0, 0])  # a new episode's first observation
        again = mgr.reset_envs_to_state_ids(went)
    np.testing.assert_array_equal(out.obs["state"], again.obs["state"])


def test_an_exception_in_the_env_is_raised_with_its_traceback_and_the_shard_lives_on(no_leaks: None) -> None:
    cfg = gym_cfg(SCRIPTED, num_envs=2, seeds=[1, 2], kwargs={"raise_at": 6})
    with ProcessEnvManager(cfg) as mgr:
        mgr.reset_envs_to_state_ids(np.array([0, 1]))
        mgr.chunk_step(ZERO)
        pids = mgr.shard_pids()
        with pytest.raises(EnvFleetSimulatorError, match="raise_at=6 reached") as info:
            mgr.chunk_step(ZERO)
        assert "fixture_envs.py" in info.value.remote_traceback
        assert mgr.shard_pids() == pids
        mgr.reset_envs_to_state_ids(np.array([0, 1]))
        np.testing.assert_array_equal(mgr.chunk_step(ZERO).obs["state"][:, 0], [4, 4])


def test_a_crash_and_a_hang_are_recovered(no_leaks: None) -> None:
    for hook in ({"exit_at": 6}, {"hang_at": 6}):
        # Shard processes (not the caller's own, which auto picks for so cheap an env): a crash and a hang are theirs.
        cfg = gym_cfg(SCRIPTED, num_envs=2, seeds=[1, 2], kwargs=hook, train_step_timeout_s=5, train_in_process=False)
        with ProcessEnvManager(cfg) as mgr:
            first, out = _run(mgr, 2)  # the hook fires in the second chunk
            assert not first.infos["sim_restarted"].any(), hook
            assert out.infos["sim_restarted"].all(), hook
            assert out.truncations[:, -1].all(), hook
            # The rebuilt shards run on: a reset and a chunk that stays clear of the hook.
            mgr.reset_envs_to_state_ids(np.array([1, 0]))
            step = mgr.chunk_step(ZERO)
            assert not step.infos["sim_restarted"].any(), hook
            np.testing.assert_array_equal(step.obs["state"][:, 0], [4, 4])
