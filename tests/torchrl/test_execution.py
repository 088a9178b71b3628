"""A realtime config through the TorchRL face: TorchRL's own spec check, and what ran in every step's output."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torchrl.envs.utils import check_env_specs

from envfleet.config import ConfigError, load_config
from envfleet.execution import ActionSource
from envfleet.torchrl import make_env

from .test_env import toy_cfg

REALTIME = ["train.execution.mode=realtime", "train.execution.delay=2", "train.execution.horizon=2"]


def test_a_realtime_stage_passes_check_env_specs_and_reports_what_ran(no_leaks) -> None:
    cfg = load_config(data=toy_cfg(envs_per_process=3), overrides=REALTIME)
    env = make_env(cfg)
    try:
        check_env_specs(env)
        assert env.observation_spec["applied_action"].shape == torch.Size([3, 2, 7])
        env.set_seed(0)
        td = env.rollout(3, break_when_any_done=False)
        delays = td["next", "action_delay"]
        assert delays[:, 0].tolist() == [0, 0, 0] and (delays[:, 1:] == 2).all()
        sources = td["next", "action_source"]
        # The second chunk arrived 2 sub-steps late, a horizon of 2 after its observation: the first chunk's
        # one queued action (index 2 of 3) ran, then was held.
        assert sources[:, 1].tolist() == [[ActionSource.previous, ActionSource.hold]] * 3
        applied, first = td["next", "applied_action"][:, 1].numpy(), td["action"][:, 0].numpy()
        np.testing.assert_array_equal(applied[:, 0], first[:, 2])
        np.testing.assert_array_equal(applied[:, 1], first[:, 2])
    finally:
        env.close()


def test_caller_delays_are_refused_by_the_torchrl_face(no_leaks) -> None:
    cfg = load_config(data=toy_cfg(), overrides=["train.execution.mode=realtime", "train.execution.delay=caller"])
    with pytest.raises(ConfigError, match="delay: caller and the TorchRL face do not go together"):
        make_env(cfg)
