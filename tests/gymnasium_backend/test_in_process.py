"""Envs in the caller's own process (``train.in_process``) and ``train.gymnasium.envs_per_process: auto``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from envfleet import ProcessEnvManager
from envfleet.errors import ConfigError, EnvFleetSimulatorError
from envfleet_gymnasium.layout import ROUND_TRIP_S, Choice
from envfleet_gymnasium.plugin import doctor_findings

from ..conftest import child_pids, pid_alive, shm_segments
from .common import SCRIPTED, gym_cfg

LAYOUT_ENVS = "tests.gymnasium_backend.layout_envs"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_auto_runs_cartpole_in_the_caller_and_a_slow_env_in_processes(no_leaks: None) -> None:
    before = child_pids()
    cheap = gym_cfg("CartPole-v1", chunk=8, num_envs=2, seeds=2)
    with ProcessEnvManager(cheap) as mgr:
        assert mgr.in_process and mgr.shard_pids() == [None]
        started = [_cmdline(p) for p in child_pids() - before]
        assert not [c for c in started if "envfleet.shards.server" in c], f"an env of the caller's process started a shard: {started}"
        mgr.reset_envs_to_state_ids(np.array([0, 1]))
        out = mgr.chunk_step(np.ones((2, 8, 1), np.float32))
        assert out.obs["state"].shape == (2, 4)
    slow = gym_cfg(f"{LAYOUT_ENVS}:envfleet_test/Slow-v0", chunk=8, num_envs=4, seeds=4)
    with ProcessEnvManager(slow) as mgr:
        assert not mgr.in_process
        assert mgr.num_shards == min(4, len(os.sched_getaffinity(0)))  # one process per core
        assert all(pid is not None and pid_alive(pid) for pid in mgr.shard_pids())


def test_the_choice_weighs_a_call_both_ways() -> None:
    # CartPole-like: 8 us a step.
    assert Choice.of(2, 8, 8e-6, 2).in_process
    assert Choice.of(16, 1, 8e-6, 2).in_process  # one sub-step a call: the round trip is not worth it
    many = Choice.of(64, 8, 8e-6, 2)
    assert not many.in_process and many.per_process == 32
    # Where the two are equal, the caller's process.
    step = ROUND_TRIP_S / 8
    assert Choice.of(2, 8, step, 2).in_process
    untimed = Choice.of(16, 8, None, 4)
    assert not untimed.in_process and untimed.per_process == 4 and "could not time a step" in untimed.why
    assert Choice.of(3, 8, 1e-3, 1).in_process  # one core: processes cannot run at once


def test_an_env_the_probe_cannot_time_runs_in_processes_and_the_doctor_says_so(no_leaks: None) -> None:
    cfg = gym_cfg(f"{LAYOUT_ENVS}:envfleet_test/Unstepped-v0", chunk=4, num_envs=2, seeds=2)
    with ProcessEnvManager(cfg) as mgr:
        assert not mgr.in_process and mgr.num_shards == min(2, len(os.sched_getaffinity(0)))
    found = [f for f in doctor_findings(cfg.train) if ": layout" in f[1]]
    assert len(found) == 1 and found[0][0] == "warn" and "could not time a step" in found[0][1], found


def test_the_doctor_states_the_layout(no_leaks: None) -> None:
    found = [f for f in doctor_findings(gym_cfg("CartPole-v1").train) if ": layout" in f[1]]
    assert found and found[0][0] == "ok" and "auto" in found[0][1] and "us" in found[0][1], found
    fixed = [f for f in doctor_findings(gym_cfg("CartPole-v1", envs_per_process=3).train) if ": layout" in f[1]]
    assert "3 envs per shard process" in fixed[0][1]


def test_in_process_with_another_python_or_a_backend_that_needs_its_process_is_refused(tmp_path) -> None:
    with pytest.raises(ConfigError) as err:
        gym_cfg("CartPole-v1", train_in_process=True, train_simulator_python=sys.executable)
    assert "train.in_process" in str(err.value) and "train.simulator_python" in str(err.value)
    with pytest.raises(ConfigError) as err:
        gym_cfg("CartPole-v1", train_in_process=True, train_execution={"mode": "realtime", "clock": "wall"})
    assert "train.in_process" in str(err.value) and "train.execution.clock" in str(err.value)
    from envfleet.config import load_config

    with pytest.raises(ConfigError) as err:
        load_config(data={"train": {"simulator_type": "libero", "task_suite_name": "libero_spatial", "in_process": True}})
    assert "train.in_process" in str(err.value) and "'libero'" in str(err.value) and "process of its own" in str(err.value)


def test_an_error_of_an_env_in_the_caller_is_the_call_s_and_the_envs_go_on(no_leaks: None) -> None:
    cfg = gym_cfg(SCRIPTED, chunk=4, num_envs=2, seeds=[1, 2], kwargs={"raise_at": 6}, train_in_process=True)
    with ProcessEnvManager(cfg) as mgr:
        mgr.reset_envs_to_state_ids(np.array([0, 1]))
        mgr.chunk_step(np.zeros((2, 4, 2), np.float32))
        with pytest.raises(EnvFleetSimulatorError, match="raise_at=6"):
            mgr.chunk_step(np.zeros((2, 4, 2), np.float32))
        mgr.reset_envs_to_state_ids(np.array([1, 0]))
        out = mgr.chunk_step(np.zeros((2, 4, 2), np.float32))
        np.testing.assert_array_equal(out.obs["state"][:, 0], [4, 4])
        assert not out.infos["sim_restarted"].any()


CALLER = textwrap.dedent(
    """
    import json, os, sys, numpy as np
    sys.path.insert(0, {root!r})
    from envfleet import ProcessEnvManager
    from tests.gymnasium_backend.common import gym_cfg
    cfg = gym_cfg("CartPole-v1", chunk=8, num_envs=4, seeds=4, train_in_process={in_process})
    mgr = ProcessEnvManager(cfg)
    mgr.start_simulator()
    mgr.reset_envs_to_state_ids(np.arange(4))
    print(json.dumps({{"shards": [p for p in mgr.shard_pids() if p is not None]}}), flush=True)
    while True:
        mgr.chunk_step(np.ones((4, 8, 1), np.float32))
    """
)


@pytest.mark.parametrize("in_process", [True, False], ids=["in-the-caller", "in-processes"])
def test_a_killed_caller_leaves_nothing_behind(in_process: bool, tmp_path) -> None:
    caller = subprocess.Popen(
        [sys.executable, "-c", CALLER.format(root=ROOT, in_process=in_process)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "ENVFLEET_GYMNASIUM_CACHE": str(tmp_path)},
    )
    try:
        shards = json.loads(caller.stdout.readline())["shards"]  # type: ignore[union-attr]
        assert (shards == []) is in_process
        mine = {n for n in shm_segments() if n.split("_")[1] == str(caller.pid)}
        assert mine, "the caller's envs have no shared memory"
        time.sleep(0.5)  # mid-chunk
        os.kill(caller.pid, signal.SIGKILL)
        caller.wait()
    finally:
        if caller.poll() is None:
            caller.kill()
            caller.wait()
    tmp = os.environ.get("TMPDIR", "/tmp")

    def left() -> tuple[list[int], set[str], list[str]]:
        return (
            [p for p in shards if pid_alive(p)],
            {n for n in shm_segments() if n.split("_")[1] == str(caller.pid)},
            [d for d in os.listdir(tmp) if d.startswith(f"envfleet_logs_{caller.pid}_")],
        )

    deadline = time.time() + 20
    while time.time() < deadline and any(left()):
        time.sleep(0.1)
    alive, segments, logs = left()
    assert not alive, "a shard outlived its caller"
    assert not segments, "a shared-memory segment outlived its caller"
    assert not logs, f"log directories outlived the caller: {logs}"
