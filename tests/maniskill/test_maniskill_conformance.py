"""The ManiSkill backend runs the core conformance suite on three stock tasks (CPU sim, Vulkan lavapipe)."""

from __future__ import annotations

from envfleet.testing import EnvConformance

from .common import CHUNK, maniskill_train

OVERRIDES = [f"actor.model.num_action_chunks={CHUNK}", "actor.model.action_dim=7"]


class TestPushCubeConformance(EnvConformance):
    config_data = {"train": maniskill_train("PushCube-v1", num_envs=2)}
    config_overrides = OVERRIDES


class TestPickCubeConformance(EnvConformance):
    config_data = {"train": maniskill_train("PickCube-v1", num_envs=2)}
    config_overrides = OVERRIDES


class TestStackCubeConformance(EnvConformance):
    # render: all as the base here, so the render test runs its variant with render: last.
    config_data = {"train": maniskill_train("StackCube-v1", num_envs=2, render="all")}
    config_overrides = OVERRIDES
