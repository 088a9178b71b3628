"""The TorchRL face's first-ready env driven in ``AsyncEnvPool``'s calls (``async_step_send`` /
``async_step_recv`` and TorchRL's ``step_mdp``): each env's episode is the lockstep one."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torchrl.envs.utils import step_mdp

from envfleet.config import load_config
from envfleet.errors import ConfigError, InvalidInputError
from envfleet.torchrl import EnvfleetFirstReadyEnv, make_env

from ..core.test_first_ready import lockstep_episodes

CHUNK, NUM_ENVS, ROUNDS = 3, 3, 6


def _cfg(auto_reset: bool = True):
    return load_config(
        overrides=[
            "train.simulator_type=toy",
            f"train.num_envs={NUM_ENVS}",
            f"actor.model.num_action_chunks={CHUNK}",
            f"train.max_episode_steps={2 * CHUNK}",
            f"train.auto_reset={str(auto_reset).lower()}",
            "train.init_params.camera_heights=16",
            "train.init_params.camera_widths=16",
            "train.toy.env_sleep_s=0.004",
            "train.toy.step_cost_tail=1.2",
            "train.toy.reset_sleep_s=0.02",
        ]
    )


def test_async_pool_calls_give_each_env_its_lockstep_episode(no_leaks) -> None:
    acts = np.random.default_rng(5).uniform(-1, 1, (ROUNDS, NUM_ENVS, CHUNK, 7)).astype(np.float32)
    lock = lockstep_episodes(_cfg(), NUM_ENVS, acts)
    env = EnvfleetFirstReadyEnv(_cfg())
    try:
        td = env.reset(TensorDict({"state_ids": torch.arange(NUM_ENVS)}, batch_size=[NUM_ENVS]))  # lockstep's initial states
        td["env_index"] = torch.arange(NUM_ENVS)
        td["action"] = torch.from_numpy(acts[0])
        env.async_step_send(td)
        done_chunks = [0] * NUM_ENVS
        got: list[list[tuple[float, bool, np.ndarray]]] = [[] for _ in range(NUM_ENVS)]
        batches = []
        while min(done_chunks) < ROUNDS:
            out = env.async_step_recv(min_get=1)
            ids = out["env_index"].tolist()
            batches.append(ids)
            assert torch.equal(out["action"], torch.stack([torch.from_numpy(acts[done_chunks[e], e]) for e in ids]))
            for row, e in enumerate(ids):
                got[e].append((float(out["next", "reward"][row]), bool(out["next", "done"][row]), out["next", "state"][row].numpy().copy()))
                done_chunks[e] += 1
            nxt = step_mdp(out)  # TorchRL's own step to the next state; "env_index" stays
            again = [row for row, e in enumerate(ids) if done_chunks[e] < ROUNDS]
            if again:
                nxt = nxt[torch.tensor(again)]
                nxt["action"] = torch.stack([torch.from_numpy(acts[done_chunks[ids[r]], ids[r]]) for r in again])
                env.async_step_send(nxt)
        assert any(len(b) < NUM_ENVS for b in batches), batches
        for e in range(NUM_ENVS):
            for k, (reward, done, state) in enumerate(got[e]):
                row = lock[e][k]
                assert reward == float(row["rewards"].sum()) and done == bool(row["truncations"][-1] or row["terminations"][-1])
                assert state.tobytes() == row["obs.state"].tobytes(), f"env {e}, chunk {k}"
        assert any(done for rows in got for _, done, _ in rows)  # an auto-reset happened on the way
        with pytest.raises(InvalidInputError, match="needs env indices"):
            env.async_step_send(td.exclude("env_index"))
    finally:
        env.close()


def test_first_ready_env_needs_auto_reset_and_plain_env_refuses_it(no_leaks) -> None:
    with pytest.raises(ConfigError, match="needs train.auto_reset: true"):
        EnvfleetFirstReadyEnv(_cfg(auto_reset=False))
    with pytest.raises(ConfigError, match="TorchRL resets envs itself"):
        make_env(_cfg(auto_reset=True))
