"""Nodes lost mid-rollout: env workers spread over 4 simulator nodes of a Ray cluster on this machine.

Each fault is a whole host going: its env workers and its raylet are SIGKILLed while a
step is in flight, and a fresh node has joined just before (as an autoscaler or a re-provisioned spot
instance would bring one), so the fleet keeps 4 nodes, and it happens several times in
one rollout. It runs under ``nox -s chaos`` only: a 5-node cluster costs CI minutes, and
``tests/ray_worker/test_cluster.py`` already loses a node in CI (with and without
restarts left, and with no node able to take the workers).
"""

from __future__ import annotations

import os
import signal
import threading

import pytest
import ray

from envfleet.config import load_config
from envfleet_ray.runtime.group import EnvWorkerGroup

from ..ray_worker.raytools import FAST_NODE_DEATH, loopback_cluster
from .harness import CHAOS, FaultReport, check_leaks, rollout_with_faults, scale

NODES, W, S, N, CHUNK = 4, 4, 2, 2, 4
SIM = {"sim": 1}


def add_sim_node(cluster):
    return cluster.add_node(num_cpus=1, resources={"sim": 2}, node_ip_address="127.0.0.1")


@pytest.mark.skipif(not CHAOS, reason="nox -s chaos only (ENVFLEET_CHAOS=1); tests/ray_worker/test_cluster.py loses a node in CI")
def test_node_lost_mid_rollout_repeatedly() -> None:
    cluster = loopback_cluster(num_cpus=1, system_config=FAST_NODE_DEATH)
    report = FaultReport("node-lost-mid-rollout")
    losses = scale(1, 3)
    every = 6  # stage steps between losses
    try:
        nodes = [add_sim_node(cluster) for _ in range(NODES)]
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        cfg = load_config(
            overrides=[
                "train.simulator_type=toy",
                f"train.num_envs={N}",
                f"rollout.pipeline_stage_num={S}",
                f"actor.model.num_action_chunks={CHUNK}",
                "train.max_episode_steps=16",
                "train.toy.envs_per_process=2",
                "train.toy.step_sleep_s=0.3",  # a step stays in flight long enough to lose a node under it
            ]
        )
        group = EnvWorkerGroup(cfg, num_workers=W, cpus_per_worker=0.25, resources=SIM, strategy="SPREAD", max_restarts=W * losses)
        group.init_worker()
        group.init_simulator()
        victims: list[int] = []
        done = [0]

        def inject(i: int) -> int:
            if not i or i % every or done[0] >= losses:
                return 0
            infos = group.node_info()
            victim = infos[done[0] % W]["node_id"]
            on_it = [info for info in infos if info["node_id"] == victim]
            victims.extend(p for info in on_it for p in [info["pid"], *all_shard_pids_of(info)])
            node = next(n for n in nodes if n.node_id == victim)
            nodes.remove(node)

            def lose() -> None:  # during the next step
                for info in on_it:
                    _kill(info["pid"])
                cluster.remove_node(node, allow_graceful=False)

            nodes.append(add_sim_node(cluster))  # the replacement joins first: adding a node takes seconds
            threading.Timer(0.1, lose).start()
            done[0] += 1
            return 1

        rollout_with_faults(group, report, scale(8, 24), inject)
        report.faults_recovered = len(group.recoveries)
        lost_ranks = sum(len(r["ranks"]) for r in group.recoveries)
        slowest = max((r["recreate_s"] for r in group.recoveries), default=0.0)
        report.notes.append(
            f"{NODES} simulator nodes, {W} workers x {S} stages x {N} envs; a lost node takes its workers and raylet "
            f"(SIGKILL) during a step, a fresh node joins; {lost_ranks} workers recreated, slowest recovery "
            f"{slowest:.1f} s after Ray declared the node dead (health checks every 1 s, 4 misses)"
        )
        survivors = [p for info in group.node_info() for p in [info["pid"], *all_shard_pids_of(info)]]
        group.shutdown()
        check_leaks(report, victims + survivors, set(), wait_s=30)
        report.save()
    finally:
        ray.shutdown()
        cluster.shutdown()
    assert report.faults_injected == losses
    assert report.faults_recovered == losses, "a lost node was not recovered from"
    assert report.chunks_returned == report.chunks_requested
    assert report.env_steps_returned == report.env_steps_requested
    assert report.envs_truncated >= losses * N
    assert report.leaked_processes == 0 and report.leaked_segments == 0


def all_shard_pids_of(info: dict) -> list[int]:
    return [p for stages in info["shard_pids"].values() for stage in stages for p in stage if p]


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
