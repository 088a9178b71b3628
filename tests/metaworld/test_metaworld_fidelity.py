"""The backend reproduces plain MetaWorld run in its venv with the same conventions, bit for bit.

The reference (tests/metaworld/direct.py) uses MetaWorld's API only. The backend runs
through ``ProcessEnvManager`` under ``train.simulator_python`` with ``render: last``;
one env visits three variations of two tasks, so the env is rebuilt for a new task and
reused for the same one.
"""

from __future__ import annotations

import numpy as np
import pytest

from envfleet import ProcessEnvManager
from envfleet.config import load_config
from envfleet_metaworld.tasks import INSTRUCTIONS, TASKS

from .common import CHUNK, direct_run, metaworld_train, moving_actions

CHUNKS = 3
EPISODES = [("pick-place-v3", 3), ("pick-place-v3", 17), ("drawer-open-v3", 0)]


def _backend(settle: int, actions: list[np.ndarray]) -> list[tuple[list[dict[str, np.ndarray]], str]]:
    cfg = load_config(
        data={"train": metaworld_train(num_envs=1, settle_steps=settle), "actor": {"model": {"num_action_chunks": CHUNK}}},
    )
    out = []
    with ProcessEnvManager(cfg) as mgr:
        for (task, variation), acts in zip(EPISODES, actions):
            sid = TASKS.index(task) * 50 + variation
            first = mgr.reset_envs_to_state_ids(np.array([sid]))
            frames = [{k: v[0].copy() for k, v in first.obs.items()}]
            for chunk in acts:
                step = mgr.chunk_step(chunk[None])
                frames.append({k: v[0].copy() for k, v in step.obs.items()})
            out.append((frames, first.task_descriptions[0]))
    return out


@pytest.mark.parametrize("settle", [0, 15], ids=["lerobot", "rlinf-settle-15"])
def test_backend_matches_plain_metaworld(settle: int, no_leaks: None) -> None:
    actions = [moving_actions(100 + k, CHUNKS) for k in range(len(EPISODES))]
    reference = direct_run([{"task": t, "variation": v, "actions": a} for (t, v), a in zip(EPISODES, actions)], settle=settle)
    ours = _backend(settle, actions)
    for (task, variation), ref, (frames, description) in zip(EPISODES, reference, ours):
        assert description == INSTRUCTIONS[task]
        moved = np.abs(ref["states"][-1][:3] - ref["states"][0][:3]).max()
        assert moved > 0.01, f"the arm barely moved ({moved:.4f}): the check would be weak"
        for j, mine in enumerate(frames):
            when = "after the reset" if j == 0 else f"after chunk {j}"
            np.testing.assert_array_equal(mine["full_image"], ref["images"][j], err_msg=f"{task} #{variation}: image differs {when}")
            np.testing.assert_array_equal(mine["state"], ref["states"][j], err_msg=f"{task} #{variation}: state differs {when}")


def test_variations_differ_and_repeat() -> None:
    """Two variations of a task start differently; the same one twice starts the same (set_task before reset)."""
    a, b, a_again = direct_run([{"task": "reach-v3", "variation": v, "actions": moving_actions(0, 0)} for v in (0, 1, 0)])
    assert not np.array_equal(a["images"][0], b["images"][0])
    np.testing.assert_array_equal(a["images"][0], a_again["images"][0])
