"""Measuring one env and the capacity arithmetic (real toy env in a shard process)."""

from __future__ import annotations

import os

import pytest

from envfleet.diagnostics.measure import capacity, machine, measure_backend, process_memory, process_tree


@pytest.mark.parametrize(
    ("mem_per_env", "per_process", "available", "cores", "expected"),
    [
        (1_700, 1, 23_000, 2, (13, 2, 2)),  # LIBERO-like: cores bound it
        (1_700, 1, 3_000, 8, (1, 8, 1)),  # memory bounds it
        (100, 4, 10_000, 2, (100, 8, 8)),  # 4 envs share each core's process
        (100, None, 1_000, 2, (10, None, 10)),  # one process holds all: only memory counts
        (5_000, 1, 4_000, 2, (0, 2, 0)),  # not even one fits
        (0, 1, 4_000, 2, (0, 2, 0)),  # nothing measured: nothing promised
    ],
    ids=["cores-bound", "memory-bound", "shared-process", "one-process", "none-fit", "unmeasured"],
)
def test_capacity(mem_per_env, per_process, available, cores, expected) -> None:
    cap = capacity(mem_per_env, per_process, available, cores)
    assert (cap.by_memory, cap.by_cores, cap.envs) == expected


def test_machine_and_process_memory_read_proc() -> None:
    box = machine()
    assert 0 < box.mem_available <= box.mem_total
    assert box.cores == len(os.sched_getaffinity(0))
    used, kind = process_memory(os.getpid())
    assert kind == "PSS" and 10_000_000 < used < box.mem_total
    assert process_tree(os.getpid())[0] == os.getpid()
    assert process_memory(2**22 + 12345) == (0, "RSS")  # no such process


def test_measure_toy_times_both_render_modes_and_memory(no_leaks) -> None:
    m = measure_backend("toy", ["train.toy.envs_per_process=2", "train.num_envs=2"])
    assert m.ok, m.cause
    assert set(m.step_s) == {"last", "all"} and all(s > 0 for s in m.step_s.values())
    assert m.build_s > 0 and m.reset_s > 0 and m.chunk == 8
    assert m.envs_measured == 2 and m.envs_per_process == 2
    assert 5_000_000 < m.memory_bytes < 1_000_000_000 and m.memory_per_env == m.memory_bytes // 2


def test_measure_failure_is_a_result_not_an_exception(no_leaks) -> None:
    m = measure_backend("toy", ["train.toy.raise_in_constructor=true"])
    assert not m.ok and m.cause
