"""envfleet's simulators behind LeRobot's env registry (``--env.type=envfleet``).

LeRobot imports this package (as every installed ``lerobot_env_*`` distribution) before it
parses ``--env.*``; importing it registers :class:`EnvfleetEnvConfig` under the type
``envfleet``. See docs/faces/lerobot.md.
"""

from __future__ import annotations

from .config import DEFAULT_CAMERA_NAMES, EnvfleetEnvConfig
from .vector_env import LeRobotTaskEnv

__all__ = ["DEFAULT_CAMERA_NAMES", "EnvfleetEnvConfig", "LeRobotTaskEnv"]
__version__ = "0.1.0"
