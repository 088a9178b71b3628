"""Crash recovery and offload work the same for shards under another interpreter.

A killed MetaWorld shard is rebuilt under the same ``train.simulator_python`` and
reset to where its env last reset; after offload the shards start again there. The
worker's own shared memory is freed in the end (the janitor and ``close`` are the
worker's, whatever runs the shards).
"""

from __future__ import annotations

import os
import signal

import numpy as np

from envfleet import ProcessEnvManager
from envfleet.config import load_config

from ..metaworld.common import CHUNK, metaworld_train, moving_actions, sim_python


def _exe(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        return fh.read().split(b"\0")[0].decode()


def test_killed_shard_restarts_under_the_same_interpreter(no_leaks: None) -> None:
    cfg = load_config(data={"train": metaworld_train(num_envs=2), "actor": {"model": {"num_action_chunks": CHUNK}}})
    actions = moving_actions(3, 3)
    with ProcessEnvManager(cfg) as mgr:
        assert [_exe(p) for p in mgr.shard_pids() if p] == [sim_python()] * 2
        first = mgr.reset_envs_to_state_ids(np.array([60, 61]))
        mgr.chunk_step(np.stack([actions[0]] * 2))
        victim = mgr.shard_pids()[1]
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        out = mgr.chunk_step(np.stack([actions[1]] * 2))
        assert out.infos["sim_restarted"].tolist() == [False, True]
        # The rebuilt shard starts the episode its env last reset to, under MetaWorld's venv again.
        np.testing.assert_array_equal(out.obs["full_image"][1], first.obs["full_image"][1])
        new = mgr.shard_pids()[1]
        assert new is not None and new != victim and _exe(new) == sim_python()
        assert not mgr.chunk_step(np.stack([actions[2]] * 2)).infos["sim_restarted"].any()
        mgr.stop_simulator()
        assert mgr.shard_pids() == [None, None]
        mgr.start_simulator()
        assert [_exe(p) for p in mgr.shard_pids() if p] == [sim_python()] * 2
