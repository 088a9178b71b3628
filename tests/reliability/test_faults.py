"""Fault injection through EnvWorkerGroup on a local Ray (127.0.0.1), toy backend.

CI runs these sized small; ``nox -s chaos`` runs the same code with bigger numbers.
"""

from __future__ import annotations

import os
import random
import signal

import numpy as np
import pytest

from envfleet.dataproto import DataProto
from envfleet.errors import EnvFleetSimulatorError, WorkerDiedError
from envfleet_ray.runtime.group import EnvWorkerGroup

from ..conftest import pid_alive, shm_segments, toy_cfg
from .harness import FaultReport, all_shard_pids, check_leaks, kill_random_shard, rollout_with_faults, scale

W, S, N, CHUNK = 2, 2, 2, 4


def make_cfg(**extra: object):
    return toy_cfg(N, CHUNK, S, "train.max_episode_steps=16", "train.max_restarts=1000", *[f"{k}={v}" for k, v in extra.items()])


def start_group(cfg, max_restarts: int = 0) -> EnvWorkerGroup:
    group = EnvWorkerGroup(cfg, num_workers=W, cpus_per_worker=1, max_restarts=max_restarts)
    group.init_worker()
    group.init_simulator()
    return group


def finish(group: EnvWorkerGroup, report: FaultReport, segments_before: set[str]) -> None:
    metrics = group.finish_rollout()
    report.faults_recovered = metrics["total"]["sim_restarts"] + group.restarts
    pids = all_shard_pids(group)
    actors = {info["pid"] for info in group.node_info()}
    group.shutdown()
    check_leaks(report, pids + sorted(actors), segments_before)
    report.save()


def test_sigkill_random_shard_every_few_chunks(local_ray) -> None:
    before = shm_segments()
    report = FaultReport("sigkill-random-shard")
    group = start_group(make_cfg())
    rng = random.Random(0)
    every = 3
    chunks = scale(12, 120)  # per stage; chaos: at least 10 faults (80 here)

    def inject(i: int) -> int:
        if i and i % every == 0:
            # Half between calls, half during the next call.
            return kill_random_shard(group, rng, delay_s=0.0 if i % (2 * every) else 0.002)
        return 0

    rollout_with_faults(group, report, chunks, inject)
    finish(group, report, before)
    assert report.faults_injected >= scale(7, 10)
    assert report.faults_recovered == report.faults_injected
    assert report.chunks_returned == report.chunks_requested
    assert report.env_steps_returned == report.env_steps_requested
    assert 0 < report.envs_truncated <= report.faults_injected * N
    assert report.leaked_processes == 0 and report.leaked_segments == 0


def test_sigstop_hang_recovered_through_deadline(local_ray) -> None:
    before = shm_segments()
    report = FaultReport("sigstop-shard-hang")
    group = start_group(make_cfg(**{"train.step_timeout_s": 3, "train.reset_timeout_s": 3}))
    rng = random.Random(1)
    hangs = scale(1, 4)
    rollout_with_faults(
        group, report, scale(4, 16), lambda i: kill_random_shard(group, rng, signal.SIGSTOP) if i % 8 == 1 and i // 8 < hangs else 0
    )
    finish(group, report, before)
    assert report.faults_injected == hangs
    assert report.faults_recovered == hangs
    # At least the deadline, and cut by it: nothing else would end the call (a restart's own
    # deadline is the start's, 300 s), so the bound only has to stay well below that.
    assert 2.9 < report.longest_stall_s < 120
    assert report.env_steps_returned == report.env_steps_requested
    assert report.leaked_processes == 0 and report.leaked_segments == 0


def test_actor_sigkill_without_restarts_is_reported(local_ray) -> None:
    before = shm_segments()
    report = FaultReport("actor-sigkill-no-restart")
    group = start_group(make_cfg())
    rollout_with_faults(group, report, 2)
    info = group.node_info()[0]
    shards = [p for stage in info["shard_pids"]["train"] for p in stage]
    os.kill(info["pid"], signal.SIGKILL)
    report.faults_injected = 1
    with pytest.raises(WorkerDiedError, match=r"EnvWorker rank 0 on node 127\.0\.0\.1 .*died"):
        rollout_with_faults(group, FaultReport("ignored"), 1)
    report.notes.append("reported as WorkerDiedError naming rank, node and pid; rollout stops by design")
    group.shutdown()
    check_leaks(report, [info["pid"], *shards], before)
    report.save()
    assert report.leaked_processes == 0 and report.leaked_segments == 0


def test_actor_sigkill_with_restarts_finishes_rollout(local_ray) -> None:
    before = shm_segments()
    report = FaultReport("actor-sigkill-restart")
    group = start_group(make_cfg(), max_restarts=10)
    kills = scale(1, 3)
    victims: list[int] = []
    done = [0]

    def inject(i: int) -> int:
        if i % 6 == 3 and done[0] < kills:
            info = group.node_info()[done[0] % W]
            victims.extend([info["pid"], *[p for stage in info["shard_pids"]["train"] for p in stage]])
            os.kill(info["pid"], signal.SIGKILL)
            done[0] += 1
            return 1
        return 0

    rollout_with_faults(group, report, scale(6, 20), inject)
    finish(group, report, before)
    assert report.faults_injected == kills
    assert group.restarts == kills
    assert report.env_steps_returned == report.env_steps_requested
    assert report.envs_truncated >= kills * N
    assert not [p for p in victims if pid_alive(p)], "a killed worker's simulators outlived it"
    assert report.leaked_processes == 0 and report.leaked_segments == 0


def test_backend_raising_in_chunk_step_is_reported_with_its_traceback(local_ray) -> None:
    group = start_group(make_cfg(**{"train.toy.raise_on_step": 1}))
    try:
        group.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": np.arange(W * S * N)})).get()
        data = DataProto.from_dict(non_tensors={"actions": np.zeros((W * N, CHUNK, 7), np.float32)}, meta_info={"stage_id": 0})
        group.env_interact_step(data).get()
        with pytest.raises(EnvFleetSimulatorError) as err:
            group.env_interact_step(data).get()
        text = str(err.value)
        assert "raise_on_step=1 reached" in text
        assert "envfleet_toy/env.py" in text and "chunk_step" in text  # the backend's own traceback
        assert group.env_interact_step(data).get().batch["rews"].shape == (W * N, CHUNK)  # still usable
    finally:
        group.shutdown()


def test_backend_raising_in_constructor_is_reported_with_its_traceback(local_ray) -> None:
    group = EnvWorkerGroup(make_cfg(**{"train.toy.raise_in_constructor": True}), num_workers=1)
    try:
        group.init_worker()
        with pytest.raises(EnvFleetSimulatorError) as err:
            group.init_simulator()
        text = str(err.value)
        assert "raise_in_constructor is set" in text and "envfleet_toy/env.py" in text and "__init__" in text
    finally:
        group.shutdown()
