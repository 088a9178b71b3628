"""Throughput, reset time and memory of the LIBERO backend through ``ProcessEnvManager``.

    MUJOCO_GL=egl python bench/libero_manager.py [--num-envs 1 2] [--render last all]
        [--chunk 8] [--chunks 5] [--size 128] [--suite libero_spatial]

For each (num_envs, render) pair: start a manager (one shard process per env), reset
to trials of task 0 (the first reset builds the MuJoCo env; a second reset to other
trials of the same task reuses it), one warm-up chunk, then ``--chunks`` timed chunks
of random actions. Episodes are long enough (the suite's horizon) that none ends while
timing. Prints one JSON object: env sub-steps per second over all envs, reset times,
and the resident memory (VmRSS) of each shard process.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import numpy as np

from envfleet import ProcessEnvManager
from envfleet.config import load_config


def _rss_mb(pid: int | None) -> float | None:
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except FileNotFoundError:
        return None
    return None


def measure(num_envs: int, render: str, chunk: int, chunks: int, size: int, suite: str) -> dict[str, Any]:
    """One configuration: reset times, sub-steps per second, shard RSS."""
    cfg = load_config(
        data={
            "train": {
                "simulator_type": "libero",
                "task_suite_name": suite,
                "num_envs": num_envs,
                "render": render,
                "init_params": {"camera_heights": size, "camera_widths": size},
            },
            "actor": {"model": {"num_action_chunks": chunk, "action_dim": 7}},
        }
    )
    rng = np.random.default_rng(0)
    with ProcessEnvManager(cfg) as mgr:
        t0 = time.perf_counter()
        mgr.reset_envs_to_state_ids(np.arange(num_envs))
        build_reset_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        mgr.reset_envs_to_state_ids(np.arange(num_envs) + 10)
        reuse_reset_s = time.perf_counter() - t0

        def actions() -> np.ndarray:
            arm = rng.uniform(-1, 1, size=(num_envs, chunk, 6))
            grip = np.sign(rng.uniform(-1, 1, size=(num_envs, chunk, 1)))
            return np.concatenate([arm, grip], axis=-1).astype(np.float32)

        mgr.chunk_step(actions())  # warm-up
        t0 = time.perf_counter()
        for _ in range(chunks):
            out = mgr.chunk_step(actions())
            assert not (out.terminations.any() or out.truncations.any()), "an episode ended while timing"
        wall = time.perf_counter() - t0
        rss = [_rss_mb(pid) for pid in mgr.shard_pids()]
    steps = num_envs * chunk * chunks
    return {
        "num_envs": num_envs,
        "render": render,
        "chunk": chunk,
        "size": size,
        "env_steps_per_s": round(steps / wall, 2),
        "chunk_step_s": round(wall / chunks, 3),
        "first_reset_s (build)": round(build_reset_s, 2),
        "reset_s (reused env)": round(reuse_reset_s, 2),
        "shard_rss_mb": rss,
    }


def main() -> None:
    """Run every (num_envs, render) pair and print the results as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--render", nargs="+", default=["last", "all"])
    parser.add_argument("--chunk", type=int, default=8)
    parser.add_argument("--chunks", type=int, default=5)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--suite", default="libero_spatial")
    args = parser.parse_args()
    results = []
    for n in args.num_envs:
        for render in args.render:
            results.append(measure(n, render, args.chunk, args.chunks, args.size, args.suite))
            print(json.dumps(results[-1]), flush=True)
    print(json.dumps({"cpus": os.cpu_count(), "load_avg": os.getloadavg(), "results": results}, indent=2))


if __name__ == "__main__":
    main()
