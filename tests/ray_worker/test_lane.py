"""The local lane: steps to a worker on the driver's node without Ray's task path."""

from __future__ import annotations

import socket
import threading

import numpy as np
import pytest
import ray

from envfleet.dataproto import DataProto
from envfleet.errors import InvalidInputError
from envfleet_ray.runtime.group import EnvWorkerGroup
from envfleet_ray.runtime.lane import LaneClient, LaneClosed, LaneServer

from .test_group_ray import CHUNK, N, S, cfg


# ---------------------------------------------------------------------- the lane on its own
class _Echo:
    """Stands in for a worker: the lane calls its env_interact_step."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.release.set()

    def env_interact_step(self, arg: object) -> object:
        self.release.wait(30)
        if isinstance(arg, str) and arg == "raise":
            raise InvalidInputError("echo: asked to raise")
        return arg


@pytest.fixture
def echo_lane():
    worker = _Echo()
    server = LaneServer(worker)
    client = LaneClient(server.address, server.token)
    yield worker, server, client
    client.close()
    server.close()


def test_large_arrays_cross_whole_and_writable(echo_lane) -> None:
    _, _, client = echo_lane
    big = np.random.default_rng(0).integers(0, 255, (4, 1024, 1024, 3), dtype=np.uint8)  # 12 MiB: many partial writes
    small = np.arange(10, dtype=np.float32)
    out = client.call(0, "env_interact_step", {"big": big, "small": small, "twice": [big[:1], big[1:2]]}).result(30)
    assert np.array_equal(out["big"], big) and np.array_equal(out["small"], small)
    assert np.array_equal(out["twice"][1], big[1:2])
    out["big"][0, 0, 0, 0] = 7  # received arrays are the driver's own, writable
    dp = DataProto.from_dict(non_tensors={"x": big[:2]}, meta_info={"stage_id": 1})
    back = client.call(0, "env_interact_step", dp).result(30)
    assert np.array_equal(back.non_tensor_batch["x"], big[:2]) and back.meta_info == {"stage_id": 1}


def test_replies_are_matched_to_calls_in_any_order(echo_lane) -> None:
    worker, _, client = echo_lane
    worker.release.clear()
    calls = [client.call(0, "env_interact_step", i) for i in range(3)] + [client.call(1, "env_interact_step", "s1")]
    assert not calls[0].ready()
    worker.release.set()
    assert calls[3].result(10) == "s1"
    assert [calls[i].result(10) for i in (2, 0, 1)] == [2, 0, 1]


def test_a_waiting_reader_does_not_hold_up_a_sender(echo_lane) -> None:
    worker, _, client = echo_lane
    worker.release.clear()
    first = client.call(0, "env_interact_step", "a")
    got: list[object] = []
    reader = threading.Thread(target=lambda: got.append(first.result(10)))
    reader.start()
    sent = threading.Event()
    second: list[object] = []
    threading.Thread(target=lambda: (second.append(client.call(0, "env_interact_step", "b")), sent.set())).start()
    assert sent.wait(5), "a call on a connection waited for another thread's reply"
    worker.release.set()
    reader.join(10)
    assert got == ["a"] and second[0].result(10) == "b"  # type: ignore[attr-defined]


def test_a_dropped_call_leaves_no_reply_behind(echo_lane) -> None:
    import gc

    worker, _, client = echo_lane
    worker.release.clear()
    dropped = client.call(0, "env_interact_step", np.zeros(10))
    kept = client.call(0, "env_interact_step", "kept")
    del dropped
    gc.collect()
    worker.release.set()
    assert kept.result(10) == "kept"
    conn = client.connect(0)
    assert conn.stash == {} and conn.abandoned == set()


def test_the_workers_own_exception_comes_back(echo_lane) -> None:
    _, _, client = echo_lane
    with pytest.raises(InvalidInputError, match="asked to raise"):
        client.call(0, "env_interact_step", "raise").result(10)
    assert client.call(0, "env_interact_step", 5).result(10) == 5


def test_only_listed_methods_are_served(echo_lane) -> None:
    _, _, client = echo_lane
    with pytest.raises(ValueError, match="does not serve 'close'"):
        client.call(0, "close", None).result(10)
    assert client.call(0, "env_interact_step", 1).result(10) == 1


def test_a_wrong_token_is_refused(echo_lane) -> None:
    _, server, client = echo_lane
    stranger = LaneClient(server.address, b"x" * len(server.token))
    with pytest.raises(ConnectionRefusedError, match="refused the lane"):
        stranger.connect(0)  # refused at once: the group then uses Ray's path
    with pytest.raises(LaneClosed, match="cannot connect"):
        stranger.call(0, "env_interact_step", 1)
    stranger.close()
    assert client.call(0, "env_interact_step", 2).result(10) == 2


def test_a_timeout_leaves_the_call_pending(echo_lane) -> None:
    worker, _, client = echo_lane
    worker.release.clear()
    call = client.call(0, "env_interact_step", "late")
    with pytest.raises(TimeoutError, match="did not answer within 0.2 s"):
        call.result(0.2)
    worker.release.set()
    assert call.result(10) == "late"


def test_closing_the_server_ends_pending_calls(echo_lane) -> None:
    worker, server, client = echo_lane
    worker.release.clear()
    call = client.call(0, "env_interact_step", 1)
    server.close()
    worker.release.set()
    with pytest.raises(LaneClosed):
        call.result(10)
    with pytest.raises(LaneClosed):
        client.call(0, "env_interact_step", 1).result(10)


def test_the_socket_is_abstract_and_bound_to_this_user(echo_lane) -> None:
    _, server, _ = echo_lane
    assert server.address.startswith("\0")  # no file to leave behind
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.connect(server.address)
    probe.close()


# ---------------------------------------------------------------------- through a worker group
def _step_data(stage: int, seed: int, rows: int) -> DataProto:
    acts = np.random.default_rng(seed).uniform(-1, 1, (rows, CHUNK, 7)).astype(np.float32)
    return DataProto.from_dict(non_tensors={"actions": acts}, meta_info={"stage_id": stage})


def test_lane_and_ray_paths_give_the_same_steps(local_ray) -> None:
    ids = np.arange(S * N)
    with EnvWorkerGroup(cfg(), num_workers=1) as laned, EnvWorkerGroup(cfg(), num_workers=1, local_lane=False) as plain:
        assert laned.lane_ranks == [0] and plain.lane_ranks == []
        outs = []
        for g in (laned, plain):
            g.init_worker()
            g.init_simulator()
            g.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": ids})).get()
            if g is laned:
                # Two calls of one stage in flight, read back to front, and the other stage between them.
                f1, f2, g1 = (
                    g.env_interact_step(_step_data(0, 1, N)),
                    g.env_interact_step(_step_data(0, 2, N)),
                    g.env_interact_step(_step_data(1, 3, N)),
                )
                r2, r1, q1 = f2.get(), f1.get(), g1.get()
            else:
                r1 = g.env_interact_step(_step_data(0, 1, N)).get()
                r2 = g.env_interact_step(_step_data(0, 2, N)).get()
                q1 = g.env_interact_step(_step_data(1, 3, N)).get()
            outs.append((r1, r2, q1))
        for a, b in zip(outs[0], outs[1]):
            assert set(a.batch.keys()) == set(b.batch.keys())
            for key in a.batch.keys():
                assert a.batch[key].dtype == b.batch[key].dtype and bool((a.batch[key] == b.batch[key]).all()), key
            assert list(a.non_tensor_batch["task_descriptions"]) == list(b.non_tensor_batch["task_descriptions"])
            assert a.meta_info == b.meta_info
        assert not bool((outs[0][0].batch["state"] == outs[0][1].batch["state"]).all()), "two different steps gave one state"
        with pytest.raises(InvalidInputError, match="out of range"):
            laned.env_interact_step(_step_data(7, 0, N)).get()
        fut = laned.env_interact_step(_step_data(1, 4, N))
        fut.get()
        assert fut.ready()
        bad = _step_data(0, 0, N)
        bad.non_tensor_batch["actions"][0, 0, 0] = np.nan
        with pytest.raises(InvalidInputError, match="NaN|finite"):
            laned.env_interact_step(bad).get()
        assert laned.env_interact_step(_step_data(0, 5, N)).get().batch["rews"].shape == (N, CHUNK)


def test_workers_on_another_node_or_refusing_use_ray(local_ray, monkeypatch) -> None:
    with EnvWorkerGroup(cfg(), num_workers=1) as g:
        info = g.node_info()[0]
        assert info["node_id"] == ray.get_runtime_context().get_node_id()
        assert g.lane_ranks == [0]
        here = g.nodes[0]
        g.nodes[0] = {**here, "node_id": "elsewhere"}
        g.routes.attach([0])
        assert g.lane_ranks == []  # a worker on another node gets no lane
        g.nodes[0] = here

        def refuse(self: LaneClient, key: object) -> None:
            raise ConnectionRefusedError("the worker refused the lane")

        monkeypatch.setattr(LaneClient, "connect", refuse)
        g.routes.attach([0])
        assert g.lane_ranks == []  # e.g. the driver runs as another user: Ray's path


@pytest.mark.parametrize("local_lane", [True, False], ids=["lane", "ray-task-path"])
def test_a_killed_worker_is_reported_on_either_path(local_ray, local_lane: bool) -> None:
    import os
    import signal

    from envfleet.errors import WorkerDiedError

    with EnvWorkerGroup(cfg(), num_workers=1, local_lane=local_lane) as g:
        g.init_worker()
        g.init_simulator()
        g.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": np.arange(S * N)})).get()
        g.env_interact_step(_step_data(0, 0, N)).get()
        pid = g.node_info()[0]["pid"]
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(WorkerDiedError, match=f"EnvWorker rank 0 on node .*pid {pid}") as err:
            g.env_interact_step(_step_data(0, 1, N)).get()
        # Ray's account of the death, not just "the lane closed".
        assert "ActorDiedError" in str(err.value) or "RayActorError" in str(err.value), str(err.value)
