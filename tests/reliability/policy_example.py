"""A user policy loaded by `module:callable` in the tests."""

from __future__ import annotations

import numpy as np


class EchoZero:
    """Zero actions of the right shape; built with (chunk, action_dim) by load_policy."""

    def __init__(self, chunk: int, action_dim: int) -> None:
        self.chunk, self.action_dim = chunk, action_dim

    def __call__(self, obs) -> np.ndarray:
        return np.zeros((len(obs), self.chunk, self.action_dim), dtype=np.float32)


def make_policy(chunk: int, action_dim: int, seed: int = 0):
    """A factory: envfleet passes the chunk size, the action size and the seed."""
    rng = np.random.default_rng(seed)

    def act(obs) -> np.ndarray:
        return rng.uniform(-1, 1, (len(obs), chunk, action_dim)).astype(np.float32)

    act.made_with = (chunk, action_dim, seed)  # type: ignore[attr-defined]
    return act
