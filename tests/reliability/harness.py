"""Fault-injection harness: a rollout through EnvWorkerGroup with faults injected, and its report.

Shared by the CI-sized tests (``nox -s tests``) and the long runs (``nox -s chaos``,
``ENVFLEET_CHAOS=1``): the same code with bigger numbers. Each run reports faults
injected and recovered, chunks lost, envs reported truncated, the longest stall and
whether any process or shared-memory segment leaked; reports are appended to
``$ENVFLEET_RELIABILITY_OUT/results.json`` when that is set.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from envfleet.dataproto import DataProto

from ..conftest import pid_alive, shm_segments, stop_process

CHAOS = os.environ.get("ENVFLEET_CHAOS") == "1"


def scale(ci: int, chaos: int) -> int:
    """A size for CI, or the bigger one under ``nox -s chaos``."""
    return chaos if CHAOS else ci


@dataclass
class FaultReport:
    """What one fault-injection run did and what it cost."""

    name: str
    faults_injected: int = 0
    faults_recovered: int = 0
    chunks_requested: int = 0
    chunks_returned: int = 0
    chunks_lost: int = 0  # stage steps in which some env got a restart instead of its chunk
    envs_truncated: int = 0  # env-chunks reported truncated because their simulator was rebuilt
    env_steps_requested: int = 0
    env_steps_returned: int = 0
    longest_stall_s: float = 0.0
    median_step_s: float = 0.0
    leaked_processes: int = 0
    leaked_segments: int = 0
    wall_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    def save(self) -> None:
        """Append to $ENVFLEET_RELIABILITY_OUT/results.json (when set) and print."""
        print(f"\n[reliability] {json.dumps(asdict(self))}")
        out_dir = os.environ.get("ENVFLEET_RELIABILITY_OUT")
        if not out_dir:
            return
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, "results.json")
        data = json.load(open(path)) if os.path.exists(path) else []
        data = [d for d in data if d["name"] != self.name] + [asdict(self)]
        with open(path, "w") as fh:
            json.dump(data, fh, indent=2)


def complete_step(out: DataProto, rows: int, chunk: int) -> bool:
    """Whether a step's result holds every env's row and every sub-step, with finite rewards and an image per row.

    A chunk counts as returned only then: a result that lost a worker's or a shard's rows,
    or came back without images, is requested but not returned.
    """
    batch = out.batch
    if batch is None or len(out) != rows:
        return False
    return (
        tuple(batch["rews"].shape) == (rows, chunk)
        and bool(batch["rews"].isfinite().all())
        and tuple(batch["terminations"].shape) == tuple(batch["truncations"].shape) == (rows, chunk)
        and batch["full_image"].shape[0] == rows
    )


def all_shard_pids(group: Any) -> list[int]:
    """Every shard process of every worker of the group."""
    pids = []
    for info in group.node_info():
        for stages in info["shard_pids"].values():
            for stage in stages:
                pids += [p for p in stage if p]
    return pids


def rollout_with_faults(
    group: Any,
    report: FaultReport,
    chunks: int,
    inject: Callable[[int], int] | None = None,
    seed: int = 0,
) -> None:
    """Step every stage ``chunks`` times; ``inject(i)`` may inject faults before step ``i`` (returns how many).

    Resets every env when all are finished, like EnvLoop; counts what came back.
    """
    rng = np.random.default_rng(seed)
    W, S, N = group.num_workers, group.stage_num, group.num_envs
    chunk = int(group.cfg.actor.model.num_action_chunks)
    ids = group.get_all_state_ids()
    cursor = 0

    def reset() -> None:
        nonlocal cursor
        take = np.resize(np.roll(ids, -cursor), W * S * N)
        cursor = (cursor + W * S * N) % len(ids)
        # .batch: the TensorDict is built on first read, and the process's first one imports
        # tensordict (about 2 s here; core imports it only when one is built). Read here, before
        # the clock starts, so that wall_s times the rollout and not a one-time import.
        _ = group.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": take})).get().batch

    reset()
    done = np.zeros((S, W * N), dtype=bool)
    stalls = []
    t_start = time.perf_counter()
    step_index = 0
    for _ in range(chunks):
        if done.all():
            reset()
            done[:] = False
        for s in range(S):
            if inject is not None:
                report.faults_injected += inject(step_index)
            step_index += 1
            actions = (rng.uniform(-1, 1, (W * N, chunk, 7)) * 0.5).astype(np.float32)
            t0 = time.perf_counter()
            out = group.env_interact_step(DataProto.from_dict(non_tensors={"actions": actions}, meta_info={"stage_id": s})).get()
            stalls.append(time.perf_counter() - t0)
            report.chunks_requested += 1
            report.env_steps_requested += W * N * chunk
            report.chunks_returned += int(complete_step(out, W * N, chunk))
            report.env_steps_returned += int(out.batch["rews"].numel())
            restarted = out.batch["sim_restarted"].numpy().astype(bool)
            if restarted.any():
                report.chunks_lost += 1
                report.envs_truncated += int(restarted.sum())
            done[s] = (out.batch["terminations"][:, -1] | out.batch["truncations"][:, -1]).numpy()
    report.wall_s = time.perf_counter() - t_start
    report.longest_stall_s = float(max(stalls)) if stalls else 0.0
    report.median_step_s = float(np.median(stalls)) if stalls else 0.0


def kill_random_shard(group: Any, rng: random.Random, sig: int = signal.SIGKILL, delay_s: float = 0.0) -> int:
    """Signal one random shard process, now or after ``delay_s`` (during the next call). Returns 1."""
    victim = rng.choice(all_shard_pids(group))
    if delay_s > 0:
        threading.Timer(delay_s, _signal, (victim, sig)).start()
    else:
        _signal(victim, sig)
    return 1


def _signal(pid: int, sig: int) -> None:
    try:
        if sig == signal.SIGSTOP:
            stop_process(pid)  # the shard hangs from here on, not from whenever it takes the signal
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass


def segments_of(owners: set[int]) -> set[str]:
    """envfleet segments created by the processes ``owners`` (the owner pid is part of the name)."""
    return {name for name in shm_segments() if int(name.split("_")[1]) in owners}


def check_leaks(
    report: FaultReport, pids: list[int], segments_before: set[str], wait_s: float = 15.0, owners: set[int] | None = None
) -> None:
    """Wait for ``pids`` to go and their envfleet shm segments to be unlinked.

    Segments are attributed by owner pid (``owners``, default: ``pids``), so that other
    programs using envfleet on the machine at the same time do not count.
    """
    owners = set(pids) if owners is None else owners
    deadline = time.time() + wait_s
    while time.time() < deadline:
        alive = [p for p in pids if pid_alive(p)]
        extra = segments_of(owners) - segments_before
        if not alive and not extra:
            break
        time.sleep(0.2)
    report.leaked_processes = len([p for p in pids if pid_alive(p)])
    report.leaked_segments = len(segments_of(owners) - segments_before)
