"""Episode semantics, state ids, config errors and the action transform of the LIBERO backend.

Most of these need no MuJoCo env: a ``LiberoEnv`` reads its suite's task list and
init-state files when constructed and builds a simulator only on its first reset.
The last test builds one, in this process, to check the sub-step an episode ends
by success is rendered as ``render: all`` would render it, and auto-reset.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from omegaconf import OmegaConf

from envfleet import ProcessEnvManager
from envfleet.config import load_config
from envfleet.env import EnvContext
from envfleet.episodes import StateCycle
from envfleet.errors import ConfigError, InvalidInputError
from envfleet_libero.actions import apply_action_transform
from envfleet_libero.gl import egl_device_from_cuda
from envfleet_libero.plugin import SUITES

TRIALS = 50  # every task of every suite has 50 fixed initial states


def _cfg(suite: str | None = "libero_spatial", chunk: int = 4, **train: Any) -> Any:
    data = {
        "train": {
            "simulator_type": "libero",
            "task_suite_name": suite,
            "num_envs": 1,
            "init_params": {"camera_heights": 128, "camera_widths": 128},
            **train,
        },
        "actor": {"model": {"num_action_chunks": chunk, "action_dim": 7}},
    }
    return load_config(data=data)


def _env(cfg: Any, num_envs: int = 1) -> Any:
    from envfleet_libero.env import LiberoEnv

    return LiberoEnv(cfg.train, EnvContext(num_envs=num_envs, action_dim=7, num_action_chunks=int(cfg.actor.model.num_action_chunks)))


# ---------------------------------------------------------------------- actions
def test_openvla_action_transform() -> None:
    actions = np.array(
        [
            [0.1, -0.2, 0.3, -0.4, 0.5, -0.6, 0.0],  # model says closed (0) -> LIBERO +1 (close)
            [0.1, -0.2, 0.3, -0.4, 0.5, -0.6, 1.0],  # open (1) -> LIBERO -1 (open)
            [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.8],  # binarized: > 0.5 -> open
            [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.3],  # < 0.5 -> close
        ],
        dtype=np.float32,
    )
    out = apply_action_transform(actions, "openvla")
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out[:, -1], [1.0, -1.0, -1.0, 1.0])
    np.testing.assert_array_equal(out[:, :6], actions[:, :6].astype(np.float64))
    np.testing.assert_array_equal(apply_action_transform(actions, "none"), actions.astype(np.float64))
    assert not np.signbit(apply_action_transform(np.full((1, 7), 0.5), "openvla")[0, -1])  # 0, not -0
    chunked = np.random.default_rng(0).uniform(0, 1, size=(2, 3, 7))
    np.testing.assert_array_equal(apply_action_transform(chunked, "openvla")[..., -1], -np.sign(2 * chunked[..., -1] - 1))
    with pytest.raises(ValueError, match="openvla"):
        apply_action_transform(actions, "rt1")


# ---------------------------------------------------------------------- config
@pytest.mark.parametrize("suite", [None, "libero_100", "spatial"])
def test_unknown_suite_is_a_config_error_listing_the_suites(suite: str | None) -> None:
    # load_config asks the plugin for its observation spec, which validates, before any process starts
    with pytest.raises(ConfigError) as info:
        _cfg(suite)
    message = str(info.value)
    assert "train.task_suite_name" in message and all(name in message for name in SUITES)
    good = _cfg("libero_spatial")
    data = OmegaConf.to_container(good.train, resolve=True)
    data["task_suite_name"] = suite
    with pytest.raises(ConfigError):
        _env_from_section(OmegaConf.create(data))  # and the env build, when used directly


def _env_from_section(section: Any) -> Any:
    from envfleet_libero.env import LiberoEnv

    return LiberoEnv(section, EnvContext(num_envs=1, action_dim=7, num_action_chunks=4))


def test_camera_count_and_gl_option_are_checked() -> None:
    with pytest.raises(ConfigError, match="camera_names"):
        _cfg(init_params={"camera_names": ["agentview", "frontview", "birdview"]})
    with pytest.raises(ConfigError, match="mujoco_gl"):
        _cfg(libero={"mujoco_gl": "glfw"})
    with pytest.raises(ConfigError, match="train.libero.reuse_envs"):
        _cfg(libero={"reuse_envs": False})


def test_one_camera_gives_no_wrist_image() -> None:
    mgr = ProcessEnvManager(_cfg(init_params={"camera_names": ["agentview"], "camera_heights": 64, "camera_widths": 96}))
    try:
        assert set(mgr.obs_spec) == {"full_image", "state"}
        assert mgr.obs_spec["full_image"].shape == (64, 96, 3)
    finally:
        mgr.close()


def test_egl_device_follows_cuda_visible_devices() -> None:
    assert egl_device_from_cuda(None) is None
    assert egl_device_from_cuda("2") == "2"
    assert egl_device_from_cuda(" 3, 0") == "3"
    assert egl_device_from_cuda("") == "0"
    assert egl_device_from_cuda("GPU-8d2c1b6e") == "0"


def _gl_choice(**environ: str) -> tuple[str, str]:
    """(stdout, stderr) of configure_gl() in a fresh process with these environment variables."""
    code = (
        "import os\n"
        "from envfleet_libero.gl import configure_gl\n"
        "print(configure_gl('egl'), os.environ['PYOPENGL_PLATFORM'], os.environ.get('MUJOCO_EGL_DEVICE_ID'))\n"
    )
    env = {
        k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM", "MUJOCO_EGL_DEVICE_ID", "CUDA_VISIBLE_DEVICES")
    }
    proc = subprocess.run([sys.executable, "-c", code], env={**env, **environ}, capture_output=True, text=True, timeout=300, check=True)
    return proc.stdout.strip(), proc.stderr


def test_gl_defaults_to_egl_and_falls_back_to_osmesa() -> None:
    assert _gl_choice()[0] == "egl egl None"
    assert _gl_choice(CUDA_VISIBLE_DEVICES="0")[0] == "egl egl 0"  # the first visible device
    assert _gl_choice(MUJOCO_GL="osmesa")[0] == "osmesa osmesa None"
    out, err = _gl_choice(MUJOCO_GL="egl", MUJOCO_EGL_DEVICE_ID="99")  # no such EGL device: EGL cannot start
    assert out == "osmesa osmesa 99" and "falling back to MUJOCO_GL=osmesa" in err


# ---------------------------------------------------------------------- state ids
@pytest.mark.parametrize("suite,num_tasks", [("libero_spatial", 10), ("libero_10", 10), ("libero_90", 90)])
def test_state_ids_number_trials_task_by_task(suite: str, num_tasks: int) -> None:
    env = _env(_cfg(suite))
    try:
        ids, tasks = env.get_all_state_ids(), env.get_state_task_ids()
        assert ids.dtype == np.int64 and tasks.dtype == np.int64
        np.testing.assert_array_equal(ids, np.arange(num_tasks * TRIALS))
        np.testing.assert_array_equal(tasks, np.repeat(np.arange(num_tasks), TRIALS))
        for sid in (0, TRIALS - 1, TRIALS, len(ids) - 1):
            task, trial = env.suite.locate(sid)
            assert sid == env.suite.first_id[task] + trial and tasks[sid] == task
        assert all(s is None for s in env.sims), "listing state ids must not build a MuJoCo env"
        assert "robosuite" not in env.task_description(0) and env.task_description(0)
    finally:
        env.close()
        env.close()


def test_task_id_mismatch_is_rejected_with_both_ids() -> None:
    env = _env(_cfg("libero_object"), num_envs=2)
    try:
        with pytest.raises(InvalidInputError) as info:
            env.reset_envs_to_state_ids(np.array([3, 120]), np.array([0, 3]))  # 120 is task 2, trial 20
        message = str(info.value)
        assert "env 1" in message and "task id 3" in message and "state id 120" in message and "task 2" in message
        with pytest.raises(InvalidInputError, match="out of range"):
            env.reset_envs_to_state_ids(np.array([0, 500]))
        assert all(s is None for s in env.sims)  # nothing was built for a rejected reset
    finally:
        env.close()


def test_task_id_mismatch_through_the_manager(no_leaks: None) -> None:
    with ProcessEnvManager(_cfg("libero_goal")) as mgr:  # start-up builds no MuJoCo env: fast
        assert len(mgr.get_all_state_ids()) == 10 * TRIALS
        with pytest.raises(InvalidInputError, match=r"env 0 .*task id 4 does not match state id 60, which belongs to task 1"):
            mgr.reset_envs_to_state_ids(np.array([60]), np.array([4]))


# ---------------------------------------------------------------------- in-process env
SUCCESS_AT = 2  # sub-step of the first chunk at which the patched success check passes


@pytest.fixture(scope="module")
def spatial_env() -> Iterator[Any]:
    """An in-process LiberoEnv without settle steps (so that nothing hides what a reset leaves behind)."""
    from envfleet_libero.gl import configure_gl

    configure_gl(os.environ.get("MUJOCO_GL", "egl"))
    env = _env(_cfg("libero_spatial", chunk=6, settle_steps=0))
    try:
        yield env
    finally:
        env.close()
        env.close()


def _moving_actions(seed: int, gripper: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.uniform(-1, 1, (1, 6, 6)), np.full((1, 6, 1), gripper)], axis=-1).astype(np.float32)


def test_reused_env_repeats_an_episode_exactly(spatial_env: Any) -> None:
    env = spatial_env
    sid = np.array([5])
    runs = []
    for _ in range(2):  # the first reset builds the env, the second reuses it after an episode
        first = env.reset_envs_to_state_ids(sid)
        runs.append((first, env.chunk_step(_moving_actions(4, gripper=1.0))))  # closing: the gripper command accumulates
    assert env.sims[0] is not None and env.sims[0].scene.fixture_pose is not None
    for key in runs[0][0].obs:
        np.testing.assert_array_equal(runs[0][0].obs[key], runs[1][0].obs[key], err_msg=f"reset obs {key!r} of a reused env")
        np.testing.assert_array_equal(runs[0][1].obs[key], runs[1][1].obs[key], err_msg=f"chunk obs {key!r} of a reused env")


def test_success_inside_a_chunk_renders_that_sub_step_and_auto_resets(spatial_env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from envfleet_libero.env import LiberoSim

    # robosuite counts env.steps since the reset; no settle steps here, so sub-step k is step k + 1.
    monkeypatch.setattr(LiberoSim, "check_success", lambda self: self.renv.timestep == SUCCESS_AT + 1)
    env = spatial_env
    actions = _moving_actions(3, gripper=-1.0)
    sid = np.array([5])
    results = {}
    for mode in ("last", "all"):  # same env object, so the second run reuses the MuJoCo env
        env.render_all = mode == "all"
        env.reset_envs_to_state_ids(sid)
        results[mode] = env.chunk_step(actions)
    last, full = results["last"], results["all"]
    for out in (last, full):
        np.testing.assert_array_equal(out.terminations[0], np.arange(6) >= SUCCESS_AT)
        np.testing.assert_array_equal(out.rewards[0], np.where(np.arange(6) == SUCCESS_AT, 1.0, 0.0))
        assert out.infos["success_once"][0] and out.infos["episode_length"][0] == SUCCESS_AT + 1
    for key in last.obs:
        # The episode ended at SUCCESS_AT: render: last must show that sub-step, as render: all does.
        np.testing.assert_array_equal(last.obs[key], full.obs[key], err_msg=f"{key} at the success sub-step")

    # auto_reset: the finished env is reset at the end of the chunk to its cycle's next state id.
    env.render_all = False
    env.cycle = StateCycle(env.get_all_state_ids(), 42, 0, 0, np.arange(1))
    expected = StateCycle(env.get_all_state_ids(), 42, 0, 0, np.arange(1)).next(0)
    env.reset_envs_to_state_ids(sid)
    out = env.chunk_step(actions)
    assert out.infos["episode_ended"][0] and out.infos["reset_state_id"][0] == expected
    assert out.infos["state_id"][0] == int(sid[0]) and out.infos["success_once"][0]  # infos describe the ended episode
    env.cycle = None
    monkeypatch.undo()
    fresh = env.reset_envs_to_state_ids(np.array([expected]))
    for key in out.obs:
        np.testing.assert_array_equal(out.obs[key], fresh.obs[key], err_msg=f"{key}: auto-reset obs != reset obs")
    assert out.task_descriptions == fresh.task_descriptions


def test_success_metrics_of_a_libero_episode_that_succeeds_mid_chunk(spatial_env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """LIBERO's success check passes at one sub-step only: success at any step, not at the end once the
    episode runs on (ignore_terminations); both when the success ends the episode; and a check that
    already passes at reset is reported."""
    from envfleet_libero.env import LiberoSim

    env = spatial_env
    actions = _moving_actions(5, gripper=-1.0)
    monkeypatch.setattr(LiberoSim, "check_success", lambda self: self.renv.timestep == SUCCESS_AT + 1)
    for ignore, at_end in ((False, True), (True, False)):
        env.tracker.ignore_terminations = ignore
        env.reset_envs_to_state_ids(np.array([5]))
        out = env.chunk_step(actions)
        assert out.infos["success_once"][0] and bool(out.infos["success_at_end"][0]) is at_end, ignore
        assert not out.infos["success_at_reset"][0]
    env.tracker.ignore_terminations = False
    monkeypatch.setattr(LiberoSim, "check_success", lambda self: True)
    env.reset_envs_to_state_ids(np.array([5]))
    assert env.chunk_step(actions).infos["success_at_reset"][0]
    monkeypatch.undo()
