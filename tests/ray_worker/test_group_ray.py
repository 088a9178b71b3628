"""EnvWorkerGroup on a local Ray bound to 127.0.0.1, with the toy backend."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from envfleet.dataproto import DataProto
from envfleet.errors import InvalidInputError, WorkerDiedError
from envfleet_ray.commands.loop import EnvLoop, interleaved_schedule
from envfleet_ray.commands.policies import load_policy
from envfleet_ray.runtime.group import EnvWorkerGroup

from ..conftest import pid_alive, toy_cfg
from .raytools import listening_sockets_of, ray_pids

W, S, N, CHUNK = 2, 2, 2, 4


def cfg(**extra: object):
    # depth: an observation outside verl's three, which must reach the group and survive a restart.
    return toy_cfg(N, CHUNK, S, "train.max_episode_steps=8", "train.toy.depth=float32", *[f"{k}={v}" for k, v in extra.items()])


@pytest.fixture
def group(local_ray, request):
    g = EnvWorkerGroup(cfg(), num_workers=W, cpus_per_worker=1, max_restarts=getattr(request, "param", 0))
    g.init_worker()
    g.init_simulator()
    yield g
    g.shutdown()


def reset_all(g: EnvWorkerGroup, ids: list[int]):
    return g.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": np.array(ids)}))


def step(g: EnvWorkerGroup, stage: int, seed: int = 0):
    acts = np.random.default_rng(seed).uniform(-1, 1, (W * N, CHUNK, 7)).astype(np.float32)
    return g.env_interact_step(DataProto.from_dict(non_tensors={"actions": acts}, meta_info={"stage_id": stage}))


def test_local_ray_listens_on_loopback_only(local_ray) -> None:
    pids = ray_pids()
    assert pids, "no Ray process found"
    sockets = listening_sockets_of(pids)
    assert sockets, "Ray processes listen on no TCP socket?"
    public = [(a, p) for a, p in sockets if not a.startswith("127.")]
    assert not public, f"Ray listens beyond loopback: {public}"


def test_reset_and_step_through_futures_worker_major(group) -> None:
    ids = list(range(W * S * N))  # worker 0: stage0 [0,1] stage1 [2,3]; worker 1: stage0 [4,5] stage1 [6,7]
    fut = reset_all(group, ids)
    out = fut.get()
    assert out.batch["state_id"].tolist() == ids
    assert out.non_tensor_batch["stage_id"].tolist() == [0, 0, 1, 1, 0, 0, 1, 1]
    f0, f1 = step(group, 0), step(group, 1)  # both in flight at once
    r0, r1 = f0.get(), f1.get()
    assert r0.batch["state_id"].tolist() == [0, 1, 4, 5]
    assert r1.batch["state_id"].tolist() == [2, 3, 6, 7]
    assert r0.batch["full_image"].shape == (W * N, 64, 64, 3)
    assert not r0.batch["sim_restarted"].any()


def test_wrong_sizes_are_rejected(group) -> None:
    with pytest.raises(InvalidInputError, match="expected num_workers \\* stage_num \\* num_envs = 2 \\* 2 \\* 2 = 8"):
        reset_all(group, [0, 1])
    with pytest.raises(InvalidInputError, match="meta_info\\['stage_id'\\] is missing"):
        group.env_interact_step(DataProto.from_dict(non_tensors={"actions": np.zeros((W * N, CHUNK, 7), np.float32)}))
    reset_all(group, list(range(8))).get()
    with pytest.raises(InvalidInputError, match="out of range"):
        step(group, 5).get()
    assert step(group, 0).get().batch["rews"].shape == (W * N, CHUNK)


def test_killed_actor_is_reported_with_rank_and_node(group) -> None:
    reset_all(group, list(range(8))).get()
    info = group.node_info()[1]
    shard_pids = [p for stage in info["shard_pids"]["train"] for p in stage]
    os.kill(info["pid"], signal.SIGKILL)
    with pytest.raises(WorkerDiedError) as err:
        step(group, 0).get()
    msg = str(err.value)
    assert "EnvWorker rank 1 on node 127.0.0.1" in msg and f"pid {info['pid']}" in msg
    deadline = time.time() + 10
    while time.time() < deadline and any(pid_alive(p) for p in shard_pids):
        time.sleep(0.1)
    assert not any(pid_alive(p) for p in shard_pids), "the dead worker's simulators outlived it"


@pytest.mark.parametrize("group", [1], indirect=True)
def test_killed_actor_is_recreated_with_max_restarts(group) -> None:
    reset_all(group, list(range(8))).get()
    step(group, 0).get()
    victim = group.node_info()[0]["pid"]
    os.kill(victim, signal.SIGKILL)
    out = step(group, 1, seed=3).get()
    assert out.batch["sim_restarted"].tolist() == [True, True, False, False]
    assert out.batch["truncations"][:2, -1].all() and not out.batch["truncations"][2:, -1].any()
    assert out.batch["rews"][:2].abs().sum() == 0
    assert out.batch["state_id"][:2].tolist() == [0, 0] or out.batch["full_image"].shape[0] == 4
    assert group.restarts == 1 and group.node_info()[0]["pid"] != victim
    assert out.batch["depth"].shape == (W * N, 64, 64) and out.batch["depth"][:2].abs().sum() > 0  # the rebuilt worker's too
    nxt = step(group, 0).get()
    assert not nxt.batch["sim_restarted"].any()
    assert nxt.batch["state_id"].tolist() == [0, 1, 4, 5]  # the rebuilt worker was reset to its last state ids


def test_pipelined_loop_runs_and_counts(group) -> None:
    policy = load_policy("random", CHUNK, 7)
    loop = EnvLoop(group, policy)
    stats = loop.run(6)
    assert stats.chunks_per_stage == 6
    assert stats.env_steps == 6 * S * W * N * CHUNK
    assert stats.episodes == W * S * N * 3  # max_episode_steps 8 = 2 chunks: 3 episodes per env
    assert stats.resets == 3
    metrics = group.finish_rollout()
    assert metrics["total"]["episodes"] == stats.episodes
    assert sum(r["episodes"] for r in metrics["total"]["per_task"].values()) == stats.episodes


def test_interleaved_schedule() -> None:
    ids = np.arange(6)
    tasks = np.array([0, 0, 0, 1, 1, 1])
    order, t = interleaved_schedule(ids, tasks)
    assert order.tolist() == [0, 3, 1, 4, 2, 5] and t.tolist() == [0, 1, 0, 1, 0, 1]


class _MisconfiguredGroup(EnvWorkerGroup):
    """A group whose workers get a config their constructor rejects (as on a node with other packages)."""

    def _create(self, rank: int):
        from omegaconf import DictConfig, OmegaConf

        # A plain dict, as a worker built elsewhere would get: the worker loads it, and refuses it.
        plain = OmegaConf.to_container(self.cfg, resolve=True) if isinstance(self.cfg, DictConfig) else self.cfg
        plain["train"]["num_envs"] = "four"
        self.cfg = plain
        return super()._create(rank)


def test_a_worker_constructor_error_reaches_the_caller_as_itself(local_ray) -> None:
    from envfleet.errors import ConfigError

    with pytest.raises(ConfigError, match="num_envs"):
        _MisconfiguredGroup(cfg(), num_workers=1, cpus_per_worker=1)
