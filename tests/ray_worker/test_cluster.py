"""Placement by node role and a lost node, on a Ray cluster of several nodes on this machine (loopback).

The head node plays the policy's GPU node (a Ray-counted GPU, no ``sim`` resource); two
simulator nodes (``{"sim": 2}``, one labelled ``role=sim``) stay up for the module. The
node-loss tests add nodes of their own (``{"lossy": 4}``) and kill them with
``remove_node(allow_graceful=False)``: the raylet and its processes are SIGKILLed, as
when a host is preempted or its raylet is OOM-killed.
"""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest
import ray

from envfleet.config import load_config
from envfleet.dataproto import DataProto
from envfleet.errors import InvalidInputError, WorkerDiedError
from envfleet_ray.runtime.group import EnvWorkerGroup
from envfleet_ray.runtime.placement import PlacementError

from ..conftest import pid_alive
from .raytools import FAST_NODE_DEATH, loopback_cluster

N, S, CHUNK = 2, 1, 2
SIM = {"sim": 1}
LOSSY = {"lossy": 1}


def cfg(**extra: object):
    return load_config(
        overrides=[
            "train.simulator_type=toy",
            f"train.num_envs={N}",
            f"rollout.pipeline_stage_num={S}",
            f"actor.model.num_action_chunks={CHUNK}",
            "train.max_episode_steps=1000",
            "train.toy.envs_per_process=2",
            *[f"{k}={v}" for k, v in extra.items()],
        ]
    )


@pytest.fixture(scope="module")
def cluster():
    c = loopback_cluster(num_cpus=1, system_config=FAST_NODE_DEATH, num_gpus=1, resources={"policy": 1})
    c.add_node(num_cpus=1, resources={"sim": 2}, node_ip_address="127.0.0.1", labels={"role": "sim"})
    c.add_node(num_cpus=1, resources={"sim": 2}, node_ip_address="127.0.0.1")
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    try:
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


def sim_node_ids() -> dict[str, dict]:
    return {n["NodeID"]: n for n in ray.nodes() if n["Alive"] and "sim" in n["Resources"]}


@pytest.fixture
def lossy_nodes(cluster):
    """``add(n)`` adds ``n`` nodes of ``{"lossy": 4}`` (1 CPU) for a test to kill; all are removed after it."""
    added = []

    def add(n: int = 1) -> list:
        nodes = [cluster.add_node(num_cpus=1, resources={"lossy": 4}, node_ip_address="127.0.0.1") for _ in range(n)]
        added.extend(nodes)
        cluster.wait_for_nodes()
        return nodes

    yield add
    for node in added:
        if node in cluster.worker_nodes:
            cluster.remove_node(node, allow_graceful=False)


