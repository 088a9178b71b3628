"""Configs and helpers of the gymnasium backend's tests."""

from __future__ import annotations

from typing import Any

import numpy as np

from envfleet.config import load_config

FIXTURES = "tests.gymnasium_backend.fixture_envs"
PIXEL_PENDULUM = f"{FIXTURES}:envfleet_test/PixelPendulum-v0"
SCRIPTED = f"{FIXTURES}:envfleet_test/Scripted-v0"


def gym_train(env_id: str, *, num_envs: int = 2, **section: Any) -> dict[str, Any]:
    """A ``train`` section of the gymnasium backend; ``train_*`` keywords are ``train`` keys, the rest ``train.gymnasium``'s."""
    train = {k[len("train_") :]: section.pop(k) for k in list(section) if k.startswith("train_")}
    return {"simulator_type": "gymnasium", "num_envs": num_envs, "gymnasium": {"id": env_id, **section}, **train}


def gym_cfg(env_id: str, *, chunk: int = 4, num_envs: int = 2, overrides: tuple[str, ...] = (), **section: Any) -> Any:
    """The loaded config of :func:`gym_train`, ``chunk`` actions per chunk."""
    data = {"train": gym_train(env_id, num_envs=num_envs, **section), "actor": {"model": {"num_action_chunks": chunk}}}
    return load_config(data=data, overrides=list(overrides))


def box_actions(seed: int, n: int, chunk: int, dim: int, scale: float = 1.0) -> np.ndarray:
    """``[n, chunk, dim]`` float32 actions in [-scale, scale]."""
    return (np.random.default_rng(seed).uniform(-1, 1, (n, chunk, dim)) * scale).astype(np.float32)
