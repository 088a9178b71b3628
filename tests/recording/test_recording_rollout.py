"""``envfleet rollout`` with ``train.record.format=lerobot``: EnvWorkerGroup on a local Ray (toy) and LIBERO.

Each recorded frame must be a (state, action) pair the policy handled, with the images it saw
(bit for bit: the video is lossless), and the datasets must count the summary's episodes.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from envfleet.recording import find_datasets, read_episodes, read_frames, read_info

from .logging_policy import LIBERO_RUN, read_log


def rollout(out: Path, *overrides: str, steps: int, workers: int = 1) -> dict:
    log = out / "policy-log"
    env = {**os.environ, "RAY_ADDRESS": "", "ENVFLEET_TEST_POLICY_LOG": str(log)}
    cmd = [
        sys.executable,
        "-m",
        "envfleet_ray.cli",
        "rollout",
        "--steps",
        str(steps),
        "--no-progress",
        "--workers",
        str(workers),
        "--out",
        str(out),
    ]
    cmd += ["--policy", "tests.recording.logging_policy:logging_random", "train.record.format=lerobot", *overrides]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "dataset: " in proc.stdout
    return json.loads((out / "summary.json").read_text())


def check_against_run(out: Path, summary: dict, cameras: tuple[str, ...]) -> list[dict]:
    """The datasets hold the summary's episodes; every frame is one the policy saw and answered."""
    roots = find_datasets(str(out / "datasets"))
    assert sorted(d["root"] for d in summary["datasets"]) == roots
    pairs = read_log(str(out / "policy-log"))
    rows = []
    for root in roots:
        info = read_info(root)
        assert info["envfleet"]["fingerprints"], "finish_rollout's fingerprint is in the dataset's metadata"
        assert info["envfleet"]["fingerprints"][-1]["hash"]
        for row in read_episodes(root):
            rows.append(row)
            frames = read_frames(root, row)
            assert len(frames["action"]) == row["length"]
            for t in range(row["length"]):
                key = frames["observation.state"][t].tobytes() + frames["action"][t].tobytes()
                assert key in pairs, f"{root} episode {row['episode_index']} frame {t}: not a (state, action) the policy handled"
                for cam in cameras:
                    np.testing.assert_array_equal(frames[f"observation.images.{cam}"][t], pairs[key][cam])
    per_task = summary["per_task"]
    assert len(rows) == summary["episodes"] == sum(t["episodes"] for t in per_task.values())
    for task, row in per_task.items():
        mine = [r for r in rows if str(r["envfleet/task_id"]) == task]
        assert len(mine) == row["episodes"] and all(r["tasks"] == [row["description"]] for r in mine)
        assert sum(r["envfleet/success_once"] for r in mine) == row["successes"]
    return rows


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A toy rollout on a local Ray: 2 workers x 2 stages x 2 envs, recorded."""
    out = tmp_path_factory.mktemp("toy") / "run"
    summary = rollout(
        out,
        "train.simulator_type=toy",
        "train.num_envs=2",
        "rollout.pipeline_stage_num=2",
        "actor.model.num_action_chunks=4",
        "train.max_episode_steps=8",
        "train.init_params.camera_heights=32",
        "train.init_params.camera_widths=32",
        steps=6,
        workers=2,
    )
    return out, summary


def test_toy_rollout_on_ray_records_a_dataset_per_rank_and_stage(toy_run: tuple[Path, dict]) -> None:
    out, summary = toy_run
    rows = check_against_run(out, summary, ("full_image", "wrist_image"))
    assert {(r["envfleet/rank"], r["envfleet/stage"]) for r in rows} == {(0, 0), (0, 1), (1, 0), (1, 1)}
    assert all(r["length"] == 2 for r in rows)  # 8 sub-steps = 2 chunks


def test_report_renders_in_chromium_with_playable_videos(toy_run: tuple[Path, dict], tmp_path: Path) -> None:
    """``envfleet report`` on the run; headless Chromium (Debian's, scripts/bootstrap) loads the page: the table's
    rows, the plot and every video element must render, each video decoded (readyState >= 2, a duration, a width)."""
    out, summary = toy_run
    proc = subprocess.run([sys.executable, "-m", "envfleet_ray.cli", "report", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    page = (out / "report.html").read_text()
    assert "<script" not in page and summary["fingerprint"]["hash"] in page
    result, shot = browse(page, tmp_path)
    assert result["rows"] == len(summary["per_task"]) + 2  # header, one per task, total
    assert result["svg"] == 1 and result["videos"] >= 1
    assert result["playable"] == result["videos"], result
    assert shot.stat().st_size > 10_000


def browse(page: str, where: Path) -> tuple[dict, Path]:
    """Load ``page`` in headless Chromium: a probe script (added to a copy, not to the report) waits for the
    videos and writes what rendered into the DOM Chromium dumps; and a screenshot."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "Chromium is missing: scripts/bootstrap installs Debian's chromium package"
    probe = """<script>window.addEventListener('load', () => {
      const vids = [...document.querySelectorAll('video')]; let tries = 0;
      const poll = () => {
        const ok = vids.filter(v => v.readyState >= 2 && !v.error && v.duration > 0 && v.videoWidth > 0);
        if (ok.length < vids.length && tries++ < 100) { setTimeout(poll, 100); return; }
        const el = document.createElement('pre'); el.id = 'probe';
        el.textContent = JSON.stringify({rows: document.querySelectorAll('#per-task tr').length, svg: document.querySelectorAll('svg').length,
          videos: vids.length, playable: ok.length, detail: vids.map(v => [v.readyState, v.error && v.error.code, v.duration])});
        document.body.appendChild(el); };
      poll(); });</script>"""
    probed = where / "probe.html"
    probed.write_text(page.replace("</body>", probe + "</body>"))
    flags = [chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={where / 'profile'}"]
    dom = subprocess.run(
        [*flags, "--virtual-time-budget=15000", "--dump-dom", probed.as_uri()], capture_output=True, text=True, timeout=120
    )
    found = re.search(r'<pre id="probe">([^<]*)</pre>', dom.stdout)
    assert found, dom.stderr[-2000:]
    shot = where / "report.png"
    subprocess.run(
        [*flags, "--hide-scrollbars", "--window-size=1000,1200", f"--screenshot={shot}", probed.as_uri()], capture_output=True, timeout=120
    )
    return json.loads(html.unescape(found.group(1))), shot


def test_libero_rollouts_record_two_cameras_and_compare_as_pairs(tmp_path) -> None:
    out = tmp_path / "run"
    one_stage = [*LIBERO_RUN, "rollout.pipeline_stage_num=1"]  # two runs of LIBERO scenes: one stage of 2 envs is enough
    summary = rollout(out, *one_stage, steps=4)
    assert summary["episodes"] >= 4 and summary["sim_restarts"] == 0
    rows = check_against_run(out, summary, ("full_image", "wrist_image"))
    assert all(r["length"] == 2 for r in rows)
    # A second run over the same initial states (the same config, seed and policy): compared as pairs.
    other = tmp_path / "other"
    again = rollout(other, *one_stage, steps=4)
    assert again["episodes"] == summary["episodes"]
    cmp = subprocess.run(
        [sys.executable, "-m", "envfleet_ray.cli", "compare", str(out), str(other)], capture_output=True, text=True, timeout=300
    )
    assert cmp.returncode == 0, cmp.stdout + cmp.stderr
    assert f"paired: {summary['episodes']} episodes over the same initial states" in cmp.stdout
    assert "McNemar's exact test" in cmp.stdout
