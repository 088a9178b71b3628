"""The `record` section of `nox -s bench` (bench/run.py record): a LIBERO stage without recording, recording a
frame per chunk, and recording a frame per sub-step; then LIBERO's own loop rendering every sub-step.

Three managers of the same config (libero_spatial, 2 envs, 128x128, two cameras, chunk 8, render: last), one
not recording, one with ``train.record.frames: chunk``, one with ``frames: step``, stepped in turns (A, B, C,
A, B, C, ...) so that a slow spell of the machine falls on all three; episodes of 40 sub-steps end and are
written while the next run, so the writer thread's encoding and statistics are inside the figures. Per step,
the recorded envs render every sub-step: the reference for that is LIBERO's own step loop rendering every
sub-step (bench/plain_libero.py, RENDER=all: LIBERO's own step loop), two plain processes side by side (the
fair limit for 2 envs on this machine), taken in the same turns as a fourth variant.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
from common import write
from configs import libero_cfg, libero_installed

_ROUNDS, _EPISODES, _CHUNK, _HORIZON, _HW = 3, 2, 8, 40, 128
_VARIANTS = ("off", "chunk", "step")


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


def _start_plain(envs: int) -> list[subprocess.Popen[str]]:
    """``envs`` plain LIBERO loops rendering every sub-step, built and warmed up."""
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "plain_libero.py")
    procs = [
        subprocess.Popen(
            [sys.executable, script, str(_HW), "all", str(_CHUNK), str(i)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for i in range(envs)
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready", "a plain LIBERO loop did not start"
    return procs


def _plain_episodes(procs: list[subprocess.Popen[str]]) -> tuple[int, float]:
    """The plain loops step as many chunks as one call of :func:`_episodes` does; (env steps, seconds)."""
    seconds, chunks = 0.0, _EPISODES * (_HORIZON // _CHUNK)
    for _ in range(chunks):
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("chunk\n")
            p.stdin.flush()
        marks = [json.loads(p.stdout.readline()) for p in procs if p.stdout is not None]
        seconds += max(m["t_end"] for m in marks) - min(m["t_start"] for m in marks)
    return len(procs) * chunks * _CHUNK, seconds


def _stop_plain(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        if p.stdin is not None and not p.stdin.closed:
            p.stdin.write("quit\n")
            p.stdin.close()
    for p in procs:
        p.wait(timeout=120)


def run() -> None:
    if not libero_installed():
        print("record: LIBERO is not installed; skipped")
        return
    from omegaconf import OmegaConf

    from envfleet import ProcessEnvManager
    from envfleet.config import load_config

    base = libero_cfg(2, _HW, "last", chunk=_CHUNK)
    where = tempfile.mkdtemp(prefix="envfleet-bench-record-")
    data = OmegaConf.to_container(base, resolve=True)
    data["train"]["max_episode_steps"] = _HORIZON
    cfgs = {"off": load_config(data=data)}
    for frames in ("chunk", "step"):
        data["train"]["record"] = {"format": "lerobot", "dir": os.path.join(where, frames), "frames": frames}
        cfgs[frames] = load_config(data=data)
    totals = {k: [0, 0.0] for k in (*_VARIANTS, "plain")}
    done, sizes = {}, {}
    plain_procs: list[subprocess.Popen[str]] = []
    try:
        with ProcessEnvManager(cfgs["off"]) as off, ProcessEnvManager(cfgs["chunk"]) as chunk, ProcessEnvManager(cfgs["step"]) as step:
            mgrs = {"off": off, "chunk": chunk, "step": step}
            rng = np.random.default_rng(0)
            for mgr in mgrs.values():
                _episodes(mgr, rng)  # warm-up: scenes built, first encodes done
            plain_procs = _start_plain(2)
            for _ in range(_ROUNDS):
                for name, mgr in mgrs.items():
                    steps, seconds = _episodes(mgr, rng)
                    totals[name][0] += steps
                    totals[name][1] += seconds
                steps, seconds = _plain_episodes(plain_procs)
                totals["plain"][0] += steps
                totals["plain"][1] += seconds
            for frames in ("chunk", "step"):
                done[frames] = mgrs[frames].flush_dataset()
                root = os.path.join(where, frames)
                sizes[frames] = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)
    finally:
        _stop_plain(plain_procs)
        shutil.rmtree(where, ignore_errors=True)
    rate = {k: v[0] / v[1] for k, v in totals.items()}
    plain = rate["plain"]
    case = f"LIBERO libero_spatial, 2 envs, {_HW}x{_HW}, 2 cameras, chunk {_CHUNK}"
    rows = [
        {
            "case": case,
            "recording": {"off": "off", "chunk": "frames: chunk", "step": "frames: step"}[k],
            "env steps/s": rate[k],
            "cost vs off (%)": (1 - rate[k] / rate["off"]) * 100,
            "frames": 0 if k == "off" else done[k]["frames"],
            "MiB on disk": 0.0 if k == "off" else sizes[k] / 2**20,
        }
        for k in _VARIANTS
    ]
    rows.append(
        {
            "case": case,
            "recording": "LIBERO's own loop, every sub-step rendered (2 plain processes)",
            "env steps/s": plain,
            "cost vs off (%)": (1 - plain / rate["off"]) * 100,
            "frames": 0,
            "MiB on disk": 0.0,
        }
    )
    notes = [
        f"{_ROUNDS} rounds of {_EPISODES} episodes of {_HORIZON} sub-steps per env, the three managers and the plain loops "
        "in turns, render: last",
        f"frames: step reaches {rate['step'] / plain * 100:.0f}% of LIBERO's own loop rendering every sub-step "
        "(the recorded envs render every sub-step; the others keep render: last)",
        f"writer queue full: chunk {done['chunk']['queue_full']} times, step {done['step']['queue_full']} times "
        "(libx264rgb, crf 0: lossless)",
    ]
    write("record", rows, notes)
