"""EnvWorkerGroup across a 2-node Ray cluster started on this machine (ray.cluster_utils.Cluster, loopback)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import ray

from envfleet.config import load_config
from envfleet.dataproto import DataProto
from envfleet_ray.runtime.group import EnvWorkerGroup

from .raytools import listening_sockets_of, ray_pids


@pytest.fixture(scope="module")
def two_nodes():
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    from ray._private import ray_constants  # noqa: PLC2701 (Ray has no public switch for it)

    ray_constants.ENABLE_RAY_CLUSTER = False
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "node_ip_address": "127.0.0.1", "include_dashboard": False},
    )
    cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def test_workers_spread_over_both_nodes(two_nodes) -> None:
    assert len([n for n in ray.nodes() if n["Alive"]]) == 2
    public = [(a, p) for a, p in listening_sockets_of(ray_pids()) if not a.startswith("127.")]
    assert not public, f"the test cluster listens beyond loopback: {public}"
    cfg = load_config(
        overrides=["train.simulator_type=toy", "train.num_envs=2", "rollout.pipeline_stage_num=2", "actor.model.num_action_chunks=2"]
    )
    group = EnvWorkerGroup(cfg, num_workers=2, cpus_per_worker=1, strategy="STRICT_SPREAD")
    try:
        nodes = {info["node_id"] for info in group.node_info()}
        assert len(nodes) == 2, "both workers landed on one node"
        # The worker on the driver's node takes the local lane, the other Ray's task path.
        here = ray.get_runtime_context().get_node_id()
        assert group.lane_ranks == [rank for rank, info in enumerate(group.node_info()) if info["node_id"] == here]
        assert len(group.lane_ranks) == 1
        group.init_worker()
        group.init_simulator()
        out = group.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": np.arange(8)})).get()
        assert out.batch["state_id"].tolist() == list(range(8))
        acts = np.zeros((4, 2, 7), np.float32)
        res = group.env_interact_step(DataProto.from_dict(non_tensors={"actions": acts}, meta_info={"stage_id": 1})).get()
        assert res.batch["state_id"].tolist() == [2, 3, 6, 7]
    finally:
        group.shutdown()
