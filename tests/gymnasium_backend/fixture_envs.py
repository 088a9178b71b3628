"""Gymnasium envs the gymnasium backend's tests name (``tests.gymnasium_backend.fixture_envs:<id>``), registered on import.

- ``envfleet_test/PixelPendulum-v0``: gymnasium's own Pendulum with its frame in the observation
  (gymnasium's ``AddRenderObservation``): ``{"state": Box(3), "pixels": uint8 [500, 500, 3]}``;
- ``envfleet_test/Scripted-v0``: a counter that terminates, truncates, succeeds, crashes or hangs at
  the step its kwargs say (the test hooks of the semantics and recovery tests);
- ``envfleet_test/TextObs-v0``, ``NestedTuple-v0``, ``NoSeed-v0``: what envfleet refuses;
- ``envfleet_test/Spaces-v0``: every action and observation space envfleet carries, as its kwargs
  choose, its observation echoing the last action (the faces' own-spaces tests);
- ``envfleet_test/Refused-v0``: an observation space envfleet cannot carry, as its kwarg chooses.
"""

from __future__ import annotations

import os
import time
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.wrappers import AddRenderObservation


def pixel_pendulum(**kwargs: Any) -> gymnasium.Env:
    env = gymnasium.make("Pendulum-v1", render_mode="rgb_array", **kwargs)
    return AddRenderObservation(env, render_only=False, render_key="pixels", obs_key="state")


class Scripted(gymnasium.Env):
    """``state`` = [step count, last action, seed draw]; each hook fires at the step (1-based) its kwarg names (0: never).

    :param terminate_at: terminated=True there; with ``success``, ``info["is_success"]`` too.
    :param succeed_at: ``info["is_success"]`` there, without terminating.
    :param truncate_at: truncated=True there.
    :param exit_at: the process exits there (code 7), as a simulator that crashes.
    :param hang_at: it sleeps there for an hour, as a simulator that hangs.
    :param raise_at: it raises there, as a simulator with a bug.
    """

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(
        self,
        terminate_at: int = 0,
        succeed_at: int = 0,
        truncate_at: int = 0,
        exit_at: int = 0,
        hang_at: int = 0,
        raise_at: int = 0,
        success: bool = True,
        render_mode: str | None = None,
    ) -> None:
        self.hooks = dict(
            terminate_at=terminate_at, succeed_at=succeed_at, truncate_at=truncate_at, exit_at=exit_at, hang_at=hang_at, raise_at=raise_at
        )
        self.success = success
        self.render_mode = render_mode
        self.observation_space = spaces.Box(-np.inf, np.inf, (3,), np.float64)
        self.action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.t = 0
        self.draw = 0.0
        self.last = 0.0

    def _obs(self) -> np.ndarray:
        return np.array([self.t, self.last, self.draw], dtype=np.float64)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t, self.last = 0, 0.0
        self.draw = float(self.np_random.uniform())
        return self._obs(), {"is_success": False}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        self.last = float(np.asarray(action)[0])
        h = self.hooks
        if self.t == h["exit_at"]:
            os._exit(7)
        if self.t == h["hang_at"]:
            time.sleep(3600)
        if self.t == h["raise_at"]:
            raise RuntimeError(f"Scripted: raise_at={self.t} reached (test hook)")
        terminated = self.t == h["terminate_at"]
        success = (terminated and self.success) or self.t == h["succeed_at"]
        return self._obs(), float(self.t) / 10.0, terminated, self.t == h["truncate_at"], {"is_success": success, "t": self.t}

    def render(self) -> np.ndarray:
        frame = np.zeros((8, 8, 3), dtype=np.uint8)
        frame[: 1 + self.t % 8, :, 0] = 200
        frame[:, : 1 + int(self.draw * 7), 1] = 100
        return frame


class TextObs(gymnasium.Env):
    def __init__(self) -> None:
        self.observation_space = spaces.Dict({"pos": spaces.Box(-1, 1, (2,), np.float32), "note": spaces.Text(8)})
        self.action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        return {"pos": np.zeros(2, np.float32), "note": "hello"}, {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        return {"pos": np.zeros(2, np.float32), "note": "hello"}, 0.0, False, False, {}


class NestedTuple(gymnasium.Env):
    def __init__(self) -> None:
        inner = spaces.Tuple((spaces.Discrete(3), spaces.Box(-1, 1, (1,), np.float32)))
        self.observation_space = spaces.Tuple((spaces.Box(-1, 1, (2,), np.float32), inner))
        self.action_space = spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        return self.observation_space.sample(), 0.0, False, False, {}


class NoSeed(gymnasium.Env):
    """An env written for gym's old API: its reset takes no seed."""

    def __init__(self) -> None:
        self.observation_space = spaces.Box(-1, 1, (2,), np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self):  # type: ignore[override]
        return np.zeros(2, np.float32), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        return np.zeros(2, np.float32), 0.0, False, False, {}


def _spaces_action(kind: str) -> spaces.Space:
    return {
        "discrete": spaces.Discrete(3, start=1),
        "multidiscrete": spaces.MultiDiscrete([3, 2], start=[1, -1]),
        "multibinary": spaces.MultiBinary(4),
        "box": spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([1.0, 2.0], np.float32)),
    }[kind]


