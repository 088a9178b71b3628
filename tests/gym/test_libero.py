"""The gymnasium face over real LIBERO scenes, against the stage's ProcessEnvManager run alone.

Both run libero_spatial task 0 (2 envs in one shard process, two 64x64 cameras). The face's
observations must be bit-identical to the manager's after a reset, a chunk, a partial reset
(``reset_mask``: one env starts a new episode, the other runs on) and the chunk in which an
episode ends with same-step autoreset.
"""

from __future__ import annotations

import numpy as np

from envfleet import ProcessEnvManager
from envfleet.config import load_config
from envfleet.gym import make_vector_env

CHUNK = 4


def _cfg():
    return load_config(
        overrides=[
            "train.simulator_type=libero",
            "train.task_suite_name=libero_spatial",
            "train.num_envs=2",
            "train.libero.envs_per_process=2",
            f"train.max_episode_steps={2 * CHUNK}",
            "train.init_params.camera_heights=64",
            "train.init_params.camera_widths=64",
            f"actor.model.num_action_chunks={CHUNK}",
        ]
    )


def _actions(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    arm = rng.uniform(-1.0, 1.0, size=(2, CHUNK, 6))
    gripper = np.sign(rng.uniform(-1.0, 1.0, size=(2, CHUNK, 1)))
    return np.concatenate([arm, gripper], axis=-1).astype(np.float32)


def _equal(face_obs, ref_obs, envs) -> None:
    for key in ("full_image", "wrist_image", "state"):
        np.testing.assert_array_equal(face_obs[key][envs], ref_obs[key][envs], err_msg=key)


def test_libero_through_the_face_matches_the_manager(no_leaks) -> None:
    cfg = _cfg()
    face = make_vector_env(cfg, autoreset_mode="SameStep")
    ref = ProcessEnvManager(cfg)
    try:
        ref.start_simulator()
        assert set(face.single_observation_space.spaces) == {"full_image", "wrist_image", "state"}
        obs, infos = face.reset(options={"state_ids": [0, 1]})
        first = ref.reset_envs_to_state_ids(np.array([0, 1]))
        _equal(obs, first.obs, [0, 1])
        assert infos["task_description"].tolist() == first.task_descriptions and first.task_descriptions[0]
        obs, rew, term, trunc, infos = face.step(_actions(1))
        out = ref.chunk_step(_actions(1))
        _equal(obs, out.obs, [0, 1])
        np.testing.assert_array_equal(rew, out.rewards.sum(axis=1))
        assert not (term | trunc).any()
        before = {k: v.copy() for k, v in obs.items()}
        obs, infos = face.reset(options={"reset_mask": np.array([False, True]), "state_ids": [2]})
        assert infos["_state_id"].tolist() == [False, True] and infos["state_id"][1] == 2
        _equal(obs, ref.reset_envs_to_state_ids(np.array([0, 2])).obs, [1])
        _equal(obs, before, [0])  # env 0 kept its episode
        obs, rew, term, trunc, infos = face.step(_actions(2))
        out = ref.chunk_step(_actions(2))
        assert trunc.tolist() == [True, False]  # env 0 reached max_episode_steps, env 1 is half way
        _equal(obs, out.obs, [1])
        assert infos["_final_obs"].tolist() == [True, False]
        assert infos["final_info"]["episode_length"][0] == 2 * CHUNK
        assert infos["_state_id"][0] and 0 <= infos["state_id"][0] < len(ref.get_all_state_ids())  # env 0's new episode
    finally:
        face.close()
        ref.close()
