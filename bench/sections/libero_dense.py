"""Dense LIBERO: memory, first reset and speed of several envs per process sharing scenes.

The `libero_dense` section of ``nox -s bench``; its parts also run alone:
``python bench/sections/libero_dense.py memory|speed|scale``.
Every figure is a stage run through ``ProcessEnvManager``: PSS is summed over the
stage's shard processes (``/proc/PID/smaps_rollup``), after the first reset and after
stepping; "first reset" is from creating the manager (processes start) to the end of
the first ``reset_envs_to_state_ids``.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/, when run alone
from common import write

CHUNK = 8


def _cfg(num_envs: int, per_process: int, hw: int = 128, suite: str = "libero_spatial") -> Any:
    from envfleet.config import load_config

    return load_config(
        overrides=[
            "train.simulator_type=libero",
            f"train.task_suite_name={suite}",
            f"train.num_envs={num_envs}",
            f"train.libero.envs_per_process={per_process}",
            "train.render=last",
            f"train.init_params.camera_heights={hw}",
            f"train.init_params.camera_widths={hw}",
            f"actor.model.num_action_chunks={CHUNK}",
            "train.max_episode_steps=10000",
        ]
    )


def _pss_mb(pids: list[int | None]) -> tuple[float, float]:
    """Summed PSS and RSS (MB) of the processes."""
    pss = rss = 0.0
    for pid in pids:
        if pid is None:
            continue
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                if key == "Pss":
                    pss += int(rest.split()[0]) / 1024
                elif key == "Rss":
                    rss += int(rest.split()[0]) / 1024
    return pss, rss


class Stage:
    """One stage through ``ProcessEnvManager``: started and reset on entry, stepped on demand."""

    def __init__(self, state_ids: list[int], per_process: int, hw: int = 128) -> None:
        from envfleet import ProcessEnvManager

        self.n = len(state_ids)
        self.rng = np.random.default_rng(0)
        t0 = time.perf_counter()
        self.mgr = ProcessEnvManager(_cfg(self.n, per_process, hw))
        self.mgr.start_simulator()
        self.mgr.reset_envs_to_state_ids(np.asarray(state_ids))
        self.first_reset = time.perf_counter() - t0
        self.pss_reset, _ = _pss_mb(self.mgr.shard_pids())
        self.chunk()  # warm-up

    def chunk(self) -> float:
        """One chunk of random actions; its seconds."""
        actions = (self.rng.uniform(-1, 1, (self.n, CHUNK, 7)) * 0.3).astype(np.float32)
        t0 = time.perf_counter()
        self.mgr.chunk_step(actions)
        return time.perf_counter() - t0

    def row(self, chunk_seconds: list[float]) -> dict[str, Any]:
        pss, rss = _pss_mb(self.mgr.shard_pids())
        return {
            "envs": self.n,
            "processes": self.mgr.num_shards,
            "first reset (s)": self.first_reset,
            "PSS after reset (MB)": self.pss_reset,
            "PSS stepping (MB)": pss,
            "RSS stepping (MB)": rss,
            "sub-steps/s": self.n * CHUNK / float(np.median(chunk_seconds)),
        }

    def close(self) -> None:
        self.mgr.close()


def run_stage(state_ids: list[int], per_process: int, chunks: int) -> dict[str, Any]:
    """Start, first reset, ``chunks`` timed chunks; memory and times."""
    t0 = time.perf_counter()
    stage = Stage(state_ids, per_process)
    try:
        row = {"envs/process": per_process, **stage.row([stage.chunk() for _ in range(chunks)])}
    finally:
        stage.close()
    row["wall (s)"] = time.perf_counter() - t0
    return row


def first_reset_ratio(rounds: int = 2) -> tuple[float, float]:
    """Best first reset of 1 env alone and of 8 envs at 4 per process, alternated ``rounds`` times."""
    alone, dense = [], []
    for _ in range(rounds):
        for ids, per, into in (([0], 1, alone), (list(range(8)), 4, dense)):
            stage = Stage(ids, per)
            into.append(stage.first_reset)
            stage.close()
    return min(alone), min(dense)


def speed_ratio(rounds: int = 6) -> tuple[float, float]:
    """Sub-steps/s of 8 envs at 4 per process and at 1 per process, both up, chunks alternated."""
    dense, spread = Stage(list(range(8)), 4), Stage(list(range(8)), 1)
    try:
        times: dict[int, list[float]] = {4: [], 1: []}
        for _ in range(rounds):
            times[4].append(dense.chunk())
            times[1].append(spread.chunk())
    finally:
        dense.close()
        spread.close()
    return 8 * CHUNK / float(np.median(times[4])), 8 * CHUNK / float(np.median(times[1]))


def _spread(n: int, tasks: int, trials: int = 50) -> list[int]:
    """``n`` state ids over the first ``tasks`` tasks, neighbours on one task, trials differing."""
    return [50 * (i * tasks // n) + (i % trials) for i in range(n)]


def memory_rows() -> list[dict[str, Any]]:
    """8 envs of libero_spatial: one per process, then 4 per process on 1 task, 1 state and 4 tasks."""
    rows = []
    cases = [
        ("task 0, 8 init states, 1 env/process", list(range(8)), 1),
        ("task 0, 8 init states", list(range(8)), 4),
        ("task 0, one state id", [0] * 8, 4),
        ("4 tasks, 2 envs each", _spread(8, 4), 4),
        ("1 env alone", [0], 1),
    ]
    for what, ids, per in cases:
        row = {"case": what, **run_stage(ids, per, chunks=3)}
        rows.append(row)
        print(row, flush=True)
    return rows


def scale_row(n: int = 64, per_process: int = 16, chunks: int = 3) -> dict[str, Any]:
    """``n`` envs over all 10 libero_spatial tasks in one stage."""
    row = {"case": f"{n} envs, all 10 tasks", **run_stage(_spread(n, 10), per_process, chunks=chunks)}
    print(row, flush=True)
    return row


def run() -> None:
    """The section: memory (8 envs), first reset and speed against one env per process, 64 envs."""
    rows = memory_rows()
    rows.append(scale_row())
    by = {r["case"]: r for r in rows}
    spread, dense = by["task 0, 8 init states, 1 env/process"], by["task 0, 8 init states"]
    alone_s, dense_s = first_reset_ratio()
    dense_rate, spread_rate = speed_ratio()
    notes = [
        f"8 envs, 4 per process, task 0: {dense['PSS stepping (MB)'] / 1024:.2f} GiB PSS (target <= 4 GB; one env per process: "
        f"{spread['PSS stepping (MB)'] / 1024:.2f} GiB).",
        f"First reset, best of 2 alternated runs: 8 envs at 4 per process {dense_s:.1f} s, 1 env alone {alone_s:.1f} s: "
        f"{dense_s / alone_s:.2f}x (target <= 2.5x).",
        f"Sub-steps/s of 8 envs, both layouts up and their chunks alternated (median of 6; chunk 8, two 128x128 cameras, "
        f"render last, the machine's {os.cpu_count()} cores busy in both): 4 per process {dense_rate:.1f}, 1 per process "
        f"{spread_rate:.1f}: {dense_rate / spread_rate:.2f}x (target >= 0.9x).",
        "The 64-env row runs 16 envs per process (4 processes); its state ids cover the 10 tasks, neighbouring envs on one task.",
    ]
    write("libero_dense", rows, notes)


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "all"
    if what == "memory":
        memory_rows()
    elif what == "scale":
        scale_row()
    elif what == "speed":
        print("first reset (1 alone, 8 dense):", first_reset_ratio())
        print("sub-steps/s (dense, one per process):", speed_ratio())
    else:
        run()
