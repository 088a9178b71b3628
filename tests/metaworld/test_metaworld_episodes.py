"""What MetaWorld leaves to its user, handled: its 500-step limit, the packaging import, the config."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from envfleet import ProcessEnvManager
from envfleet.config import load_config
from envfleet.errors import ConfigError

from .common import metaworld_train, sim_python


def test_full_500_step_episode_truncates_and_stepping_on_does_not_raise(no_leaks: None) -> None:
    cfg = load_config(
        data={"train": metaworld_train(num_envs=1, task_suite_name="reach-v3"), "actor": {"model": {"num_action_chunks": 50}}}
    )
    with ProcessEnvManager(cfg) as mgr:
        mgr.reset_envs_to_state_ids(np.array([0]))
        zeros = np.zeros((1, 50, 4), dtype=np.float32)
        for _ in range(9):
            out = mgr.chunk_step(zeros)
            assert not out.truncations.any()
        last = mgr.chunk_step(zeros)
        assert last.truncations[0, -1] and not last.truncations[0, :-1].any()
        assert int(last.infos["episode_length"][0]) == 500
        # MetaWorld raises on step 501; a finished env is not stepped.
        after = mgr.chunk_step(zeros)
        assert after.truncations.all() and int(after.infos["episode_length"][0]) == 500


@pytest.mark.parametrize(
    "train,match",
    [
        ({"task_suite_name": "mt10"}, "not a MetaWorld suite"),
        ({"task_suite_name": None}, "is required"),
        ({"max_episode_steps": 501}, "MetaWorld stops every episode at 500"),
        ({"settle_steps": 15, "max_episode_steps": 490}, "add up to 505"),
        ({"init_params": {"camera_names": ["corner2", "gripperPOV"]}}, "exactly 1 camera"),
        ({"metaworld": {"corner2_pos": [1.0, 2.0]}}, "corner2_pos"),
    ],
    ids=["unknown-suite", "no-suite", "past-500", "settle-plus-horizon", "two-cameras", "bad-camera-pos"],
)
def test_bad_config_is_a_config_error_before_any_process(train: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        cfg = load_config(data={"train": metaworld_train(**train)})
        ProcessEnvManager(cfg)


def test_default_horizon_leaves_room_for_settle_steps() -> None:
    from envfleet_metaworld.plugin import horizon

    assert horizon(load_config(data={"train": metaworld_train()}).train) == 500
    assert horizon(load_config(data={"train": metaworld_train(settle_steps=15)}).train) == 485


def test_missing_packaging_is_named_with_its_fix() -> None:
    code = "import sys; sys.modules['packaging'] = None\nfrom envfleet_metaworld.env import import_metaworld\nimport_metaworld()"
    done = subprocess.run([sim_python(), "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "needs the 'packaging' package" in done.stderr and "pip install packaging" in done.stderr
