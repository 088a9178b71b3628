"""The default layout (``train.libero.envs_per_process`` unset): cores first, then dense packing.

The rule's arithmetic is checked on its own; one real check runs in a Ray task given 2
CPUs, as an ``EnvWorker`` is, where the manager of 2 envs with the defaults splits them
into 2 shard processes, and in a task given 1 CPU, where they share one. Nothing is
started: the manager's tests show it starts one process per shard.
"""

from __future__ import annotations

from typing import Any

import pytest

from envfleet import ProcessEnvManager
from envfleet_libero.layout import PROCESS_BYTES, default_envs_per_process, stage_count

from .test_libero_dense import _cfg

RAY_CPUS = 2
GB = 10**9


@pytest.mark.parametrize(
    "envs,cores,memory,stages,expected",
    [
        (1, 2, 20 * GB, 1, 1),
        (2, 2, 20 * GB, 2, 1),  # the envs fit on the cores: one each
        (2, 1, 20 * GB, 2, 2),  # one core: they share
        (3, 2, 20 * GB, 1, 2),  # spread over both cores: 2 + 1
        (8, 2, 20 * GB, 1, 4),
        (16, 2, 20 * GB, 2, 4),  # envs outnumber the cores: dense, 4 per process, 4 processes
        (4, 4, 4 * GB, 1, 2),  # memory holds 2 processes, not 4
        (4, 4, 1 * GB, 1, 4),  # memory short of one process: still one, with every env
        (2, 2, 2 * PROCESS_BYTES, 2, 2),  # two stages halve what each may take
        (64, 2, 20 * GB, 1, 6),  # 16 processes of 4 do not fit: 11 of 6
    ],
    ids=["one", "fit", "one-core", "uneven", "dense", "many", "memory", "no-memory", "stages", "memory-dense"],
)
def test_rule(envs: int, cores: int, memory: int, stages: int, expected: int) -> None:
    assert default_envs_per_process(envs, cores, memory, stages) == expected


def test_stages_come_from_the_rollout_section() -> None:
    assert stage_count(_cfg(2, stages=3).train) == 3  # type: ignore[attr-defined]
    assert stage_count({"num_envs": 2}) == 1


def _shards(num_envs: int) -> int:
    """In a Ray task: how many shard processes the default layout gives ``num_envs`` envs."""
    return ProcessEnvManager(_cfg(num_envs)).num_shards  # type: ignore[arg-type]  # built, not started: the layout is decided here


def test_two_envs_with_the_defaults_get_a_process_each_on_two_ray_cpus(local_ray: Any) -> None:
    import ray

    task = ray.remote(_shards)
    assert ray.get(task.options(num_cpus=2).remote(2)) == 2
    assert ray.get(task.options(num_cpus=1).remote(2)) == 1
