"""The TorchRL face over the gymnasium backend: gymnasium's Pendulum, rendering, named by its id; TorchRL's own
spec check, a rollout with partial resets and a collector."""

from __future__ import annotations

import pytest
import torch
from torchrl.collectors import SyncDataCollector
from torchrl.envs.utils import check_env_specs

from envfleet.config import load_config
from envfleet.torchrl import make_env

CHUNK = 4


@pytest.fixture
def env(no_leaks):
    cfg = load_config(
        overrides=[
            "train.simulator_type=gymnasium",
            "train.gymnasium.id=Pendulum-v1",
            "train.gymnasium.render=rgb_array",
            "train.gymnasium.seeds=5",
            "train.num_envs=2",
            f"actor.model.num_action_chunks={CHUNK}",
            f"train.max_episode_steps={2 * CHUNK}",
        ]
    )
    e = make_env(cfg)
    yield e
    e.close()


def test_check_env_specs_and_a_rollout(env) -> None:
    assert set(env.observation_spec.keys()) == {"full_image", "state"}
    assert env.observation_spec["full_image"].dtype == torch.uint8 and env.action_spec.shape == torch.Size([2, CHUNK, 1])
    check_env_specs(env)
    env.set_seed(0)
    td = env.rollout(5, break_when_any_done=False)  # episodes of 2 chunks: TorchRL resets them through "_reset"
    assert td["next", "full_image"].shape == torch.Size([2, 5, 500, 500, 3])
    done = td["next", "truncated"].squeeze(-1)
    assert done[:, 1].all() and done[:, 3].all() and not done[:, [0, 2, 4]].any()


def test_sync_data_collector(env) -> None:
    collector = SyncDataCollector(env, policy=None, frames_per_batch=8, total_frames=16)
    batches = list(collector)
    collector.shutdown()
    assert len(batches) == 2 and batches[0]["next", "reward"].shape[-1] == 1
