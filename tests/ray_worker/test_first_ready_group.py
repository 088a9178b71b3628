"""First-ready stepping through EnvWorkerGroup (envfleet_ray.runtime.first_ready) on a local Ray with the toy:
each env's episode is the lockstep one bit for bit, a killed worker is recreated while the others step, bad input."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from envfleet.dataproto import DataProto
from envfleet.errors import InvalidInputError
from envfleet_ray.runtime.first_ready import FirstReadyGroup
from envfleet_ray.runtime.group import EnvWorkerGroup

from ..conftest import pid_alive, shm_segments, toy_cfg

W, N, CHUNK = 2, 2, 4
# Heavy-tailed per-env step costs, a reset as long as several chunks, episodes of 3 chunks with auto-reset:
# envs (one per process) finish in orders that differ from chunk to chunk.
COSTS = {"env_sleep_s": 0.004, "step_cost_tail": 1.2, "reset_sleep_s": 0.03, "max_episode_steps": 3 * CHUNK, "auto_reset": True}


def _actions(rounds: int) -> np.ndarray:
    return np.random.default_rng(11).uniform(-1, 1, (rounds, W * N, CHUNK, 7)).astype(np.float32)


def _group(local_ray: object, max_restarts: int = 0, **train: object) -> EnvWorkerGroup:
    g = EnvWorkerGroup(toy_cfg(N, CHUNK, 1, envs_per_process=1, **train), num_workers=W, cpus_per_worker=1, max_restarts=max_restarts)
    g.init_worker()
    g.init_simulator()
    return g


def _reset(g: EnvWorkerGroup) -> DataProto:
    return g.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": np.arange(W * N)})).get()  # type: ignore[no-any-return]


def _row(out: DataProto, j: int) -> dict[str, object]:
    assert out.batch is not None
    row: dict[str, object] = {k: out.batch[k][j].numpy().copy() for k in out.batch.keys()}
    row.update({k: v[j] for k, v in out.non_tensor_batch.items() if k != "env_ids"})
    return row


def _same(a: dict[str, object], b: dict[str, object], where: str) -> None:
    assert a.keys() == b.keys(), where
    for key, value in a.items():
        if isinstance(value, np.ndarray):
            other = b[key]
            assert isinstance(other, np.ndarray) and value.dtype == other.dtype and value.tobytes() == other.tobytes(), f"{where}: {key}"
        else:
            assert value == b[key], f"{where}: {key}"


def test_each_env_bit_identical_to_lockstep(local_ray) -> None:
    rounds = 7
    acts = _actions(rounds)
    # Two groups, each fresh: an auto-reset picks its next state where the env's walk over states stands.
    g = _group(local_ray, **COSTS)
    try:
        _reset(g)
        lock: list[list[dict[str, object]]] = [[] for _ in range(W * N)]
        for k in range(rounds):
            out = g.env_interact_step(DataProto.from_dict(non_tensors={"actions": acts[k]}, meta_info={"stage_id": 0})).get()
            for e in range(W * N):
                lock[e].append(_row(out, e))
    finally:
        g.shutdown()
    g = _group(local_ray, **COSTS)
    try:
        _reset(g)
        fr = g.first_ready(0)
        ready: list[list[dict[str, object]]] = [[] for _ in range(W * N)]
        batches: list[list[int]] = []
        # Sent in an order that is not the ids' own: rows come back by id whatever the order sent.
        fr.send([3, 0, 2, 1], acts[0][[3, 0, 2, 1]])
        while any(len(rows) < rounds for rows in ready):
            out = fr.recv(1)
            ids = out.non_tensor_batch["env_ids"].tolist()
            assert ids == sorted(ids)
            batches.append(ids)
            again = []
            for j, e in enumerate(ids):
                ready[e].append(_row(out, j))
                if len(ready[e]) < rounds:
                    again.append(e)
            if again:
                fr.send(again, np.stack([acts[len(ready[e]), e] for e in again]))
        assert not fr.busy
    finally:
        g.shutdown()
    for e in range(W * N):
        assert len(lock[e]) == len(ready[e]) == rounds
        for k in range(rounds):
            _same(lock[e][k], ready[e][k], f"env {e}, chunk {k}")
    # Not lockstep in disguise: results came without the others, and auto-resets happened.
    assert any(len(b) < W * N for b in batches), batches
    assert any(int(row["reset_state_id"]) >= 0 for rows in ready for row in rows)  # type: ignore[call-overload]
    assert not any(bool(row["sim_restarted"]) for rows in ready for row in rows)


def test_a_killed_worker_is_recreated_while_the_others_step(local_ray) -> None:
    g = _group(local_ray, max_restarts=1, step_sleep_s=0.15)
    try:
        first = _reset(g)
        info = g.node_info()[0]
        victim, shard_pids = info["pid"], [p for stage in info["shard_pids"]["train"] for p in stage]
        fr = FirstReadyGroup(g, 0)
        acts = np.zeros((W * N, CHUNK, 7), np.float32)
        fr.send(np.arange(W * N), acts)
        os.kill(victim, signal.SIGKILL)
        others = 0
        while True:
            out = fr.recv(1)
            ids = out.non_tensor_batch["env_ids"].tolist()
            if any(e < N for e in ids):
                break
            others += len(ids)
            assert not out.batch["sim_restarted"].any()
            fr.send(ids, acts[: len(ids)])
        assert others >= N, others  # worker 1's envs kept returning while worker 0 was recreated
        mine = [j for j, e in enumerate(ids) if e < N]
        assert [ids[j] for j in mine] == list(range(N))  # both of the dead worker's envs, in one answer
        assert out.batch["sim_restarted"][mine].all() and out.batch["worker_restarted"][mine].all()
        assert out.batch["truncations"][mine, -1].all() and not out.batch["rews"][mine].any()
        assert np.array_equal(out.batch["full_image"][mine].numpy(), first.batch["full_image"][:N].numpy())
        assert g.restarts == 1 and g.node_info()[0]["pid"] != victim
        # Everyone steps on, the recreated worker too, with no restart flag any more.
        rest = [e for e in range(W * N) if fr.phase[e].value != "ready"]
        if rest:
            fr.recv(len(rest))
        fr.send(np.arange(W * N), acts)
        again = fr.recv(W * N)
        assert again.non_tensor_batch["env_ids"].tolist() == list(range(W * N)) and not again.batch["sim_restarted"].any()
        owners = {str(victim)} | {str(i["pid"]) for i in g.node_info()}
    finally:
        g.shutdown()

    def left() -> list[str]:
        return [n for n in shm_segments() if n.split("_")[1] in owners]

    deadline = time.time() + 10
    while time.time() < deadline and (pid_alive(victim) or any(pid_alive(p) for p in shard_pids) or left()):
        time.sleep(0.1)
    assert not pid_alive(victim) and not any(pid_alive(p) for p in shard_pids), "the dead worker or its simulators outlived it"
    assert not left(), f"shared memory of the group's workers left behind: {left()}"


def test_bad_input_is_rejected_and_the_group_stays_usable(local_ray) -> None:
    g = _group(local_ray, step_sleep_s=0.05)
    try:
        _reset(g)
        fr = g.first_ready(0)
        acts = np.zeros((W * N, CHUNK, 7), np.float32)
        with pytest.raises(InvalidInputError, match="stage_id must be an int in"):
            g.first_ready(3)
        with pytest.raises(InvalidInputError, match="min_ready=1, but only 0 envs"):
            fr.recv(1)
        with pytest.raises(InvalidInputError, match="out of range: expected 0..3"):
            fr.send([4], acts[:1])
        with pytest.raises(InvalidInputError, match=r"actions must have shape \[len\(env_ids\)=2"):
            fr.send([0, 1], acts)
        fr.send([1, 2], acts[:2])
        with pytest.raises(InvalidInputError, match=r"env\(s\) \[2\] not ready for actions \(env 2: its chunk is in flight"):
            fr.send([2, 3], acts[:2])
        for bad in (0, 5, -1, 1.5, True):
            with pytest.raises(InvalidInputError, match="min_ready must be an integer in 1..4"):
                fr.recv(bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="min_ready=3, but only 2 envs have chunks in flight"):
            fr.recv(3)
        with pytest.raises(InvalidInputError, match="max_ready must be an integer >= min_ready=2"):
            fr.recv(2, max_ready=1)
        # A worker's own check comes back as itself: a chunk length other than the one in flight.
        with pytest.raises(InvalidInputError, match="chunks of 4 sub-steps are in flight"):
            fr.send([0], np.zeros((1, CHUNK + 1, 7), np.float32))
        out = fr.recv(2)
        assert out.non_tensor_batch["env_ids"].tolist() == [1, 2] and out.batch["full_image"].shape[0] == 2
        # Usable: a timeout with nothing done, max_ready, a lockstep step.
        fr.send(np.arange(W * N), acts)
        empty = fr.recv(1, timeout_s=0.0)
        assert len(empty) == 0 and empty.non_tensor_batch["env_ids"].size == 0
        assert fr.recv(W * N).non_tensor_batch["env_ids"].tolist() == list(range(W * N))
        fr.send(np.arange(W * N), acts)
        got: list[int] = []
        while len(got) < W * N:
            part = fr.recv(1, max_ready=1)
            assert len(part) == 1
            got += part.non_tensor_batch["env_ids"].tolist()
        assert sorted(got) == list(range(W * N)) and not fr.busy
        step = g.env_interact_step(DataProto.from_dict(non_tensors={"actions": acts}, meta_info={"stage_id": 0})).get()
        assert step.batch["rews"].shape == (W * N, CHUNK)
    finally:
        g.shutdown()
