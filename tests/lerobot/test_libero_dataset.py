"""A LIBERO rollout's dataset (`envfleet rollout`, train.record.format: lerobot) loaded by LeRobot 0.6.1's own ``LeRobotDataset``.

The rollout runs as users run it, in the main venv (Python 3.11, the main lock, LIBERO and Ray:
``ENVFLEET_MAIN_PYTHON``, which ``nox -s tests-lerobot`` sets to the tests session's venv), with a
seeded random policy that keeps every observation it saw and every action it sent. LeRobot then
reads the datasets here (Python 3.12). Video: libx264rgb at crf 0 (lossless), so the decoded frames
must equal the images the policy saw bit for bit.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from lerobot.datasets.lerobot_dataset import LeRobotDataset

from tests.lerobot.main_venv import main_venv_rollout
from tests.recording.logging_policy import LIBERO_RUN, read_log

CAMERAS = ("full_image", "wrist_image")


@pytest.fixture(scope="module")
def libero_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """`envfleet rollout` of LIBERO in the main venv: 1 worker x 2 stages x 2 envs, 5 steps of 8 actions, recorded."""
    out = tmp_path_factory.mktemp("libero") / "run"
    _, summary = main_venv_rollout(out, 5, ["train.record.format=lerobot", *LIBERO_RUN])
    return out, summary


def test_lerobot_loads_a_libero_rollouts_datasets(libero_run: tuple[Path, dict]) -> None:
    out, summary = libero_run
    assert summary["episodes"] >= 8 and summary["sim_restarts"] == 0
    pairs = read_log(str(out / "policy-log"))
    roots = sorted(d["root"] for d in summary["datasets"])
    assert [Path(r).name for r in roots] == ["rank_0_stage_0", "rank_0_stage_1"]
    episodes, frames = 0, 0
    tasks: dict[str, list[str]] = {}
    for root in roots:
        ds = LeRobotDataset(f"envfleet/{Path(root).name}", root=root, video_backend="pyav")
        assert set(ds.meta.features) >= {f"observation.images.{c}" for c in CAMERAS} | {"observation.state", "action"}
        episodes += ds.num_episodes
        frames += ds.num_frames
        for index in range(ds.num_episodes):
            row = ds.meta.episodes[index]
            assert row["length"] == 2  # 16 sub-steps in chunks of 8
            tasks.setdefault(str(row["envfleet/task_id"]), []).extend(row["tasks"])
            start = row["dataset_from_index"]
            for t in range(row["length"]):
                item = ds[start + t]
                assert item["task"] == row["tasks"][0] and int(item["frame_index"]) == t
                state = item["observation.state"].numpy()
                action = item["action"].numpy()
                key = state.tobytes() + action.tobytes()
                # The state the policy was given and the actions it sent, to the bit.
                assert key in pairs, f"{root} episode {index} frame {t}: not a (state, action) the policy handled"
                seen = pairs[key]
                assert np.array_equal(seen["actions"].reshape(-1), action)
                for cam in CAMERAS:
                    # LeRobot hands images out as float [C, H, W] in [0, 1]: back to uint8 exactly.
                    decoded = (item[f"observation.images.{cam}"] * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()
                    np.testing.assert_array_equal(decoded, seen[cam])
            assert bool(ds[start + row["length"] - 1]["next.done"])
    # Episodes, frames and task strings: the rollout's summary.
    assert episodes == summary["episodes"] and frames == 2 * episodes
    per_task = summary["per_task"]
    assert sorted(tasks) == sorted(per_task)
    for task, row in per_task.items():
        assert tasks[task] == [row["description"]] * row["episodes"]
