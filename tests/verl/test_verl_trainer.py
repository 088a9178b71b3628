"""envfleet's worker as the Env role of verl's own trainer machinery (verl 0.9.1).

The role is built as verl's ``RobRayPPOTrainer`` builds it and driven in the order of
verl's ``EnvLoop``: init, a reset future, then per stage generate -> env_interact_step ->
get, then finish_rollout. Toy backend: 2 workers x 2 stages x 2 envs.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from verl import DataProto

from envfleet.errors import InvalidInputError

from ..conftest import shm_segments
from ..reliability.bad_inputs import RESET, WORKER_CASES, BadInput
from .roles import build_roles, drive_in_envloop_order, verl_config

W, S, N, CHUNK = 2, 2, 2, 4
TOY = {
    "simulator_type": "toy",
    "num_envs": N,
    "max_episode_steps": 16,
    "init_params": {"camera_depths": False, "camera_heights": 32, "camera_widths": 32, "camera_names": ["table", "wrist"]},
    "toy": {"depth": "float32"},  # an observation outside verl's three: it travels beside them
}


RAY_CPUS = 8  # for the local_ray fixture of tests/conftest.py: verl's roles and the rollout's


@pytest.fixture(scope="module")
def roles(local_ray):
    before = shm_segments()
    config = verl_config(TOY, stages=S, chunk=CHUNK)
    env_wg, rollout_wg = build_roles(config, env_workers=W)
    env_wg.init_worker()
    env_wg.init_simulator()
    yield env_wg, rollout_wg
    owners = {str(info["pid"]) for info in env_wg.node_info()}
    env_wg.close()
    # close() through verl's dispatch has freed every stage's shared memory when it returns. Only the
    # workers' own segments count: another job on the machine may hold segments of its own.
    left = {name for name in shm_segments() - before if name.split("_")[1] in owners}
    assert left == set(), f"segments of the workers still linked after close(): {sorted(left)}"


def reset(env_wg, ids: np.ndarray, tasks: np.ndarray | None = None) -> DataProto:
    columns = {"state_ids": ids} if tasks is None else {"state_ids": ids, "task_ids": tasks}
    return env_wg.reset_envs_to_state_ids(DataProto.from_dict(non_tensors=columns)).get()


def test_role_is_a_verl_worker_group(roles) -> None:
    env_wg, _ = roles
    assert env_wg.world_size == W
    for name in ("init_worker", "init_simulator", "env_interact_step", "reset_envs_to_state_ids", "get_all_state_ids", "finish_rollout"):
        assert callable(getattr(env_wg, name)), name
    ids = env_wg.get_all_state_ids()  # one-to-all: one answer per worker
    assert len(ids) == W and all(np.array_equal(ids[0], other) for other in ids)


def test_envloop_order(roles) -> None:
    """The EnvLoop's order of calls, 3 rounds; each env's observation reaches the policy in its row."""
    env_wg, rollout_wg = roles
    ids = env_wg.get_all_state_ids()[0][[0, 11, 22, 3, 14, 25, 6, 17]]  # toy: task = id // 10
    tasks = ids // 10
    history = drive_in_envloop_order(env_wg, rollout_wg, ids, tasks, rounds=3)
    first = history[0]
    assert [tuple(first[s].batch["full_image"].shape) for s in range(S)] == [(W * N, 32, 32, 3)] * S
    for s in range(S):
        descriptions = first[s].non_tensor_batch["task_descriptions"].tolist()
        assert descriptions == [f"reach the {d.split()[2]} goal (task {t})" for d, t in zip(descriptions, first[s].batch["state_id"] // 10)]
        # Zero actions leave each point where it was: every round shows the reset's state.
        assert all(torch.equal(later[s].batch["state"], first[s].batch["state"]) for later in history[1:])
    metrics = env_wg.finish_rollout()
    assert [m["rank"] for m in metrics] == list(range(W))
    assert all(m["chunks"] == 3 * S and m["env_steps"] == 3 * S * N * CHUNK for m in metrics)


def test_an_extra_observation_travels_through_verls_dispatch(roles) -> None:
    """The toy's ``depth`` comes back from reset and step through verl's RayWorkerGroup, concatenated worker-major."""
    env_wg, _ = roles
    first = reset(env_wg, np.arange(W * S * N))
    assert tuple(first.batch["depth"].shape) == (W * S * N, 32, 32) and first.batch["depth"].dtype == torch.float32
    step = DataProto.from_dict(non_tensors={"actions": np.ones((W * N, CHUNK, 7), np.float32)}, meta_info={"stage_id": 1})
    out = env_wg.env_interact_step(step).get()
    assert tuple(out.batch["depth"].shape) == (W * N, 32, 32)
    # Rows 2-3 of the reset are worker 0's stage 1: the point moved, so its depth changed.
    assert not torch.equal(out.batch["depth"][:N], first.batch["depth"][N : 2 * N])


def test_stages_overlap(local_ray) -> None:
    """Two stages of one worker submitted together take about the time of one (the actor is asynchronous)."""
    sleep_s = 1.0
    train = {**TOY, "num_envs": 1, "toy": {"step_sleep_s": sleep_s}}
    env_wg, _ = build_roles(verl_config(train, stages=2, chunk=CHUNK), env_workers=1)
    try:
        env_wg.init_worker()
        env_wg.init_simulator()
        reset(env_wg, np.array([0, 1]))

        def step(stage: int):
            return env_wg.env_interact_step(
                DataProto.from_dict(non_tensors={"actions": np.zeros((1, CHUNK, 7), np.float32)}, meta_info={"stage_id": stage})
            )

        step(0).get()  # warm
        t0 = time.perf_counter()
        step(0).get()
        one = time.perf_counter() - t0
        t0 = time.perf_counter()
        futures = [step(0), step(1)]
        results = [f.get() for f in futures]
        both = time.perf_counter() - t0
        assert [r.meta_info["stage_id"] for r in results] == [0, 1]
        # Run one after the other, two stages cannot take less than two sleeps; together they take
        # one sleep plus overhead. A sleep needs no CPU, so a loaded machine does not close the gap.
        assert one >= sleep_s and both < 2 * sleep_s, f"one stage {one:.2f} s, two stages together {both:.2f} s"
    finally:
        env_wg.close()


@pytest.mark.parametrize("case", WORKER_CASES, ids=[c.id for c in WORKER_CASES])
def test_bad_input_through_verl(roles, case: BadInput) -> None:
    """The reliability suite's bad inputs give the same errors through verl's dispatch, and the workers still step."""
    env_wg, _ = roles
    rows = W * N * S if case.method == RESET else W * N
    data = DataProto.from_dict(non_tensors=case.columns(rows, CHUNK), meta_info=case.meta)
    with pytest.raises(case.error) as err:
        getattr(env_wg, case.method)(data).get()
    assert case.fragment in str(err.value)
    out = reset(env_wg, np.arange(W * S * N))
    assert out.batch["state_id"].tolist() == list(range(W * S * N))
    for stage in range(S):
        step = DataProto.from_dict(non_tensors={"actions": np.zeros((W * N, CHUNK, 7), np.float32)}, meta_info={"stage_id": stage})
        assert env_wg.env_interact_step(step).get().batch["rews"].shape == (W * N, CHUNK)


def test_wrong_row_count_through_verl(roles) -> None:
    """verl splits a batch evenly; a worker that gets the wrong number of rows says how many it expected."""
    env_wg, _ = roles
    step = DataProto.from_dict(non_tensors={"actions": np.zeros((W * 3, CHUNK, 7), np.float32)}, meta_info={"stage_id": 0})
    with pytest.raises(InvalidInputError, match=r"num_envs=2"):
        env_wg.env_interact_step(step).get()
