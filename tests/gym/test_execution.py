"""A realtime config through the gymnasium face and its SB3 shim: what ran, in every step's infos."""

from __future__ import annotations

import numpy as np
import pytest

from envfleet.config import ConfigError, load_config
from envfleet.execution import ActionSource
from envfleet.gym import make_vector_env
from envfleet.sb3 import make_vec_env

from ..conftest import toy_cfg

SEEDED = ["train.execution.mode=realtime", "train.execution.delay=latency", "train.execution.latency.distribution=uniform"]
SEEDED += ["train.execution.latency.low_ms=100", "train.execution.latency.high_ms=400", "train.execution.horizon=6"]


def _rollout(cfg, calls: int = 5) -> list[dict]:
    env = make_vector_env(cfg)
    try:
        env.reset(seed=0)
        rng = np.random.default_rng(2)
        return [env.step(rng.uniform(-1, 1, env.action_space.shape).astype(np.float32))[4] for _ in range(calls)]
    finally:
        env.close()


def test_each_step_says_what_ran_and_a_seed_gives_the_same_steps_twice(no_leaks) -> None:
    cfg = toy_cfg(3, 8, 1, *SEEDED)
    first, again = _rollout(cfg), _rollout(cfg)
    for a, b in zip(first, again, strict=True):
        for key in ("applied_action", "action_source", "action_delay"):
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    assert first[0]["action_delay"].tolist() == [0, 0, 0]
    delays = np.stack([info["action_delay"] for info in first[1:]])
    assert delays.min() >= 1 and delays.max() <= 4  # 100-400 ms at the toy's 10 sub-steps per second
    for info in first:
        assert info["applied_action"].shape == (3, 6, 7) and info["chunk_rewards"].shape == (3, 6)
        source = info["action_source"]
        for i, d in enumerate(info["action_delay"]):
            # Until the chunk arrives: the previous chunk's 2 queued actions (8 - horizon 6), then the last one held.
            queued = min(d, 2) if info is not first[0] else 0
            assert (source[i, d:] == ActionSource.current).all()
            assert (source[i, :queued] == ActionSource.previous).all() and (source[i, queued:d] == ActionSource.hold).all()


def test_sb3_steps_a_realtime_stage_and_caller_delays_are_refused(no_leaks) -> None:
    venv = make_vec_env(toy_cfg(2, 4, 1, "train.execution.mode=realtime", "train.execution.delay=1"))
    try:
        venv.reset()
        venv.step(np.zeros((2, *venv.action_space.shape), np.float32))
        _, _, _, infos = venv.step(np.zeros((2, *venv.action_space.shape), np.float32))
        assert [int(info["action_delay"]) for info in infos] == [1, 1]
    finally:
        venv.close()
    cfg = load_config(data=toy_cfg(2, 4, 1), overrides=["train.execution.mode=realtime", "train.execution.delay=caller"])
    with pytest.raises(ConfigError, match="delay: caller and the gymnasium face do not go together"):
        make_vector_env(cfg)
