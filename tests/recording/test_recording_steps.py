"""train.record.frames: step, keep: success, min_length, meta/stats.json, growing a dataset, a killed run (toy stage).

A per-step dataset must hold what stepping one sub-step per chunk gives for the same actions (the toy
is deterministic): the second stage runs with chunks of 1 and no recording, and is the reference.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from envfleet import ProcessEnvManager
from envfleet.config import load_config
from envfleet.errors import ConfigError
from envfleet.recording import read_episodes, read_frames, read_info
from envfleet.recording import stats as dstats

N, CHUNK, DIM = 2, 4, 7


def cfg(record_dir: str | None, *overrides: str, chunk: int = CHUNK):
    record = ["train.record.format=lerobot", f"train.record.dir={record_dir}"] if record_dir else []
    return load_config(
        overrides=[
            "train.simulator_type=toy",
            f"train.num_envs={N}",
            f"actor.model.num_action_chunks={chunk}",
            "train.max_episode_steps=10",
            "train.init_params.camera_heights=32",
            "train.init_params.camera_widths=32",
            *record,
            *overrides,
        ]
    )


def toward_goal(state: np.ndarray, rng: np.random.Generator, noise: float) -> np.ndarray:
    """A toy action towards the goal (state[4:6] is goal minus point), with noise."""
    act = np.zeros((len(state), DIM), dtype=np.float32)
    act[:, :2] = np.clip(state[:, 4:6] / 0.05, -1, 1) + noise * rng.normal(size=(len(state), 2))
    return act


def test_per_step_frames_equal_stepping_one_sub_step_at_a_time(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    acts = rng.uniform(-1, 1, size=(3, N, CHUNK, DIM)).astype(np.float32)  # 12 sub-steps > max_episode_steps=10
    with ProcessEnvManager(cfg(str(tmp_path / "rec"), "train.record.frames=step")) as mgr:
        mgr.reset_envs_to_state_ids(np.array([0, 7]))
        for a in acts:
            mgr.chunk_step(a)
        summary = mgr.flush_dataset()
    assert summary is not None and summary["frames_kind"] == "step" and summary["fps"] == 10
    assert "render every sub-step" in summary["recording_cost"]
    # The reference: chunks of one sub-step, nothing recorded.
    states, images = [], []
    with ProcessEnvManager(cfg(None, chunk=1)) as ref:
        res = ref.reset_envs_to_state_ids(np.array([0, 7]))
        states.append(res.obs["state"].copy())
        images.append(res.obs["full_image"].copy())
        for a in acts.transpose(0, 2, 1, 3).reshape(-1, N, 1, DIM):
            out = ref.chunk_step(a)
            states.append(out.obs["state"].copy())
            images.append(out.obs["full_image"].copy())
    root = summary["root"]
    info = read_info(root)
    assert info["fps"] == 10 and info["features"]["action"]["shape"] == [DIM] and info["envfleet"]["frames"] == "step"
    rows = read_episodes(root)
    assert [r["length"] for r in rows] == [10, 10]  # truncated at max_episode_steps: 10 frames, not 12
    flat = acts.transpose(0, 2, 1, 3).reshape(-1, N, DIM)
    for row in rows:
        i = [0, 7].index(row["envfleet/state_id"])
        frames = read_frames(root, row)
        np.testing.assert_array_equal(frames["action"], flat[:10, i])
        np.testing.assert_array_equal(frames["observation.state"], np.stack(states)[:10, i])
        np.testing.assert_array_equal(frames["observation.images.full_image"], np.stack(images)[:10, i])
        assert frames["next.done"].tolist() == [False] * 9 + [True]
        np.testing.assert_allclose(frames["timestamp"], np.arange(10) / 10, rtol=0, atol=1e-6)


def test_stats_json_is_the_episodes_stats_aggregated_and_appending_updates_it(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    for _ in range(2):  # the second run appends to the same dataset
        with ProcessEnvManager(cfg(str(tmp_path / "rec"), "train.record.frames=step")) as mgr:
            for _ in range(2):
                mgr.reset_envs_to_state_ids(np.array([3, 4]))
                for _ in range(3):
                    mgr.chunk_step(rng.uniform(-1, 1, size=(N, CHUNK, DIM)).astype(np.float32))
            root = mgr.flush_dataset()["root"]
    rows = read_episodes(root)
    assert [r["episode_index"] for r in rows] == list(range(8))
    stats = json.loads(Path(root, "meta", "stats.json").read_text())
    info = read_info(root)
    assert set(stats) == set(info["features"])  # every feature, the images and the index columns included
    assert stats["action"]["count"] == [info["total_frames"]]
    for name in ("min", "max", "mean", "std", "q01", "q10", "q50", "q90", "q99"):
        assert np.asarray(stats["observation.images.full_image"][name]).shape == (3, 1, 1)
        assert np.asarray(stats["action"][name]).shape == (DIM,)
    # Recomputed here from the frames read back: each episode's stats, aggregated in order.
    parts = []
    for row in rows:
        frames = read_frames(root, row)
        images = {k: list(frames.pop(k)) for k in [k for k in frames if k.startswith("observation.images.")]}
        parts.append(dstats.episode_stats({k: v for k, v in frames.items() if k in info["features"]}, images))
    total = parts[0]
    for part in parts[1:]:
        total = dstats.aggregate([total, part])
    for key, feat in total.items():
        for name, value in feat.items():
            np.testing.assert_allclose(np.asarray(stats[key][name], dtype=np.float64), value, rtol=1e-6, atol=1e-7, err_msg=f"{key}/{name}")
    # The action's mean and std are those of all frames.
    actions = np.concatenate([read_frames(root, r)["action"] for r in rows])
    np.testing.assert_allclose(stats["action"]["mean"], actions.mean(axis=0, dtype=np.float64), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stats["action"]["std"], actions.std(axis=0, dtype=np.float64), rtol=1e-5, atol=1e-6)


def test_keep_success_and_min_length(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    written = []
    for keep in ("all", "success"):
        overrides = ["train.record.frames=step", f"train.record.keep={keep}", "train.record.min_length=3"]
        with ProcessEnvManager(cfg(str(tmp_path / keep), *overrides)) as mgr:
            for n in range(4):
                res = mgr.reset_envs_to_state_ids(np.array([n, n + 10]))
                state = res.obs["state"]
                for _ in range(3):
                    # Env 0 heads for its goal, env 1 wanders.
                    act = np.repeat(toward_goal(state, rng, 0.0)[:, None], CHUNK, axis=1)
                    act[1] = rng.uniform(-1, 1, size=(CHUNK, DIM))
                    state = mgr.chunk_step(act).obs["state"]
            written.append(mgr.flush_dataset())
    kept_all, kept_success = written
    rows = read_episodes(kept_success["root"])
    assert rows and all(r["envfleet/success_once"] for r in rows)
    assert kept_success["not_kept"] > 0
    every = read_episodes(kept_all["root"])
    assert len(every) == len(rows) + kept_success["not_kept"] - kept_success["too_short"] + kept_all["too_short"]
    assert all(r["length"] >= 3 for r in every)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("train.record.min_length=0", r"train\.record\.min_length is 0"),
        ("train.record.fps=0", r"train\.record\.fps is 0"),
        ("train.record.frames=every", r"frames"),
        ("train.record.keep=best", r"keep"),
    ],
    ids=["min-length", "fps", "frames", "keep"],
)
def test_bad_record_keys_are_config_errors(tmp_path: Path, override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ProcessEnvManager(cfg(str(tmp_path / "rec"), "train.record.frames=step", override))


def test_per_step_needs_a_fixed_chunk(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"fixed chunk length"):
        ProcessEnvManager(cfg(str(tmp_path / "rec"), "train.record.frames=step", "actor.model.num_action_chunks=null"))


KILLED_RUN = """
import sys, numpy as np
from envfleet import ProcessEnvManager
from tests.recording.test_recording_steps import cfg
rng = np.random.default_rng(0)
with ProcessEnvManager(cfg(sys.argv[1], "train.record.frames=step", "train.record.queue_episodes=1")) as mgr:
    while True:
        mgr.reset_envs_to_state_ids(np.array([0, 1]))
        for _ in range(3):
            mgr.chunk_step(rng.uniform(-1, 1, size=(2, 4, 7)).astype(np.float32))
