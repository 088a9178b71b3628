"""ManiSkill3 as an envfleet backend (``train.simulator_type: maniskill``).

The package's top level stays light (no ManiSkill, SAPIEN or torch import): the
simulator is imported in the shard process that builds the env, after the Vulkan
driver has been chosen (:mod:`envfleet_maniskill.device`).
"""

from __future__ import annotations

from .plugin import GRIPPER_SIGNS, KNOWN_ROBOTS, REWARD_MODES, ManiskillConfig
from .tasks import INSTRUCTIONS, TASKS

__all__ = ["TASKS", "INSTRUCTIONS", "GRIPPER_SIGNS", "KNOWN_ROBOTS", "REWARD_MODES", "ManiskillConfig"]
