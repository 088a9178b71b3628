"""One plain LIBERO loop (no envfleet manager, processes or shared memory): the limit for bench_libero.

    python bench/plain_libero.py HW RENDER CHUNK CHUNKS INDEX NPROCS BARRIER_DIR

Builds libero_spatial task 0's OffScreenRenderEnv (through envfleet_libero's LiberoSim on
LIBERO's own step loop, ``physics="libero"``,
which only adds the switch that skips camera rendering on sub-steps nobody reads),
resets it, waits until all NPROCS loops are ready, then steps CHUNKS chunks of CHUNK
random actions, rendering every sub-step (RENDER=all) or the last of each chunk
(RENDER=last). Prints JSON with the wall-clock start and end of the stepping.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np


def main() -> None:
    hw, render, chunk, chunks, index, nprocs, barrier = sys.argv[1:8]
    hw_i, chunk_i, chunks_i, nprocs_i = int(hw), int(chunk), int(chunks), int(nprocs)
    os.environ.setdefault("MUJOCO_GL", "egl")
    from envfleet_libero.env import LiberoSim, SuiteIndex

    suite = SuiteIndex("libero_spatial")
    task = suite.tasks[0]
    sim = LiberoSim(task, ["agentview", "robot0_eye_in_hand"], hw_i, hw_i, physics="libero")
    sim.reset(task.init_states[int(index) % len(task.init_states)], seed=42, settle_steps=10, render_all=render == "all")
    rng = np.random.default_rng(int(index))
    actions = (rng.uniform(-1, 1, (chunks_i + 1, chunk_i, 7)) * 0.3).astype(np.float64)
    for k in range(chunk_i):  # warm-up chunk
        sim.step(actions[0, k], render=render == "all" or k == chunk_i - 1)
    open(os.path.join(barrier, f"ready_{index}"), "w").close()
    while len([f for f in os.listdir(barrier) if f.startswith("ready_")]) < nprocs_i:
        time.sleep(0.01)
    t_start = time.time()
    for c in range(1, chunks_i + 1):
        for k in range(chunk_i):
            sim.step(actions[c, k], render=render == "all" or k == chunk_i - 1)
    t_end = time.time()
    sim.close()
    print(json.dumps({"t_start": t_start, "t_end": t_end}))


if __name__ == "__main__":
    main()
