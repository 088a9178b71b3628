"""Every shard of a stage hung at once (SIGSTOP, real shard processes of the toy backend): the stage
rebuilds them together, so it recovers within one step deadline plus one build time, not one build
time per shard, and leaves no process or shared memory behind."""

from __future__ import annotations

import os
import time

import numpy as np

from envfleet.config import load_config
from envfleet.shards.manager import ProcessEnvManager

from ..conftest import shm_segments, stop_process
from .harness import FaultReport, check_leaks

SHARDS = 4
BUILD_S = 1.5  # each shard sleeps this long while building: a start that waits on a device, no CPU
STEP_TIMEOUT_S = 2.0


def test_every_shard_of_a_stage_hung_recovers_in_one_deadline_and_one_build() -> None:
    report = FaultReport("all-shards-hung")
    segments_before = shm_segments()
    cfg = load_config(
        data={"train": {"simulator_type": "toy", "num_envs": SHARDS, "step_timeout_s": STEP_TIMEOUT_S}},
        overrides=["actor.model.num_action_chunks=2", "train.toy.envs_per_process=1", f"train.toy.build_sleep_s={BUILD_S}"],
    )
    mgr = ProcessEnvManager(cfg)
    pids: list[int] = []
    try:
        t0 = time.monotonic()
        mgr.start_simulator()
        build_s = time.monotonic() - t0  # all shards built together: what one build costs on this machine
        first = mgr.reset_envs_to_state_ids(mgr.get_all_state_ids()[:SHARDS])
        hung = [int(p) for p in mgr.shard_pids() if p is not None]
        assert len(hung) == SHARDS
        for pid in hung:
            stop_process(pid)
        report.faults_injected = SHARDS
        t0 = time.monotonic()
        out = mgr.chunk_step(np.zeros((SHARDS, 2, 7), dtype=np.float32))
        stall = time.monotonic() - t0
        report.longest_stall_s = stall
        report.faults_recovered = mgr.stats.restarts
        assert mgr.stats.restarts == SHARDS
        # A sequential rebuild would take STEP_TIMEOUT_S + SHARDS * BUILD_S (8 s here).
        assert stall < STEP_TIMEOUT_S + build_s + 1.0, f"recovered in {stall:.1f} s; one build takes {build_s:.1f} s"
        assert out.truncations[:, -1].all()  # every env's episode was cut by its shard's rebuild
        np.testing.assert_array_equal(out.obs["full_image"], first.obs["full_image"])  # the replayed reset
        fresh = [int(p) for p in mgr.shard_pids() if p is not None]
        assert not set(fresh) & set(hung)
        mgr.chunk_step(np.zeros((SHARDS, 2, 7), dtype=np.float32))  # and the stage steps on
        pids = hung + fresh
    finally:
        mgr.close()
    check_leaks(report, pids, segments_before, owners={os.getpid(), *pids})
    report.save()
    assert report.leaked_processes == 0 and report.leaked_segments == 0
