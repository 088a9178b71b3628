"""The SB3 face over a real ``envfleet serve`` on loopback: the same steps as the face run in process."""

from __future__ import annotations

import numpy as np

from envfleet.sb3 import make_vec_env

from ..gym.common import CHUNK, steer, toy_cfg
from ..remote.servetools import serve

BASE = (
    "train.simulator_type=toy",
    "train.num_envs=3",
    f"actor.model.num_action_chunks={CHUNK}",
    "train.max_episode_steps=12",
    "train.init_params.camera_heights=16",
    "train.init_params.camera_widths=16",
    "train.toy.envs_per_process=3",
)


def test_sb3_vec_env_over_a_server_matches_the_local_one(tmp_path, no_leaks) -> None:
    served = serve(tmp_path, base=BASE)
    local = make_vec_env(toy_cfg())
    try:
        remote = make_vec_env(toy_cfg(**{"remote.address": served.address, "remote.token_file": served.token_file}))
        try:
            assert remote.observation_space == local.observation_space and remote.action_space == local.action_space
            local.seed(7)
            remote.seed(7)
            obs, robs = local.reset(), remote.reset()
            dones_seen = 0
            for t in range(14):  # past an episode's end (12 steps): SB3's autoreset over the wire too
                for key in obs:
                    np.testing.assert_array_equal(robs[key], obs[key], err_msg=f"step {t}: {key}")
                actions = steer(obs)
                obs, rew, dones, infos = local.step(actions)
                robs, rrew, rdones, rinfos = remote.step(actions)
                np.testing.assert_array_equal(rrew, rew, err_msg=f"rewards at step {t}")
                np.testing.assert_array_equal(rdones, dones, err_msg=f"dones at step {t}")
                assert [sorted(i) for i in rinfos] == [sorted(i) for i in infos], f"info keys at step {t}"
                dones_seen += int(dones.sum())
            assert dones_seen > 0, "no episode ended: the autoreset path was not compared"
        finally:
            remote.close()
    finally:
        local.close()
        served.stop()
