"""What one env costs, and how many this machine holds: ``envfleet doctor --measure``.

:func:`measure_backend` builds one shard process of a backend at its layout (as many
envs as it puts in one process, all on the first state ids, so envs that share a task
share what the backend shares), as a rollout would, and times its build, its reset and its chunk steps with ``render: last`` and
(for a backend that honours ``render``) ``render: all``; it reads the memory of the
shard process (PSS, else RSS). :func:`capacity` turns that into the number of envs the
machine's free memory and cores can hold at the backend's layout:

- by memory: available memory (``MemAvailable``, or the cgroup's limit if lower)
  divided by the memory of one env (a shard's PSS divided by its envs);
- by cores: one shard process per usable core (``os.sched_getaffinity``), each holding
  the backend's envs per process; a shard steps its envs one after another on one
  thread, and on a CPU renderer (llvmpipe) rendering takes the cores too. A backend
  that runs all of a stage's envs in one process is not bounded by cores here;
- the smaller of the two.

>>> cap = capacity(mem_per_env=1_700_000_000, envs_per_process=1, mem_available=23_000_000_000, cores=2)
>>> cap.by_memory, cap.by_cores, cap.envs
(13, 2, 2)
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..plugins import get_backend
from ..shards.manager import ProcessEnvManager
from .check import smallest_config

__all__ = [
    "Measurement",
    "Capacity",
    "Machine",
    "measure_backend",
    "process_memory",
    "process_tree",
    "machine",
    "capacity",
    "envs_per_process",
]

_TIMED_STEPS = 3  # chunk steps timed after one untimed warm-up step


@dataclass
class Measurement:
    """One backend's costs. Times in seconds; ``step`` maps render mode to seconds per chunk step."""

    name: str
    ok: bool
    cause: str = ""
    build_s: float = 0.0
    reset_s: float = 0.0
    step_s: dict[str, float] = field(default_factory=dict)
    chunk: int = 0  # sub-steps per chunk step
    memory_bytes: int = 0  # of the shard process(es), PSS where the kernel reports it
    memory_kind: str = "PSS"
    envs_measured: int = 1
    envs_per_process: int | None = 1  # the layout: envs sharing one shard process (None: all)

    @property
    def memory_per_env(self) -> int:
        """Bytes per env: the shard's memory divided by the envs in it."""
        return self.memory_bytes // max(self.envs_measured, 1)


@dataclass(frozen=True)
class Machine:
    """The memory and cores this process may use."""

    mem_available: int  # bytes: MemAvailable, or what the cgroup's limit leaves if lower
    mem_total: int  # bytes: MemTotal, or the cgroup's limit if lower
    cores: int  # CPUs this process may run on


@dataclass(frozen=True)
class Capacity:
    """How many envs fit, by memory, by cores, and both."""

    by_memory: int
    by_cores: int | None  # None: the layout puts all envs in one process, cores do not bound it
    envs: int


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants that are alive, from /proc."""
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as fh:
                    todo.extend(int(x) for x in fh.read().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return out


def process_memory(pid: int) -> tuple[int, str]:
    """Bytes of memory of process ``pid`` and the measure used: ``"PSS"`` (shared pages split
    among the processes that map them, from ``/proc/<pid>/smaps_rollup``) or ``"RSS"``."""
    for path, key, kind in ((f"/proc/{pid}/smaps_rollup", "Pss:", "PSS"), (f"/proc/{pid}/status", "VmRSS:", "RSS")):
        try:
            with open(path) as fh:
                for line in fh:
                    if line.startswith(key):
                        return int(line.split()[1]) * 1024, kind
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return 0, "RSS"


def _read_int(path: str) -> int | None:
    try:
        with open(path) as fh:
            text = fh.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def machine() -> Machine:
    """This machine's available memory and usable cores (cgroup v2 memory limit honoured)."""
    info: dict[str, int] = {}
    with open("/proc/meminfo") as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            info[key] = int(rest.split()[0]) * 1024
    total, available = info["MemTotal"], info.get("MemAvailable", info.get("MemFree", 0))
    limit = _read_int("/sys/fs/cgroup/memory.max")
    if limit is not None and limit < total:
        used = _read_int("/sys/fs/cgroup/memory.current") or 0
        total, available = limit, min(available, max(limit - used, 0))
    return Machine(available, total, len(os.sched_getaffinity(0)))


