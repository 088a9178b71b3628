"""A seeded random policy that keeps what it saw and sent (for tests that check a recording against it).

``envfleet rollout --policy tests.recording.logging_policy:logging_random`` with
``ENVFLEET_TEST_POLICY_LOG`` set to a directory: each call leaves ``NNNNN.npz`` there with the
observations (``state`` and every camera image) and the actions returned.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

__all__ = ["LIBERO_RUN", "logging_random", "read_log"]

# The LIBERO rollout the recording tests run with this policy (`envfleet rollout` overrides): 1 worker x 2 stages
# x 2 envs of libero_spatial, 64x64, episodes of 2 chunks of 8.
LIBERO_RUN = [
    "train.simulator_type=libero",
    "train.task_suite_name=libero_spatial",
    "train.num_envs=2",
    "rollout.pipeline_stage_num=2",
    "actor.model.num_action_chunks=8",
    "train.max_episode_steps=16",
    "train.init_params.camera_heights=64",
    "train.init_params.camera_widths=64",
]


def logging_random(chunk: int, action_dim: int, seed: int = 0) -> Any:
    """The policy (a factory, as ``envfleet rollout --policy`` calls it)."""
    rng = np.random.default_rng(seed)
    where = os.environ["ENVFLEET_TEST_POLICY_LOG"]
    os.makedirs(where, exist_ok=True)
    calls = [0]

    def act(obs: Any) -> np.ndarray:
        actions = rng.uniform(-1.0, 1.0, size=(len(obs), chunk, action_dim)).astype(np.float32)
        seen = {k: obs.batch[k].numpy() for k in obs.batch.keys() if k in ("state", "full_image", "wrist_image")}
        np.savez(os.path.join(where, f"{calls[0]:05d}.npz"), actions=actions, **seen)
        calls[0] += 1
        return actions

    return act


def read_log(where: str) -> dict[bytes, dict[str, np.ndarray]]:
    """Every (state, action) pair the policy handled, keyed by their bytes, with the images it saw."""
    pairs = {}
    for name in sorted(os.listdir(where)):
        log = np.load(os.path.join(where, name))
        for i in range(len(log["actions"])):
            key = log["state"][i].tobytes() + log["actions"][i].tobytes()
            pairs[key] = {k: log[k][i] for k in log.files}
    return pairs
