"""An observation key outside verl's three (the toy's ``depth`` and ``side_image``) reaches the
trainer: through an in-process EnvWorker, a shard restart and the stage video; verl's strict
helper still refuses it. (EnvWorkerGroup with a worker restart: tests/ray_worker/test_group_ray.py,
whose toy declares ``depth`` too; verl's trainer: tests/verl/test_verl_trainer.py.)"""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from envfleet.dataproto import DataProto
from envfleet.errors import InvalidInputError
from envfleet_ray.runtime.batch import create_env_batch_dataproto, env_batch_dataproto
from envfleet_ray.runtime.worker import EnvWorker

from ..conftest import toy_cfg

N, CHUNK, H = 2, 4, 32
EXTRA = (
    "train.toy.depth=float32",
    "train.toy.side_camera=true",
    f"train.init_params.camera_heights={H}",
    f"train.init_params.camera_widths={H}",
)


def cfg(num_envs: int = N, *more: str):
    return toy_cfg(num_envs, CHUNK, 1, *EXTRA, "train.max_episode_steps=8", *more)


def expected_depth(state: np.ndarray) -> np.ndarray:
    """The toy's depth from its state: each pixel's distance to the point (state[:, :2])."""
    x = np.linspace(-1.0, 1.0, H)[None, None, :]
    y = np.linspace(1.0, -1.0, H)[None, :, None]
    return np.hypot(x - state[:, 0, None, None], y - state[:, 1, None, None]).astype(np.float32)


def check_extra_keys(out: DataProto, rows: int) -> None:
    b = out.batch
    assert b["depth"].shape == (rows, H, H) and str(b["depth"].dtype) == "torch.float32"
    assert b["side_image"].shape == (rows, H, H, 3) and str(b["side_image"].dtype) == "torch.uint8"
    np.testing.assert_allclose(b["depth"].numpy(), expected_depth(b["state"].numpy()), atol=1e-6)
    for i in range(rows):  # drawn, not zeros
        assert b["side_image"][i].min() != b["side_image"][i].max()


def actions(rows: int, seed: int = 0) -> DataProto:
    acts = np.random.default_rng(seed).uniform(-1, 1, (rows, CHUNK, 7)).astype(np.float32)
    return DataProto.from_dict(non_tensors={"actions": acts}, meta_info={"stage_id": 0})


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    videos = str(tmp_path_factory.mktemp("videos"))
    w = EnvWorker(cfg(N, "train.video_cfg.save_video=true", f"train.video_cfg.video_base_dir={videos}"), rank=0)
    w.init_worker()
    w.init_simulator()
    yield w
    w.close()


def test_worker_reset_and_step_carry_the_extra_keys(worker) -> None:
    assert list(worker.observation_spec()) == ["full_image", "wrist_image", "state", "side_image", "depth"]
    reset = worker.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": np.array([0, 11])}))
    check_extra_keys(reset, N)
    step = worker.env_interact_step(actions(N))
    check_extra_keys(step, N)
    assert not np.array_equal(step.batch["depth"].numpy(), reset.batch["depth"].numpy()), "the point moved, its depth did not"


def test_a_killed_shard_comes_back_with_every_key(worker) -> None:
    worker.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": np.array([3, 4])}))
    worker.env_interact_step(actions(N, seed=1))
    pids = worker.node_info()["shard_pids"]["train"][0]
    os.kill(pids[1], signal.SIGKILL)
    out = worker.env_interact_step(actions(N, seed=2))
    assert out.batch["sim_restarted"].tolist() == [False, True]
    check_extra_keys(out, N)
    fresh = worker.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": np.array([3, 4])}))
    np.testing.assert_array_equal(out.batch["depth"][1].numpy(), fresh.batch["depth"][1].numpy())  # the restarted env's reset


def test_restart_step_result_has_every_key(worker) -> None:
    reset = worker.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": np.array([5, 6])}))
    out = worker.restart_step_result(0, CHUNK)
    for key in worker.observation_spec():
        np.testing.assert_array_equal(out.batch[key].numpy(), reset.batch[key].numpy(), err_msg=key)
    assert out.batch["worker_restarted"].all()


def test_the_video_draws_every_camera_side_by_side(worker) -> None:
    import imageio.v2 as imageio

    worker.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": np.array([0, 1])}))
    worker.env_interact_step(actions(N, seed=4))
    paths = worker.finish_rollout()["videos"]
    assert paths
    frame = imageio.mimread(paths[-1])[0]
    # Two envs in one row; each tile is full_image | wrist_image | side_image (depth is no camera image).
    assert frame.shape == (H, 2 * 3 * H, 3)


def test_video_image_keys_must_be_camera_images() -> None:
    from envfleet.errors import ConfigError
    from envfleet.shards.manager import ProcessEnvManager

    with pytest.raises(ConfigError, match=r"image_keys is \['depth'\]: \['depth'\] not among the backend's camera images"):
        ProcessEnvManager(cfg(N, "train.video_cfg.save_video=true", "train.video_cfg.image_keys=[depth]"))


def test_verls_strict_helper_still_refuses_extra_keys() -> None:
    z = np.zeros((2, CHUNK), np.float32)
    obs = {"full_image": np.zeros((2, 4, 4, 3), np.uint8), "state": np.zeros((2, 8), np.float32), "depth": np.zeros((2, 4, 4), np.float32)}
    with pytest.raises(InvalidInputError, match=r"\['depth'\] unknown: create_env_batch_dataproto keeps verl's env-worker layout"):
        create_env_batch_dataproto({**obs, "task_descriptions": ["a", "b"]}, z, z > 0, z > 0)
    with pytest.raises(InvalidInputError, match=r"\['depth'\] unknown.*env_batch_dataproto \(what EnvWorker returns\)"):
        create_env_batch_dataproto({"images_and_states": obs, "task_descriptions": ["a", "b"]}, z, z > 0, z > 0)
    out = env_batch_dataproto(obs, ["a", "b"], z, z > 0, z > 0, {"depth": np.ones(2)})
    assert out.batch["depth"].shape == (2, 4, 4) and out.batch["info_depth"].tolist() == [1.0, 1.0]
    with pytest.raises(InvalidInputError, match=r"observation key\(s\) \['rews'\] clash"):
        env_batch_dataproto({"rews": z}, ["a", "b"], z, z > 0, z > 0)
