"""ProcessEnvManager with the toy backend: parallel shards, bad input, crash, hang, offload, leaks."""

from __future__ import annotations

import gc
import glob
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import numpy as np
import pytest

from envfleet import ProcessEnvManager
from envfleet.config import load_config
from envfleet.errors import EnvFleetSimulatorError, InvalidInputError, RestartLimitError

from ..conftest import own_segments as shm_segments
from ..conftest import pid_alive, stop_process, toy_cfg


def make_cfg(num_envs: int = 4, chunk: int = 4, **toy: object) -> object:
    return toy_cfg(num_envs, chunk, **toy)


@pytest.fixture
def manager(request, no_leaks):
    kwargs = getattr(request, "param", {})
    mgr = ProcessEnvManager(make_cfg(**kwargs))
    mgr.start_simulator()
    yield mgr
    mgr.close()


def actions(n: int = 4, chunk: int = 4, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (n, chunk, 7)).astype(np.float32)


def test_one_process_per_shard(manager) -> None:
    pids = manager.shard_pids()
    assert manager.num_shards == 4 and len(set(pids)) == 4
    assert all(pid_alive(p) for p in pids)


@pytest.mark.parametrize("manager", [{"envs_per_process": 2}], indirect=True)
def test_envs_per_process_groups_envs(manager) -> None:
    assert manager.num_shards == 2
    assert [s.env_slice for s in manager.shards] == [slice(0, 2), slice(2, 4)]


def test_shards_step_in_parallel(no_leaks) -> None:
    # Each shard sleeps through its chunk: a sleep needs no CPU, so on a loaded machine the
    # shards still overlap, and one after the other they could not finish before `serial`.
    sleep_s, shards = 2.0, 3
    with ProcessEnvManager(make_cfg(num_envs=shards, step_sleep_s=sleep_s)) as mgr:
        mgr.reset_envs_to_state_ids(np.arange(shards))
        t0 = time.perf_counter()
        mgr.chunk_step(actions(shards))
        wall = time.perf_counter() - t0
    serial = shards * sleep_s
    assert sleep_s <= wall < serial, f"{shards} shards took {wall:.3f}s; one after the other would take at least {serial:.3f}s"


def test_outputs_and_torch_actions(manager) -> None:
    import torch  # here, not on top: nox -s tests-core runs this module in a venv without torch, deselecting this test

    first = manager.reset_envs_to_state_ids(np.array([0, 10, 20, 5]), np.array([0, 1, 2, 0]))
    assert first.task_descriptions[1] == "reach the green goal (task 1)"
    out = manager.chunk_step(torch.from_numpy(actions()))
    assert out.obs["full_image"].shape == (4, 64, 64, 3)
    assert out.infos["sim_restarted"].tolist() == [False] * 4
    assert out.infos["state_id"].tolist() == [0, 10, 20, 5]


def test_calls_before_start_and_after_close_are_errors(no_leaks) -> None:
    mgr = ProcessEnvManager(make_cfg())
    with pytest.raises(RuntimeError, match="start_simulator"):
        mgr.chunk_step(actions())
    mgr.close()
    with pytest.raises(RuntimeError, match="closed"):
        mgr.start_simulator()
    mgr.close()  # twice is fine


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (lambda m: m.chunk_step(np.zeros((3, 4, 7), np.float32)), r"shape \[num_envs=4, chunk=4, action_dim=7\], got \[3, 4, 7\]"),
        (lambda m: m.chunk_step(np.zeros((4, 4, 7), np.int32)), "float dtype"),
        (lambda m: m.chunk_step([[0.0]]), "numpy array"),
        (lambda m: m.reset_envs_to_state_ids(np.array([0.5, 1, 2, 3])), "integers"),
        (lambda m: m.reset_envs_to_state_ids(np.array([0, 1, 2, -1])), "state id -1 .env 3"),
        (lambda m: m.reset_envs_to_state_ids(np.array([0, 1, 2, 3]), np.array([0, 0, 0])), r"task_ids must have shape \(4,\)"),
        (lambda m: m.reset_envs_to_state_ids(np.array([0, 1, 2, 13]), np.array([0, 0, 0, 0])), "env 3.*task id 0.*state id 13.*task 1"),
    ],
    ids=["wrong-env-count", "int-actions", "list-actions", "fractional-ids", "negative-id", "short-task-ids", "task-mismatch"],
)
def test_bad_input_then_usable(manager, bad, match) -> None:
    manager.reset_envs_to_state_ids(np.arange(4))
    with pytest.raises(InvalidInputError, match=match):
        bad(manager)
    out = manager.chunk_step(actions())
    assert out.rewards.shape == (4, 4)


