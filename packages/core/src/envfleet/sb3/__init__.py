"""envfleet as a Stable-Baselines3 ``VecEnv``: a thin shim over the gymnasium face (``envfleet.gym``).

>>> from stable_baselines3 import PPO                              # doctest: +SKIP
>>> from envfleet.sb3 import make_vec_env                          # doctest: +SKIP
>>> venv = make_vec_env("examples/libero_demo.yaml")               # doctest: +SKIP
>>> PPO("MultiInputPolicy", venv, n_steps=16).learn(64)            # doctest: +SKIP
>>> venv.close()                                                   # doctest: +SKIP

Needs the ``sb3`` extra (``pip install 'envfleet[sb3]'``). See docs/faces/sb3.md.
"""

from __future__ import annotations

from ..errors import MissingExtraError

try:
    import stable_baselines3  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised in a venv without SB3
    raise MissingExtraError(
        "envfleet.sb3 needs Stable-Baselines3, which is not installed: pip install 'envfleet[sb3]' (pin torch to your build first)"
    ) from exc

from .vec_env import RESET_OPTIONS, EnvfleetVecEnv, make_vec_env

__all__ = ["RESET_OPTIONS", "EnvfleetVecEnv", "make_vec_env"]