"""


def test_a_run_killed_while_recording_leaves_every_finished_episode_readable(tmp_path: Path) -> None:
    record = tmp_path / "rec"
    root = record / "train" / "rank_0_stage_0"
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_RUN, str(record)], cwd=Path(__file__).resolve().parents[2], start_new_session=True
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            info = root / "meta" / "info.json"
            if info.exists() and json.loads(info.read_text())["total_episodes"] >= 6:
                break
            assert proc.poll() is None, "the recording process ended on its own"
            time.sleep(0.05)
        else:
            pytest.fail("no 6 episodes recorded within 120 s")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the run and its shard processes, at once
        proc.wait()
    rows = read_episodes(str(root))
    assert len(rows) >= 6
    for row in rows:
        frames = read_frames(str(root), row)
        assert len(frames["action"]) == row["length"] == len(frames["observation.images.full_image"])
    # stats.json is written just before info.json counts an episode: it counts those frames, or one episode (<= 10) more.
    counted = sum(r["length"] for r in rows)
    assert 0 <= json.loads((root / "meta" / "stats.json").read_text())["action"]["count"][0] - counted <= 10
    # The next run appends after the counted episodes, and the statistics count every frame again.
    with ProcessEnvManager(cfg(str(record), "train.record.frames=step")) as mgr:
        mgr.reset_envs_to_state_ids(np.array([0, 1]))
        for _ in range(3):
            mgr.chunk_step(np.zeros((N, CHUNK, DIM), np.float32))
        done = mgr.flush_dataset()
    assert done["episodes"] == len(rows) + 2
    assert json.loads((root / "meta" / "stats.json").read_text())["action"]["count"] == [done["frames"]]


def test_images_stored_as_images_round_trip_bit_for_bit(tmp_path: Path) -> None:
    """train.record.images: image: LeRobot's image features, a PNG per frame in the parquet, lossless."""
    rng = np.random.default_rng(3)
    seen = []
    with ProcessEnvManager(cfg(str(tmp_path / "rec"), "train.record.frames=step", "train.record.images=image")) as mgr:
        res = mgr.reset_envs_to_state_ids(np.array([2, 9]))
        seen.append(res.obs["wrist_image"].copy())
        for _ in range(3):
            mgr.chunk_step(rng.uniform(-1, 1, size=(N, CHUNK, DIM)).astype(np.float32))
        root = mgr.flush_dataset()["root"]
    info = read_info(root)
    assert info["features"]["observation.images.wrist_image"]["dtype"] == "image" and info["video_path"] is None
    assert not (Path(root) / "videos").exists()
    rows = read_episodes(root)
    assert len(rows) == 2
    for row in rows:
        frames = read_frames(root, row)
        i = [2, 9].index(row["envfleet/state_id"])
        assert frames["observation.images.wrist_image"].shape == (row["length"], 32, 32, 3)
        np.testing.assert_array_equal(frames["observation.images.wrist_image"][0], seen[0][i])
    stats = json.loads(Path(root, "meta", "stats.json").read_text())
    assert np.asarray(stats["observation.images.full_image"]["mean"]).shape == (3, 1, 1)