def test_a_shard_runs_only_the_commands_of_its_table(manager) -> None:
    from envfleet.shards.handle import Deadline
    from envfleet.shards.messages import ErrorKind, Outcome

    shard = manager.shards[0]
    shard.conn.send(("__init__", None))  # a method of the server, but not a command
    reply = shard.reply_within(Deadline.after(30.0))
    assert reply.outcome is Outcome.ERR and reply.payload.kind is ErrorKind.ERROR
    assert reply.payload.type_name == "ValueError" and "unknown command '__init__'" in reply.payload.text
    assert manager.chunk_step(actions()).rewards.shape == (4, 4)


def _reset_obs(state_ids: np.ndarray) -> dict[str, np.ndarray]:
    with ProcessEnvManager(make_cfg(num_envs=len(state_ids))) as ref:
        return ref.reset_envs_to_state_ids(state_ids).obs


def test_sigkill_between_calls_restarts_shard(manager) -> None:
    ids = np.array([3, 4, 5, 6])
    manager.reset_envs_to_state_ids(ids)
    manager.chunk_step(actions())
    victim = manager.shard_pids()[2]
    os.kill(victim, signal.SIGKILL)
    time.sleep(0.2)
    out = manager.chunk_step(actions(seed=1))
    assert out.infos["sim_restarted"].tolist() == [False, False, True, False]
    assert out.truncations[2].tolist() == [False, False, False, True]
    assert out.rewards[2].tolist() == [0, 0, 0, 0]
    expected = _reset_obs(ids)
    np.testing.assert_array_equal(out.obs["full_image"][2], expected["full_image"][2])
    assert manager.stats.restarts == 1
    assert manager.shard_pids()[2] != victim
    nxt = manager.chunk_step(actions(seed=2))
    assert not nxt.infos["sim_restarted"].any()


@pytest.mark.parametrize("manager", [{"step_cost_s": 0.1}], indirect=True)
def test_sigkill_during_call_restarts_shard(manager) -> None:
    manager.reset_envs_to_state_ids(np.arange(4))
    victim = manager.shard_pids()[0]
    threading.Timer(0.15, os.kill, (victim, signal.SIGKILL)).start()
    out = manager.chunk_step(actions())
    assert out.infos["sim_restarted"].tolist() == [True, False, False, False]
    assert out.truncations[0, -1] and not out.truncations[1:, -1].any()
    assert not manager.chunk_step(actions()).infos["sim_restarted"].any()


@pytest.mark.parametrize("manager", [{"step_timeout_s": 2.0}], indirect=True)
def test_sigstop_hang_detected_by_deadline(manager) -> None:
    manager.reset_envs_to_state_ids(np.arange(4))
    victim = manager.shard_pids()[1]
    stop_process(victim)
    t0 = time.perf_counter()
    out = manager.chunk_step(actions())
    stall = time.perf_counter() - t0
    # At least the deadline; and cut by it: nothing else would end the call (the restart's own
    # deadline is the start's, 300 s), so the bound only has to stay well below that.
    assert 1.9 < stall < 120
    assert out.infos["sim_restarted"].tolist() == [False, True, False, False]
    assert not pid_alive(victim)
    assert "did not answer within 2 s" in manager.stats.restart_log[-1]["cause"]


