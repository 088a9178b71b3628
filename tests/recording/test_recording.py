"""Recording LeRobot datasets (train.record) from a toy stage, read back from the format's own files."""

from __future__ import annotations

import errno
import json
import os
import subprocess
from typing import Any

import numpy as np
import pytest

from envfleet import ProcessEnvManager
from envfleet.config import load_config
from envfleet.errors import ConfigError
from envfleet.recording import MARKER, RecordingError, read_episodes, read_frames, read_info
from envfleet.recording import lerobot as lerobot_files
from envfleet.recording.stage import check_record_dir

N, CHUNK, DIM = 2, 4, 7


def cfg(record_dir: str, *overrides: str):
    return load_config(
        overrides=[
            "train.simulator_type=toy",
            f"train.num_envs={N}",
            f"actor.model.num_action_chunks={CHUNK}",
            "train.max_episode_steps=12",
            "train.init_params.camera_heights=32",
            "train.init_params.camera_widths=32",
            "train.record.format=lerobot",
            f"train.record.dir={record_dir}",
            *overrides,
        ]
    )


def run_episodes(mgr: ProcessEnvManager, resets: list[list[int]], steps: int, seed: int = 0) -> list[dict]:
    """Reset and step; returns, per reset and env, what the recording must hold (copies)."""
    rng = np.random.default_rng(seed)
    expected = []
    for ids in resets:
        res = mgr.reset_envs_to_state_ids(np.array(ids))
        eps = [
            {
                "state_id": ids[i],
                "task": res.task_descriptions[i],
                "full": [res.obs["full_image"][i].copy()],
                "state": [res.obs["state"][i].copy()],
                "action": [],
                "done": False,
            }
            for i in range(N)
        ]
        for _ in range(steps):
            acts = rng.normal(size=(N, CHUNK, DIM)).astype(np.float32)
            out = mgr.chunk_step(acts)
            for i, ep in enumerate(eps):
                if ep["done"]:
                    continue
                ep["action"].append(acts[i].copy())
                ep["done"] = bool(out.infos["episode_ended"][i])
                if not ep["done"]:
                    ep["full"].append(out.obs["full_image"][i].copy())
                    ep["state"].append(out.obs["state"][i].copy())
        expected += [ep for ep in eps if ep["done"]]
    return expected


def test_episodes_round_trip_bit_for_bit(tmp_path) -> None:
    """Episodes, frames, tasks, actions, state and lossless images equal what the stage returned."""
    with ProcessEnvManager(cfg(str(tmp_path / "rec")), stage_id=1, rank=3) as mgr:
        expected = run_episodes(mgr, [[0, 11], [5, 27]], steps=4)
        done = mgr.flush_dataset({"fingerprint": {"hash": "f00"}})
    root = str(tmp_path / "rec" / "train" / "rank_3_stage_1")
    assert done is not None and done["root"] == root and done["episodes"] == len(expected) == 4
    rows = read_episodes(root)
    info = read_info(root)
    assert info["total_episodes"] == 4 and info["total_frames"] == sum(len(e["action"]) for e in expected) == 12
    assert info["envfleet"]["fingerprints"] == [{"hash": "f00"}] and info["envfleet"]["action_shape"] == [CHUNK, DIM]
    for row, ep in zip(rows, expected):
        assert row["tasks"] == [ep["task"]] and row["length"] == len(ep["action"])
        assert (row["envfleet/state_id"], row["envfleet/stage"], row["envfleet/rank"], row["envfleet/seed"]) == (ep["state_id"], 1, 3, 42)
        assert row["envfleet/sim_restarted"] is False
        frames = read_frames(root, row)
        np.testing.assert_array_equal(
            frames["action"].view(np.uint32), np.stack(ep["action"]).reshape(len(ep["action"]), -1).view(np.uint32)
        )
        np.testing.assert_array_equal(frames["observation.state"], np.stack(ep["state"]))
        np.testing.assert_array_equal(frames["observation.images.full_image"], np.stack(ep["full"]))  # libx264rgb, crf 0: lossless
        assert frames["next.done"].tolist() == [False] * (row["length"] - 1) + [True]
    assert os.path.exists(tmp_path / "rec" / MARKER)


def test_a_directory_that_is_not_an_envfleet_dataset_is_refused_before_any_process(tmp_path) -> None:
    (tmp_path / "rec").mkdir()
    (tmp_path / "rec" / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match=r"exists and is not an envfleet dataset directory"):
        ProcessEnvManager(cfg(str(tmp_path / "rec")))
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match=r"is a file"):
        ProcessEnvManager(cfg(str(tmp_path / "file")))


def _check_and_mark(tmp: str, rank: int, rounds: int, barrier: Any, out: Any) -> None:
    failures = []
    for n in range(rounds):
        record_dir = os.path.join(tmp, f"rec{n}")
        barrier.wait()
        try:
            root = os.path.join(record_dir, "train", f"rank_{rank}_stage_0")
            check_record_dir(record_dir, root)
            os.makedirs(root, exist_ok=True)
        except Exception as exc:  # handed back, so that the test names every failure
            failures.append(f"round {n}: {type(exc).__name__}: {exc}")
    out.put(failures)


