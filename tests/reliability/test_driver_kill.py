"""The driver SIGKILLed mid-rollout: no process, shared-memory segment or Ray worker of the project remains."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import ray

from ..conftest import pid_alive, shm_segments
from ..ray_worker.raytools import ray_pids
from .harness import FaultReport, check_leaks

DRIVER = textwrap.dedent(
    """
    import json, sys, numpy as np
    from envfleet.config import load_config
    from envfleet.dataproto import DataProto
    from envfleet_ray import init_ray
    from envfleet_ray.runtime.group import EnvWorkerGroup
    init_ray(num_cpus=4)
    cfg = load_config(overrides=["train.simulator_type=toy", "train.num_envs=2", "rollout.pipeline_stage_num=2",
                                 "actor.model.num_action_chunks=4", "train.toy.step_cost_s=0.002"])
    g = EnvWorkerGroup(cfg, num_workers=2)
    g.init_worker(); g.init_simulator()
    g.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": np.arange(8)})).get()
    info = g.node_info()
    print(json.dumps({"actors": [i["pid"] for i in info],
                      "shards": [p for i in info for st in i["shard_pids"]["train"] for p in st]}), flush=True)
    while True:  # a rollout that the test interrupts with SIGKILL
        for s in range(2):
            g.env_interact_step(DataProto.from_dict(non_tensors={"actions": np.zeros((4, 4, 7), np.float32)},
                                                    meta_info={"stage_id": s})).get()
    """
)


def test_driver_sigkilled_mid_rollout_leaves_nothing(tmp_path) -> None:
    assert not ray.is_initialized()
    report = FaultReport("driver-sigkill")
    before_ray = ray_pids()
    before_shm = shm_segments()
    env = {**os.environ, "RAY_ADDRESS": ""}
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        line = driver.stdout.readline()  # type: ignore[union-attr]
        pids = json.loads(line)
        assert all(pid_alive(p) for p in pids["shards"])
        time.sleep(1.0)  # mid-rollout
        driver.kill()
        driver.wait()
        report.faults_injected = 1
        # The project's own processes go without Ray's help: actors die with their owner, shards with their parent.
        check_leaks(report, pids["actors"] + pids["shards"], before_shm, wait_s=30)
        patterns = [os.path.join(tempfile.gettempdir(), f"envfleet_logs_{pid}_*") for pid in pids["actors"]]
        deadline = time.time() + 10
        while (logs := [d for pattern in patterns for d in glob.glob(pattern)]) and time.time() < deadline:
            time.sleep(0.2)
    finally:
        driver.kill()
        # Ray's own cluster, started by the killed driver, is shut down by the test.
        for pid in ray_pids() - before_ray:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    report.faults_recovered = 1 if report.leaked_processes == 0 and report.leaked_segments == 0 else 0
    report.save()
    assert report.leaked_processes == 0, "EnvWorker or shard processes outlived the killed driver"
    assert report.leaked_segments == 0, "shared memory outlived the killed driver"
    assert not logs, f"the shards' log directories outlived the killed driver: {logs}"
    time.sleep(1.0)
    leftover = [p for p in ray_pids() - before_ray if pid_alive(p)]
    assert not leftover, f"Ray processes of the killed driver remain: {leftover}"
