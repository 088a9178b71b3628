"""``EpisodeTracker.record_chunk`` accounts a chunk exactly as ``record`` does sub-step by sub-step."""

from __future__ import annotations

import numpy as np
import pytest

from envfleet.episodes import EpisodeTracker


def _run(tracker: EpisodeTracker, rng: np.random.Generator, chunk: int, whole: bool, gym_style: bool) -> None:
    """One chunk of random outcomes, each env stepped until its episode ends, accounted either way."""
    n = tracker.n
    success = rng.random((n, chunk)) < 0.1
    terminated = rng.random((n, chunk)) < 0.08
    truncated = rng.random((n, chunk)) < 0.03
    reward = rng.normal(size=(n, chunk)).astype(np.float32)
    tracker.start_chunk(chunk)
    if not whole:
        for k in range(chunk):
            live = tracker.active()
            if gym_style:
                tracker.record(k, live, success[:, k], reward=reward[:, k], terminated=terminated[:, k], truncated=truncated[:, k])
            else:
                tracker.record(k, live, success[:, k])
        return
    left = tracker.steps_left()
    sim = np.zeros((n, chunk), dtype=bool)
    for i in range(n):
        for k in range(min(chunk, int(left[i]))):
            sim[i, k] = True
            ends = truncated[i, k] or terminated[i, k] if gym_style else success[i, k]
            if ends and not tracker.ignore_terminations:
                break
            if gym_style and truncated[i, k]:
                break
    if gym_style:
        tracker.record_chunk(sim, success, reward, terminated=terminated, truncated=truncated)
    else:
        tracker.record_chunk(sim, success)


@pytest.mark.parametrize("gym_style", [True, False])
@pytest.mark.parametrize("ignore", [False, True])
@pytest.mark.parametrize("n", [3, 16], ids=["small-chunks", "large-chunks"])  # record_chunk's Python path, and its numpy one
def test_record_chunk_is_record_per_sub_step(gym_style: bool, ignore: bool, n: int) -> None:
    steps = 13
    trackers = [EpisodeTracker(n, steps, reward_coef=0.5, ignore_terminations=ignore) for _ in range(2)]
    for t in trackers:
        t.begin(np.arange(n), np.arange(n), np.zeros(n, dtype=np.int64))
    seen_end = 0
    for call in range(60):
        chunk = 1 + call % 8
        flags = []
        for whole, t in zip((False, True), trackers):
            _run(t, np.random.default_rng(call), chunk, whole, gym_style)
            flags.append(t.end_chunk())
        a, b = flags
        for name in ("rewards", "terminations", "truncations", "ended"):
            assert np.array_equal(getattr(a, name), getattr(b, name)), (call, name)
        assert (a.successes is None) == (b.successes is None)
        if a.successes is not None:
            assert np.array_equal(a.successes, b.successes)
        assert a.infos.keys() == b.infos.keys()
        for key in a.infos:
            assert np.array_equal(a.infos[key], b.infos[key]), (call, key)
            assert a.infos[key].dtype == b.infos[key].dtype
        seen_end += int(a.ended.sum())
        ended = np.nonzero(a.ended)[0]
        for t in trackers:  # a new episode for every env that ended, as an auto-reset does
            t.begin(ended, ended, np.zeros(len(ended), dtype=np.int64))
    assert seen_end > 10  # episodes did end, by termination and by the step limit