@pytest.mark.parametrize("manager", [{"step_timeout_s": 2.0, "reset_timeout_s": 20.0}], indirect=True)
def test_a_slow_reset_gets_the_reset_deadline_not_the_step_deadline(manager) -> None:
    # A reset may build a scene (LIBERO does for a new task): a shard that takes longer
    # than step_timeout_s over it is not killed, as long as it answers within reset_timeout_s.
    manager.reset_envs_to_state_ids(np.arange(4))
    victim = manager.shard_pids()[2]
    stop_process(victim)
    resume = threading.Timer(3.0, os.kill, (victim, signal.SIGCONT))
    resume.start()
    t0 = time.perf_counter()
    out = manager.reset_envs_to_state_ids(np.arange(4, 8))
    resume.join()  # the SIGCONT goes to this manager's shard, never to a later owner of its pid
    assert time.perf_counter() - t0 > 2.9
    assert not out.infos["sim_restarted"].any() and manager.stats.restarts == 0
    assert manager.shard_pids()[2] == victim
    assert out.infos["state_id"].tolist() == [4, 5, 6, 7]


def test_reset_deadline_defaults_to_the_larger_of_step_and_start() -> None:
    from envfleet.config import ConfigError

    def deadline(**train: float) -> float:
        cfg = load_config(overrides=["train.simulator_type=toy", *[f"train.{k}={v}" for k, v in train.items()]])
        mgr = ProcessEnvManager(cfg)  # not started: no process
        mgr.close()
        return mgr.reset_timeout_s

    assert deadline() == 300.0
    assert deadline(step_timeout_s=500) == 500.0
    assert deadline(reset_timeout_s=7) == 7.0
    with pytest.raises(ConfigError, match="reset_timeout_s' must be > 0 or null"):
        load_config(overrides=["train.simulator_type=toy", "train.reset_timeout_s=0"])


@pytest.mark.parametrize("manager", [{"max_restarts": 1}], indirect=True)
def test_restart_limit_raises_with_details(manager) -> None:
    manager.reset_envs_to_state_ids(np.arange(4))
    os.kill(manager.shard_pids()[3], signal.SIGKILL)
    manager.chunk_step(actions())
    os.kill(manager.shard_pids()[3], signal.SIGKILL)
    with pytest.raises(RestartLimitError) as info:
        manager.chunk_step(actions())
    msg = str(info.value)
    assert "stage 0, shard 3 (envs 3)" in msg
    assert "SIGKILL" in msg
    assert "max_restarts=1" in msg
    assert "envfleet shard: pid" in msg  # the tail of the child's output


def test_backend_exception_carries_traceback_and_shard_survives(no_leaks) -> None:
    with ProcessEnvManager(make_cfg(raise_on_step=1)) as mgr:
        mgr.reset_envs_to_state_ids(np.arange(4))
        mgr.chunk_step(actions())
        pids = mgr.shard_pids()
        with pytest.raises(EnvFleetSimulatorError) as info:
            mgr.chunk_step(actions())
        assert "raise_on_step=1 reached" in str(info.value)
        assert "envfleet_toy/env.py" in info.value.remote_traceback
        assert mgr.shard_pids() == pids
        assert mgr.chunk_step(actions()).rewards.shape == (4, 4)


def test_constructor_exception_reported(no_leaks) -> None:
    mgr = ProcessEnvManager(make_cfg(raise_in_constructor=True))
    with pytest.raises(EnvFleetSimulatorError, match="raise_in_constructor is set") as info:
        mgr.start_simulator()
    assert "ToyEnv" in info.value.remote_traceback or "__init__" in info.value.remote_traceback
    assert not any(pid_alive(p) for p in mgr.shard_pids() if p)
    mgr.close()


