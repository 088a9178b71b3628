"""What envfleet's faces onto other ecosystems (``envfleet.gym``, ``envfleet.torchrl``) share.

A face takes its config as :func:`envfleet.load_config` does (:func:`as_config`) and, when
the caller names no initial states, draws them from a :class:`StateWalk`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from .config import load_config
from .errors import ConfigError

__all__ = ["StateWalk", "as_config"]


def as_config(config: Any, overrides: list[str] | None = None) -> DictConfig:
    """``config`` (a YAML path, a dict or a DictConfig) loaded and checked by :func:`envfleet.load_config`."""
    overrides = list(overrides or [])
    if isinstance(config, (str, os.PathLike)):
        return load_config(config, overrides)
    if isinstance(config, (Mapping, DictConfig)):
        data = OmegaConf.to_container(config, resolve=True) if isinstance(config, DictConfig) else dict(config)
        return load_config(None, overrides, data=data)  # type: ignore[arg-type]
    raise ConfigError(
        f"config must be a YAML path, a dict or a DictConfig (anything envfleet.load_config accepts), got {type(config).__name__}"
    )


class StateWalk:
    """An endless walk over every state id: a permutation shuffled by the seed, reshuffled when used up.

    Envs that start new episodes together take the next ids in env order.

    >>> walk = StateWalk(np.arange(4), seed=0)
    >>> sorted(walk.take(4).tolist())
    [0, 1, 2, 3]
    """

    def __init__(self, state_ids: np.ndarray, seed: int) -> None:
        self.state_ids = np.asarray(state_ids, dtype=np.int64)
        self.seed(seed)

    def seed(self, seed: int) -> None:
        """Start a new walk, shuffled by ``seed``."""
        self._rng = np.random.default_rng(int(seed))
        self._order = np.zeros(0, dtype=np.int64)
        self._pos = 0

    def take(self, count: int) -> np.ndarray:
        """The next ``count`` state ids."""
        out = np.empty(int(count), dtype=np.int64)
        for j in range(int(count)):
            if self._pos >= len(self._order):
                self._order = self._rng.permutation(self.state_ids)
                self._pos = 0
            out[j] = self._order[self._pos]
            self._pos += 1
        return out
