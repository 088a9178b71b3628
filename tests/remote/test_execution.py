"""``train.execution`` through ``envfleet serve``: the server schedules, the caller's delays cross the wire,
and a client whose execution section differs from the server's is refused."""

from __future__ import annotations

import numpy as np
import pytest

from envfleet import ProcessEnvManager
from envfleet.config import ConfigError
from envfleet.errors import InvalidInputError
from envfleet.remote import RemoteEnvManager, build_manager

from .servetools import local_cfg, serve

CALLER = ("train.execution.mode=realtime", "train.execution.delay=caller", "train.execution.horizon=3")


def _chunks(calls: int) -> np.ndarray:
    return np.random.default_rng(11).uniform(-1, 1, (calls, 4, 4, 7)).astype(np.float32)


def _delays(k: int) -> np.ndarray:
    return np.array([k % 4, 1, 0, 3], np.int64) % 4


def test_a_realtime_stage_over_the_wire_is_the_local_one_bit_for_bit(tmp_path, no_leaks) -> None:
    chunks = _chunks(5)
    with ProcessEnvManager(local_cfg(*CALLER)) as ref:
        ref.reset_envs_to_state_ids(np.arange(4))
        want = [ref.chunk_step(chunk, _delays(k)) for k, chunk in enumerate(chunks)]
    served = serve(tmp_path, *CALLER)
    try:
        with build_manager(local_cfg(*CALLER, remote=served.address, token_file=served.token_file)) as mgr:
            assert isinstance(mgr, RemoteEnvManager) and mgr.execution["delay"] == "caller"
            mgr.reset_envs_to_state_ids(np.arange(4))
            got = [mgr.chunk_step(chunk, _delays(k)) for k, chunk in enumerate(chunks)]
            with pytest.raises(InvalidInputError, match="between 0 and the horizon"):
                mgr.chunk_step(chunks[0], np.array([0, 0, 9, 0]))
            mgr.chunk_step(chunks[0], _delays(0))  # the stage stays usable
        for g, w in zip(got, want, strict=True):
            for key in w.obs:
                np.testing.assert_array_equal(g.obs[key], w.obs[key], err_msg=key)
            for key in ("applied_action", "action_source", "action_delay"):
                np.testing.assert_array_equal(g.infos[key], w.infos[key], err_msg=key)
            np.testing.assert_array_equal(g.rewards, w.rewards)
        assert got[1].infos["action_delay"].tolist() == _delays(1).tolist()
    finally:
        served.stop()


def test_a_client_whose_execution_differs_from_the_servers_is_refused(tmp_path, no_leaks) -> None:
    served = serve(tmp_path, *CALLER)
    try:
        with pytest.raises(ConfigError, match=r"train.execution is mode chunk here but .*'delay': 'caller'.* on the server"):
            build_manager(local_cfg(remote=served.address, token_file=served.token_file))
    finally:
        served.stop()
