"""Physics alone: one LIBERO env stepped by the fast loop against LIBERO's own ``env.step``.

    python bench/libero_physics.py REPS STEPS

Two ``LiberoSim`` of libero_spatial task 0 in this process, on one shared scene, one with
``physics="fast"`` and one with ``physics="libero"``, reset to the same state and given
the same random actions; the fast one also evaluates the success predicate after each
step, which LIBERO's ``env.step`` does itself (its ``done``). No camera is rendered (the observables' clocks run as always).
The two are stepped in alternating blocks of STEPS env steps, REPS blocks each, so that
the machine's load hits both alike. Prints JSON: per variant the seconds per env step of
each block.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np


def main() -> None:
    reps, steps = int(sys.argv[1]), int(sys.argv[2])
    os.environ.setdefault("MUJOCO_GL", "egl")
    from envfleet_libero.env import LiberoSim, SuiteIndex

    task = SuiteIndex("libero_spatial").tasks[0]
    sims = {name: LiberoSim(task, ["agentview", "robot0_eye_in_hand"], 128, 128, physics=name) for name in ("fast", "libero")}
    for sim in sims.values():
        sim.reset(task.init_states[0], seed=42, settle_steps=10, render_all=False, render_final=False)
    rng = np.random.default_rng(0)
    times: dict[str, list[float]] = {name: [] for name in sims}
    for rep in range(reps + 1):  # block 0 warms up
        actions = (rng.uniform(-1, 1, (steps, 7)) * 0.3).astype(np.float64)
        for name, sim in sims.items():
            t0 = time.perf_counter()
            for action in actions:
                sim.step(action, render=False)
                if name == "fast":
                    sim.check_success()  # LIBERO's env.step evaluates it already (its done)
            if rep:
                times[name].append((time.perf_counter() - t0) / steps)
    same = np.array_equal(sims["fast"].snapshot()["mj_state"], sims["libero"].snapshot()["mj_state"])
    for sim in sims.values():
        sim.close()
    print(json.dumps({"seconds_per_step": times, "same_state": bool(same)}))


if __name__ == "__main__":
    main()
