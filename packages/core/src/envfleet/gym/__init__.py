"""envfleet as a gymnasium ``VectorEnv``: one stage's shard processes behind gymnasium 1.x's vector API.

>>> from envfleet.gym import make_vector_env                       # doctest: +SKIP
>>> envs = make_vector_env("examples/libero_demo.yaml", autoreset_mode="SameStep")  # doctest: +SKIP
>>> obs, infos = envs.reset(seed=0)                               # doctest: +SKIP
>>> obs, rewards, terminations, truncations, infos = envs.step(envs.action_space.sample())  # doctest: +SKIP
>>> envs.close()                                                  # doctest: +SKIP

Needs the ``gym`` extra (``pip install 'envfleet[gym]'``). See docs/faces/gymnasium.md.
"""

from __future__ import annotations

from ..errors import MissingExtraError

try:
    import gymnasium  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised in a venv without gymnasium
    raise MissingExtraError("envfleet.gym needs gymnasium 1.x, which is not installed: pip install 'envfleet[gym]'") from exc

from .ready import EnvfleetFirstReadyVectorEnv
from .vector_env import STEP_MODES, EnvfleetVectorEnv, make_vector_env

__all__ = ["STEP_MODES", "EnvfleetFirstReadyVectorEnv", "EnvfleetVectorEnv", "make_vector_env"]
