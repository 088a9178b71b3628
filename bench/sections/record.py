"""The `record` section of `nox -s bench` (bench/run.py record): a LIBERO stage with and without train.record.

Two managers of the same config (2 envs, 128x128, two cameras, chunk 8), one recording LeRobot datasets,
stepped in turns (A, B, A, B, ...) so that a slow spell of the machine falls on both; episodes of 40
sub-steps end and are written while the next run, so the writer thread's encoding is inside the figure.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time

import numpy as np
from common import write
from configs import libero_cfg, libero_installed

_ROUNDS, _EPISODES, _CHUNK, _HORIZON = 3, 2, 8, 40


def _episodes(mgr, rng: np.random.Generator) -> tuple[int, float]:
    """Run ``_EPISODES`` episodes on every env; (env steps, seconds)."""
    steps, t = 0, 0.0
    for _ in range(_EPISODES):
        mgr.reset_envs_to_state_ids(np.arange(mgr.num_envs))
        for _ in range(_HORIZON // _CHUNK):
            actions = rng.uniform(-1, 1, (mgr.num_envs, _CHUNK, 7)).astype(np.float32)
            t0 = time.perf_counter()
            mgr.chunk_step(actions)
            t += time.perf_counter() - t0
            steps += mgr.num_envs * _CHUNK
    return steps, t


def run() -> None:
    if not libero_installed():
        print("record: LIBERO is not installed; skipped")
        return
    from omegaconf import OmegaConf

    from envfleet import ProcessEnvManager
    from envfleet.config import load_config

    base = libero_cfg(2, 128, "last", chunk=_CHUNK)
    where = tempfile.mkdtemp(prefix="envfleet-bench-record-")
    data = OmegaConf.to_container(base, resolve=True)
    data["train"]["max_episode_steps"] = _HORIZON
    plain = load_config(data=data)
    data["train"]["record"] = {"format": "lerobot", "dir": where}
    recording = load_config(data=data)
    totals = {"off": [0, 0.0], "on": [0, 0.0]}
    try:
        with ProcessEnvManager(plain) as off, ProcessEnvManager(recording) as on:
            rng = np.random.default_rng(0)
            _episodes(off, rng), _episodes(on, rng)  # warm-up: scenes built, first encodes done
            for _ in range(_ROUNDS):
                for name, mgr in (("off", off), ("on", on)):
                    steps, seconds = _episodes(mgr, rng)
                    totals[name][0] += steps
                    totals[name][1] += seconds
            done = on.flush_dataset()
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(where) for f in fs)
    finally:
        shutil.rmtree(where, ignore_errors=True)
    rate = {k: v[0] / v[1] for k, v in totals.items()}
    rows = [
        {
            "case": "LIBERO libero_spatial, 2 envs, 128x128, 2 cameras, chunk 8",
            "without recording (env steps/s)": rate["off"],
            "with recording (env steps/s)": rate["on"],
            "cost (%)": (1 - rate["on"] / rate["off"]) * 100,
        }
    ]
    assert done is not None
    notes = [
        f"{_ROUNDS} rounds of {_EPISODES} episodes of {_HORIZON} sub-steps per env, the two managers in turns; target: cost <= 5%",
        f"recorded {done['episodes']} episodes, {done['frames']} frames, {size / 2**20:.1f} MiB on disk (libx264rgb, crf 0: lossless); "
        f"writer queue full {done['queue_full']} times",
    ]
    write("record", rows, notes)
