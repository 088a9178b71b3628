"""The ManiSkill backend runs the core conformance suite on three stock tasks (CPU sim, Vulkan lavapipe)."""

from __future__ import annotations

import os

import pytest

from envfleet.testing import EnvConformance

from .common import CHUNK, maniskill_train

# Each ManiSkill process costs about 20 CPU-s of imports and shader compilation, and the suite starts
# many: CI runs it on one task, ENVFLEET_MANISKILL_ALL_TASKS=1 on all three.
all_tasks = pytest.mark.skipif(
    os.environ.get("ENVFLEET_MANISKILL_ALL_TASKS") != "1", reason="opt-in: set ENVFLEET_MANISKILL_ALL_TASKS=1 for PickCube and StackCube"
)

OVERRIDES = [f"actor.model.num_action_chunks={CHUNK}", "actor.model.action_dim=7"]


class TestPushCubeConformance(EnvConformance):
    config_data = {"train": maniskill_train("PushCube-v1", num_envs=2)}
    config_overrides = OVERRIDES


@all_tasks
class TestPickCubeConformance(EnvConformance):
    config_data = {"train": maniskill_train("PickCube-v1", num_envs=2)}
    config_overrides = OVERRIDES


@all_tasks
class TestStackCubeConformance(EnvConformance):
    # render: all as the base here, so the render test runs its variant with render: last.
    config_data = {"train": maniskill_train("StackCube-v1", num_envs=2, render="all")}
    config_overrides = OVERRIDES
