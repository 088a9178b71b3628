"""``train.execution`` in simulated time on a gymnasium env (Pendulum, rendering): bit for bit ``mode: chunk``
at delay 0, gymnasium's own SyncVectorEnv stepped alone with the executed actions for fixed and seeded
delays, the same three times, and an auto-reset that discards the queue (CartPole)."""

from __future__ import annotations

import numpy as np
import pytest

from envfleet import ProcessEnvManager
from envfleet.execution import ActionSource

from .common import box_actions, gym_cfg
from .test_sync_vector_env import SEEDS, STATE_IDS, _frames, sync_env

CHUNK, CALLS = 8, 4
REALTIME = ("train.execution.mode=realtime",)
SEEDED = (*REALTIME, "train.execution.delay=latency", "train.execution.control_fps=20", "train.execution.horizon=6")
SEEDED += ("train.execution.latency.distribution=exponential", "train.execution.latency.mean_ms=120")


def _chunks() -> list[np.ndarray]:
    return [box_actions(c, len(STATE_IDS), CHUNK, 1, scale=2.0) for c in range(CALLS)]


def _run(*overrides: str) -> list:
    cfg = gym_cfg("Pendulum-v1", chunk=CHUNK, num_envs=len(STATE_IDS), render="rgb_array", seeds=SEEDS, overrides=overrides)
    with ProcessEnvManager(cfg) as mgr:
        mgr.reset_envs_to_state_ids(STATE_IDS)
        return [mgr.chunk_step(chunk) for chunk in _chunks()]


def test_delay_zero_is_mode_chunk_bit_for_bit() -> None:
    for a, b in zip(_run(), _run(*REALTIME), strict=True):
        for key in a.obs:
            np.testing.assert_array_equal(a.obs[key], b.obs[key], err_msg=key)
        np.testing.assert_array_equal(a.rewards, b.rewards)


@pytest.mark.parametrize(
    "overrides", [(*REALTIME, "train.execution.delay=3", "train.execution.horizon=5"), SEEDED], ids=["fixed", "seeded"]
)
def test_executed_actions_on_sync_vector_env_alone_give_the_same_episodes(overrides: tuple[str, ...]) -> None:
    outs = _run(*overrides)
    delays = np.stack([out.infos["action_delay"] for out in outs])
    assert delays[0].tolist() == [0, 0, 0] and delays[1:].max() > 0, delays
    ref = sync_env("Pendulum-v1", len(STATE_IDS), render_mode="rgb_array")
    try:
        ref.reset(seed=[SEEDS[k] for k in STATE_IDS])
        for c, out in enumerate(outs):
            applied = out.infos["applied_action"]
            for k in range(applied.shape[1]):
                _, reward, *_ = ref.step(applied[:, k])
                np.testing.assert_array_equal(out.rewards[:, k], reward.astype(np.float32), err_msg=f"call {c} sub-step {k}")
            np.testing.assert_array_equal(out.obs["full_image"], _frames(ref), err_msg=f"frame after call {c}")
    finally:
        ref.close()


def test_seeded_delays_give_the_same_episodes_three_times() -> None:
    runs = [_run(*SEEDED) for _ in range(3)]
    for other in runs[1:]:
        for a, b in zip(runs[0], other, strict=True):
            np.testing.assert_array_equal(a.obs["full_image"], b.obs["full_image"])
            np.testing.assert_array_equal(a.infos["applied_action"], b.infos["applied_action"])
            np.testing.assert_array_equal(a.infos["action_delay"], b.infos["action_delay"])


def test_cartpole_auto_reset_discards_the_queue() -> None:
    keys = (*REALTIME, "train.execution.delay=2", "train.execution.horizon=4", "train.auto_reset=true")
    cfg = gym_cfg("CartPole-v1", chunk=CHUNK, num_envs=3, seeds=SEEDS, overrides=keys)
    ended_any = False
    with ProcessEnvManager(cfg) as mgr:
        mgr.reset_envs_to_state_ids(STATE_IDS)
        ended = np.zeros(3, dtype=bool)
        for c in range(12):
            out = mgr.chunk_step(np.ones((3, CHUNK, 1), np.float32))  # always push right: episodes end soon
            for i in np.flatnonzero(ended):
                assert out.infos["action_delay"][i] == 0
                assert (out.infos["action_source"][i] == ActionSource.current).all(), f"call {c} env {i}"
            ended = out.terminations.any(axis=1) | out.truncations.any(axis=1)
            ended_any |= bool(ended.any())
    assert ended_any, "no episode ended: the test tests nothing"
