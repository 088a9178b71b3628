"""``envfleet rollout`` with ``train.record.format=lerobot``: EnvWorkerGroup on a local Ray (toy) and LIBERO.

Each recorded frame must be a (state, action) pair the policy handled, with the images it saw
(bit for bit: the video is lossless), and the datasets must count the summary's episodes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from envfleet.recording import find_datasets, read_episodes, read_frames, read_info

from .logging_policy import read_log


def rollout(out: Path, *overrides: str, steps: int, workers: int = 1) -> dict:
    log = out / "policy-log"
    env = {**os.environ, "RAY_ADDRESS": "", "ENVFLEET_TEST_POLICY_LOG": str(log)}
    cmd = [
        sys.executable,
        "-m",
        "envfleet_ray.cli",
        "rollout",
        "--steps",
        str(steps),
        "--no-progress",
        "--workers",
        str(workers),
        "--out",
        str(out),
    ]
    cmd += ["--policy", "tests.recording.logging_policy:logging_random", "train.record.format=lerobot", *overrides]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "dataset: " in proc.stdout
    return json.loads((out / "summary.json").read_text())


def check_against_run(out: Path, summary: dict, cameras: tuple[str, ...]) -> list[dict]:
    """The datasets hold the summary's episodes; every frame is one the policy saw and answered."""
    roots = find_datasets(str(out / "datasets"))
    assert sorted(d["root"] for d in summary["datasets"]) == roots
    pairs = read_log(str(out / "policy-log"))
    rows = []
    for root in roots:
        info = read_info(root)
        assert info["envfleet"]["fingerprints"], "finish_rollout's fingerprint is in the dataset's metadata"
        assert info["envfleet"]["fingerprints"][-1]["hash"]
        for row in read_episodes(root):
            rows.append(row)
            frames = read_frames(root, row)
            assert len(frames["action"]) == row["length"]
            for t in range(row["length"]):
                key = frames["observation.state"][t].tobytes() + frames["action"][t].tobytes()
                assert key in pairs, f"{root} episode {row['episode_index']} frame {t}: not a (state, action) the policy handled"
                for cam in cameras:
                    np.testing.assert_array_equal(frames[f"observation.images.{cam}"][t], pairs[key][cam])
    per_task = summary["per_task"]
    assert len(rows) == summary["episodes"] == sum(t["episodes"] for t in per_task.values())
    for task, row in per_task.items():
        mine = [r for r in rows if str(r["envfleet/task_id"]) == task]
        assert len(mine) == row["episodes"] and all(r["tasks"] == [row["description"]] for r in mine)
        assert sum(r["envfleet/success_once"] for r in mine) == row["successes"]
    return rows


def test_toy_rollout_on_ray_records_a_dataset_per_rank_and_stage(tmp_path) -> None:
    out = tmp_path / "run"
    summary = rollout(
        out,
        "train.simulator_type=toy",
        "train.num_envs=2",
        "rollout.pipeline_stage_num=2",
        "actor.model.num_action_chunks=4",
        "train.max_episode_steps=8",
        "train.init_params.camera_heights=32",
        "train.init_params.camera_widths=32",
        steps=6,
        workers=2,
    )
    rows = check_against_run(out, summary, ("full_image", "wrist_image"))
    assert {(r["envfleet/rank"], r["envfleet/stage"]) for r in rows} == {(0, 0), (0, 1), (1, 0), (1, 1)}
    assert all(r["length"] == 2 for r in rows)  # 8 sub-steps = 2 chunks


def test_libero_rollout_records_two_cameras(tmp_path) -> None:
    out = tmp_path / "run"
    summary = rollout(
        out,
        "train.simulator_type=libero",
        "train.task_suite_name=libero_spatial",
        "train.num_envs=2",
        "rollout.pipeline_stage_num=2",
        "actor.model.num_action_chunks=8",
        "train.max_episode_steps=16",
        "train.init_params.camera_heights=64",
        "train.init_params.camera_widths=64",
        steps=5,
    )
    assert summary["episodes"] >= 8 and summary["sim_restarts"] == 0
    rows = check_against_run(out, summary, ("full_image", "wrist_image"))
    assert all(r["length"] == 2 for r in rows)