def test_offload_continues_the_same_episodes(no_leaks) -> None:
    ids = np.array([1, 11, 21, 2])
    results = []
    for offload in (False, True):
        with ProcessEnvManager(make_cfg()) as mgr:
            mgr.reset_envs_to_state_ids(ids)
            mgr.chunk_step(actions(seed=3))
            if offload:
                pids = mgr.shard_pids()
                mgr.stop_simulator()
                assert not any(pid_alive(p) for p in pids)
                assert mgr.shard_pids() == [None] * 4
                mgr.start_simulator()
            results.append(mgr.chunk_step(actions(seed=4)))
    for key in results[0].obs:
        np.testing.assert_array_equal(results[0].obs[key], results[1].obs[key])
    np.testing.assert_array_equal(results[0].infos["episode_length"], results[1].infos["episode_length"])


def test_no_leak_after_close(no_leaks) -> None:
    before = shm_segments()
    mgr = ProcessEnvManager(make_cfg())
    mgr.start_simulator()
    pids = mgr.shard_pids()
    logs = mgr._shard_set.log_dir
    assert len(shm_segments() - before) == 4 and os.path.isdir(logs)
    mgr.close()
    assert shm_segments() == before
    assert not any(pid_alive(p) for p in pids)
    assert not os.path.exists(logs)


def test_no_leak_after_gc_without_close(no_leaks) -> None:
    before = shm_segments()
    mgr = ProcessEnvManager(make_cfg())
    mgr.start_simulator()
    pids = mgr.shard_pids()
    del mgr
    gc.collect()
    assert shm_segments() == before
    assert not any(pid_alive(p) for p in pids)


