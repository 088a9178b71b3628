"""``train.execution`` in simulated time on the toy backend's real shard processes: the schedule of
actions, bit-identity with ``mode: chunk``, seeded delays, auto-reset and bad input."""

from __future__ import annotations

import numpy as np
import pytest

from envfleet import ProcessEnvManager
from envfleet.config import ConfigError
from envfleet.errors import InvalidInputError
from envfleet.execution import ActionSource, check_execution, interpolate, smooth_overlap

from ..conftest import toy_cfg

N, CHUNK, DIM = 4, 8, 7
REALTIME = "train.execution.mode=realtime"


def _chunks(calls: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (calls, N, CHUNK, DIM)).astype(np.float32)


def _run(*overrides: str, calls: int = 6, delays: list[np.ndarray | None] | None = None, chunks: np.ndarray | None = None, **train: object):
    chunks = _chunks(calls) if chunks is None else chunks
    with ProcessEnvManager(toy_cfg(N, CHUNK, 1, *overrides, **train)) as mgr:
        first = mgr.reset_envs_to_state_ids(np.arange(N))
        outs = [mgr.chunk_step(chunk, None if delays is None else delays[k]) for k, chunk in enumerate(chunks)]
    return first, outs


def _same(a, b, infos: bool = True) -> None:
    for key in a.obs:
        np.testing.assert_array_equal(a.obs[key], b.obs[key], err_msg=key)
    for key in ("rewards", "terminations", "truncations"):
        np.testing.assert_array_equal(getattr(a, key), getattr(b, key), err_msg=key)
    if infos:
        for key in set(a.infos) & set(b.infos):
            np.testing.assert_array_equal(a.infos[key], b.infos[key], err_msg=key)


def test_delay_zero_over_the_whole_chunk_is_mode_chunk_bit_for_bit() -> None:
    _, chunked = _run()
    _, realtime = _run(REALTIME)
    for a, b in zip(chunked, realtime, strict=True):
        _same(a, b)
        np.testing.assert_array_equal(b.infos["action_source"], ActionSource.current)
        assert not b.infos["action_delay"].any()
    chunks = _chunks(6)
    for k, out in enumerate(realtime):
        np.testing.assert_array_equal(out.infos["applied_action"], chunks[k])


