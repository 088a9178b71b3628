"""envfleet as a TorchRL env: one stage's shard processes behind a batched ``EnvBase``.

>>> from envfleet.torchrl import make_env                      # doctest: +SKIP
>>> env = make_env("examples/libero_demo.yaml")               # doctest: +SKIP
>>> rollout = env.rollout(4)                                  # doctest: +SKIP
>>> env.close()                                               # doctest: +SKIP

Needs the ``torchrl`` extra (``pip install 'envfleet[torchrl]'``). See docs/faces/torchrl.md.
"""

from __future__ import annotations

from ..errors import MissingExtraError

try:
    import torchrl  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised in a venv without torchrl
    raise MissingExtraError("envfleet.torchrl needs TorchRL, which is not installed: pip install 'envfleet[torchrl]'") from exc

from .env import EnvfleetEnv, make_env
from .ready import EnvfleetFirstReadyEnv

__all__ = ["EnvfleetEnv", "EnvfleetFirstReadyEnv", "make_env"]
