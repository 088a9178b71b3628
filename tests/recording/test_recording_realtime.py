"""A realtime stage recorded per step: a frame's ``action`` is the action applied at that sub-step (what a
robot's dataset holds), not the one the policy sent for it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from envfleet import ProcessEnvManager
from envfleet.recording import read_episodes, read_frames

from .test_recording_steps import CHUNK, DIM, N, cfg


def test_recorded_actions_are_the_applied_ones(tmp_path: Path) -> None:
    keys = ["train.record.frames=step", "train.execution.mode=realtime", "train.execution.delay=2", "train.execution.on_empty=zero"]
    rng = np.random.default_rng(5)
    sent = rng.uniform(-1, 1, size=(3, N, CHUNK, DIM)).astype(np.float32)  # 12 sub-steps > max_episode_steps=10
    applied = []
    with ProcessEnvManager(cfg(str(tmp_path / "rec"), *keys)) as mgr:
        mgr.reset_envs_to_state_ids(np.array([0, 7]))
        for chunk in sent:
            applied.append(mgr.chunk_step(chunk).infos["applied_action"])
        summary = mgr.flush_dataset()
    assert summary is not None
    ran = np.concatenate(applied, axis=1)  # [N, 12, DIM]
    assert not np.array_equal(ran, sent.transpose(1, 0, 2, 3).reshape(N, -1, DIM)), "the delays changed nothing"
    assert not ran[:, 4:6].any()  # the second chunk arrived 2 sub-steps late, with nothing queued: zeros ran
    for row in read_episodes(summary["root"]):
        i = [0, 7].index(row["envfleet/state_id"])
        frames = read_frames(summary["root"], row)
        np.testing.assert_array_equal(frames["action"], ran[i, : row["length"]])
    meta = json.loads(Path(summary["root"], "meta", "envfleet.json").read_text())
    assert '"delay": 2' in json.dumps(meta) and '"realtime"' in json.dumps(meta), "the dataset does not state its schedule"
