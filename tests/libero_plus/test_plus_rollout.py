"""``envfleet rollout`` on a LIBERO-plus suite (local Ray, real scenes): a success rate per dimension.

Two envs run a robot-start task and a noise task of libero_plus_goal (one scene, one compile per
process), one chunk per episode; the summary has a row per dimension with its Wilson interval,
the fingerprint names the dimensions and the assets folder's absence, and ``envfleet compare``
and the HTML report's table give the same rows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from envfleet_libero.plus.data import plus_tasks


def test_rollout_reports_success_per_dimension(tmp_path) -> None:
    tasks = plus_tasks("libero_plus_goal")
    robot = next(t.plus_id for t in tasks if t.dimension == "robot")
    noise = next(t.plus_id for t in tasks if t.dimension == "noise")
    out_dir = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "envfleet_ray.cli",
        "rollout",
        "--steps",
        "2",
        "--policy",
        "random",
        "--out",
        str(out_dir),
        "train.simulator_type=libero",
        "train.task_suite_name=libero_plus_goal",
        "train.num_envs=2",
        "rollout.pipeline_stage_num=1",
        "actor.model.num_action_chunks=4",
        "train.max_episode_steps=4",
        "train.settle_steps=2",
        "train.init_params.camera_heights=64",
        "train.init_params.camera_widths=64",
        "train.libero.plus.dimensions=[robot,noise]",
        f"train.libero.plus.tasks=[{robot},{noise}]",
        "train.libero.plus.trials=1",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env={**os.environ, "RAY_ADDRESS": ""})
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads((out_dir / "summary.json").read_text())
    assert {row["group"] for row in summary["per_task"].values()} == {"robot", "noise"}
    groups = summary["per_group"]
    assert set(groups) == {"robot", "noise"}
    assert sum(g["episodes"] for g in groups.values()) == sum(t["episodes"] for t in summary["per_task"].values()) >= 2
    for row in groups.values():
        lo, hi = row["ci95"]
        assert 0.0 <= lo <= row["success_rate"] <= hi <= 1.0 and hi - lo > 0.3  # a handful of episodes: a wide interval
    text = json.dumps(summary["fingerprint"])
    assert '"dimensions": ["robot", "noise"]' in text and '"assets": false' in text, text
    assert "noise" in proc.stdout and "robot" in proc.stdout  # the printed per-group table

    from envfleet_ray.commands.compare import compare
    from envfleet_ray.commands.report import group_table

    code, lines = compare(summary, summary)
    assert code == 0 and any(line.strip().startswith("robot") and "+0.00" in line for line in lines), lines
    table = group_table(summary)
    assert "<table id=per-group>" in table and ">robot<" in table and ">noise<" in table