def test_first_ready_stepping_with_per_step_recording_hands_out_no_sub_steps(tmp_path: Path) -> None:
    """The sub-step observations stay in shared memory: a first-ready chunk has the backend's keys only."""
    with ProcessEnvManager(cfg(str(tmp_path / "rec"), "train.record.frames=step")) as mgr:
        mgr.reset_envs_to_state_ids(np.array([0, 1]))
        mgr.send_chunk(np.arange(N), np.zeros((N, CHUNK, DIM), np.float32))
        got = mgr.recv_chunk(N)
        assert sorted(got.obs) == sorted(mgr.obs_spec) and not any(k.startswith("substep/") for k in got.obs)


def test_the_fingerprint_says_what_recording_renders(tmp_path: Path) -> None:
    from envfleet.fingerprint import protocol
    from envfleet.plugins import get_backend

    toy = get_backend("toy")
    step = cfg(str(tmp_path / "a"), "train.record.frames=step").train
    chunk = cfg(str(tmp_path / "b")).train
    plain = cfg(None).train
    assert protocol(step, toy, {})["recording"] == {"frames": "step", "renders": "every sub-step"}
    assert protocol(chunk, toy, {})["recording"] == {"frames": "chunk", "renders": "last"}
    assert "recording" not in protocol(plain, toy, {})  # a run that records nothing keeps its fingerprint


def test_a_dataset_recorded_per_chunk_is_not_appended_to_per_step(tmp_path: Path) -> None:
    """Same feature names, another action shape and fps: refused before any process starts, naming both."""
    with ProcessEnvManager(cfg(str(tmp_path / "rec"))) as mgr:
        mgr.reset_envs_to_state_ids(np.array([0, 1]))
        for _ in range(3):
            mgr.chunk_step(np.zeros((N, CHUNK, DIM), np.float32))
        assert mgr.flush_dataset()["episodes"] == 2
    with pytest.raises(ConfigError, match=r"holds a dataset at 10 fps; this run records 5 fps"):
        ProcessEnvManager(cfg(str(tmp_path / "rec"), "train.record.fps=5"))
    with pytest.raises(ConfigError, match=r"holds a dataset whose 'action' is .*\[28\].*this run records it as .*\[7\]"):
        ProcessEnvManager(cfg(str(tmp_path / "rec"), "train.record.frames=step"))
    assert len(read_episodes(str(tmp_path / "rec" / "train" / "rank_0_stage_0"))) == 2  # untouched


@pytest.mark.parametrize("frames", ["step", "chunk"])
def test_an_episode_cut_by_a_restart_is_never_kept_as_a_success(tmp_path: Path, frames: str) -> None:
    """The toy's shard exits inside its 13th chunk step (a crashing simulator); both envs had reached their goal
    before (ignore_terminations keeps the episodes going): keep: all writes them marked, keep: success writes none."""
    written = {}
    for keep in ("all", "success"):
        overrides = [f"train.record.frames={frames}", f"train.record.keep={keep}", "train.toy.exit_on_step=12"]
        overrides += ["train.ignore_terminations=true", "train.max_episode_steps=100"]
        with ProcessEnvManager(cfg(str(tmp_path / keep), *overrides)) as mgr:
            state = mgr.reset_envs_to_state_ids(np.array([0, 1])).obs["state"]
            for _ in range(13):  # 48 sub-steps reach any goal; the 13th chunk step is cut
                out = mgr.chunk_step(np.repeat(toward_goal(state, np.random.default_rng(0), 0.0)[:, None], CHUNK, axis=1))
                state = out.obs["state"]
            assert out.infos["sim_restarted"].all()
            written[keep] = mgr.flush_dataset()
    rows = read_episodes(written["all"]["root"])
    assert len(rows) == 2 and all(r["envfleet/sim_restarted"] and r["envfleet/success_once"] for r in rows)
    assert written["success"]["episodes"] == 0 and written["success"]["not_kept"] == 2
