"""LeRobot 0.6.1's own ``lerobot-train`` on a dataset recorded per step from a real LIBERO rollout.

The rollout runs as users run it (``envfleet rollout``, ``train.record.frames=step``) in the main venv
(``ENVFLEET_MAIN_PYTHON``, set by ``nox -s tests-lerobot``), with the seeded random policy that logs
what it saw and sent. Here (Python 3.12, LeRobot): ``LeRobotDataset`` reads it with LIBERO's 20 Hz, the
episodes' lengths and tasks; ``meta/stats.json`` equals what LeRobot's own functions compute over the
same frames; and ``lerobot-train`` fits ACT on CPU (no pretrained backbone, nothing downloaded) for a
few steps with a finite loss.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from lerobot.datasets.compute_stats import aggregate_stats, auto_downsample_height_width, get_feature_stats, sample_indices
from lerobot.datasets.lerobot_dataset import LeRobotDataset

from envfleet.recording import read_episodes, read_frames
from tests.lerobot.main_venv import main_venv_rollout
from tests.recording.logging_policy import read_log

CHUNK, STEPS = 8, 16
ROLLOUT = [
    "train.simulator_type=libero",
    "train.task_suite_name=libero_spatial",
    "train.num_envs=2",
    "rollout.pipeline_stage_num=1",
    f"actor.model.num_action_chunks={CHUNK}",
    f"train.max_episode_steps={STEPS}",
    "train.init_params.camera_heights=64",
    "train.init_params.camera_widths=64",
    "train.record.format=lerobot",
    "train.record.frames=step",
]


@pytest.fixture(scope="module")
def per_step_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """`envfleet rollout` of LIBERO in the main venv: 1 worker x 1 stage x 2 envs, 4 chunk steps, recorded per step."""
    out = tmp_path_factory.mktemp("libero-steps") / "run"
    proc, summary = main_venv_rollout(out, 4, ROLLOUT)
    assert "render every sub-step" in proc.stdout  # the summary says what recording cost
    return out, summary


def _root(summary: dict) -> str:
    (dataset,) = summary["datasets"]
    return str(dataset["root"])


def test_lerobot_reads_the_per_step_dataset_with_libero_fps_lengths_and_tasks(per_step_run: tuple[Path, dict]) -> None:
    out, summary = per_step_run
    assert summary["episodes"] == 4 and summary["sim_restarts"] == 0
    ds = LeRobotDataset("envfleet/libero-steps", root=_root(summary), video_backend="pyav")
    assert ds.fps == 20 and tuple(ds.meta.features["action"]["shape"]) == (7,)
    assert ds.num_episodes == 4 and ds.num_frames == 4 * STEPS
    per_task = summary["per_task"]
    pairs = read_log(str(out / "policy-log"))
    for index in range(ds.num_episodes):
        row = ds.meta.episodes[index]
        assert row["length"] == STEPS
        assert row["tasks"] == [per_task[str(row["envfleet/task_id"])]["description"]]
        start = row["dataset_from_index"]
        for t in range(0, STEPS, CHUNK):
            # The frame a chunk starts at holds the observation the policy chose the chunk from; its next
            # CHUNK frames hold the chunk's actions, one each.
            item = ds[start + t]
            key = (
                item["observation.state"].numpy().tobytes()
                + np.stack([ds[start + t + k]["action"].numpy() for k in range(CHUNK)]).tobytes()
            )
            assert key in pairs, f"episode {index} frame {t}: not a state the policy was shown and the chunk it sent"
            for cam in ("full_image", "wrist_image"):
                decoded = (item[f"observation.images.{cam}"] * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()
                np.testing.assert_array_equal(decoded, pairs[key][cam])  # lossless video: the images the policy saw
            assert float(item["timestamp"]) == pytest.approx(t / 20)
        assert bool(ds[start + STEPS - 1]["next.done"]) and not bool(ds[start + STEPS - 2]["next.done"])


def _lerobot_stats(root: str, features: dict) -> dict:
    """The dataset's statistics as LeRobot's own functions compute them: per episode, then aggregated in order."""
    total = None
    for row in read_episodes(root):
        frames = read_frames(root, row)
        ep = {}
        for key, values in frames.items():
            if features[key]["dtype"] in ("video", "image"):
                picked = np.stack([auto_downsample_height_width(values[i].transpose(2, 0, 1)) for i in sample_indices(len(values))])
                stats = get_feature_stats(picked, axis=(0, 2, 3), keepdims=True)
                ep[key] = {k: v if k == "count" else np.squeeze(v / 255.0, axis=0) for k, v in stats.items()}
            else:
                ep[key] = get_feature_stats(values, axis=0, keepdims=values.ndim == 1)
        total = ep if total is None else aggregate_stats([total, ep])
    assert total is not None
    return total


def test_stats_match_lerobots_own_computation(per_step_run: tuple[Path, dict]) -> None:
    _, summary = per_step_run
    root = _root(summary)
    ds = LeRobotDataset("envfleet/libero-steps", root=root, video_backend="pyav")
    theirs = _lerobot_stats(root, ds.meta.features)
    ours = ds.meta.stats
    assert set(ours) == set(theirs) == set(ds.meta.features)
    for key, feat in theirs.items():
        assert set(ours[key]) == set(feat) >= {"min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99"}
        for name, value in feat.items():
            np.testing.assert_allclose(np.asarray(ours[key][name], dtype=np.float64), value, rtol=1e-6, atol=1e-7, err_msg=f"{key}/{name}")


def test_lerobot_train_fits_act_on_the_per_step_dataset(per_step_run: tuple[Path, dict], tmp_path: Path) -> None:
    _, summary = per_step_run
    cmd = [
        os.path.join(os.path.dirname(sys.executable), "lerobot-train"),
        "--policy.type=act",
        "--dataset.repo_id=envfleet/libero-steps",
        f"--dataset.root={_root(summary)}",
        "--dataset.video_backend=pyav",
        "--policy.device=cpu",
        "--policy.pretrained_backbone_weights=null",
        "--policy.push_to_hub=false",
        f"--policy.chunk_size={CHUNK}",
        f"--policy.n_action_steps={CHUNK}",
        "--wandb.enable=false",
        "--steps=3",
        "--batch_size=4",
        "--num_workers=0",
        "--log_freq=1",
        "--save_checkpoint=false",
        f"--output_dir={tmp_path / 'train'}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    losses = [float(x) for x in re.findall(r"step:\d+ .*? loss:(\S+)", log)]
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses), log[-3000:]
    assert "End of training" in log


def test_image_features_load_in_lerobot_with_lerobots_stats(tmp_path: Path) -> None:
    """train.record.images: image (a toy stage recorded per step here): LeRobot decodes the PNGs to the recorded images."""
    from envfleet import ProcessEnvManager
    from envfleet.config import load_config

    overrides = ["train.simulator_type=toy", "train.num_envs=2", "actor.model.num_action_chunks=4", "train.max_episode_steps=10"]
    overrides += ["train.init_params.camera_heights=32", "train.init_params.camera_widths=32", "train.record.format=lerobot"]
    overrides += [f"train.record.dir={tmp_path / 'rec'}", "train.record.frames=step", "train.record.images=image"]
    rng = np.random.default_rng(0)
    with ProcessEnvManager(load_config(overrides=overrides)) as mgr:
        mgr.reset_envs_to_state_ids(np.array([0, 5]))
        for _ in range(3):
            mgr.chunk_step(rng.uniform(-1, 1, size=(2, 4, 7)).astype(np.float32))
        root = mgr.flush_dataset()["root"]
    ds = LeRobotDataset("envfleet/toy-images", root=root)
    assert ds.meta.features["observation.images.full_image"]["dtype"] == "image" and ds.fps == 10
    for row in read_episodes(root):
        frames = read_frames(root, row)
        for t in range(row["length"]):
            item = ds[row["dataset_from_index"] + t]
            decoded = (item["observation.images.full_image"] * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()
            np.testing.assert_array_equal(decoded, frames["observation.images.full_image"][t])
    theirs = _lerobot_stats(root, ds.meta.features)
    for key, feat in theirs.items():
        for name, value in feat.items():
            np.testing.assert_allclose(
                np.asarray(ds.meta.stats[key][name], dtype=np.float64), value, rtol=1e-6, atol=1e-7, err_msg=f"{key}/{name}"
            )