def lose_node(cluster, node_id: str, infos: list[dict]) -> None:
    """The host ``node_id`` vanishes: its env workers and its raylet are SIGKILLed at once
    (a worker would otherwise answer direct calls for a moment after its raylet is gone)."""
    for info in infos:
        if info["node_id"] == node_id:
            try:
                os.kill(info["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
    cluster.remove_node(next(n for n in cluster.worker_nodes if n.node_id == node_id), allow_graceful=False)


def reset_and_step(group: EnvWorkerGroup, step_sleep: bool = False) -> DataProto:
    rows = group.num_workers * N
    group.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": np.arange(rows * S) % 30})).get()
    acts = np.zeros((rows, CHUNK, 7), np.float32)
    return group.env_interact_step(DataProto.from_dict(non_tensors={"actions": acts}, meta_info={"stage_id": 0})).get()


def processes_of(infos: list[dict]) -> list[int]:
    pids = []
    for info in infos:
        pids.append(info["pid"])
        for stages in info["shard_pids"].values():
            for stage in stages:
                pids += [p for p in stage if p]
    return pids


def wait_gone(pids: list[int], timeout_s: float = 20.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.2)
    return [p for p in pids if pid_alive(p)]


def test_workers_land_on_sim_nodes_only(cluster) -> None:
    sims = set(sim_node_ids())
    group = EnvWorkerGroup(cfg(), num_workers=4, cpus_per_worker=0.25, resources=SIM, strategy="SPREAD")
    try:
        assert group.bundle == {"CPU": 0.25, "sim": 1.0}
        placed = [info["node_id"] for info in group.node_info()]
        assert set(placed) <= sims, "an env worker landed on a node without the 'sim' resource"
        assert set(placed) == sims, "SPREAD left a simulator node empty"
        assert group.lane_ranks == []  # the driver's (policy) node holds no worker
        group.init_worker()
        group.init_simulator()
        out = reset_and_step(group)
        assert out.batch["rews"].shape == (4 * N, CHUNK)
        assert ray.available_resources().get("sim", 0) == 0
        # The cluster could hold one more, but this group holds every sim slot: bounded wait, then an error.
        t0 = time.monotonic()
        with pytest.raises(PlacementError, match=r"could not grant 1 bundles of .*'sim': 1\.0.* within 2 s"):
            EnvWorkerGroup(cfg(), num_workers=1, cpus_per_worker=0.25, resources=SIM, placement_timeout_s=2)
        assert 1.9 < time.monotonic() - t0 < 30
        pending = [pg for pg in ray.util.placement_group_table().values() if pg["state"] not in ("REMOVED", "CREATED")]
        assert not pending, f"the refused placement group was left behind: {pending}"
    finally:
        group.shutdown()
    deadline = time.monotonic() + 10
    while ray.available_resources().get("sim", 0) < 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ray.available_resources().get("sim", 0) == 4, "the group's bundles were not given back"


def step_ids(group: EnvWorkerGroup, ids: np.ndarray, acts: np.ndarray) -> DataProto:
    group.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": ids})).get()
    return group.env_interact_step(DataProto.from_dict(non_tensors={"actions": acts}, meta_info={"stage_id": 0})).get()


def test_a_node_of_several_workers_is_stepped_through_its_relay(cluster) -> None:
    """One Ray call per simulator node: each node's relay reaches its 2 workers over their lanes."""
    sims = set(sim_node_ids())
    ids = (np.arange(4 * N) * 7) % 30
    acts = np.random.default_rng(0).uniform(-1, 1, (4 * N, CHUNK, 7)).astype(np.float32)
    kw = {"num_workers": 4, "cpus_per_worker": 0.25, "resources": SIM, "strategy": "SPREAD"}
    direct = EnvWorkerGroup(cfg(), node_relay=False, **kw)
    try:
        assert direct.relay_ranks == {}
        direct.init_worker()
        direct.init_simulator()
        expected = step_ids(direct, ids, acts)
    finally:
        direct.shutdown()
    group = EnvWorkerGroup(cfg(), max_restarts=1, **kw)
    relay_pids: list[int] = []
    try:
        nodes = [info["node_id"] for info in group.node_info()]
        assert group.relay_ranks == {node: [r for r in range(4) if nodes[r] == node] for node in sims}
        relays = group.relay_info()
        assert sorted(r["node_id"] for r in relays) == sorted(sims), "one relay per simulator node, on that node"
        relay_pids = [r["pid"] for r in relays]
        group.init_worker()
        group.init_simulator()
        out = step_ids(group, ids, acts)
        for key in ("rews", "state_id", "terminations", "truncations", "full_image"):
            assert np.array_equal(out.batch[key].numpy(), expected.batch[key].numpy()), f"{key} differs through the relay"
        # A worker's own error comes back as itself, and the group steps on.
        with pytest.raises(InvalidInputError, match="float dtype"):
            bad = DataProto.from_dict(non_tensors={"actions": acts.astype(np.int64)}, meta_info={"stage_id": 0})
            group.env_interact_step(bad).get()
        # A relayed worker killed alone: recreated, its envs reported restarted, attached to the relay again.
        victim = group.node_info()[1]
        os.kill(victim["pid"], signal.SIGKILL)
        after = group.env_interact_step(DataProto.from_dict(non_tensors={"actions": acts}, meta_info={"stage_id": 0})).get()
        restarted = after.batch["sim_restarted"].numpy().astype(bool).reshape(4, N)
        assert restarted[1].all() and not restarted[[0, 2, 3]].any()
        assert group.restarts == 1
        assert 1 in group.relay_ranks[group.node_info()[1]["node_id"]], "the recreated worker is not stepped through its node's relay"
        assert group.env_interact_step(DataProto.from_dict(non_tensors={"actions": acts}, meta_info={"stage_id": 0})).get().batch[
            "rews"
        ].shape == (4 * N, CHUNK)
    finally:
        group.shutdown()
    assert relay_pids and not wait_gone(relay_pids), "a relay outlived the group's shutdown"


def test_workers_follow_node_labels(cluster) -> None:
    labelled = next(i for i, n in sim_node_ids().items() if (n.get("Labels") or {}).get("role") == "sim")
    group = EnvWorkerGroup(cfg(), num_workers=2, cpus_per_worker=0.25, labels={"role": "sim"}, strategy="SPREAD")
    try:
        assert {info["node_id"] for info in group.node_info()} == {labelled}
    finally:
        group.shutdown()


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"resources": {"sim": 3}}, ["{'CPU': 0.25, 'sim': 3.0}", "'sim': 2.0"]),  # more than any node offers
        ({"resources": {"tpu": 1}}, ["'tpu': 1.0"]),  # a resource no node has
        ({"resources": SIM, "strategy": "STRICT_SPREAD", "num_workers": 3}, ["3 distinct nodes"]),
        ({"labels": {"role": "gpu-sim"}}, ["labelled {'role': 'gpu-sim'}"]),
    ],
    ids=["too-big", "unknown-resource", "strict-spread", "unknown-label"],
)
def test_unsatisfiable_placement_is_an_error_at_once(cluster, kwargs, words) -> None:
    kwargs = {"num_workers": 2, "cpus_per_worker": 0.25, **kwargs}
    t0 = time.monotonic()
    with pytest.raises(PlacementError) as err:
        EnvWorkerGroup(cfg(), **kwargs)
    assert time.monotonic() - t0 < 10, "an infeasible placement must not wait in Ray's scheduler"
    text = str(err.value)
    for word in words + ["Nodes:", "ray start --resources"]:
        assert word in text, f"{word!r} not in: {text}"


