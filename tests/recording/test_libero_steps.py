"""A LIBERO stage recorded per step (train.record.frames: step) against LIBERO's own ``OffScreenRenderEnv``.

Two envs of libero_spatial task 0 (trials 0 and 1), 64x64, chunks of 8, episodes of 16 sub-steps, the arm
moving (directed actions). LIBERO alone, with the protocol of tests/libero/reference.py, steps the same
actions one ``env.step`` at a time, rendering every one: each frame's state, action and both cameras must
equal it, bit for bit, stored as video (libx264rgb at crf 0, lossless: the codec's error bound is 0) and
as LeRobot's image features (a PNG per frame).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from envfleet import ProcessEnvManager
from envfleet.config import load_config
from envfleet.recording import read_episodes, read_frames, read_info
from tests.libero.reference import CAMERAS, SETTLE_ACTION, directed_actions, frame, libero_modules, suite_bench

SEED, SETTLE, SIZE, CHUNK, STEPS = 7, 10, 64, 8, 16


def plain_libero(trial: int, actions: np.ndarray) -> list[dict[str, np.ndarray]]:
    """LIBERO's env alone: the frame after settling, then after every ``env.step`` of ``actions`` ``[steps, 7]``."""
    _, offscreen = libero_modules()
    bench = suite_bench("libero_spatial")
    env = offscreen(bddl_file_name=bench.get_task_bddl_file_path(0), camera_heights=SIZE, camera_widths=SIZE, camera_names=CAMERAS)
    try:
        env.seed(SEED)
        env.reset()
        obs = env.set_init_state(bench.get_task_init_states(0)[trial])
        for _ in range(SETTLE):
            obs, _, _, _ = env.step(SETTLE_ACTION)
        frames = [frame(obs)]
        for action in actions:
            obs, _, _, _ = env.step(action.astype(np.float64))
            frames.append(frame(obs))
        return frames
    finally:
        env.close()


@pytest.mark.parametrize("images", ["video", "image"])
def test_libero_per_step_frames_equal_libero_stepping_alone(tmp_path: Path, images: str) -> None:
    train = {
        "simulator_type": "libero",
        "task_suite_name": "libero_spatial",
        "num_envs": 2,
        "seed": SEED,
        "settle_steps": SETTLE,
        "render": "last",
        "max_episode_steps": STEPS,
        "init_params": {"camera_heights": SIZE, "camera_widths": SIZE, "camera_names": CAMERAS},
        "record": {"format": "lerobot", "dir": str(tmp_path / "rec"), "frames": "step", "images": images},
    }
    cfg = load_config(data={"train": train, "actor": {"model": {"num_action_chunks": CHUNK, "action_dim": 7}}})
    actions = np.stack([directed_actions(seed, STEPS // CHUNK, CHUNK) for seed in (1, 2)], axis=1)  # [chunks, env, chunk, 7]
    with ProcessEnvManager(cfg) as mgr:
        mgr.reset_envs_to_state_ids(np.array([0, 1]))  # task 0, trials 0 and 1
        for chunk in actions:
            out = mgr.chunk_step(chunk)
            assert not any(k.startswith("substep/") for k in out.obs)  # the caller never sees the sub-steps
        done = mgr.flush_dataset()
    assert done is not None and done["episodes"] == 2 and done["frames"] == 2 * STEPS
    info = read_info(done["root"])
    assert info["fps"] == 20 and info["features"]["action"]["shape"] == [7]
    assert info["features"]["observation.images.full_image"]["dtype"] == images
    for row in read_episodes(done["root"]):
        trial = int(row["envfleet/state_id"])
        ours = read_frames(done["root"], row)
        sent = actions[:, trial].reshape(STEPS, 7)
        ref = plain_libero(trial, sent)
        assert row["length"] == STEPS
        np.testing.assert_array_equal(ours["action"], sent)
        np.testing.assert_array_equal(ours["observation.state"], np.stack([f["state"] for f in ref[:STEPS]]))
        for cam in ("full_image", "wrist_image"):
            np.testing.assert_array_equal(ours[f"observation.images.{cam}"], np.stack([f[cam] for f in ref[:STEPS]]), err_msg=cam)
        # The arm moved: frames differ from one sub-step to the next (zero actions could not reveal a wrong moment).
        assert (np.abs(np.diff(ours["observation.state"], axis=0)).max(axis=1) > 1e-4).mean() > 0.5