def test_workers_starting_together_share_one_record_dir(tmp_path) -> None:
    """Four processes check and mark one fresh train.record.dir at the same instant, as a worker group does, 200 times."""
    import multiprocessing as mp

    ctx, procs, rounds = mp.get_context("fork"), 4, 200
    barrier, out = ctx.Barrier(procs), ctx.Queue()
    workers = [ctx.Process(target=_check_and_mark, args=(str(tmp_path), r, rounds, barrier, out)) for r in range(procs)]
    for w in workers:
        w.start()
    failures = [f for _ in workers for f in out.get(timeout=120)]
    for w in workers:
        w.join(timeout=30)
    assert failures == []
    for n in range(rounds):
        assert sorted(os.listdir(tmp_path / f"rec{n}")) == [MARKER, "train"]
        assert json.loads((tmp_path / f"rec{n}" / MARKER).read_text())["format"] == "lerobot"


def test_an_unknown_format_is_a_config_error(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"train\.record\.format"):
        cfg(str(tmp_path), "train.record.format=hdf5")


def test_a_second_run_appends_to_its_own_dataset(tmp_path) -> None:
    for seed in (0, 1):
        with ProcessEnvManager(cfg(str(tmp_path / "rec")), stage_id=0) as mgr:
            run_episodes(mgr, [[0, 1]], steps=3, seed=seed)
            mgr.flush_dataset()
    rows = read_episodes(str(tmp_path / "rec" / "train" / "rank_0_stage_0"))
    assert [r["episode_index"] for r in rows] == [0, 1, 2, 3]
    assert [r["dataset_from_index"] for r in rows] == [0, 3, 6, 9]


def _assert_failed_run_keeps_episodes(mgr: ProcessEnvManager, root: str, where: str) -> None:
    with pytest.raises(RecordingError) as caught:
        for _ in range(40):
            run_episodes(mgr, [[0, 1]], steps=3)
            mgr.flush_dataset()
    assert where in str(caught.value) and "stay loadable" in str(caught.value)
    rows = read_episodes(root)
    assert rows, "no episode was written before the disk filled"
    for row in rows:
        frames = read_frames(root, row)
        assert len(frames["action"]) == row["length"] and len(frames["observation.images.full_image"]) == row["length"]
    assert not [p for p, _, fs in os.walk(root) for f in fs if f.endswith(".part")]


def test_a_fake_full_disk_ends_the_run_naming_the_path(tmp_path, monkeypatch) -> None:
    """Fake (a quota-like stand-in for the filesystem): os.replace of the 26th file fails with ENOSPC."""
    real, calls = os.replace, []

    def replace_with_quota(src, dst):
        calls.append(dst)
        if len(calls) > 25:
            raise OSError(errno.ENOSPC, "No space left on device (fake quota)", str(dst))
        real(src, dst)

    monkeypatch.setattr(lerobot_files.os, "replace", replace_with_quota)
    root = str(tmp_path / "rec" / "train" / "rank_0_stage_0")
    with ProcessEnvManager(cfg(str(tmp_path / "rec")), stage_id=0) as mgr:
        _assert_failed_run_keeps_episodes(mgr, root, root)
        monkeypatch.setattr(lerobot_files.os, "replace", real)


def test_a_full_tmpfs_ends_the_run_naming_the_path(tmp_path) -> None:
    """A real filesystem that fills: a 300 KB tmpfs (needs root, as CI's container has)."""
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=300k", "tmpfs", str(mount)], capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (not root); test_a_fake_full_disk_ends_the_run_naming_the_path covers it")
    try:
        root = str(mount / "rec" / "train" / "rank_0_stage_0")
        with ProcessEnvManager(cfg(str(mount / "rec"), "train.init_params.camera_heights=64", "train.init_params.camera_widths=64")) as mgr:
            _assert_failed_run_keeps_episodes(mgr, root, root)
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=True)  # lazy: a handle the failed write left open


def test_a_full_queue_waits_and_is_reported_never_dropped(caplog) -> None:
    """The writer's queue holds one job; a slow writer makes later puts wait: each wait is logged and counted."""
    import threading
    import time

    from envfleet.recording import DatasetWriter

    done: list[int] = []
    gate = threading.Event()

    def job(i: int):
        def run(dataset: object) -> None:
            gate.wait(5)
            time.sleep(0.05)
            done.append(i)

        return run

    writer = DatasetWriter(lambda: object(), capacity=1, where="/nowhere")
    threading.Timer(0.3, gate.set).start()
    for i in range(4):
        writer.put(job(i))
    writer.close()
    assert done == [0, 1, 2, 3]
    assert writer.queue_full >= 1 and writer.queue_wait_s > 0
    assert "the writer's queue is full" in caplog.text
