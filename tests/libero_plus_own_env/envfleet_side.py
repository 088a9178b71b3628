"""envfleet's LiberoEnv on the tasks of a spec; run by the main venv's Python (with another MuJoCo laid over it, or not).

``python envfleet_side.py SPEC OUT``: for each task of the JSON spec (written by
test_against_liberoplus.py), resets one env of its ``libero_plus_*`` suite to the task's first
state id (no settling) and steps one chunk of LIBERO's no-op; writes the observations handed out,
and the MuJoCo state behind them, to ``OUT/<key>.npz``.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

from envfleet.config import load_config
from envfleet.env import EnvContext

DUMMY = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0])


def main() -> None:
    from envfleet_libero.env import LiberoEnv

    spec_path, out = sys.argv[1], sys.argv[2]
    with open(spec_path) as fh:
        spec = json.load(fh)
    steps = int(spec["steps"])
    suites: dict[str, list[dict]] = {}
    for task in spec["tasks"]:
        suites.setdefault(task["suite"], []).append(task)
    for suite, tasks in suites.items():
        train = {
            "simulator_type": "libero",
            "task_suite_name": suite,
            "num_envs": 1,
            "seed": spec["seed"],
            "settle_steps": 0,
            "init_params": {"camera_heights": spec["size"], "camera_widths": spec["size"]},
            "libero": {"plus": {"tasks": [t["plus_id"] for t in tasks], "trials": 1}},
        }
        cfg = load_config(data={"train": train, "actor": {"model": {"num_action_chunks": steps, "action_dim": 7}}})
        env = LiberoEnv(cfg.train, EnvContext(num_envs=1, action_dim=7, num_action_chunks=steps))
        try:
            for task in tasks:
                index = next(t.index for t in env.suite.tasks if t.plus.plus_id == task["plus_id"])
                state_id = int(env.suite.first_id[index])
                first = env.reset_envs_to_state_ids(np.array([state_id]))
                sim = env.sims[0]
                assert sim is not None
                model, data = sim.renv.sim.model, sim.renv.sim
                cam = model.camera_name2id("agentview")
                record = {
                    "state_id": np.array(state_id),
                    "description": np.array(first.task_descriptions[0]),
                    "cam_pos": model.cam_pos[cam].copy(),
                    "cam_quat": model.cam_quat[cam].copy(),
                    "initial_joint": np.asarray(sim.renv.robots[0].controller.initial_joint, dtype=np.float64),
                    "arm": np.asarray(sim.renv.robots[0]._ref_joint_pos_indexes),
                    "a_agent": first.obs["full_image"][0].copy(),
                    "a_wrist": first.obs["wrist_image"][0].copy(),
                    "a_state8": first.obs["state"][0].copy(),
                    "a_state": data.get_state().flatten(),
                }
                step = env.chunk_step(np.tile(DUMMY, (1, steps, 1)))
                record.update(
                    {
                        "b_agent": step.obs["full_image"][0].copy(),
                        "b_wrist": step.obs["wrist_image"][0].copy(),
                        "b_state8": step.obs["state"][0].copy(),
                        "b_state": data.get_state().flatten(),
                    }
                )
                np.savez(os.path.join(out, f"{task['key']}.npz"), **record)
        finally:
            env.close()
    import mujoco

    with open(os.path.join(out, "versions.json"), "w") as fh:
        json.dump({"mujoco": mujoco.__version__, "numpy": np.__version__}, fh)


if __name__ == "__main__":
    main()
