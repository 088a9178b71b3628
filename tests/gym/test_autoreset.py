"""The three autoreset modes, step by step, against gymnasium's own ``SyncVectorEnv`` over the same toy envs."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.error import ResetNeeded
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from envfleet.gym import make_vector_env

from .common import CHUNK, steer, toy_cfg
from .reference import StateWalk, ToyChunkEnv

SEED = 7
STEPS = 14


def _reference(cfg, mode: str) -> SyncVectorEnv:
    walk = StateWalk(np.arange(30), SEED)
    return SyncVectorEnv([lambda: ToyChunkEnv(cfg.train, CHUNK, walk) for _ in range(cfg.train.num_envs)], autoreset_mode=mode)


def _same_obs(a: dict, b: dict) -> None:
    assert set(a) == set(b)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"], ids=["next-step", "same-step"])
def test_autoreset_matches_sync_vector_env(mode: str, no_leaks) -> None:
    cfg = toy_cfg()
    face = make_vector_env(cfg, autoreset_mode=mode)
    ref = _reference(cfg, mode)
    try:
        assert face.metadata["autoreset_mode"] is AutoresetMode(mode)
        obs, infos = face.reset(seed=SEED)
        ref_obs, ref_infos = ref.reset(seed=SEED)
        _same_obs(obs, ref_obs)
        np.testing.assert_array_equal(infos["state_id"], ref_infos["state_id"])
        ended_kinds = set()
        resets = 0
        for t in range(STEPS):
            actions = steer(obs)
            obs, rew, term, trunc, infos = face.step(actions)
            ref_obs, ref_rew, ref_term, ref_trunc, ref_infos = ref.step(actions)
            _same_obs(obs, ref_obs)
            np.testing.assert_array_equal(rew, ref_rew, err_msg=f"rewards at step {t}")
            np.testing.assert_array_equal(term, ref_term, err_msg=f"terminations at step {t}")
            np.testing.assert_array_equal(trunc, ref_trunc, err_msg=f"truncations at step {t}")
            ended_kinds |= {"term"} if term.any() else set()
            ended_kinds |= {"trunc"} if trunc.any() else set()
            # A reset env reports its new state id where gymnasium's envs report theirs.
            if "_state_id" in ref_infos:
                reset_here = ref_infos["_state_id"]
                resets += int(reset_here.sum())
                np.testing.assert_array_equal(infos["state_id"][reset_here], ref_infos["state_id"][reset_here])
            if mode == "SameStep":
                assert ("final_obs" in infos) == ("final_obs" in ref_infos)
                if "final_obs" in ref_infos:
                    np.testing.assert_array_equal(infos["_final_obs"], ref_infos["_final_obs"])
                    np.testing.assert_array_equal(infos["_final_info"], ref_infos["_final_info"])
                    for i in np.nonzero(ref_infos["_final_obs"])[0]:
                        _same_obs(infos["final_obs"][i], ref_infos["final_obs"][i])
                    ended = ref_infos["_final_info"]
                    np.testing.assert_array_equal(
                        infos["final_info"]["episode_length"][ended], ref_infos["final_info"]["episode_length"][ended]
                    )
                    assert infos["final_info"]["_episode_length"].tolist() == ended.tolist()
                assert not (term | trunc).any() or "final_obs" in infos
        assert ended_kinds == {"term", "trunc"}, "the walk should end episodes both ways"
        assert resets >= 3
    finally:
        face.close()
        ref.close()


def test_next_step_reset_step_ignores_the_action_and_pays_nothing(no_leaks) -> None:
    face = make_vector_env(toy_cfg(max_steps=CHUNK), autoreset_mode="NextStep")  # every episode is one step long
    try:
        face.reset(seed=1)
        _, rew, term, trunc, infos = face.step(np.ones(face.action_space.shape, np.float32))
        assert trunc.all() and not term.any() and infos["_episode_length"].all()
        obs, rew, term, trunc, infos = face.step(np.ones(face.action_space.shape, np.float32))
        assert not (term | trunc).any() and (rew == 0).all()
        assert infos["_state_id"].all() and not infos["_episode_length"].any()
        fresh = make_vector_env(toy_cfg(max_steps=CHUNK))
        try:
            again, _ = fresh.reset(options={"state_ids": infos["state_id"]})
            _same_obs(obs, again)
        finally:
            fresh.close()
    finally:
        face.close()


def test_disabled_mode_needs_a_masked_reset(no_leaks) -> None:
    cfg = toy_cfg()
    face = make_vector_env(cfg, autoreset_mode=AutoresetMode.DISABLED)
    ref = _reference(cfg, "Disabled")
    try:
        obs, _ = face.reset(seed=SEED)
        ref.reset(seed=SEED)
        masked_resets = 0
        for _ in range(STEPS):
            actions = steer(obs)
            obs, rew, term, trunc, infos = face.step(actions)
            ref_obs, ref_rew, ref_term, ref_trunc, _ = ref.step(actions)
            _same_obs(obs, ref_obs)
            np.testing.assert_array_equal(rew, ref_rew)
            np.testing.assert_array_equal(term | trunc, ref_term | ref_trunc)
            ended = term | trunc
            if ended.any():
                with pytest.raises(ResetNeeded, match=r"reset_mask"):
                    face.step(steer(obs))
                obs, infos = face.reset(options={"reset_mask": ended})
                ref_obs, ref_infos = ref.reset(options={"reset_mask": ended.copy()})
                _same_obs(obs, ref_obs)
                assert infos["_state_id"].tolist() == ended.tolist() == ref_infos["_state_id"].tolist()
                np.testing.assert_array_equal(infos["state_id"][ended], ref_infos["state_id"][ended])
                masked_resets += 1
        assert masked_resets >= 2
    finally:
        face.close()
        ref.close()
