"""An EnvWorker rollout through Ray (local, bound to 127.0.0.1): one worker, two stages, auto-reset."""

from __future__ import annotations

import numpy as np
import ray
import torch

from envfleet.config import load_config
from envfleet.dataproto import DataProto
from envfleet_ray import init_ray
from envfleet_ray.runtime.group import EnvWorkerGroup

from .common import assert_no_segments_left, pusher_train

N, S, CHUNK, HORIZON = 2, 2, 4, 6


def test_env_worker_rollout_through_ray() -> None:
    cfg = load_config(
        data={"train": pusher_train(num_envs=N, auto_reset=True, max_episode_steps=HORIZON, isaac={"state_bank_size": 8})},
        overrides=[f"rollout.pipeline_stage_num={S}", f"actor.model.num_action_chunks={CHUNK}", "actor.model.action_dim=2"],
    )
    init_ray(num_cpus=2)
    try:
        group = EnvWorkerGroup(cfg, num_workers=1)
        worker_pid = int(group.nodes[0]["pid"])
        try:
            group.init_worker()
            group.init_simulator()
            ids = group.get_all_state_ids()
            assert ids.tolist() == list(range(8))
            assert group.get_state_task_ids().tolist() == [0] * 8
            # Both stages start from the same ids: two processes, the same starts.
            reset = group.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": np.array([3, 4, 3, 4])})).get()
            assert reset.batch["full_image"].shape == (S * N, 64, 64, 3) and reset.batch["full_image"].dtype == torch.uint8
            assert reset.batch["wrist_image"].shape == (S * N, 64, 64, 3) and reset.batch["wrist_image"].dtype == torch.uint8
            assert reset.batch["state"].shape == (S * N, 8) and reset.batch["state"].dtype == torch.float32
            for key in ("full_image", "wrist_image", "state"):
                assert torch.equal(reset.batch[key][:N], reset.batch[key][N:]), f"stage 0 and stage 1 disagree on {key!r}"
            assert list(reset.non_tensor_batch["task_descriptions"]) == ["push the red cube to the green goal"] * (S * N)
            rng = np.random.default_rng(0)
            resets = []
            for _ in range(2):
                for stage in range(S):
                    actions = rng.uniform(-1, 1, (N, CHUNK, 2)).astype(np.float32)
                    out = group.env_interact_step(
                        DataProto.from_dict(non_tensors={"actions": actions}, meta_info={"stage_id": stage})
                    ).get()
                    assert out.meta_info["stage_id"] == stage
                    assert out.batch["full_image"].shape == (N, 64, 64, 3) and out.batch["full_image"].dtype == torch.uint8
                    assert out.batch["wrist_image"].shape == (N, 64, 64, 3) and out.batch["wrist_image"].dtype == torch.uint8
                    assert out.batch["state"].shape == (N, 8) and out.batch["state"].dtype == torch.float32
                    assert out.batch["rews"].shape == (N, CHUNK) and out.batch["rews"].dtype == torch.float32
                    for flag in ("terminations", "truncations"):
                        assert out.batch[flag].shape == (N, CHUNK) and out.batch[flag].dtype == torch.bool
                    resets.append(out.batch["reset_state_id"].numpy())
            # The horizon (6 sub-steps) ends inside the second chunk; auto-reset starts new episodes.
            assert all((r == -1).all() for r in resets[:S]), "no env should reset in the first chunk"
            assert all((r >= 0).all() for r in resets[S:]), "every env should have been reset after its truncation"
            metrics = group.finish_rollout()
            assert metrics["total"]["episodes"] == S * N
        finally:
            group.shutdown()
        assert_no_segments_left(worker_pid)
    finally:
        ray.shutdown()
