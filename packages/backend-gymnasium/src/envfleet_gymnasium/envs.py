"""Gymnasium envs of envfleet's own, registered when this module is imported: ``envfleet_gymnasium.envs:envfleet/Zero-v0``.

``envfleet/Zero-v0`` costs nothing to step: its observation is a fixed ``state`` vector (drawn from the
reset's seed) and, with ``image_size``, a fixed image, either in the observation (``pixels``) or from
``render()``. It measures what the gymnasium backend itself costs (``nox -s bench -- gymnasium``) and
is the smallest env a test or a config can name.

>>> import gymnasium, envfleet_gymnasium.envs  # doctest: +SKIP
>>> env = gymnasium.make("envfleet/Zero-v0", image_size=8, images="render", render_mode="rgb_array")  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

__all__ = ["ZERO_ID", "ZeroEnv"]

ZERO_ID = "envfleet/Zero-v0"


class ZeroEnv(gymnasium.Env):  # type: ignore[misc]
    """An env that costs nothing: see the module doc.

    :param state_dim: size of the ``state`` vector (float32).
    :param action_dim: size of the Box action space, in [-1, 1].
    :param image_size: side of the square image (uint8 [S, S, 3]); 0: none.
    :param images: ``obs`` (a Dict observation with ``pixels``) or ``render`` (from ``render()``).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(
        self, state_dim: int = 8, action_dim: int = 4, image_size: int = 0, images: str = "render", render_mode: str | None = None
    ) -> None:
        if images not in ("obs", "render"):
            raise ValueError(f"images must be 'obs' or 'render', got {images!r}")
        self.render_mode = render_mode
        self.images = images
        self.action_space = spaces.Box(-1.0, 1.0, (int(action_dim),), np.float32)
        state = spaces.Box(-np.inf, np.inf, (int(state_dim),), np.float32)
        self._image = np.zeros((int(image_size), int(image_size), 3), dtype=np.uint8) if image_size else None
        if self._image is not None and images == "obs":
            pixels = spaces.Box(0, 255, self._image.shape, np.uint8)
            self.observation_space = spaces.Dict({"pixels": pixels, "state": state})
        else:
            self.observation_space = state
        self._state = np.zeros(int(state_dim), dtype=np.float32)

    def _obs(self) -> Any:
        if self._image is not None and self.images == "obs":
            return {"pixels": self._image, "state": self._state}
        return self._state

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self._state = self.np_random.uniform(-1, 1, self._state.shape).astype(np.float32)
        if self._image is not None:
            self._image = self.np_random.integers(0, 256, self._image.shape, dtype=np.uint8)
        return self._obs(), {"is_success": False}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        return self._obs(), 0.0, False, False, {"is_success": False}

    def render(self) -> np.ndarray | None:
        return self._image


if ZERO_ID not in gymnasium.envs.registry:
    gymnasium.register(ZERO_ID, entry_point=ZeroEnv, max_episode_steps=1000, disable_env_checker=True)  # type: ignore[arg-type]
