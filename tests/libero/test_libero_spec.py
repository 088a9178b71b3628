"""What the LIBERO backend's spec tells callers before any env exists: the episode horizon."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from envfleet.config import load_config
from envfleet.errors import ConfigError
from envfleet.plugins import get_backend

# LIBERO's own horizons per suite (the openvla evaluation's max_steps), and a LIBERO-PRO suite
# of each kind: a perturbation takes its base suite's horizon.
HORIZONS = {"libero_spatial": 220, "libero_object": 280, "libero_goal": 300, "libero_10": 520, "libero_goal_swap": 300}


@pytest.mark.parametrize("suite", sorted(HORIZONS))
def test_the_spec_gives_the_suites_horizon(suite: str) -> None:
    cfg = load_config(overrides=["train.simulator_type=libero", f"train.task_suite_name={suite}"])
    spec = get_backend("libero")
    assert spec.max_episode_steps is not None
    assert spec.max_episode_steps(cfg.train) == HORIZONS[suite]


def test_an_unknown_suite_has_no_horizon_but_a_clear_error() -> None:
    # A section as a caller might hand it over before the config is checked (load_config refuses the name).
    section = OmegaConf.create({"task_suite_name": "libero_spatail"})
    with pytest.raises(ConfigError, match=r"train\.task_suite_name.*Did you mean 'libero_spatial'"):
        get_backend("libero").max_episode_steps(section)  # type: ignore[misc]
