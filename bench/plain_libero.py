"""One plain LIBERO loop (no envfleet manager, processes or shared memory): the limit for the libero section.

    python bench/plain_libero.py HW RENDER CHUNK INDEX

Builds libero_spatial task 0's OffScreenRenderEnv (through envfleet_libero's LiberoSim on
LIBERO's own step loop, ``physics="libero"``, which only adds the switch that skips camera
rendering on sub-steps nobody reads), resets it, steps one warm-up chunk and prints
``ready``. Then, for every ``chunk`` line on stdin, it steps one chunk of CHUNK random
actions, rendering every sub-step (RENDER=all) or the last of the chunk (RENDER=last),
and prints JSON with the wall-clock start and end of that chunk; ``quit`` ends it. The
parent sends ``chunk`` to all its loops at once, so they step side by side, and can
alternate them with other variants.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np


def main() -> None:
    hw, render, chunk, index = sys.argv[1:5]
    hw_i, chunk_i = int(hw), int(chunk)
    os.environ.setdefault("MUJOCO_GL", "egl")
    from envfleet_libero.env import LiberoSim, SuiteIndex

    suite = SuiteIndex("libero_spatial")
    task = suite.tasks[0]
    sim = LiberoSim(task, ["agentview", "robot0_eye_in_hand"], hw_i, hw_i, physics="libero")
    sim.reset(task.init_states[int(index) % len(task.init_states)], seed=42, settle_steps=10, render_all=render == "all")
    rng = np.random.default_rng(int(index))

    def one_chunk() -> None:
        actions = (rng.uniform(-1, 1, (chunk_i, 7)) * 0.3).astype(np.float64)
        for k in range(chunk_i):
            sim.step(actions[k], render=render == "all" or k == chunk_i - 1)

    one_chunk()  # warm-up
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() != "chunk":
            break
        t_start = time.time()
        one_chunk()
        print(json.dumps({"t_start": t_start, "t_end": time.time()}), flush=True)
    sim.close()


if __name__ == "__main__":
    main()
