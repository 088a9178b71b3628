"""EpisodeTracker's success metrics: at any sub-step, at the episode's end, and at reset."""

from __future__ import annotations

import numpy as np

from envfleet.episodes import EpisodeTracker


def run_chunk(tracker: EpisodeTracker, successes: list[list[bool]]):
    """One chunk; ``successes[k]`` is each env's success check after sub-step ``k``."""
    tracker.start_chunk(len(successes))
    for k, success in enumerate(successes):
        tracker.record(k, tracker.active(), np.array(success))
    return tracker.end_chunk()


def test_success_mid_chunk_ends_the_episode_and_counts_at_end_too() -> None:
    t = EpisodeTracker(2, max_episode_steps=8)
    t.begin(np.arange(2), np.array([3, 4]), np.array([0, 0]))
    flags = run_chunk(t, [[False, False], [True, False], [False, False], [False, False]])
    assert flags.infos["episode_ended"].tolist() == [True, False]
    assert flags.infos["success_once"].tolist() == [True, False]
    assert flags.infos["success_at_end"].tolist() == [True, False]
    assert flags.infos["episode_length"].tolist() == [2, 4]


def test_with_ignore_terminations_a_passing_success_is_not_success_at_end() -> None:
    t = EpisodeTracker(2, max_episode_steps=4, ignore_terminations=True)
    t.begin(np.arange(2), np.array([3, 4]), np.array([0, 0]))
    # env 0 succeeds at sub-step 1 and leaves the goal; env 1 succeeds at the last sub-step.
    flags = run_chunk(t, [[False, False], [True, False], [False, False], [False, True]])
    assert flags.infos["episode_ended"].tolist() == [True, True]  # truncated at 4
    assert flags.infos["success_once"].tolist() == [True, True]
    assert flags.infos["success_at_end"].tolist() == [False, True]


def test_success_at_reset_is_reported_and_cleared_by_the_next_begin() -> None:
    t = EpisodeTracker(2, max_episode_steps=2)
    t.begin(np.arange(2), np.array([1, 2]), np.array([0, 0]), np.array([True, False]))
    flags = run_chunk(t, [[False, False], [False, False]])
    assert flags.infos["success_at_reset"].tolist() == [True, False]
    t.begin(np.array([0]), np.array([5]), np.array([0]))
    assert run_chunk(t, [[False, False]]).infos["success_at_reset"].tolist() == [False, False]


def test_state_round_trip_keeps_the_new_counters() -> None:
    t = EpisodeTracker(1, max_episode_steps=8, ignore_terminations=True)
    t.begin(np.arange(1), np.array([0]), np.array([0]), np.array([True]))
    run_chunk(t, [[True]])
    u = EpisodeTracker(1, max_episode_steps=8, ignore_terminations=True)
    u.load_state(t.get_state())
    flags = run_chunk(u, [[False]])
    assert flags.infos["success_once"].tolist() == [True] and flags.infos["success_at_end"].tolist() == [False]
    assert flags.infos["success_at_reset"].tolist() == [True]
