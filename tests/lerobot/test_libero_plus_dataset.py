"""A LIBERO-plus rollout recorded as LeRobot datasets, read by LeRobot 0.6.1's own ``LeRobotDataset``.

``envfleet rollout`` runs in the main venv (``ENVFLEET_MAIN_PYTHON``: LIBERO, Ray and LIBERO-plus's
data), as in test_libero_dataset.py: one env runs a robot-start task and a noise task of
libero_plus_goal (the same base task, one compiled scene), one chunk per episode, recorded with
``train.record.format=lerobot``. LeRobot reads the datasets here: each episode's task string is the
BDDL's instruction (never the task's file name with its suffix), each frame is one the policy saw,
and the summary has a row per dimension whose episodes are the datasets' episodes of that dimension.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from lerobot.datasets.lerobot_dataset import LeRobotDataset

from tests.lerobot.main_venv import REPO, main_venv_rollout
from tests.recording.logging_policy import read_log

DIMENSIONS = ("robot", "noise")


def _plus_task_ids() -> list[int]:
    """The first robot-start task of libero_plus_goal and its noise task on the same base task (main venv: the plus data)."""
    code = (
        "import json; from envfleet_libero.plus.data import plus_tasks; ts = plus_tasks('libero_plus_goal'); "
        "r = next(t for t in ts if t.dimension == 'robot'); n = next(t for t in ts if t.dimension == 'noise' and t.base == r.base); "
        "print(json.dumps([r.plus_id, n.plus_id]))"
    )
    python = os.environ.get("ENVFLEET_MAIN_PYTHON", "")
    if not os.path.exists(python):
        pytest.fail(f"ENVFLEET_MAIN_PYTHON is {python!r}: expected the python of the main venv (nox -s tests-lerobot sets it)")
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return list(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_lerobot_loads_a_libero_plus_rollout_with_a_row_per_dimension(tmp_path: Path) -> None:
    ids = _plus_task_ids()
    out = tmp_path / "run"
    _, summary = main_venv_rollout(
        out,
        2,
        [
            "train.record.format=lerobot",
            "train.simulator_type=libero",
            "train.task_suite_name=libero_plus_goal",
            "train.num_envs=1",
            "rollout.pipeline_stage_num=1",
            "actor.model.num_action_chunks=4",
            "train.max_episode_steps=4",
            "train.settle_steps=0",
            "train.init_params.camera_heights=64",
            "train.init_params.camera_widths=64",
            f"train.libero.plus.dimensions=[{','.join(DIMENSIONS)}]",
            f"train.libero.plus.tasks=[{ids[0]},{ids[1]}]",
            "train.libero.plus.trials=1",
        ],
    )
    per_task = summary["per_task"]
    groups = summary["per_group"]
    assert {row["group"] for row in per_task.values()} == set(groups) == set(DIMENSIONS)
    for row in per_task.values():
        assert "initstate" not in row["description"] and "noise" not in row["description"], row
    pairs = read_log(str(out / "policy-log"))
    seen: dict[str, int] = dict.fromkeys(DIMENSIONS, 0)
    for dataset in summary["datasets"]:
        root = dataset["root"]
        ds = LeRobotDataset(f"envfleet/{Path(root).name}", root=root, video_backend="pyav")
        for index in range(ds.num_episodes):
            row = ds.meta.episodes[index]
            task = per_task[str(row["envfleet/task_id"])]
            assert row["tasks"] == [task["description"]]  # the BDDL's instruction
            seen[task["group"]] += 1
            item = ds[row["dataset_from_index"]]
            key = item["observation.state"].numpy().tobytes() + item["action"].numpy().tobytes()
            assert key in pairs and np.array_equal(pairs[key]["actions"].reshape(-1), item["action"].numpy())
    # The summary's row per dimension counts the datasets' episodes of that dimension.
    assert seen == {d: groups[d]["episodes"] for d in DIMENSIONS} and all(n >= 1 for n in seen.values()), (seen, groups)
    for row in groups.values():
        lo, hi = row["ci95"]
        assert 0.0 <= lo <= row["success_rate"] <= hi <= 1.0
