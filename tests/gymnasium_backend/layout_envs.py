"""Gymnasium envs of the layout tests (``tests.gymnasium_backend.layout_envs:<id>``), registered on import.

- ``envfleet_test/Slow-v0``: a step that sleeps ``step_s`` (2 ms): an env that is worth a process per core;
- ``envfleet_test/Unstepped-v0``: a step that raises on its first call in a process, as an env whose step
  the spec probe cannot time.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

_STEPPED: set[int] = set()


class Slow(gymnasium.Env):
    """``state`` = [step count, seed draw]; each step sleeps ``step_s`` seconds."""

    def __init__(self, step_s: float = 0.002) -> None:
        self.step_s = float(step_s)
        self.observation_space = spaces.Box(-np.inf, np.inf, (2,), np.float64)
        self.action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.t = 0
        self.draw = 0.0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t, self.draw = 0, float(self.np_random.uniform())
        return np.array([self.t, self.draw]), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        time.sleep(self.step_s)
        self.t += 1
        return np.array([self.t, self.draw]), 0.0, False, False, {}


class Unstepped(Slow):
    """Its first step in a process raises (the spec probe's timing step); later ones run."""

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if 0 not in _STEPPED:
            _STEPPED.add(0)
            raise RuntimeError("Unstepped: the first step of a process raises (test hook)")
        return super().step(action)


for _id, _entry in (("envfleet_test/Slow-v0", Slow), ("envfleet_test/Unstepped-v0", Unstepped)):
    if _id not in gymnasium.envs.registry:
        gymnasium.register(_id, entry_point=_entry, max_episode_steps=100)