def test_lost_node_workers_recreated_on_surviving_nodes(cluster, lossy_nodes) -> None:
    lossy_nodes(2)  # 8 slots for 4 workers, 2 on each node: a lost node's workers fit on the other
    # A null chunk length (verl-vla's config has none): the recreated workers' rows take the step's own.
    unfixed = cfg(**{"train.toy.step_sleep_s": 1.0, "actor.model.num_action_chunks": "null"})
    group = EnvWorkerGroup(unfixed, num_workers=4, cpus_per_worker=0.25, resources=LOSSY, strategy="SPREAD", max_restarts=4)
    try:
        group.init_worker()
        group.init_simulator()
        first = reset_and_step(group)
        before = group.node_info()
        victim = before[0]["node_id"]
        lost = [r for r, info in enumerate(before) if info["node_id"] == victim]
        assert group.relay_ranks[victim] == lost  # the in-flight step reaches them through their node's relay
        kept = [r for r in range(4) if r not in lost]
        acts = np.zeros((4 * N, CHUNK, 7), np.float32)
        future = group.env_interact_step(DataProto.from_dict(non_tensors={"actions": acts}, meta_info={"stage_id": 0}))
        time.sleep(0.3)  # the step is in flight: every worker sleeps 1 s in it
        lose_node(cluster, victim, before)
        out = future.get()  # no time bound here: on a loaded 2-core machine a recreation took 255 s (bench: fleet)
        restarted = out.batch["sim_restarted"].numpy().astype(bool).reshape(4, N)
        truncated = out.batch["truncations"][:, -1].numpy().reshape(4, N)
        assert restarted[lost].all() and truncated[lost].all(), "the lost node's envs are not reported truncated and restarted"
        assert not restarted[kept].any() and not truncated[kept].any(), "the surviving workers' step was lost"
        assert out.batch["rews"].shape == (4 * N, CHUNK)
        assert group.restarts == len(lost)
        after = group.node_info()
        assert all(after[r]["node_id"] != victim for r in lost)
        alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        assert {info["node_id"] for info in after} <= alive
        assert victim not in group.relay_ranks and {r["node_id"] for r in group.relay_info()} <= alive, "the lost node's relay is kept"
        assert sorted(r for ranks in group.relay_ranks.values() for r in ranks) == [0, 1, 2, 3]
        causes = group.finish_rollout()["total"]["restart_causes"]
        assert sorted(c["rank"] for c in causes if c["stage"] is None) == lost
        assert all("its node is lost" in c["cause"] and victim[:8] in c["cause"] for c in causes if c["stage"] is None)
        # The recreated workers got the last reset again and step on.
        again = group.env_interact_step(DataProto.from_dict(non_tensors={"actions": acts}, meta_info={"stage_id": 0})).get()
        assert not again.batch["sim_restarted"].numpy().any()
        assert again.batch["state_id"].tolist() == first.batch["state_id"].tolist()
        assert not wait_gone(processes_of([before[r] for r in lost])), "the lost node's workers or simulators outlived it"
    finally:
        survivors = processes_of(group.node_info()) if group.workers else []
        group.shutdown()
    assert not wait_gone(survivors), "a worker or simulator on a surviving node outlived shutdown"