def test_no_leak_after_parent_sigkill() -> None:
    from ..conftest import shm_segments as all_segments

    def parent_segments() -> set[str]:
        return {n for n in all_segments() if n.split("_")[1] == str(parent.pid)}

    code = textwrap.dedent(
        """
        import sys, time, numpy as np
        from envfleet.config import load_config
        from envfleet import ProcessEnvManager
        cfg = load_config(overrides=["train.simulator_type=toy", "train.num_envs=3"])
        m = ProcessEnvManager(cfg); m.start_simulator(); m.reset_envs_to_state_ids(np.arange(3))
        print(" ".join(map(str, m.shard_pids())), flush=True)
        time.sleep(600)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 3 and all(pid_alive(p) for p in pids)
        assert len(parent_segments()) == 3
        logs = os.path.join(tempfile.gettempdir(), f"envfleet_logs_{parent.pid}_*")
        assert len(glob.glob(logs)) == 1
        parent.kill()
        parent.wait()
        deadline = time.time() + 15
        while time.time() < deadline and (any(pid_alive(p) for p in pids) or parent_segments()):
            time.sleep(0.1)
        assert not [p for p in pids if pid_alive(p)], "shard processes outlived their parent"
        assert not parent_segments(), "shared memory outlived its owner"
        while time.time() < deadline and glob.glob(logs):
            time.sleep(0.1)
        assert not glob.glob(logs), "the shards' log directory outlived its owner"
    finally:
        parent.kill()


def test_results_are_never_overwritten_while_held(manager) -> None:
    # The manager recycles result arrays (see concepts.md), but only ones nobody holds.
    manager.reset_envs_to_state_ids(np.arange(4))
    first = manager.chunk_step(actions(seed=1))
    kept = {k: v.copy() for k, v in first.obs.items()}
    view = first.obs["full_image"][1:]  # a view also keeps its array out of the pool
    import torch  # here, not on top: nox -s tests-core runs this module in a venv without torch, deselecting this test

    tensor = torch.from_numpy(first.obs["state"])  # and so does a tensor made from it
    second = manager.chunk_step(actions(seed=2))
    third = manager.chunk_step(actions(seed=3))
    for key, value in kept.items():
        assert np.array_equal(first.obs[key], value), key
    assert not np.array_equal(second.obs["state"], first.obs["state"])  # the env did move
    assert np.array_equal(view, kept["full_image"][1:]) and np.array_equal(tensor.numpy(), kept["state"])
    for result in (second, third):
        for key in first.obs:
            assert not np.shares_memory(result.obs[key], first.obs[key]), key
    assert not np.shares_memory(second.obs["full_image"], third.obs["full_image"])


def test_dropped_results_are_recycled(manager) -> None:
    manager.reset_envs_to_state_ids(np.arange(4))
    addresses = set()
    for seed in range(6):
        result = manager.chunk_step(actions(seed=seed))
        addresses.add(result.obs["full_image"].ctypes.data)
        del result
    assert len(addresses) <= 2  # the same memory comes back instead of new pages each call


def test_shards_of_different_sizes_merge_by_the_slow_path(no_leaks) -> None:
    # 5 envs, 2 per process: the last shard has one env, so the shards' byte layouts differ.
    mgr = ProcessEnvManager(make_cfg(num_envs=5, envs_per_process=2))
    with mgr:
        mgr.reset_envs_to_state_ids(np.arange(5))
        out = mgr.chunk_step(actions(n=5))
        assert [s.num_envs for s in mgr.shards] == [2, 2, 1]
        assert out.rewards.shape == (5, 4) and out.rewards.dtype == np.float32
        assert out.infos["state_id"].tolist() == [0, 1, 2, 3, 4]
        assert out.infos["episode_length"].tolist() == [4] * 5 and out.infos["sim_restarted"].tolist() == [False] * 5


@pytest.mark.parametrize("per_process", [1, 2], ids=["one-env-shards", "uneven-shards"])
def test_each_env_gets_its_own_actions_and_returns_its_own_observations(no_leaks, per_process: int) -> None:
    # The same envs stepped in this process are the reference: every env of every shard must
    # get its own row of actions and hand back its own images, rewards and infos.
    from envfleet.env import EnvContext
    from envfleet_toy.env import ToyEnv

    n, chunk = 5, 4
    cfg = make_cfg(num_envs=n, chunk=chunk, envs_per_process=per_process)
    reference = ToyEnv(cfg.train, EnvContext(num_envs=n, action_dim=7, num_action_chunks=chunk))
    ids = np.array([3, 14, 7, 22, 9])
    with ProcessEnvManager(cfg) as mgr:
        mgr.reset_envs_to_state_ids(ids)
        reference.reset_envs_to_state_ids(ids)
        for seed in range(3):
            acts = actions(n=n, chunk=chunk, seed=seed)
            got, want = mgr.chunk_step(acts), reference.chunk_step(acts)
            for key in want.obs:
                assert np.array_equal(got.obs[key], want.obs[key]), key
            assert np.array_equal(got.rewards, want.rewards) and np.array_equal(got.truncations, want.truncations)
            for key in ("state_id", "episode_length", "success_once"):
                assert np.array_equal(got.infos[key], want.infos[key]), key
    reference.close()


def test_a_null_chunk_length_takes_each_calls_own(no_leaks) -> None:
    """``actor.model.num_action_chunks: null`` (verl-vla's config has no chunk length): each call's
    actions set it, and flags follow; a fixed length still refuses another."""
    cfg = load_config(overrides=["train.simulator_type=toy", "train.num_envs=2", "actor.model.num_action_chunks=null"])
    mgr = ProcessEnvManager(cfg)
    mgr.start_simulator()
    try:
        mgr.reset_envs_to_state_ids(np.array([0, 1]))
        for chunk in (3, 5, 1):
            out = mgr.chunk_step(actions(2, chunk))
            assert out.rewards.shape == out.terminations.shape == out.truncations.shape == (2, chunk)
    finally:
        mgr.close()
    fixed = ProcessEnvManager(make_cfg(num_envs=2, chunk=4))
    fixed.start_simulator()
    try:
        fixed.reset_envs_to_state_ids(np.array([0, 1]))
        with pytest.raises(InvalidInputError, match="chunk=4"):
            fixed.chunk_step(actions(2, 3))
    finally:
        fixed.close()
