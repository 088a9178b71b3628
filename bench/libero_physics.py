"""Physics alone: one LIBERO env stepped by the fast loop against LIBERO's own ``env.step``.

    python bench/libero_physics.py REPS STEPS

Three ``LiberoSim`` of libero_spatial task 0 in this process, on one shared scene: ``fast``
(``physics="fast"``: the lean sub-steps), ``split`` (the same loop with robosuite's own
controller and observables in every sub-step, the fast loop before the lean sub-steps) and
``libero`` (``physics="libero"``), reset to the same state and given the same random actions;
the fast ones also evaluate the success predicate after each step, which LIBERO's
``env.step`` does itself (its ``done``). No camera is rendered (the observables' clocks run as always).
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
    from envfleet_libero.physics import FastStep

    task = SuiteIndex("libero_spatial").tasks[0]
    cams = ["agentview", "robot0_eye_in_hand"]
    sims = {name: LiberoSim(task, cams, 128, 128, physics="libero" if name == "libero" else "fast") for name in ("fast", "split", "libero")}
    split = sims["split"]
    assert split._fast is not None
    split._fast = FastStep(split.renv, split._fast.keys, lean=False)
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
                if name != "libero":
                    sim.check_success()  # LIBERO's env.step evaluates it already (its done)
            if rep:
                times[name].append((time.perf_counter() - t0) / steps)
    own = sims["libero"].snapshot()["mj_state"]
    same = all(np.array_equal(sims[name].snapshot()["mj_state"], own) for name in ("fast", "split"))
    for sim in sims.values():
        sim.close()
    print(json.dumps({"seconds_per_step": times, "same_state": bool(same)}))


if __name__ == "__main__":
    main()
