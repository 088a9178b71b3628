"""``render: last`` against ``render: all`` with the arm moving, the stage video, and finished envs.

One scenario, run once for the module on two managers that differ only in
``train.render``: a reset, then chunks of random actions (the arm moves), with
``max_episode_steps`` ending the episode in the middle of a chunk and
``auto_reset`` off, so that the chunks after it exercise a finished env.
"""

from __future__ import annotations

import glob
import itertools
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from envfleet import ProcessEnvManager
from envfleet.config import load_config

CHUNK = 8
NUM_CHUNKS = 4
# Ends the episode at sub-step 3 of the third chunk (20 = 2 * 8 + 4): with lazy rendering
# that sub-step must be rendered although it is not a chunk end.
MAX_STEPS = 20
STATE_ID = 23  # libero_spatial task 0, trial 23


@dataclass
class Run:
    """What one manager returned: the reset and every chunk."""

    reset: Any
    steps: list[Any]
    video: list[str]


def _config(render: str, video_dir: str | None) -> Any:
    train: dict[str, Any] = {
        "simulator_type": "libero",
        "task_suite_name": "libero_spatial",
        "num_envs": 1,
        "render": render,
        "max_episode_steps": MAX_STEPS,
        "auto_reset": False,
        "init_params": {"camera_heights": 128, "camera_widths": 128},
    }
    if video_dir is not None:
        train["video_cfg"] = {"save_video": True, "video_base_dir": video_dir}
    return load_config(data={"train": train, "actor": {"model": {"num_action_chunks": CHUNK, "action_dim": 7}}})


def _actions() -> np.ndarray:
    rng = np.random.default_rng(7)
    arm = rng.uniform(-1.0, 1.0, size=(NUM_CHUNKS, 1, CHUNK, 6))
    gripper = np.sign(rng.uniform(-1.0, 1.0, size=(NUM_CHUNKS, 1, CHUNK, 1)))
    return np.concatenate([arm, gripper], axis=-1).astype(np.float32)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    video_dir = str(tmp_path_factory.mktemp("videos"))
    managers = {"last": ProcessEnvManager(_config("last", video_dir)), "all": ProcessEnvManager(_config("all", None))}
    actions = _actions()

    def run(mgr: ProcessEnvManager) -> Run:
        mgr.start_simulator()
        reset = mgr.reset_envs_to_state_ids(np.array([STATE_ID]))
        steps = [mgr.chunk_step(a) for a in actions]
        video = mgr.flush_video("stage_0")
        mgr.wait_video()
        return Run(reset, steps, video)

    try:
        # The two managers are independent processes: run them side by side.
        with ThreadPoolExecutor(max_workers=2) as pool:
            futures = {mode: pool.submit(run, mgr) for mode, mgr in managers.items()}
            return {mode: f.result() for mode, f in futures.items()}
    finally:
        for mgr in managers.values():
            mgr.close()


def test_render_last_equals_render_all(runs: dict[str, Run]) -> None:
    last, full = runs["last"], runs["all"]
    for key in ("full_image", "wrist_image", "state"):
        np.testing.assert_array_equal(last.reset.obs[key], full.reset.obs[key], err_msg=f"{key} after the reset")
        for j, (a, b) in enumerate(zip(last.steps, full.steps)):
            np.testing.assert_array_equal(a.obs[key], b.obs[key], err_msg=f"{key} after chunk {j} (render: last vs all)")
    for a, b in zip(last.steps, full.steps):
        np.testing.assert_array_equal(a.truncations, b.truncations)
        np.testing.assert_array_equal(a.rewards, b.rewards)


def test_the_arm_moved_and_the_images_changed(runs: dict[str, Run]) -> None:
    # Zero actions could not tell a camera sampled at the wrong sub-step from the right one.
    run = runs["last"]
    states = [run.reset.obs["state"][0]] + [s.obs["state"][0] for s in run.steps]
    moves = [float(np.abs(b[:3] - a[:3]).max()) for a, b in itertools.pairwise(states[:3])]
    assert min(moves) > 0.01, f"eef moved only {moves} m per chunk"
    for key in ("full_image", "wrist_image"):
        changed = np.abs(run.steps[0].obs[key].astype(int) - run.reset.obs[key].astype(int)).max(axis=-1) > 0
        assert changed.mean() > 0.01, f"{key}: only {changed.mean():.2%} of pixels changed over a chunk"


def test_episode_truncated_mid_chunk_stays_finished(runs: dict[str, Run]) -> None:
    steps = runs["last"].steps
    k = MAX_STEPS - 2 * CHUNK - 1  # index of the truncating sub-step in the third chunk
    third = steps[2]
    assert not steps[0].truncations.any() and not steps[1].truncations.any()
    assert not third.truncations[0, :k].any() and third.truncations[0, k:].all()
    assert third.infos["episode_ended"][0] and third.infos["episode_length"][0] == MAX_STEPS
    fourth = steps[3]
    assert fourth.truncations.all(), "a finished env's flag must stay True on every later sub-step"
    assert not fourth.rewards.any()
    assert fourth.infos["episode_length"][0] == MAX_STEPS and not fourth.infos["episode_ended"][0]
    assert fourth.infos["reset_state_id"][0] == -1 and fourth.infos["state_id"][0] == STATE_ID
    for key in third.obs:
        np.testing.assert_array_equal(third.obs[key], fourth.obs[key], err_msg=f"{key} of a finished env changed")


def test_video_is_written_and_shows_the_scene(runs: dict[str, Run]) -> None:
    import imageio.v2 as imageio

    paths = runs["last"].video
    assert len(paths) == 1 and os.path.isfile(paths[0]), paths
    assert os.path.basename(os.path.dirname(paths[0])) == "stage_0"
    assert glob.glob(os.path.join(os.path.dirname(paths[0]), "*.mp4")) == paths
    frames = np.stack(imageio.mimread(paths[0]))
    assert len(frames) == 1 + NUM_CHUNKS  # the reset and each chunk
    for i, frame in enumerate(frames):
        assert frame.std() > 20, f"frame {i} looks blank (pixel std {frame.std():.1f})"
    assert runs["all"].video == []