def _expected(chunks: np.ndarray, delay: int, horizon: int, hold: bool) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The schedule written out per env and sub-step: what ran and where it came from."""
    applied, sources = [], []
    queue: list[list[np.ndarray]] = [[] for _ in range(N)]
    last = [np.zeros(DIM, np.float32) for _ in range(N)]
    for k, chunk in enumerate(chunks):
        d = 0 if k == 0 else delay
        run = np.zeros((N, horizon, DIM), np.float32)
        src = np.zeros((N, horizon), np.int8)
        for i in range(N):
            for t in range(horizon):
                if t >= d:
                    run[i, t], src[i, t] = chunk[i, t], ActionSource.current
                elif t < len(queue[i]):
                    run[i, t], src[i, t] = queue[i][t], ActionSource.previous
                else:
                    run[i, t] = (queue[i][-1] if queue[i] else last[i]) if hold else 0.0
                    src[i, t] = ActionSource.hold if hold else ActionSource.zero
            queue[i] = list(chunk[i, horizon:])
            last[i] = run[i, -1]
        applied.append(run)
        sources.append(src)
    return applied, sources


@pytest.mark.parametrize(("delay", "horizon", "on_empty"), [(3, 8, "hold"), (2, 4, "hold"), (5, 5, "zero"), (4, 6, "zero")])
def test_fixed_delays_run_the_stated_schedule_and_equal_the_env_stepped_alone(delay: int, horizon: int, on_empty: str) -> None:
    keys = [REALTIME, f"train.execution.delay={delay}", f"train.execution.horizon={horizon}", f"train.execution.on_empty={on_empty}"]
    chunks = _chunks(6, seed=1)
    _, outs = _run(*keys, chunks=chunks)
    applied, sources = _expected(chunks, delay, horizon, on_empty == "hold")
    for k, out in enumerate(outs):
        np.testing.assert_array_equal(out.infos["applied_action"], applied[k], err_msg=f"call {k}")
        np.testing.assert_array_equal(out.infos["action_source"], sources[k], err_msg=f"call {k}")
        assert out.infos["action_delay"].tolist() == [0 if k == 0 else delay] * N
        assert out.rewards.shape == (N, horizon)
    # The backend saw plain chunks: the same env stepped alone (mode chunk) with what ran gives the same episodes.
    _, alone = _run(f"actor.model.num_action_chunks={horizon}", chunks=np.stack(applied))
    for a, b in zip(outs, alone, strict=True):
        _same(a, b, infos=False)


LATENCY = [
    REALTIME,
    "train.execution.delay=latency",
    "train.execution.latency.distribution=exponential",
    "train.execution.latency.mean_ms=250",
]


def test_seeded_latency_gives_the_same_episodes_three_times_and_another_seed_other_delays() -> None:
    runs = [_run(*LATENCY, calls=8)[1] for _ in range(3)]
    for other in runs[1:]:
        for a, b in zip(runs[0], other, strict=True):
            _same(a, b)
    delays = np.stack([out.infos["action_delay"] for out in runs[0]])
    assert delays[0].tolist() == [0] * N  # the first chunk after a reset has no delay
    assert delays[1:].max() > 0 and len(np.unique(delays[1:])) > 1, delays  # 250 ms at 10 sub-steps/s: drawn, not constant
    assert delays.max() <= CHUNK
    reseeded = _run(*LATENCY, "train.execution.seed=7", calls=8)[1]
    assert not np.array_equal(np.stack([out.infos["action_delay"] for out in reseeded]), delays)


@pytest.mark.parametrize("dist", ["constant", "uniform", "normal"])
def test_each_distribution_turns_ms_into_sub_steps_with_the_control_rate(dist: str) -> None:
    keys = [REALTIME, "train.execution.delay=latency", f"train.execution.latency.distribution={dist}"]
    keys += ["train.execution.latency.mean_ms=300", "train.execution.latency.std_ms=100"]
    keys += ["train.execution.latency.low_ms=100", "train.execution.latency.high_ms=500"]
    delays = np.stack([out.infos["action_delay"] for out in _run(*keys, calls=6)[1][1:]])
    if dist == "constant":
        assert (delays == 3).all()  # 300 ms at the toy's 10 sub-steps per second
    elif dist == "uniform":
        assert delays.min() >= 1 and delays.max() <= 5
    else:
        assert delays.min() >= 0 and len(np.unique(delays)) > 1


def test_auto_reset_discards_the_queue_and_the_next_chunk_has_no_delay() -> None:
    keys = [REALTIME, "train.execution.delay=2", "train.execution.horizon=4"]
    _, outs = _run(*keys, calls=8, auto_reset=True, max_episode_steps=10)
    ended_before = False
    for out in outs:
        if ended_before:
            assert out.infos["action_delay"].tolist() == [0] * N
            np.testing.assert_array_equal(out.infos["action_source"], ActionSource.current)
        ended_before = bool(out.truncations.any(axis=1).all())
    assert any(out.truncations.any() for out in outs), "no episode ended: the test tests nothing"


def test_caller_delays_are_checked_and_a_bad_one_steps_nothing() -> None:
    keys = [REALTIME, "train.execution.delay=caller", "train.execution.horizon=6"]
    chunks = _chunks(4)
    with ProcessEnvManager(toy_cfg(N, CHUNK, 1, *keys)) as mgr:
        mgr.reset_envs_to_state_ids(np.arange(N))
        first = mgr.chunk_step(chunks[0], np.array([1, 2, 3, 4]))
        assert first.infos["action_delay"].tolist() == [0] * N  # after a reset
        steps = int(first.infos["episode_length"].sum())
        for bad, match in [
            (None, "give each call's delays"),
            (np.array([0, 1, 7, 0]), "between 0 and the horizon"),
            (np.array([0, 1, -1, 0]), "between 0 and the horizon"),
            (np.array([0.5, 1, 1, 0]), "whole numbers"),
            (np.array([1, 1]), "4 whole numbers"),
        ]:
            with pytest.raises(InvalidInputError, match=match):
                mgr.chunk_step(chunks[1], bad)
        again = mgr.chunk_step(chunks[1], np.array([1, 2, 3, 4]))  # usable, and nothing stepped meanwhile
        assert int(again.infos["episode_length"].sum()) == steps + N * 6
        assert again.infos["action_delay"].tolist() == [1, 2, 3, 4]
    with ProcessEnvManager(toy_cfg(N, CHUNK, 1)) as mgr:
        mgr.reset_envs_to_state_ids(np.arange(N))
        with pytest.raises(InvalidInputError, match="mode is chunk"):
            mgr.chunk_step(chunks[0], np.zeros(N, np.int64))


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["train.execution.delay=9"], r"'train.execution.delay' must be between 0 and the horizon \(8"),
        (["train.execution.horizon=4", "train.execution.delay=5"], r"between 0 and the horizon \(4"),
        (["train.execution.horizon=9"], r"'train.execution.horizon' must be between 1 and the chunk length \(8"),
        (["train.execution.delay=-2"], r"'train.execution.delay' must be >= 0"),
        (["train.execution.delay=2.5"], r"'train.execution.delay' must be a whole number"),
        (["train.execution.latency.distribution=gamma"], r"'train.execution.latency.distribution'.*constant, uniform, exponential, normal"),
        (["train.execution.clock=wall", "train.execution.target_step_hz=0"], r"'train.execution.target_step_hz' must be > 0"),
        (
            ["train.execution.interpolation.enable=true", "train.execution.interpolation.factor=1"],
            r"'train.execution.interpolation.factor' must be >= 2",
        ),
        (["train.execution.mode=chunk", "train.execution.delay=2"], r"'train.execution.delay' needs 'train.execution.mode: realtime'"),
        (["train.execution.clock=wall", "train.execution.delay=2"], r"'train.execution.delay' and 'train.execution.clock: wall'"),
        (["actor.model.num_action_chunks=null"], r"needs a fixed chunk length"),
    ],
)
def test_bad_execution_configs_are_refused_at_load_naming_the_key(overrides: list[str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        toy_cfg(N, CHUNK, 1, REALTIME, *overrides)


def test_serial_smoothing_that_exceeds_the_plan_and_latency_without_control_fps_are_refused() -> None:
    smoothing = ["train.execution.serial_smoothing.enable=true", "train.execution.serial_smoothing.execution_steps=6"]
    with pytest.raises(
        ConfigError, match=r"serial_smoothing.execution_steps' \+ 'blend_steps' \(6 \+ 20\) must not exceed the plan's sub-steps \(8"
    ):
        toy_cfg(N, CHUNK, 1, *smoothing)
    # A backend that declares no control rate (gymnasium's, whose rate depends on the env id).
    latency = toy_cfg(N, CHUNK, 1, REALTIME, "train.execution.delay=latency").train.execution
    with pytest.raises(ConfigError, match="declares no control_fps: set .train.execution.control_fps."):
        check_execution(latency, "train.", CHUNK, None, "gymnasium")
    with_rate = toy_cfg(N, CHUNK, 1, REALTIME, "train.execution.delay=latency", "train.execution.control_fps=50").train.execution
    check_execution(with_rate, "train.", CHUNK, None, "gymnasium")


def test_interpolation_and_overlap_smoothing_run_through_the_manager() -> None:
    keys = [REALTIME, "train.execution.interpolation.enable=true", "train.execution.interpolation.factor=2"]
    keys += ["train.execution.horizon=12", "train.execution.delay=3", "train.execution.smooth_overlap=true"]
    chunks = _chunks(3, seed=5)
    _, outs = _run(*keys, chunks=chunks)
    up = [interpolate(c, 2) for c in chunks]
    np.testing.assert_array_equal(outs[0].infos["applied_action"], up[0][:, :12])
    # Call 1: 4 queued sub-steps of call 0 (up[0][12:16]); the chunk arrives at 3, and the queue's last
    # one (index 3) is blended into the chunk's index 3 on.
    second = outs[1].infos["applied_action"]
    np.testing.assert_array_equal(second[:, :3], up[0][:, 12:15])
    blended = smooth_overlap(up[0][:, 15:16], up[1][:, 3:])
    np.testing.assert_array_equal(second[:, 3:], blended[:, :9])


def test_without_a_chunk_length_each_call_sets_it_and_must_cover_the_horizon() -> None:
    keys = ["actor.model.num_action_chunks=null", REALTIME, "train.execution.horizon=3", "train.execution.delay=2"]
    rng = np.random.default_rng(4)
    with ProcessEnvManager(toy_cfg(N, CHUNK, 1, *keys)) as mgr:
        mgr.reset_envs_to_state_ids(np.arange(N))
        long = rng.uniform(-1, 1, (N, 6, DIM)).astype(np.float32)
        mgr.chunk_step(long)  # 3 run, 3 queued
        with pytest.raises(InvalidInputError, match=r"cover the horizon \(3 sub-steps\), got 2"):
            mgr.chunk_step(long[:, :2])
        out = mgr.chunk_step(long[:, :4])
        np.testing.assert_array_equal(out.infos["applied_action"][:, :2], long[:, 3:5])  # the queue, until the delay
        np.testing.assert_array_equal(out.infos["applied_action"][:, 2], long[:, 2])  # then the new chunk at index 2


def test_the_fingerprint_states_a_realtime_schedule_and_leaves_mode_chunk_as_it_was() -> None:
    from envfleet.fingerprint import protocol
    from envfleet.plugins import get_backend

    toy = get_backend("toy")
    assert "execution" not in protocol(toy_cfg(N, CHUNK, 1).train, toy, {})
    stated = protocol(toy_cfg(N, CHUNK, 1, *LATENCY).train, toy, {})["execution"]
    assert stated["mode"] == "realtime" and stated["delay"] == "latency" and stated["latency"]["mean_ms"] == 250.0
