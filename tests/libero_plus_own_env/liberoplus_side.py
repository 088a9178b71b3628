"""LIBERO-plus's own env, as its package ships it, on the tasks of a spec; run in LIBERO-plus's venv.

``python liberoplus_side.py SPEC OUT``: for each task of the JSON spec (written by
test_against_liberoplus.py), builds LIBERO-plus's ``OffScreenRenderEnv`` from the BDDL path its
benchmark gives the task, seeds it, resets it, loads the initial state and steps LIBERO's no-op,
as LIBERO's evaluations do; writes what it saw to ``OUT/<key>.npz`` and ``OUT/<key>.json``. Then
LIBERO-plus's own noise functions on one clean frame (doubled to 256x256), each after ``np.random.seed``, to ``OUT/noise.npz``.

Imports LIBERO-plus and NumPy only: nothing of envfleet, which needs the main venv.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

# Imports inside functions: LIBERO-plus writes its config on import, where LIBERO_CONFIG_PATH (set in main) says.

DUMMY = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0]  # LIBERO's no-op: no motion, gripper open


def observe(env, obs, prefix):  # type: ignore[no-untyped-def]
    """What envfleet hands out, raw: both cameras, the state's observables and the whole MuJoCo state."""
    return {
        f"{prefix}_agent": np.asarray(obs["agentview_image"]),
        f"{prefix}_wrist": np.asarray(obs["robot0_eye_in_hand_image"]),
        f"{prefix}_eef": np.concatenate([obs["robot0_eef_pos"], obs["robot0_eef_quat"], obs["robot0_gripper_qpos"]]),
        f"{prefix}_state": env.get_sim_state(),
    }


def run_task(spec, task, out):  # type: ignore[no-untyped-def]
    from liberoplus.liberoplus.envs.env_wrapper import OffScreenRenderEnv

    t0 = time.perf_counter()
    env = OffScreenRenderEnv(bddl_file_name=task["bddl"], camera_heights=spec["size"], camera_widths=spec["size"])
    try:
        env.seed(spec["seed"])
        env.reset()
        renv = env.env
        model = renv.sim.model
        cam = model.camera_name2id("agentview")
        record = {
            "cam_pos": model.cam_pos[cam].copy(),
            "cam_quat": model.cam_quat[cam].copy(),
            "init_qpos": np.asarray(renv.robots[0].init_qpos, dtype=np.float64),
            "arm": np.asarray(renv.robots[0]._ref_joint_pos_indexes),
        }
        obs = env.set_init_state(np.load(task["init"]))
        record.update(observe(env, obs, "a"))
        record["initial_joint"] = np.asarray(renv.robots[0].controller.initial_joint, dtype=np.float64)
        for _ in range(spec["steps"]):
            obs, _reward, _done, _info = env.step(DUMMY)
        record.update(observe(env, obs, "b"))
        if task.get("init_offset"):
            # A robot task: the same scene with envfleet's initial state (the arm moved by the start's offset).
            # set_init_state's observation depends on the state alone (it sets time, qpos and qvel, then renders).
            record.update(observe(env, env.set_init_state(np.load(task["init_offset"])), "o"))
        np.savez(os.path.join(out, f"{task['key']}.npz"), **record)
        with open(os.path.join(out, f"{task['key']}.json"), "w") as fh:
            json.dump({"language": env.language_instruction, "seconds": time.perf_counter() - t0}, fh)
        return record["a_agent"]
    finally:
        env.close()


def run_noise(spec, image, out):  # type: ignore[no-untyped-def]
    from liberoplus.liberoplus.envs import env_wrapper
    from PIL import Image

    # LIBERO-plus's fog adds a 256x256 fractal: the frame doubled to that size.
    image = np.ascontiguousarray(np.kron(image, np.ones((256 // image.shape[0], 256 // image.shape[1], 1), dtype=np.uint8)))
    functions = {
        "motion_blur": env_wrapper.motion_blur,
        "gaussian_blur": env_wrapper.gaussian_blur,
        "zoom_blur": env_wrapper.zoom_blur,
        "fog": env_wrapper.fog,
    }
    result = {"image": image}
    for kind, severity in spec["noise_functions"]:
        np.random.seed(spec["noise_seed"])
        # As LIBERO-plus's env applies them: on a PIL image, cast to uint8.
        result[f"{kind}_{severity}"] = np.asarray(functions[kind](Image.fromarray(image), severity=severity)).astype(np.uint8)
    np.savez(os.path.join(out, "noise.npz"), **result)


def main() -> None:
    spec_path, out = sys.argv[1], sys.argv[2]
    with open(spec_path) as fh:
        spec = json.load(fh)
    # LIBERO-plus writes its config (paths of its data) on import, to ~/.liberoplus unless told.
    os.environ["LIBERO_CONFIG_PATH"] = spec["config_dir"]
    images = {task["key"]: run_task(spec, task, out) for task in spec["tasks"]}
    run_noise(spec, images[spec["noise_image"]], out)
    import mujoco
    import robosuite

    with open(os.path.join(out, "versions.json"), "w") as fh:
        json.dump({"mujoco": mujoco.__version__, "numpy": np.__version__, "robosuite": robosuite.__version__}, fh)


if __name__ == "__main__":
    main()
