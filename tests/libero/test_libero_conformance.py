"""The LIBERO backend runs envfleet's backend conformance suite (two envs, 128x128, chunks of 4)."""

from __future__ import annotations

from envfleet.testing import EnvConformance


class TestLiberoConformance(EnvConformance):
    config_data = {
        "train": {
            "simulator_type": "libero",
            "task_suite_name": "libero_spatial",
            "num_envs": 2,
            "init_params": {"camera_heights": 128, "camera_widths": 128},
            # One process for both (the default layout would give each a core): the suite checks the
            # contract, not the layout, and each LIBERO process costs CI 10-30 s.
            "libero": {"envs_per_process": 2},
        }
    }
    config_overrides = ["actor.model.num_action_chunks=4"]
    # Each sampled state id is likely another task, i.e. a new MuJoCo env (~15 s on 2 cores).
    sample_size = 2
