"""First-ready stepping (send_chunk / recv_chunk) with the toy backend: each env's episode is the
lockstep one bit for bit, bad input, a crash and a hang of one shard."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from envfleet import ProcessEnvManager
from envfleet.errors import InvalidInputError, SimulatorStoppedError

from ..conftest import pid_alive, stop_process, toy_cfg

CHUNK = 4
# Heavy-tailed per-env step costs and a reset as long as several chunks, episodes of 3 chunks with
# auto-reset: envs finish in orders that differ from chunk to chunk.
COSTS = {"env_sleep_s": 0.004, "step_cost_tail": 1.2, "reset_sleep_s": 0.03, "max_episode_steps": 3 * CHUNK, "auto_reset": True}


def _actions(rounds: int, num_envs: int) -> np.ndarray:
    return np.random.default_rng(7).uniform(-1, 1, (rounds, num_envs, CHUNK, 7)).astype(np.float32)


def result_row(result: object, j: int) -> dict[str, object]:
    out = {f"obs.{k}": v[j].copy() for k, v in result.obs.items()}  # type: ignore[attr-defined]
    out.update({f"info.{k}": np.asarray(v[j]).copy() for k, v in result.infos.items()})  # type: ignore[attr-defined]
    out.update(rewards=result.rewards[j].copy(), terminations=result.terminations[j].copy(), truncations=result.truncations[j].copy())  # type: ignore[attr-defined]
    out["description"] = result.task_descriptions[j]  # type: ignore[attr-defined]
    return out


def lockstep_episodes(cfg: object, num_envs: int, acts: np.ndarray) -> list[list[dict[str, object]]]:
    with ProcessEnvManager(cfg) as mgr:
        mgr.reset_envs_to_state_ids(np.arange(num_envs))
        per_env: list[list[dict[str, object]]] = [[] for _ in range(num_envs)]
        for k in range(len(acts)):
            out = mgr.chunk_step(acts[k])
            for e in range(num_envs):
                per_env[e].append(result_row(out, e))
    return per_env


def first_ready_episodes(
    cfg: object, num_envs: int, acts: np.ndarray, min_ready: int
) -> tuple[list[list[dict[str, object]]], list[list[int]]]:
    rounds = len(acts)
    with ProcessEnvManager(cfg) as mgr:
        mgr.reset_envs_to_state_ids(np.arange(num_envs))
        per_env: list[list[dict[str, object]]] = [[] for _ in range(num_envs)]
        mgr.send_chunk(np.arange(num_envs), acts[0])
        batches: list[list[int]] = []
        while any(len(rows) < rounds for rows in per_env):
            in_flight = sum(1 for rows in per_env if len(rows) < rounds)
            out = mgr.recv_chunk(min(min_ready, in_flight))
            batches.append(out.env_ids.tolist())
            again = []
            for j, e in enumerate(out.env_ids.tolist()):
                per_env[e].append(result_row(out, j))
                if len(per_env[e]) < rounds:
                    again.append(e)
            if again:
                mgr.send_chunk(np.array(again), np.stack([acts[len(per_env[e]), e] for e in again]))
        assert not mgr.first_ready.busy
    return per_env, batches


def assert_same_episodes(lock: list[list[dict[str, object]]], ready: list[list[dict[str, object]]]) -> None:
    for e, (a_rows, b_rows) in enumerate(zip(lock, ready)):
        assert len(a_rows) == len(b_rows)
        for k, (a, b) in enumerate(zip(a_rows, b_rows)):
            assert a.keys() == b.keys(), (e, k)
            for key in a:
                if isinstance(a[key], np.ndarray):
                    assert a[key].dtype == b[key].dtype and a[key].tobytes() == b[key].tobytes(), f"env {e}, chunk {k}: {key} differs"  # type: ignore[union-attr]
                else:
                    assert a[key] == b[key], f"env {e}, chunk {k}: {key} differs"


@pytest.mark.parametrize("per_process", [1, 2])
def test_each_env_bit_identical_to_lockstep(no_leaks, per_process: int) -> None:
    num_envs, rounds = 4, 8
    cfg = toy_cfg(num_envs, CHUNK, envs_per_process=per_process, **COSTS)
    acts = _actions(rounds, num_envs)
    lock = lockstep_episodes(cfg, num_envs, acts)
    ready, batches = first_ready_episodes(cfg, num_envs, acts, min_ready=per_process)
    assert_same_episodes(lock, ready)
    # The run was not lockstep in disguise: some results came without the others, and auto-resets happened.
    assert any(len(b) < num_envs for b in batches), batches
    assert any(row["info.reset_state_id"] >= 0 for rows in ready for row in rows)
    assert all(not row["info.sim_restarted"] for rows in ready for row in rows)


def test_bad_input_is_rejected_and_the_manager_stays_usable(no_leaks) -> None:
    acts = _actions(1, 4)[0]
    with ProcessEnvManager(toy_cfg(4, CHUNK, envs_per_process=2)) as mgr:
        with pytest.raises(SimulatorStoppedError, match="reset every env once"):
            mgr.send_chunk([0, 1], acts[:2])
        mgr.reset_envs_to_state_ids(np.arange(4))
        with pytest.raises(InvalidInputError, match="take all 2 of them or none|takes all 2 of them or none"):
            mgr.send_chunk([0], acts[:1])
        with pytest.raises(InvalidInputError, match=r"shape \[num_envs=2"):
            mgr.send_chunk([0, 1], acts)
        mgr.send_chunk([0, 1], acts[:2])
        with pytest.raises(InvalidInputError, match=r"env\(s\) 0..1 not ready for actions"):
            mgr.send_chunk([1, 0], acts[:2])
        for bad in (0, 5, -1, 1.5, True):
            with pytest.raises(InvalidInputError, match="min_ready must be an integer in 1..4"):
                mgr.recv_chunk(bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="min_ready=3, but only 2 envs have chunks in flight"):
            mgr.recv_chunk(3)
        with pytest.raises(InvalidInputError, match="chunk_step needs every env idle"):
            mgr.chunk_step(np.zeros((4, CHUNK, 7), np.float32))
        for call in (lambda: mgr.reset_envs_to_state_ids(np.arange(4)), mgr.stop_simulator, lambda: mgr.flush_video("x")):
            with pytest.raises(InvalidInputError, match="needs every env idle, but envs 0..1 have first-ready chunks in flight"):
                call()
        with pytest.raises(InvalidInputError, match=r"shape \[num_envs=2, chunk=4"):
            mgr.send_chunk([2, 3], np.zeros((2, CHUNK + 1, 7), np.float32))
        out = mgr.recv_chunk(2)
        assert out.env_ids.tolist() == [0, 1] and out.obs["full_image"].shape[0] == 2
        with pytest.raises(InvalidInputError, match="min_ready=1, but only 0 envs"):
            mgr.recv_chunk(1)
        # Usable: a lockstep call and another first-ready round.
        full = mgr.chunk_step(np.zeros((4, CHUNK, 7), np.float32))
        assert full.rewards.shape == (4, CHUNK)
        mgr.send_chunk([3, 2, 1, 0], acts)
        assert sorted(mgr.recv_chunk(4).env_ids.tolist()) == [0, 1, 2, 3]


def test_a_held_result_is_never_overwritten(no_leaks) -> None:
    acts = _actions(3, 2)
    with ProcessEnvManager(toy_cfg(2, CHUNK)) as mgr:
        mgr.reset_envs_to_state_ids(np.arange(2))
        mgr.send_chunk([0, 1], acts[0])
        held = mgr.recv_chunk(2)
        snapshot = {k: v.copy() for k, v in held.obs.items()}
        for k in (1, 2):  # the same envs stepped again, twice, while the first result is held
            mgr.send_chunk([0, 1], acts[k])
            later = mgr.recv_chunk(2)
            assert not any(np.shares_memory(held.obs[key], later.obs[key]) for key in held.obs)
            assert not np.array_equal(later.obs["state"], snapshot["state"])
        for key, value in snapshot.items():
            assert np.array_equal(held.obs[key], value), key


def test_one_chunk_length_in_flight(no_leaks) -> None:
    with ProcessEnvManager(toy_cfg(2, "null")) as mgr:
        mgr.reset_envs_to_state_ids(np.arange(2))
        mgr.send_chunk([0], np.zeros((1, 3, 7), np.float32))
        with pytest.raises(InvalidInputError, match=r"chunks of \[3\] sub-steps are in flight; send_chunk's actions have 5"):
            mgr.send_chunk([1], np.zeros((1, 5, 7), np.float32))
        mgr.send_chunk([1], np.zeros((1, 3, 7), np.float32))
        assert mgr.recv_chunk(2).rewards.shape == (2, 3)


def test_timeout_returns_what_is_done(no_leaks) -> None:
    with ProcessEnvManager(toy_cfg(2, CHUNK, step_sleep_s=1.0)) as mgr:
        mgr.reset_envs_to_state_ids(np.arange(2))
        mgr.send_chunk([0, 1], np.zeros((2, CHUNK, 7), np.float32))
        t0 = time.perf_counter()
        out = mgr.recv_chunk(2, timeout_s=0.1)
        assert time.perf_counter() - t0 < 0.9 and out.env_ids.size == 0 and out.rewards.shape == (0, CHUNK)
        assert sorted(mgr.recv_chunk(2).env_ids.tolist()) == [0, 1]
        # max_ready: both done, one handed out, the other kept for the next call.
        mgr.send_chunk([0, 1], np.zeros((2, CHUNK, 7), np.float32))
        time.sleep(1.5)
        first = mgr.recv_chunk(1, max_ready=1)
        second = mgr.recv_chunk(1, timeout_s=0.0)
        assert len(first.env_ids) == len(second.env_ids) == 1 and {int(first.env_ids[0]), int(second.env_ids[0])} == {0, 1}
        with pytest.raises(InvalidInputError, match="max_ready must be an integer >= min_ready=2"):
            mgr.recv_chunk(2, max_ready=1)


def _restart_case(mgr: ProcessEnvManager, hurt: object) -> None:
    """Shard 1 of 3 is hurt while all step: the others keep returning results, then shard 1's envs
    come back marked ``sim_restarted`` with their last reset's observations, and it steps on."""
    first = mgr.reset_envs_to_state_ids(np.arange(3))
    old = mgr.shard_pids()[1]
    acts = np.zeros((3, CHUNK, 7), np.float32)
    mgr.send_chunk(np.arange(3), acts)
    hurt(old)  # type: ignore[operator]
    others = 0
    while True:
        out = mgr.recv_chunk(1)
        ids = out.env_ids.tolist()
        if 1 in ids:
            break
        others += len(ids)
        mgr.send_chunk(out.env_ids, acts[: len(ids)])
    # While shard 1 was down, the two others went on (at least one round each beyond their first).
    assert others >= 4, others
    j = ids.index(1)
    assert out.infos["sim_restarted"][j] and not out.infos["sim_restarted"][[i for i in range(len(ids)) if i != j]].any()
    assert out.truncations[j].tolist() == [False] * (CHUNK - 1) + [True] and not out.rewards[j].any()
    assert np.array_equal(out.obs["full_image"][j], first.obs["full_image"][1])
    assert mgr.stats.restarts == 1 and not pid_alive(old) and mgr.shard_pids()[1] != old
    rest = [i for i in range(3) if i not in ids]
    if rest:
        mgr.recv_chunk(len(rest))
    mgr.send_chunk(np.arange(3), acts)
    again = mgr.recv_chunk(3)
    assert not again.infos["sim_restarted"].any()


def test_a_crashed_shard_restarts_while_the_others_step(no_leaks) -> None:
    with ProcessEnvManager(toy_cfg(3, CHUNK, step_sleep_s=0.2, reset_sleep_s=1.5)) as mgr:
        _restart_case(mgr, lambda pid: os.kill(pid, signal.SIGKILL))
        pids = mgr.shard_pids()
    assert not any(pid_alive(p) for p in pids)


def test_a_hung_shard_restarts_while_the_others_step(no_leaks) -> None:
    with ProcessEnvManager(toy_cfg(3, CHUNK, step_sleep_s=0.2, reset_sleep_s=1.5, step_timeout_s=1.5, reset_timeout_s=20.0)) as mgr:
        _restart_case(mgr, stop_process)
        pids = mgr.shard_pids()
    assert not any(pid_alive(p) for p in pids)
