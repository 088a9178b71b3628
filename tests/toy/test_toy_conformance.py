"""The toy backend runs the core conformance suite, with one and with several envs per process (and extra observations)."""

from __future__ import annotations

from envfleet.testing import EnvConformance


class TestToyConformance(EnvConformance):
    config_data = {"train": {"simulator_type": "toy", "num_envs": 3}}
    config_overrides = ["actor.model.num_action_chunks=4"]


class TestToyConformanceOneProcess(EnvConformance):
    # With two observations outside verl's three (a uint8 depth map and a third camera): the suite's
    # EnvWorker checks hold them to reaching the trainer.
    config_data = {
        "train": {
            "simulator_type": "toy",
            "num_envs": 3,
            "toy": {"envs_per_process": 3, "depth": "uint8", "side_camera": True},
            "render": "all",
        }
    }
    config_overrides = ["actor.model.num_action_chunks=2"]
