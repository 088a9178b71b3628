"""lerobot-eval's own ``eval_policy_all`` over a LIBERO-plus suite through the LeRobot face: a row per dimension.

LeRobot's venv (Python 3.12) holds envfleet-libero's registration, LIBERO's task tables and LIBERO-plus's
task data, each without its dependencies: the config is checked and the observation spec given here. The
shards run LIBERO in the main venv (``ENVFLEET_MAIN_PYTHON``) through ``train.simulator_python``. A
robot-start task and a noise task of libero_plus_spatial on the same base task, one env, one episode of
one 4-step chunk each: LeRobot's report has one group per dimension, each holding its task's episode.
"""

from __future__ import annotations

import os

import pytest
from lerobot.envs import close_envs
from lerobot.envs.factory import make_env, make_env_config
from lerobot.processor import PolicyProcessorPipeline
from lerobot.processor.converters import policy_action_to_transition, transition_to_policy_action
from lerobot.scripts.lerobot_eval import eval_policy_all
from lerobot.utils.import_utils import register_third_party_plugins

from envfleet_libero.plus.data import plus_tasks

from .policy import Reacher, ReacherConfig

SUITE = "libero_plus_spatial"
CHUNK = 4


def test_lerobot_eval_reports_a_libero_plus_suite_per_dimension(no_leaks: None, monkeypatch: pytest.MonkeyPatch) -> None:
    python = os.environ.get("ENVFLEET_MAIN_PYTHON")
    if not python or not os.path.exists(python):
        pytest.fail(f"ENVFLEET_MAIN_PYTHON is {python!r}: expected the python of the main venv, with LIBERO (nox -s tests-lerobot sets it)")
    monkeypatch.setenv("MUJOCO_GL", "egl")
    monkeypatch.setenv("PYOPENGL_PLATFORM", "egl")
    register_third_party_plugins()  # what lerobot-eval does before it parses --env.*
    tasks = plus_tasks(SUITE)
    robot = next(t for t in tasks if t.dimension == "robot" and t.robot_start != 0)
    noise = next(t for t in tasks if t.dimension == "noise" and t.base == robot.base)  # the same scene
    chosen = sorted([robot.plus_id, noise.plus_id])  # the selection's task ids are positions in this order
    expected = {f"{SUITE}_robot": chosen.index(robot.plus_id), f"{SUITE}_noise": chosen.index(noise.plus_id)}
    cfg = make_env_config(
        "envfleet",
        backend="libero",
        task=SUITE,
        episode_length=CHUNK,
        n_action_steps=CHUNK,
        overrides=[
            f"train.simulator_python={python}",
            "train.libero.plus.dimensions=[robot,noise]",
            f"train.libero.plus.tasks=[{robot.plus_id},{noise.plus_id}]",
            "train.libero.plus.trials=1",
            "train.settle_steps=0",
            "train.init_params.camera_heights=64",
            "train.init_params.camera_widths=64",
        ],
    )
    envs = make_env(cfg, n_envs=1)
    try:
        assert {group: list(by_task) for group, by_task in envs.items()} == {g: [t] for g, t in expected.items()}
        policy = Reacher(ReacherConfig(gain=0.0, n_action_steps=CHUNK, device="cpu"))
        identity = PolicyProcessorPipeline(steps=[])
        to_action = PolicyProcessorPipeline(steps=[], to_transition=policy_action_to_transition, to_output=transition_to_policy_action)
        info = eval_policy_all(envs, policy, identity, identity, identity, to_action, n_episodes=1, start_seed=0)
        instructions = {group: by_task[expected[group]].call("task_description")[0] for group, by_task in envs.items()}
    finally:
        close_envs(envs)
    assert set(info["per_group"]) == set(expected)
    assert all(row["n_episodes"] == 1 for row in info["per_group"].values()), info["per_group"]
    assert info["overall"]["n_episodes"] == 2
    assert sorted((t["task_group"], t["task_id"]) for t in info["per_task"]) == sorted(expected.items())
    assert all(len(t["metrics"]["successes"]) == 1 for t in info["per_task"])
    # Each group's env ran its task: the BDDL's instruction (one base task), never the task's file name.
    assert len(set(instructions.values())) == 1 and all(s and "initstate" not in s for s in instructions.values()), instructions
