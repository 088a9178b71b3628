"""Any gymnasium environment as an envfleet backend: ``train.simulator_type: gymnasium``, the env named by ``train.gymnasium.id``.

The package's top level stays light (no gymnasium import): a worker whose venv lacks the env's
packages registers the backend, probes the env's spaces under ``train.simulator_python``
(:mod:`envfleet_gymnasium.probe`) and runs its shards there.
"""

from __future__ import annotations

from .case import Case, GymnasiumConfig
from .plugin import observation_spec

__all__ = ["Case", "GymnasiumConfig", "observation_spec"]