def test_lost_node_without_restarts_names_ranks_node_and_cause(cluster, lossy_nodes) -> None:
    lossy_nodes(2)
    group = EnvWorkerGroup(cfg(), num_workers=2, cpus_per_worker=0.25, resources=LOSSY, strategy="STRICT_SPREAD")
    try:
        group.init_worker()
        group.init_simulator()
        reset_and_step(group)
        infos = group.node_info()
        lose_node(cluster, infos[1]["node_id"], infos)
        with pytest.raises(WorkerDiedError) as err:
            reset_and_step(group)
        text = str(err.value)
        assert "EnvWorker rank 1 on node 127.0.0.1" in text and infos[1]["node_id"][:8] in text
        assert "rank 0" not in text
        assert "its node is lost" in text, f"the cause (its node died) is missing: {text}"
        assert "max_restarts=0" in text
    finally:
        group.shutdown()
    assert not wait_gone(processes_of(infos))


def test_lost_node_no_node_can_take_the_workers(cluster, lossy_nodes) -> None:
    lossy_nodes(1)
    group = EnvWorkerGroup(cfg(), num_workers=2, cpus_per_worker=0.25, resources=LOSSY, max_restarts=4, restart_timeout_s=5)
    try:
        group.init_worker()
        group.init_simulator()
        reset_and_step(group)
        infos = group.node_info()
        lose_node(cluster, infos[0]["node_id"], infos)
        t0 = time.monotonic()
        with pytest.raises(WorkerDiedError) as err:
            reset_and_step(group)
        assert time.monotonic() - t0 < 60
        text = str(err.value)
        assert "EnvWorker rank 0 on node" in text and (
            "EnvWorker rank 1 on node" in text or "ranks [1] ran on the same lost node" in text
        ), text
        assert infos[0]["node_id"][:8] in text
        assert "no surviving node can take their bundles" in text and "'lossy': 1.0" in text, text
    finally:
        group.shutdown()
    assert not wait_gone(processes_of(infos))
