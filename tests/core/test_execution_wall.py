"""``train.execution.clock: wall`` on the toy backend's real shard processes: the control loop in the
shard runs queued actions while the policy thinks, aligns each chunk to its observation, and paces."""

from __future__ import annotations

import time

import numpy as np
import pytest

from envfleet import ProcessEnvManager
from envfleet.config import ConfigError
from envfleet.errors import InvalidInputError
from envfleet.execution import ActionSource

from ..conftest import toy_cfg

N, CHUNK, DIM = 4, 8, 7
WALL = ("train.execution.mode=realtime", "train.execution.clock=wall")


def _chunks(calls: int) -> np.ndarray:
    return np.random.default_rng(3).uniform(-1, 1, (calls, N, CHUNK, DIM)).astype(np.float32)


def test_queued_actions_run_while_the_policy_thinks_and_each_chunk_takes_over_at_its_aligned_index() -> None:
    step_s, think_s, horizon = 0.01, 0.025, 4
    chunks = _chunks(8)
    cfg = toy_cfg(N, CHUNK, 1, *WALL, f"train.execution.horizon={horizon}", step_sleep_s=step_s, envs_per_process=2)
    with ProcessEnvManager(cfg) as mgr:
        mgr.reset_envs_to_state_ids(np.arange(N))
        outs = []
        for chunk in chunks:
            outs.append(mgr.chunk_step(chunk))
            time.sleep(think_s)  # the policy infers the next chunk; the shards step on meanwhile
    delays = np.stack([out.infos["action_delay"] for out in outs])
    assert delays[0].tolist() == [0] * N  # after a reset the loop waits for the first chunk
    assert (delays[1:] > 0).all(), delays  # later chunks found sub-steps run since their observation
    for k, out in enumerate(outs):
        applied, source = out.infos["applied_action"], out.infos["action_source"]
        for i in range(N):
            d = int(out.infos["action_delay"][i])
            for t in range(horizon):
                if t >= d:  # the newest chunk, at its index aligned to the observation it came from
                    assert source[i, t] == ActionSource.current
                    np.testing.assert_array_equal(applied[i, t], chunks[k][i, t])
                else:  # the previous chunk's queue, which ran on while the policy thought
                    assert source[i, t] == ActionSource.previous
                    np.testing.assert_array_equal(applied[i, t], chunks[k - 1][i, horizon + t])
        # No sub-step waited while actions were queued: each started right after the one before.
        gaps = np.diff(out.infos["substep_t"][0])
        assert gaps.max() < step_s + 0.02, gaps
        assert out.rewards.shape == (N, horizon)


def test_target_step_hz_holds_within_ten_percent_over_200_sub_steps() -> None:
    hz = 50.0
    cfg = toy_cfg(2, CHUNK, 1, *WALL, f"train.execution.target_step_hz={hz}")
    chunks = np.zeros((25, 2, CHUNK, DIM), np.float32)
    with ProcessEnvManager(cfg) as mgr:
        mgr.reset_envs_to_state_ids(np.arange(2))
        starts = np.concatenate([mgr.chunk_step(chunk).infos["substep_t"][0] for chunk in chunks])
    assert len(starts) == 200
    rate = (len(starts) - 1) / (starts[-1] - starts[0])
    assert abs(rate - hz) / hz < 0.10, f"{rate:.1f} sub-steps/s against a target of {hz}"


def test_a_reset_drops_the_queue_and_bad_input_leaves_the_stage_usable() -> None:
    cfg = toy_cfg(N, CHUNK, 1, *WALL, "train.execution.horizon=2", step_sleep_s=0.005)
    chunks = _chunks(3)
    with ProcessEnvManager(cfg) as mgr:
        mgr.reset_envs_to_state_ids(np.arange(N))
        mgr.chunk_step(chunks[0])
        with pytest.raises(InvalidInputError, match="the wall clock measures them"):
            mgr.chunk_step(chunks[1], np.zeros(N, np.int64))
        mgr.reset_envs_to_state_ids(np.arange(N))
        out = mgr.chunk_step(chunks[1])
        assert out.infos["action_delay"].tolist() == [0] * N
        np.testing.assert_array_equal(out.infos["action_source"], ActionSource.current)
        np.testing.assert_array_equal(out.infos["applied_action"], chunks[1][:, :2])
        with pytest.raises(ConfigError, match="first-ready stepping"):
            mgr.send_chunk(np.arange(N), chunks[2])


def test_auto_reset_on_the_wall_clock_is_refused_naming_both_keys() -> None:
    with pytest.raises(ConfigError, match=r"'train.auto_reset' and 'train.execution.clock: wall'"):
        toy_cfg(N, CHUNK, 1, *WALL, auto_reset=True)


def test_wall_tick_runs_the_tail_in_one_backend_call_and_chunks_stay_aligned() -> None:
    cfg = toy_cfg(N, CHUNK, 1, *WALL, "train.execution.horizon=4", "train.execution.wall_tick=4", step_sleep_s=0.01)
    chunks = _chunks(4)
    with ProcessEnvManager(cfg) as mgr:
        mgr.reset_envs_to_state_ids(np.arange(N))
        outs = []
        for chunk in chunks:
            outs.append(mgr.chunk_step(chunk))
            time.sleep(0.05)  # longer than the tail's one call (a 10 ms sleep): it has run when the next chunk comes
    for k, out in enumerate(outs[1:], start=1):
        assert out.infos["action_delay"].tolist() == [4] * N
        np.testing.assert_array_equal(out.infos["applied_action"], chunks[k - 1][:, 4:])  # the tail, while the policy thought
    with pytest.raises(ConfigError, match="'train.execution.wall_tick' and 'train.execution.target_step_hz' do not go together"):
        toy_cfg(N, CHUNK, 1, *WALL, "train.execution.wall_tick=2", "train.execution.target_step_hz=20")
