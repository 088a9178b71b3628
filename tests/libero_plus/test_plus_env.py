"""LIBERO-plus's perturbations in the real LIBERO simulator: every one kept.

Two envs in one process, 64x64 cameras: a robot-start task's arm starts at LIBERO's initial state
moved by the start's offset, with the start as the controller's rest pose; a noise task corrupts the
agentview image only, the same in two resets to one state id; a camera task's agentview camera is
where :func:`perturbed_pose` puts it; every task hands out the BDDL's instruction.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from envfleet.config import load_config
from envfleet.env import EnvContext
from envfleet_libero.plus.camera import perturbed_pose
from envfleet_libero.plus.robot import start_offset, start_qpos

SEED = 7


@pytest.fixture(scope="module")
def env() -> Iterator[Any]:
    from envfleet_libero.env import LiberoEnv

    train = {
        "simulator_type": "libero",
        "task_suite_name": "libero_plus_object",
        "num_envs": 2,
        "seed": SEED,
        "settle_steps": 0,
        "render": "last",
        "init_params": {"camera_heights": 64, "camera_widths": 64, "camera_names": ["agentview", "robot0_eye_in_hand"]},
        "libero": {"plus": {"dimensions": ["robot", "noise", "camera"], "trials": 2}},
    }
    cfg = load_config(data={"train": train, "actor": {"model": {"num_action_chunks": 2, "action_dim": 7}}})
    env = LiberoEnv(cfg.train, EnvContext(num_envs=2, action_dim=7, num_action_chunks=2))
    yield env
    env.close()


def _first(env: Any, dimension: str, pred: Any = lambda t: True) -> tuple[Any, int]:
    task = next(t for t in env.suite.tasks if t.plus.dimension == dimension and pred(t))
    return task, int(env.suite.first_id[task.index])


def test_robot_start_survives_the_init_state_and_noise_is_seeded(env: Any) -> None:
    robot, robot_id = _first(env, "robot", lambda t: t.plus.robot_start > 100)
    noise, noise_id = _first(env, "noise", lambda t: t.plus.noise == 33)  # fog: random draws
    first = env.reset_envs_to_state_ids(np.array([robot_id, noise_id]))
    assert first.task_descriptions == [robot.bddl_language, noise.bddl_language]
    assert (
        "initstate" not in first.task_descriptions[0] and first.task_descriptions[0] == "pick the alphabet soup and place it in the basket"
    )
    sim = env.sims[0]
    arm = sim.renv.robots[0]._ref_joint_pos_indexes
    init = robot.init_states[0]
    qpos = sim.renv.sim.data.qpos[arm]
    np.testing.assert_allclose(qpos, init[1 + np.asarray(arm)] + start_offset(robot.plus.robot_start), atol=1e-12)
    assert np.abs(qpos - init[1 + np.asarray(arm)]).max() > 0.05  # the offset is there (distance 0.2 rad for starts 101-200)
    np.testing.assert_array_equal(sim.renv.robots[0].controller.initial_joint, start_qpos(robot.plus.robot_start))
    noisy = first.obs["full_image"][1].copy()
    wrist = first.obs["wrist_image"][1].copy()
    # The same state id again: the same noise; the wrist camera is never corrupted.
    again = env.reset_envs_to_state_ids(np.array([robot_id, noise_id]))
    np.testing.assert_array_equal(again.obs["full_image"][1], noisy)
    # The unperturbed image of the same scene and state: the noise task's wrist image equals it, its agentview does not.
    base = env.reset_envs_to_state_ids(np.array([robot_id, noise_id + 1]))  # trial 1: another state id, other noise
    assert not np.array_equal(base.obs["full_image"][1], noisy)
    sim1 = env.sims[1]
    clean = sim1.env.set_init_state(noise.init_states[0])  # the raw render of trial 0, no noise
    np.testing.assert_array_equal(clean["robot0_eye_in_hand_image"][::-1, ::-1], wrist)
    assert np.abs(clean["agentview_image"][::-1, ::-1].astype(int) - noisy).mean() > 5


def test_camera_task_moves_the_agentview_camera(env: Any) -> None:
    camera, camera_id = _first(env, "camera", lambda t: t.plus.view[0] != 0 and t.plus.view[1] != 0)
    _robot, robot_id = _first(env, "robot")
    env.reset_envs_to_state_ids(np.array([camera_id, robot_id]))
    model = env.sims[0].renv.sim.model
    cam = model.camera_name2id("agentview")
    base_model = env.sims[1].renv.sim.model
    # LIBERO's own agentview pose for this problem: its class's _setup_camera, recorded.
    calls: dict[str, Any] = {}

    class Recorder:
        def set_camera(self, camera_name: str, pos: Any, quat: Any, camera_attribs: Any = None) -> None:
            calls[camera_name] = (list(pos), list(quat))

    libero_class = next(c for c in type(env.sims[1].renv).__mro__ if c.__module__.startswith("libero.libero.envs.problems"))
    libero_class._setup_camera(None, Recorder())
    libero_pos, libero_quat = calls["agentview"]
    # The robot task's camera is the identity view's (LIBERO's pose, rounded); the camera task's is moved from it.
    pos0, _ = perturbed_pose(libero_pos, libero_quat, (0, 0, 100, 0, 0))
    np.testing.assert_allclose(base_model.cam_pos[base_model.camera_name2id("agentview")], pos0)
    assert np.abs(pos0 - libero_pos).max() < 6e-5
    pos, quat = perturbed_pose(libero_pos, libero_quat, camera.plus.view)
    np.testing.assert_allclose(model.cam_pos[cam], pos)
    np.testing.assert_allclose(np.abs(np.dot(model.cam_quat[cam], quat / np.linalg.norm(quat))), 1.0, atol=1e-9)
    assert np.linalg.norm(pos - pos0) > 0.05
