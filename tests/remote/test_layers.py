"""Everything above a manager over a real ``envfleet serve``: EnvWorkerGroup on Ray, the gymnasium face, ``envfleet rollout``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

from envfleet.dataproto import DataProto

from .servetools import local_cfg, serve

RAY_CPUS = 2
STAGES = "rollout.pipeline_stage_num=2"


def _step(stage: int, seed: int) -> DataProto:
    acts = np.random.default_rng(seed).uniform(-1, 1, (4, 4, 7)).astype(np.float32)
    return DataProto.from_dict(non_tensors={"actions": acts}, meta_info={"stage_id": stage})


def _same(a: DataProto, b: DataProto) -> None:
    assert a.batch is not None and b.batch is not None and set(a.batch.keys()) == set(b.batch.keys())
    for key in a.batch.keys():
        assert a.batch[key].dtype == b.batch[key].dtype and bool((a.batch[key] == b.batch[key]).all()), key
    assert list(a.non_tensor_batch["task_descriptions"]) == list(b.non_tensor_batch["task_descriptions"])


def test_env_worker_group_on_ray_drives_the_server(tmp_path, local_ray, no_leaks) -> None:
    from envfleet_ray import EnvWorker, EnvWorkerGroup

    served = serve(tmp_path, STAGES)
    try:
        ids = DataProto.from_dict(non_tensors={"state_ids": np.arange(8) * 3})
        local = EnvWorker(local_cfg(STAGES))
        local.init_worker()
        local.init_simulator()
        want = [local.reset_envs_to_state_ids(ids), *(local.env_interact_step(_step(s % 2, s)) for s in range(4))]
        local_summary = local.finish_rollout()
        local.close()
        with EnvWorkerGroup(local_cfg(STAGES, remote=served.address, token_file=served.token_file), num_workers=1) as group:
            group.init_worker()
            group.init_simulator()
            assert len(served.shard_pids()) == 4  # both stages' shards run under the server
            got = [group.reset_envs_to_state_ids(ids).get(), *(group.env_interact_step(_step(s % 2, s)).get() for s in range(4))]
            summary = group.finish_rollout()
        for a, b in zip(got, want):
            _same(a, b)
        fingerprint = summary["workers"][0]["fingerprint"]
        local_fp = local_summary["fingerprint"]
        assert fingerprint["backend"] == "toy" and fingerprint["packages"] == local_fp["packages"]
        assert fingerprint["hash"] == local_fp["hash"], "the same envs and states measure the same protocol"
    finally:
        served.stop()


def test_gymnasium_face_over_the_server_matches_sync_vector_env(tmp_path, no_leaks) -> None:
    from gymnasium.vector import SyncVectorEnv

    from envfleet.gym import make_vector_env

    from ..gym.common import CHUNK, steer
    from ..gym.common import toy_cfg as gym_cfg
    from ..gym.reference import StateWalk, ToyChunkEnv

    keys = ("train.num_envs=3", f"actor.model.num_action_chunks={CHUNK}", "train.max_episode_steps=12", "train.toy.envs_per_process=3")
    served = serve(tmp_path, *keys, token=None)
    cfg = gym_cfg()
    face = make_vector_env(local_cfg(*keys, remote=served.address), autoreset_mode="NextStep")
    walk = StateWalk(np.arange(30), 7)
    ref = SyncVectorEnv([lambda: ToyChunkEnv(cfg.train, CHUNK, walk) for _ in range(3)], autoreset_mode="NextStep")
    try:
        assert "RemoteEnvManager" in repr(face.manager)
        obs, _ = face.reset(seed=7)
        ref_obs, _ = ref.reset(seed=7)
        ended = 0
        for t in range(14):
            for key in ref_obs:
                np.testing.assert_array_equal(obs[key], ref_obs[key], err_msg=f"{key} at step {t}")
            actions = steer(obs)
            obs, rew, term, trunc, _ = face.step(actions)
            ref_obs, ref_rew, ref_term, ref_trunc, _ = ref.step(actions)
            np.testing.assert_array_equal(rew, ref_rew)
            np.testing.assert_array_equal(term, ref_term)
            np.testing.assert_array_equal(trunc, ref_trunc)
            ended += int((term | trunc).sum())
        assert ended >= 3, "episodes ended and were reset through the server"
    finally:
        face.close()
        ref.close()
        served.stop()


def test_rollout_command_with_train_remote(tmp_path) -> None:
    served = serve(tmp_path, STAGES)
    try:
        out = subprocess.run(
            [sys.executable, "-m", "envfleet_ray.cli", "rollout", "--steps", "3", "--policy", "zero", "--out", str(tmp_path / "run"),
             "--cpus-per-worker", "0.5", *local_cfg_overrides(served)],
            capture_output=True, text=True, timeout=300, env={**os.environ, "RAY_ADDRESS": ""},
        )  # fmt: skip
        assert out.returncode == 0, out.stderr[-3000:]
        summary = json.loads((tmp_path / "run" / "summary.json").read_text())
        assert summary["backend"] == "toy" and summary["stages"] == 2
        assert summary["env_steps"] == 3 * 2 * 4 * 4
        assert summary["fingerprint"]["backend"] == "toy"
        assert served.log().count("opened stage") == 2, "both stages ran on the server"
    finally:
        served.stop()


def local_cfg_overrides(served) -> list[str]:
    from .servetools import overrides

    return [*overrides(STAGES), f"train.remote.address={served.address}", f"train.remote.token_file={served.token_file}"]
