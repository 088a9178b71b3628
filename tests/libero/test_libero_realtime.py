"""``train.execution`` in simulated time on real LIBERO: the schedule needs no change in the backend, so
LIBERO's own env stepped alone with the executed actions gives the same frames bit for bit (render-last
kept), at delay 0 (``mode: chunk``'s actions) and with seeded latencies, the same three times."""

from __future__ import annotations

import numpy as np

from envfleet import ProcessEnvManager
from envfleet.config import load_config

from .reference import directed_actions, libero_cfg, run_alone

SUITE, TASK, TRIAL = "libero_spatial", 0, 1
SEED, SETTLE, SIZE, CHUNK, CALLS = 3, 2, 64, 4, 3
SEEDED = ["train.execution.mode=realtime", "train.execution.delay=latency", "train.execution.latency.distribution=exponential"]
SEEDED += ["train.execution.latency.mean_ms=100"]  # LIBERO's 20 sub-steps per second: about 2 sub-steps, drawn


def _run(*overrides: str) -> tuple[list[dict[str, np.ndarray]], list[np.ndarray], list[np.ndarray]]:
    base = libero_cfg(SUITE, 1, seed=SEED, settle=SETTLE, size=SIZE, chunk=CHUNK)
    cfg = load_config(data=base, overrides=list(overrides))
    actions = directed_actions(5, CALLS, CHUNK)
    with ProcessEnvManager(cfg) as mgr:
        state_id = int(mgr.get_all_state_ids()[mgr.get_state_task_ids() == TASK][TRIAL])
        first = mgr.reset_envs_to_state_ids(np.array([state_id]))
        frames = [{k: v[0].copy() for k, v in first.obs.items()}]
        applied, delays = [], []
        for chunk in actions:
            out = mgr.chunk_step(chunk[None])
            frames.append({k: v[0].copy() for k, v in out.obs.items()})
            applied.append(out.infos["applied_action"][0] if "applied_action" in out.infos else chunk)
            delays.append(out.infos["action_delay"] if "action_delay" in out.infos else np.zeros(1, np.int64))
    return frames, applied, delays


def _same_frames(ours: list[dict[str, np.ndarray]], theirs: list[dict[str, np.ndarray]], what: str) -> None:
    for j, (mine, ref) in enumerate(zip(ours, theirs, strict=True)):
        for key in ("full_image", "wrist_image", "state"):
            np.testing.assert_array_equal(mine[key], ref[key], err_msg=f"{what}: {key} after call {j}")


def test_realtime_libero_is_libero_alone_with_the_executed_actions_and_reproducible() -> None:
    zero, zero_applied, _ = _run("train.execution.mode=realtime")
    np.testing.assert_array_equal(np.stack(zero_applied), directed_actions(5, CALLS, CHUNK))  # delay 0: the chunks as sent
    alone = run_alone(SUITE, TASK, TRIAL, directed_actions(5, CALLS, CHUNK), seed=SEED, settle=SETTLE, size=SIZE)
    _same_frames(zero, alone.frames, "delay 0 against LIBERO alone (mode chunk's actions)")

    runs = [_run(*SEEDED) for _ in range(2)]
    frames, applied, delays = runs[0]
    assert np.concatenate(delays)[1:].max() > 0, delays  # some chunk arrived late
    assert not np.array_equal(np.stack(applied), directed_actions(5, CALLS, CHUNK))
    for other in runs[1:]:
        _same_frames(other[0], frames, "a second run with the same seed")
        np.testing.assert_array_equal(np.stack(other[1]), np.stack(applied))
    alone = run_alone(SUITE, TASK, TRIAL, np.stack(applied), seed=SEED, settle=SETTLE, size=SIZE)
    _same_frames(frames, alone.frames, "seeded delays against LIBERO alone with the executed actions")
