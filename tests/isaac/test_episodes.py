"""Episode semantics and render modes, with one env finishing mid-episode while the other keeps moving.

Two managers run the same actions on a user-style task (``tests/isaac/easy_task.py``):
one with ``render: last``, one with ``render: all``. Their results must be identical,
and the finished env must stay frozen: flag True, reward 0, same observation.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator

import numpy as np
import pytest

from envfleet import ProcessEnvManager
from envfleet.config import load_config

from .common import SLOW_START

CHUNK = 4
DRIFT = np.array([0.5, 0.0], dtype=np.float32)  # the test task's drift (easy_task.ReachEnvCfg.drift)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def reach_config(render: str):
    return load_config(
        data={
            "train": {
                "simulator_type": "isaac",
                "task_name": "Envfleet-Test-Reach-v0",
                "num_envs": 2,
                "render": render,
                "max_episode_steps": 60,
                **SLOW_START,
                "isaac": {
                    "task_modules": ["tests.isaac.easy_task"],
                    "success_term": "near_cube",
                    "task_buffers": ["reach"],
                    "state_terms": ["policy", "reach"],
                    "state_dim": 9,
                    "state_bank_size": 8,
                },
            }
        },
        overrides=[f"actor.model.num_action_chunks={CHUNK}", "actor.model.action_dim=2"],
    )


@pytest.fixture(scope="module")
def managers() -> Iterator[dict[str, ProcessEnvManager]]:
    # The shards import the test task by module name: make this checkout importable there.
    if ROOT not in sys.path:
        sys.path.append(ROOT)
    mgrs = {render: ProcessEnvManager(reach_config(render)) for render in ("last", "all")}
    try:
        threads = [threading.Thread(target=m.start_simulator) for m in mgrs.values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for render, m in mgrs.items():
            assert m.running, f"the render={render} manager did not start"
        yield mgrs
    finally:
        for m in mgrs.values():
            m.close()


def toward_cube(state: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Env 0 heads for the cube (against the task's drift); env 1 wanders randomly (and does not get close in these few steps)."""
    actions = rng.uniform(-1, 1, (2, CHUNK, 2)).astype(np.float32)
    d = state[0, 2:4] - state[0, 0:2]
    actions[0] = d / max(float(np.linalg.norm(d)), 1e-6) - DRIFT
    return actions


def test_reset_restores_task_buffers_and_descriptions(managers) -> None:
    m = managers["last"]
    a = m.reset_envs_to_state_ids(np.array([2, 5]))
    b = m.reset_envs_to_state_ids(np.array([5, 2]))
    assert a.obs["state"].shape == (2, 9)
    assert a.obs["state"][0, 8] != a.obs["state"][1, 8], "reach is drawn per state id"
    np.testing.assert_array_equal(a.obs["state"][0], b.obs["state"][1])
    assert a.task_descriptions == ["touch the red cube with the pusher"] * 2


def test_finished_env_is_frozen_and_render_modes_agree(managers) -> None:
    ids = np.array([3, 6])
    starts = {r: m.reset_envs_to_state_ids(ids) for r, m in managers.items()}
    for key in starts["last"].obs:
        np.testing.assert_array_equal(starts["last"].obs[key], starts["all"].obs[key], err_msg=f"reset {key!r}")
    rng = np.random.default_rng(7)
    state = starts["last"].obs["state"]
    results: list[dict[str, object]] = []
    finished_at = None
    for c in range(12):
        actions = toward_cube(state, rng)
        outs = {r: m.chunk_step(actions) for r, m in managers.items()}
        for key in outs["last"].obs:
            np.testing.assert_array_equal(outs["last"].obs[key], outs["all"].obs[key], err_msg=f"chunk {c}: render last vs all, {key!r}")
        np.testing.assert_array_equal(outs["last"].rewards, outs["all"].rewards)
        np.testing.assert_array_equal(outs["last"].terminations, outs["all"].terminations)
        out = outs["last"]
        results.append({"obs": {k: v.copy() for k, v in out.obs.items()}, "term": out.terminations.copy(), "rew": out.rewards.copy()})
        state = out.obs["state"]
        if finished_at is None and out.terminations[0].any():
            finished_at = c
        if finished_at is not None and c >= finished_at + 2:
            break
    assert finished_at is not None, "env 0 never reached the cube"
    print(f"env 0 finished in chunk {finished_at}")
    assert not any(r["term"][1].any() for r in results), "env 1 should not have succeeded"  # type: ignore[index]
    end = results[finished_at]
    k = int(np.argmax(end["term"][0]))  # type: ignore[index,call-overload]
    assert end["term"][0, k:].all() and end["rew"][0, k] == 1.0 and not end["rew"][0, k + 1 :].any()  # type: ignore[index]
    for later in results[finished_at + 1 :]:
        assert later["term"][0].all() and not later["rew"][0].any()  # type: ignore[index]
        for key, value in later["obs"].items():  # type: ignore[attr-defined]
            np.testing.assert_array_equal(value[0], end["obs"][key][0], err_msg=f"the finished env's {key!r} changed")  # type: ignore[index]
        # ... while the other env keeps moving
        assert not np.array_equal(later["obs"]["state"][1], end["obs"]["state"][1])  # type: ignore[index]
