"""Every bad gymnasium case is a clear ConfigError at load_config, before any shard starts, and leaves nothing running;
``envfleet doctor --config`` names it; bad actions and ids are refused before they reach an env."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from envfleet import ProcessEnvManager
from envfleet.config import load_config
from envfleet.errors import ConfigError, InvalidInputError

from ..conftest import child_pids, pid_alive
from .common import FIXTURES, SCRIPTED, gym_cfg, gym_train


def _load(env_id: str, **section: object) -> None:
    load_config(data={"train": gym_train(env_id, **section)})


CASES = [
    ("CartPol-v1", {}, "which gymnasium does not know.*Did you mean.*CartPole"),
    ("no_such_module_xyz:Thing-v0", {}, "module 'no_such_module_xyz'.*does not import"),
    ("CartPole-v1", {"kwargs": {"pole_colour": "red"}}, r"train.gymnasium.kwargs.*refused by CartPole-v1.*pole_colour"),
    (f"{FIXTURES}:envfleet_test/TextObs-v0", {}, r"observation entry 'note' is Text\(.*no fixed shape.*state_keys"),
    (f"{FIXTURES}:envfleet_test/NestedTuple-v0", {}, r"observation entry '1' is Tuple\(.*nested Tuple"),
    (f"{FIXTURES}:envfleet_test/NoSeed-v0", {}, r"cannot start from a fixed initial state.*no 'seed' argument"),
    ("CartPole-v1", {"seeds": [3, 3]}, "lists seed 3 twice"),
    ("CartPole-v1", {"seeds": [1, -2]}, "integer >= 0"),
    ("CartPole-v1", {"render": "human"}, "must be 'rgb_array'"),
    ("CartPole-v1", {"kwargs": {"render_mode": "rgb_array"}}, "set train.gymnasium.render: rgb_array instead"),
    ("CartPole-v1", {"image_keys": ["pixels"]}, "names 'pixels', which is not an entry of the observation"),
    ("CartPole-v1", {"rescale_actions": True}, "action space Discrete"),
    ("Pendulum-v1", {"render": "rgb_array", "image_keys": {"full_image": "state"}}, "an image is a uint8 Box"),
]


@pytest.mark.parametrize("env_id,section,match", CASES, ids=[c[2].split(".")[0][:28].strip() for c in CASES])
def test_bad_case_is_a_config_error_and_leaves_nothing_running(env_id: str, section: dict, match: str, no_leaks: None) -> None:
    before = child_pids()
    with pytest.raises(ConfigError, match=match):
        _load(env_id, **section)
    assert not [p for p in child_pids() - before if pid_alive(p)], "the probe left a process running"


def test_a_probe_that_hangs_is_killed_at_its_deadline(no_leaks: None) -> None:
    before = child_pids()
    with pytest.raises(ConfigError, match=r"did not finish within 3 s \(train.start_timeout_s\)"):
        # The module sleeps at import: the probe never answers.
        load_config(data={"train": {**gym_train("tests.gymnasium_backend.hang_on_import:Hang-v0"), "start_timeout_s": 3}})
    assert not [p for p in child_pids() - before if pid_alive(p)]


def test_left_out_entries_are_not_refused() -> None:
    """An uncarriable entry that state_keys leaves out is not carried, and not refused."""
    cfg = load_config(data={"train": gym_train(f"{FIXTURES}:envfleet_test/TextObs-v0", state_keys=["pos"])})
    from envfleet.plugins import get_backend

    assert set(get_backend("gymnasium").checked_observation_spec(cfg.train, 2)) == {"pos"}


def test_doctor_names_a_bad_case(tmp_path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("train:\n  simulator_type: gymnasium\n  gymnasium: {id: CartPol-v1}\n")
    out = subprocess.run(
        [sys.executable, "-m", "envfleet_ray.cli", "doctor", "--config", str(config)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode != 0
    assert "CartPol-v1" in out.stdout + out.stderr and "does not know" in out.stdout + out.stderr


def test_doctor_says_where_images_come_from(tmp_path) -> None:
    for env_id, extra, said in (
        ("Pendulum-v1", "render: rgb_array", "render() is called at the read sub-step only"),
        ("tests.gymnasium_backend.fixture_envs:envfleet_test/PixelPendulum-v0", "seeds: 2", "nothing to skip: the images (pixels)"),
    ):
        config = tmp_path / "case.yaml"
        config.write_text(f"train:\n  simulator_type: gymnasium\n  gymnasium: {{id: '{env_id}', {extra}}}\n")
        out = subprocess.run(
            [sys.executable, "-m", "envfleet_ray.cli", "doctor", "--config", str(config)], capture_output=True, text=True, timeout=300
        )
        assert said in out.stdout, out.stdout + out.stderr
        assert f"gymnasium env {env_id}" in out.stdout


@pytest.mark.parametrize("bad", ["not_whole", "out_of_range", "nan"])
def test_bad_discrete_actions_reach_no_env(bad: str, no_leaks: None) -> None:
    cfg = gym_cfg("CartPole-v1", chunk=3, num_envs=2, seeds=4)
    with ProcessEnvManager(cfg) as mgr:
        first = mgr.reset_envs_to_state_ids(np.array([0, 1]))
        actions = np.ones((2, 3, 1), dtype=np.float32)
        actions[1, 2, 0] = {"not_whole": 0.5, "out_of_range": 2.0, "nan": np.nan}[bad]
        with pytest.raises(InvalidInputError, match=r"actions\[1, 2, 0\]"):
            mgr.chunk_step(actions)
        # Nothing was stepped: the next good chunk starts from the reset's state.
        out = mgr.chunk_step(np.zeros((2, 1, 1), dtype=np.float32)) if mgr.chunk is None else None
        step = mgr.chunk_step(np.zeros((2, 3, 1), dtype=np.float32))
        assert out is None and np.asarray(step.infos["episode_length"]).tolist() == [3, 3]
        assert not np.array_equal(step.obs["state"], first.obs["state"])


def test_a_state_id_past_the_seeds_is_refused(no_leaks: None) -> None:
    with ProcessEnvManager(gym_cfg(SCRIPTED, num_envs=1, seeds=[7, 8])) as mgr:
        with pytest.raises(InvalidInputError, match=r"state id 2 \(env 0 of stage 0\) is out of range: expected 0..1"):
            mgr.reset_envs_to_state_ids(np.array([2]))
        assert mgr.reset_envs_to_state_ids(np.array([1])).obs["state"].shape == (1, 3)
