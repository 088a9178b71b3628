"""End to end: `envfleet rollout` on LIBERO for a few chunks (local Ray, real scenes), summary.json and video."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np


def test_envfleet_rollout_libero_writes_summary_and_video(tmp_path) -> None:
    out_dir = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "envfleet_ray.cli",
        "rollout",
        "--steps",
        "3",
        "--policy",
        "random",
        "--out",
        str(out_dir),
        "train.simulator_type=libero",
        "train.task_suite_name=libero_spatial",
        "train.num_envs=1",
        "rollout.pipeline_stage_num=2",
        "actor.model.num_action_chunks=8",
        "train.max_episode_steps=16",
        "train.init_params.camera_heights=128",
        "train.init_params.camera_widths=128",
        "train.video_cfg.save_video=true",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env={**os.environ, "RAY_ADDRESS": ""})
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["backend"] == "libero" and summary["task_suite_name"] == "libero_spatial"
    assert summary["stages"] == 2 and summary["num_envs"] == 1 and summary["workers"] == 1
    assert summary["env_steps"] == 3 * 2 * 1 * 8
    assert summary["env_steps_per_s"] > 0 and summary["sim_restarts"] == 0
    # max_episode_steps 16 = 2 chunks: each stage's env finished one episode
    assert sum(t["episodes"] for t in summary["per_task"].values()) == 2
    assert all(t["description"] for t in summary["per_task"].values())
    assert len(summary["videos"]) == 2
    import imageio.v2 as imageio

    for path in summary["videos"]:
        frames = [np.asarray(f) for f in imageio.get_reader(path)]
        assert len(frames) >= 3
        assert frames[-1].std() > 10, f"{path}: the last frame is blank"
