"""The default layout: how many of a stage's envs share one shard process.

With ``train.libero.envs_per_process`` left unset (null), a stage's envs spread over every
core the worker may use before two of them share a process, since a process steps its
envs one after another on one core. Envs share processes (dense packing, the memory
saving of one compiled scene per task) where they outnumber the cores, or where the
memory available cannot hold one process per core. The rule is written on the LIBERO
page ("Default layout"); it is computed in the worker, before any shard starts.

>>> default_envs_per_process(num_envs=2, cores=2, mem_available=20 * 10**9, stages=2)
1
>>> default_envs_per_process(num_envs=8, cores=2, mem_available=20 * 10**9, stages=1)
4
>>> default_envs_per_process(num_envs=4, cores=4, mem_available=4 * 10**9, stages=1)
2
"""

from __future__ import annotations

import math
import os
import sys
from typing import Any

# Imports inside functions: omegaconf and the machine's figures load only when a stage's layout is decided,
# not when backends are listed.

__all__ = ["DENSE_ENVS_PER_PROCESS", "PROCESS_BYTES", "default_envs_per_process", "worker_cores", "stage_count", "default_layout"]

#: Envs per process where envs outnumber cores: the dense layout's figure (docs: "Dense envs").
DENSE_ENVS_PER_PROCESS = 4

#: Memory of one LIBERO shard process holding one task's scene: `envfleet doctor --measure libero`
#: reads 1.6-1.8 GB PSS for libero_spatial task 0 (imports, compiled model, GL context); the upper end.
PROCESS_BYTES = 1_800_000_000


def default_envs_per_process(num_envs: int, cores: int, mem_available: int, stages: int) -> int:
    """Envs per process for ``num_envs`` envs of one stage, on ``cores`` cores and ``mem_available`` bytes.

    - by cores: one process per core, up to one per env; where envs outnumber cores, as many
      per process as spreads them over the cores, but at most :data:`DENSE_ENVS_PER_PROCESS`
      (more processes than cores then, as the dense layout always gave);
    - by memory: the worker's ``stages`` stages each run that many processes, at
      :data:`PROCESS_BYTES` each; where ``mem_available`` cannot hold them, fewer processes
      with more envs each (never fewer than one process).
    """
    num_envs, cores, stages = max(int(num_envs), 1), max(int(cores), 1), max(int(stages), 1)
    per_process = min(DENSE_ENVS_PER_PROCESS, math.ceil(num_envs / min(num_envs, cores)))
    processes_by_memory = max(int(mem_available) // (PROCESS_BYTES * stages), 1)
    if math.ceil(num_envs / per_process) > processes_by_memory:
        per_process = math.ceil(num_envs / processes_by_memory)
    return per_process


def worker_cores() -> int:
    """The cores this worker may use: the CPUs Ray assigned it, inside a Ray worker; else the CPU affinity.

    Ray is asked only where it is already imported and connected (core and this backend do
    not depend on it). Ray's figure is bounded by the affinity: Ray may advertise more
    logical CPUs than the process may run on.
    """
    affinity = len(os.sched_getaffinity(0))
    ray = sys.modules.get("ray")
    if ray is not None:
        try:
            if ray.is_initialized():
                cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
                if cpus is not None and cpus >= 1:
                    return max(1, min(int(cpus), affinity))
        except Exception:  # a driver, or a Ray without a runtime context here: the affinity decides
            pass
    return affinity


def stage_count(env_cfg: Any) -> int:
    """``rollout.pipeline_stage_num`` of the config ``env_cfg`` (``train`` or ``val``) belongs to; 1 if it has none."""
    try:
        from omegaconf import OmegaConf

        value = OmegaConf.select(env_cfg, "..rollout.pipeline_stage_num", default=None)
    except Exception:  # a plain mapping, or a section without a parent
        return 1
    return int(value) if isinstance(value, int) and value >= 1 else 1


def default_layout(env_cfg: Any) -> int:
    """:func:`default_envs_per_process` for this config, on this worker's cores and this machine's memory."""
    from envfleet.diagnostics.measure import machine

    num_envs = env_cfg.get("num_envs") if hasattr(env_cfg, "get") else None
    return default_envs_per_process(int(num_envs or 1), worker_cores(), machine().mem_available, stage_count(env_cfg))
