"""concat_harmonized, dead_error, chunk_of and bundle_shape, without Ray: a dead worker's rows and message, a bundle."""

from __future__ import annotations

import numpy as np
import torch

from envfleet.dataproto import DataProto
from envfleet_ray.runtime.recovery import concat_harmonized, dead_error


def part(n: int, with_state_id: bool) -> DataProto:
    tensors = {"rews": torch.ones(n, 2)}
    if with_state_id:
        tensors["state_id"] = torch.arange(n)
    non_tensors = {"task_descriptions": np.array(["t"] * n, dtype=object)}
    if with_state_id:
        non_tensors["extra"] = np.ones(n, np.float32)
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)


def test_parts_that_agree_are_concatenated_as_they_are() -> None:
    out = concat_harmonized([part(2, True), part(3, True)])
    assert out.batch["state_id"].tolist() == [0, 1, 0, 1, 2]
    assert len(out) == 5


def test_a_rebuilt_workers_missing_keys_are_filled() -> None:
    out = concat_harmonized([part(2, True), part(2, False), part(1, True)])
    assert out.batch["state_id"].tolist() == [0, 1, -1, -1, 0]  # ints: -1
    assert out.batch["rews"].shape == (5, 2)
    assert out.non_tensor_batch["extra"].tolist() == [1, 1, 0, 0, 1]


def test_dead_error_names_every_rank_its_node_and_a_lost_node() -> None:
    nodes = [
        {"ip": "10.0.0.7", "hostname": "sim-7", "node_id": "96ce92c2aaaa", "pid": 11},
        {"ip": "10.0.0.8", "hostname": "sim-8", "node_id": "12345678bbbb", "pid": 12},
    ]
    err = dead_error({1: RuntimeError("boom"), 0: RuntimeError("The actor died")}, nodes, "why", alive={"12345678bbbb"})
    text = str(err)
    assert text.index("rank 0") < text.index("rank 1")
    assert "rank 0 on node 10.0.0.7 (sim-7, node id 96ce92c2, pid 11) died: RuntimeError: The actor died (its node is lost" in text
    assert "rank 1 on node 10.0.0.8" in text and text.count("its node is lost") == 1
    assert text.endswith("; why")


def test_bundle_shape_rejects_what_ray_cannot_take() -> None:
    import pytest

    from envfleet_ray.runtime.placement import bundle_shape

    assert bundle_shape(0.5, 0, 2**30, {"sim": 1}) == {"CPU": 0.5, "memory": float(2**30), "sim": 1.0}
    with pytest.raises(ValueError, match=r"resources\['CPU'\]: use cpus_per_worker"):
        bundle_shape(1, resources={"CPU": 2})
    with pytest.raises(ValueError, match=r"resources\['sim'\] must be a positive number, got -1"):
        bundle_shape(1, resources={"sim": -1})


def test_raylet_answers_tells_a_listening_port_from_a_closed_one() -> None:
    import socket

    from envfleet_ray.runtime.placement import raylet_answers

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        assert raylet_answers({"NodeManagerAddress": "127.0.0.1", "NodeManagerPort": port})
    assert not raylet_answers({"NodeManagerAddress": "127.0.0.1", "NodeManagerPort": port})  # closed now: refused
    assert not raylet_answers({"NodeID": "no address"})


def test_chunk_of_reads_a_steps_actions() -> None:
    import pytest

    from envfleet.errors import InvalidInputError
    from envfleet_ray.runtime.recovery import chunk_of

    assert chunk_of(DataProto.from_dict(non_tensors={"actions": np.zeros((3, 5, 7), np.float32)})) == 5
    rows = np.empty(2, dtype=object)
    rows[:] = [np.zeros((4, 7)), np.zeros((4, 7))]
    assert chunk_of(DataProto.from_dict(non_tensors={"actions": rows})) == 4
    with pytest.raises(InvalidInputError, match=r"needs 'actions' \[n, chunk, action_dim\], got shape \(3, 7\)"):
        chunk_of(DataProto.from_dict(non_tensors={"actions": np.zeros((3, 7), np.float32)}))
