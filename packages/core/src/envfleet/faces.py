"""What envfleet's faces onto other ecosystems (``envfleet.gym``, ``envfleet.torchrl``) share.

A face takes its config as :func:`envfleet.config.as_config` does (a loaded config as it is) and, when
the caller names no initial states, draws them from a :class:`StateWalk`.
"""

from __future__ import annotations

import numpy as np

from .config import as_config

__all__ = ["StateWalk", "as_config"]


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
