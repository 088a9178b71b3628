"""The TorchRL face over a real ``envfleet serve`` on loopback: the same rollout as the face run in process."""

from __future__ import annotations

import torch

from envfleet.remote import RemoteEnvManager
from envfleet.torchrl import make_env

from ..remote.servetools import serve
from .test_env import CHUNK, toy_cfg

BASE = (
    "train.simulator_type=toy",
    "train.num_envs=3",
    f"actor.model.num_action_chunks={CHUNK}",
    f"train.max_episode_steps={2 * CHUNK}",
    "train.init_params.camera_heights=16",
    "train.init_params.camera_widths=16",
    "train.toy.envs_per_process=3",
)


def _rollout(env) -> object:
    env.set_seed(0)
    actions = iter(torch.linspace(-1, 1, 5 * 3 * CHUNK * 7).reshape(5, 3, CHUNK, 7))
    # Episodes last 2 chunks; break_when_any_done=False makes TorchRL reset done envs through "_reset".
    return env.rollout(5, policy=lambda td: td.set("action", next(actions)), break_when_any_done=False)


def test_torchrl_env_over_a_server_matches_the_local_one(tmp_path, no_leaks) -> None:
    served = serve(tmp_path, base=BASE)
    local = make_env(toy_cfg(envs_per_process=3))
    try:
        remote = make_env(_remote_cfg(served))
        try:
            assert isinstance(remote.manager, RemoteEnvManager)
            assert remote.observation_spec == local.observation_spec and remote.action_spec == local.action_spec
            want, got = _rollout(local), _rollout(remote)
            assert bool(want["next", "truncated"].any()), "no episode ended: the partial-reset path was not compared"
            assert set(got.keys(True, True)) == set(want.keys(True, True))
            for key in want.keys(True, True):
                assert got[key].dtype == want[key].dtype and torch.equal(got[key], want[key]), key
        finally:
            remote.close()
    finally:
        local.close()
        served.stop()


def _remote_cfg(served):
    from envfleet.config import load_config

    return load_config(overrides=[*BASE, f"train.remote.address={served.address}", f"train.remote.token_file={served.token_file}"])
