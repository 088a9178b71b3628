"""The gymnasium face's first-ready vector env: ``step_async(actions, env_ids)`` / ``step_wait(min_ready)``
give each env its lockstep episode; bad input is refused."""

from __future__ import annotations

import numpy as np
import pytest

from envfleet.errors import ConfigError, InvalidInputError
from envfleet.gym import EnvfleetFirstReadyVectorEnv

from ..conftest import toy_cfg
from ..core.test_first_ready import lockstep_episodes

CHUNK, NUM_ENVS, ROUNDS = 4, 3, 6
COSTS = {"env_sleep_s": 0.004, "step_cost_tail": 1.2, "reset_sleep_s": 0.02, "max_episode_steps": 2 * CHUNK}


def test_step_wait_min_ready_gives_each_env_its_lockstep_episode(no_leaks) -> None:
    cfg = toy_cfg(NUM_ENVS, CHUNK, auto_reset=True, **COSTS)
    acts = np.random.default_rng(11).uniform(-1, 1, (ROUNDS, NUM_ENVS, CHUNK, 7)).astype(np.float32)
    lock = lockstep_episodes(cfg, NUM_ENVS, acts)
    envs = EnvfleetFirstReadyVectorEnv(cfg)
    try:
        envs.reset(options={"state_ids": np.arange(NUM_ENVS)})  # lockstep's initial states
        envs.step_async(acts[0])
        count = [0] * NUM_ENVS
        sizes = []
        while min(count) < ROUNDS:
            obs, rewards, terminated, truncated, infos = envs.step_wait(min_ready=1)
            assert not terminated.any() or bool(infos["success_once"][terminated].all())
            sizes.append(len(infos["env_ids"]))
            again = []
            for row, e in enumerate(infos["env_ids"].tolist()):
                want = lock[e][count[e]]
                assert obs["full_image"][row].tobytes() == want["obs.full_image"].tobytes(), (e, count[e])
                assert rewards[row] == float(want["rewards"].sum()) and truncated[row] == bool(want["truncations"][-1])
                assert infos["reset_state_id"][row] == want["info.reset_state_id"]
                count[e] += 1
                if count[e] < ROUNDS:
                    again.append(e)
            if again:
                envs.step_async(np.stack([acts[count[e], e] for e in again]), env_ids=again)
        assert min(sizes) < NUM_ENVS, sizes
        # Bad input: the wrong number of rows, an env still in flight; then the env is still usable.
        envs.step_async(acts[0][:1], env_ids=[0])
        with pytest.raises(InvalidInputError, match=r"shape \[2, 4, 7\]"):
            envs.step_async(acts[0][:1], env_ids=[1, 2])
        with pytest.raises(InvalidInputError, match=r"env\(s\) 0 not ready"):
            envs.step_async(acts[0][:1], env_ids=[0])
        assert envs.step_wait()[4]["env_ids"].tolist() == [0]
        out = envs.step(acts[1])
        assert out[4]["env_ids"].tolist() == [0, 1, 2]
    finally:
        envs.close()


def test_needs_the_simulators_auto_reset(no_leaks) -> None:
    with pytest.raises(ConfigError, match="needs train.auto_reset: true"):
        EnvfleetFirstReadyVectorEnv(toy_cfg(1, CHUNK))
