"""The per-sub-step success a backend whose terminations include failures reports
(``infos["success"]``), which the verl-vla adapter hands out as ``next.success``."""

from __future__ import annotations

import numpy as np

from envfleet.episodes import EpisodeTracker


def run_chunk(tracker: EpisodeTracker, success: list[list[bool]], fail: list[list[bool]] | None) -> dict[str, np.ndarray]:
    chunk = len(success[0])
    tracker.start_chunk(chunk)
    for k in range(chunk):
        live = tracker.active()
        tracker.record(k, live, np.array([s[k] for s in success]), None if fail is None else np.array([f[k] for f in fail]))
    flags = tracker.end_chunk()
    return {"terminations": flags.terminations, **flags.infos}


def test_success_per_sub_step_apart_from_a_failure_termination() -> None:
    t = EpisodeTracker(3, max_episode_steps=100)
    t.begin(np.arange(3), np.arange(3), np.zeros(3, dtype=np.int64))
    # env 0 succeeds at sub-step 1, env 1 fails at sub-step 2, env 2 runs on.
    out = run_chunk(t, [[False, True, False, False], [False] * 4, [False] * 4], [[False] * 4, [False, False, True, False], [False] * 4])
    assert out["terminations"].tolist() == [[False, True, True, True], [False, False, True, True], [False] * 4]
    # The failure terminates env 1 but is no success; env 0 keeps its success once finished.
    assert out["success"].tolist() == [[False, True, True, True], [False] * 4, [False] * 4]
    assert out["success"].dtype == bool and out["success"].shape == out["terminations"].shape


def test_no_success_array_where_terminations_are_successes() -> None:
    t = EpisodeTracker(2, max_episode_steps=100)
    t.begin(np.arange(2), np.arange(2), np.zeros(2, dtype=np.int64))
    out = run_chunk(t, [[False, True], [False, False]], None)
    assert "success" not in out  # the adapter reads the terminations, which are the successes