def capacity(mem_per_env: int, envs_per_process: int | None, mem_available: int, cores: int) -> Capacity:
    """The envs that fit in ``mem_available`` bytes and ``cores`` cores (see the module's rules).

    >>> capacity(mem_per_env=100, envs_per_process=None, mem_available=1000, cores=2)
    Capacity(by_memory=10, by_cores=None, envs=10)
    """
    by_memory = mem_available // mem_per_env if mem_per_env > 0 else 0
    by_cores = None if envs_per_process is None else max(cores, 0) * envs_per_process
    return Capacity(by_memory, by_cores, by_memory if by_cores is None else min(by_memory, by_cores))


def envs_per_process(spec: Any, env_cfg: Any) -> int | None:
    """The backend's envs per shard process for this env config (``None``: all of a stage's)."""
    value = spec.envs_per_process(env_cfg) if callable(spec.envs_per_process) else spec.envs_per_process
    return None if value is None else int(value)


def _one_run(cfg: Any, result: Measurement, mode: str, first: bool) -> None:
    t0 = time.perf_counter()
    with ProcessEnvManager(cfg) as mgr:  # entering starts the simulator
        build = time.perf_counter() - t0
        t0 = time.perf_counter()
        mgr.reset_envs_to_state_ids(mgr.get_all_state_ids()[: mgr.num_envs])
        reset = time.perf_counter() - t0
        actions = np.zeros((mgr.num_envs, mgr.chunk, mgr.action_dim), np.float32)
        mgr.chunk_step(actions)  # warm-up: first-use costs (shader compiles, caches) are not a step's
        times = []
        for _ in range(_TIMED_STEPS):
            t0 = time.perf_counter()
            mgr.chunk_step(actions)
            times.append(time.perf_counter() - t0)
        memory, kind = 0, "PSS"
        for pid in mgr.shard_pids():
            for member in process_tree(pid) if pid is not None else []:
                used, used_kind = process_memory(member)
                memory += used
                kind = "RSS" if used_kind == "RSS" else kind
        result.step_s[mode] = statistics.median(times)
        result.memory_bytes = max(result.memory_bytes, memory)
        result.memory_kind = kind if first else result.memory_kind
        if first:
            result.build_s, result.reset_s = build, reset
            result.chunk, result.envs_measured = mgr.chunk, mgr.num_envs


def measure_backend(name: str, overrides: Sequence[str] = ()) -> Measurement:
    """Build one shard of backend ``name`` (its smallest config at its envs per process, then ``overrides``) and measure it.

    Never raises for a failing backend: the result says ``ok=False`` and the cause.
    """
    result = Measurement(name, False)
    try:
        spec = get_backend(name)
        modes = ["last", "all"] if "render" in spec.implements else ["default"]
        for k, mode in enumerate(modes):
            extra = [f"train.render={mode}"] if mode != "default" else []
            cfg = smallest_config(name, [*overrides, *extra], num_action_chunks=None)
            per_process = envs_per_process(spec, cfg.train)
            if per_process is not None and per_process > 1 and not any(o.startswith("train.num_envs=") for o in overrides):
                # A full shard: what one env costs depends on how many share its process.
                cfg = smallest_config(name, [f"train.num_envs={per_process}", *overrides, *extra], num_action_chunks=None)
            if k == 0:
                result.envs_per_process = per_process
            _one_run(cfg, result, mode, first=k == 0)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        result.cause = f"{type(exc).__name__}: {first}"
        return result
    result.ok = True
    return result
