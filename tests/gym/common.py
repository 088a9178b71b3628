"""Configs and a policy for the gymnasium face's tests on the toy backend."""

from __future__ import annotations

from typing import Any

import numpy as np

from envfleet.config import load_config

CHUNK = 3


def toy_cfg(num_envs: int = 3, chunk: int = CHUNK, max_steps: int = 12, envs_per_process: int | None = None, **extra: Any) -> Any:
    """The toy with small images; every env in one process unless ``envs_per_process`` says otherwise."""
    overrides = [
        "train.simulator_type=toy",
        f"train.num_envs={num_envs}",
        f"actor.model.num_action_chunks={chunk}",
        f"train.max_episode_steps={max_steps}",
        "train.init_params.camera_heights=16",
        "train.init_params.camera_widths=16",
        f"train.toy.envs_per_process={envs_per_process or num_envs}",
    ]
    overrides += [f"train.{k}={v}" for k, v in extra.items()]
    return load_config(overrides=overrides)


def steer(obs: dict[str, np.ndarray], chunk: int = CHUNK) -> np.ndarray:
    """Even envs head for their goal at full speed (they terminate); odd envs stand still (they truncate)."""
    state = obs["state"]
    n = state.shape[0]
    actions = np.zeros((n, chunk, 7), dtype=np.float32)
    toward = np.clip(state[:, 4:6] / 0.05, -1.0, 1.0)
    actions[::2, :, :2] = toward[::2, None, :]
    return actions