class SpacesEnv(gymnasium.Env):
    """A counter ``t`` whose observation echoes the last action, in the spaces its kwargs choose.

    :param action: ``discrete`` (``Discrete(3, start=1)``), ``multidiscrete`` (``MultiDiscrete([3, 2], start=[1, -1])``),
        ``multibinary`` (``MultiBinary(4)``) or ``box`` (``Box([-1, 0], [1, 2])``).
    :param obs: ``dict`` (``{"echo": Box, "inner": {"t": Discrete, "flags": MultiBinary}, "grid": MultiDiscrete}``),
        ``tuple`` (``(Box, Discrete)``), ``box`` (float64 ``[t, *echo]``, bounds of its own per entry),
        ``discrete`` (``t``) or ``multidiscrete`` (``[t % 3, t % 4]``).
    """

    def __init__(self, action: str = "multidiscrete", obs: str = "dict") -> None:
        self.action_space = _spaces_action(action)
        self.kind = obs
        width = int(np.prod(self.action_space.shape)) if self.action_space.shape else 1
        echo = spaces.Box(-5.0, 5.0, (width,), np.float32)
        self.observation_space = {
            "dict": spaces.Dict(
                {
                    "echo": echo,
                    "inner": spaces.Dict({"t": spaces.Discrete(100), "flags": spaces.MultiBinary(3)}),
                    "grid": spaces.MultiDiscrete([4, 5]),
                }
            ),
            "tuple": spaces.Tuple((echo, spaces.Discrete(100))),
            "box": spaces.Box(np.array([0.0] + [-5.0] * width), np.array([100.0] + [5.0] * width), dtype=np.float64),
            "discrete": spaces.Discrete(100),
            "multidiscrete": spaces.MultiDiscrete([3, 4]),
        }[obs]
        self.t = 0
        self.echo = np.zeros(width, np.float32)

    def _obs(self) -> Any:
        t = self.t
        if self.kind == "dict":
            flags = np.array([t % 2, (t // 2) % 2, 1], np.int8)
            return {"echo": self.echo.copy(), "inner": {"t": np.int64(t), "flags": flags}, "grid": np.array([t % 4, t % 5], np.int64)}
        if self.kind == "tuple":
            return (self.echo.copy(), np.int64(t))
        if self.kind == "box":
            return np.concatenate([[float(t)], self.echo]).astype(np.float64)
        if self.kind == "discrete":
            return np.int64(t)
        return np.array([t % 3, t % 4], np.int64)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = int(self.np_random.integers(0, 10))
        self.echo = np.zeros_like(self.echo)
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        assert self.action_space.contains(action), f"{action!r} is not in {self.action_space}"
        self.t += 1
        self.echo = np.asarray(action, dtype=np.float32).reshape(-1)
        return self._obs(), float(self.echo.sum()), False, False, {}


class RefusedObs(gymnasium.Env):
    """An observation space envfleet cannot carry beside a Box: ``obs`` is ``graph``, ``sequence``, ``oneof`` or
    ``tuple_dict`` (a Tuple holding a Dict)."""

    def __init__(self, obs: str = "graph") -> None:
        pos = spaces.Box(-1, 1, (2,), np.float32)
        odd = {
            "graph": lambda: spaces.Graph(spaces.Box(-1, 1, (2,), np.float32), None),
            "sequence": lambda: spaces.Sequence(spaces.Discrete(3)),
            "oneof": lambda: spaces.OneOf((spaces.Discrete(2), pos)),
            "tuple_dict": lambda: spaces.Tuple((pos, spaces.Dict({"a": pos}))),
        }[obs]()
        self.observation_space = spaces.Dict({"pos": pos, "odd": odd})
        self.action_space = spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        return self.observation_space.sample(), 0.0, False, False, {}


for _id, _entry, _steps in (
    ("envfleet_test/PixelPendulum-v0", pixel_pendulum, 200),
    ("envfleet_test/Spaces-v0", SpacesEnv, 20),
    ("envfleet_test/Refused-v0", RefusedObs, 10),
    ("envfleet_test/Scripted-v0", Scripted, 50),
    ("envfleet_test/TextObs-v0", TextObs, 10),
    ("envfleet_test/NestedTuple-v0", NestedTuple, 10),
    ("envfleet_test/NoSeed-v0", NoSeed, 10),
):
    if _id not in gymnasium.envs.registry:
        gymnasium.register(_id, entry_point=_entry, max_episode_steps=_steps)
