"""MetaWorld as an envfleet backend: MT50 and its single tasks, one env per process, LeRobot's camera conventions.

The package's top level stays light (no MetaWorld or MuJoCo import), so that a worker
without the simulator can register the backend and run it under ``train.simulator_python``.
"""

from __future__ import annotations

from .plugin import SUITES, MetaworldConfig
from .tasks import INSTRUCTIONS, TASKS

__all__ = ["SUITES", "TASKS", "INSTRUCTIONS", "MetaworldConfig"]
