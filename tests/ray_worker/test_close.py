"""A close that has closed: ``close()`` returns only after every shard has ended and every segment is
unlinked, whatever was in flight (a failed step, a step still running on another stage, a restart).

Checked at once after close() returns, with no grace period: a caller that looks for leaks, or starts
the next job, sees what is left at that moment.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

from envfleet.config import load_config
from envfleet.dataproto import DataProto
from envfleet.errors import InvalidInputError

from ..conftest import child_pids, own_segments, pid_alive, shm_segments

STAGES = 3
N = 2


def _config(**toy: Any) -> Any:
    return load_config(
        data={
            "train": {"simulator_type": "toy", "num_envs": N, "toy": {"envs_per_process": 1, **toy}},
            "rollout": {"pipeline_stage_num": STAGES},
            "actor": {"model": {"num_action_chunks": 2}},
        }
    )


def _step(stage: int, rows: int = N, action_dim: int = 7) -> DataProto:
    return DataProto.from_dict(non_tensors={"actions": np.zeros((rows, 2, action_dim), np.float32)}, meta_info={"stage_id": stage})


def _shard_children(before: set[int]) -> set[int]:
    """This process's children started after ``before`` that run a shard (not the janitor or Python's resource tracker)."""
    found = set()
    for pid in child_pids() - before:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if b"envfleet.shards.server" in fh.read():
                    found.add(pid)
        except FileNotFoundError:
            pass
    return found


def _in_flight(worker: Any) -> tuple[list[threading.Thread], list[BaseException]]:
    """Stage 0 restarts a crashed shard, stage 1's step fails, stage 2's step sleeps: all at once."""
    errors: list[BaseException] = []

    def run(data: DataProto) -> None:
        try:
            worker.env_interact_step(data)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(data,)) for data in (_step(0), _step(1, rows=N + 1), _step(2))]
    for thread in threads:
        thread.start()
    return threads, errors


def test_worker_close_with_a_failed_a_running_and_a_restarting_step_leaves_nothing() -> None:
    from envfleet_ray import EnvWorker

    before = own_segments()
    children_before = child_pids()
    # Every shard's first step exits (a crash: stage 0's is restarted while the others run) or sleeps.
    worker = EnvWorker(_config(step_sleep_s=1.0, exit_on_step=0))
    worker.init_worker()
    worker.init_simulator()
    ids = np.arange(N * STAGES)
    worker.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": ids, "task_ids": ids // 10}))
    shards = {pid for stage in worker.node_info()["shard_pids"]["train"] for pid in stage}
    assert len(shards) == STAGES * N and own_segments() - before
    threads, errors = _in_flight(worker)
    time.sleep(0.3)  # the steps are under way: the shards sleep or have exited
    worker.close()
    left = own_segments() - before
    # The shards, and any started since (the restarts).
    alive = {pid for pid in shards | _shard_children(children_before) if pid_alive(pid)}
    for thread in threads:
        thread.join(timeout=60)
    assert not left, f"segments still linked when close() returned: {sorted(left)}"
    assert not alive, f"shard processes still alive when close() returned: {sorted(alive)}"
    assert any(isinstance(e, InvalidInputError) for e in errors), errors


RAY_CPUS = 4


def test_group_close_with_steps_in_flight_leaves_nothing(local_ray) -> None:
    """The same through Ray: the group's close() returns when its workers' shards and segments are gone."""
    import psutil

    from envfleet_ray import EnvWorkerGroup

    before = shm_segments()
    group = EnvWorkerGroup(_config(step_sleep_s=1.0), num_workers=1, cpus_per_worker=1)
    group.init_worker()
    group.init_simulator()
    ids = np.arange(N * STAGES)
    group.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": ids, "task_ids": ids // 10})).get()
    worker_pid = group.node_info()[0]["pid"]
    shards = {pid for stage in group.node_info()[0]["shard_pids"]["train"] for pid in stage}
    assert len(shards) == STAGES * N
    running = group.env_interact_step(_step(2))
    failing = group.env_interact_step(_step(1, action_dim=5))  # refused inside the worker
    time.sleep(0.3)
    group.close()
    left = {n for n in shm_segments() - before if n.split("_")[1] == str(worker_pid)}
    alive = {pid for pid in shards if psutil.pid_exists(pid) and pid_alive(pid)}
    assert not left, f"segments still linked when close() returned: {sorted(left)}"
    assert not alive, f"shard processes still alive when close() returned: {sorted(alive)}"
    for future in (running, failing):
        with pytest.raises(Exception):  # noqa: B017 - the worker is gone, or the step was bad: either is an error
            future.get()
