"""The toy backend runs the core conformance suite, with one and with several envs per process."""

from __future__ import annotations

from envfleet.testing import EnvConformance


class TestToyConformance(EnvConformance):
    config_data = {"train": {"simulator_type": "toy", "num_envs": 3}}
    config_overrides = ["actor.model.num_action_chunks=4"]


class TestToyConformanceOneProcess(EnvConformance):
    config_data = {"train": {"simulator_type": "toy", "num_envs": 3, "toy": {"envs_per_process": 3}, "render": "all"}}
    config_overrides = ["actor.model.num_action_chunks=2"]
