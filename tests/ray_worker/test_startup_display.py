"""`envfleet rollout` says what it is doing before the first chunk: Ray, the workers, the shards
starting (n of m) and the first reset, each with its time; plain lines in a log, one line
updated in place on a terminal. Run as a user runs it, with the toy backend slowed down where a
real simulator is slow (its build and its reset sleep)."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import threading
import time

from envfleet.config import load_config
from envfleet_ray import EnvWorker

ENVFLEET = [sys.executable, "-m", "envfleet_ray.cli"]
SLOW = ["train.simulator_type=toy", "train.num_envs=2", "train.toy.build_sleep_s=1.5", "train.toy.reset_sleep_s=2.0"]
ENV = {**os.environ, "RAY_ADDRESS": "", "ENVFLEET_PROGRESS": ""}


def _lines(text: str) -> list[str]:
    return [line.strip() for line in re.split(r"[\r\n]", text) if line.strip()]


def test_a_log_gets_each_phase_with_its_counts_and_time_before_the_first_chunk(tmp_path: object) -> None:
    out = subprocess.run(
        [*ENVFLEET, "rollout", "--steps", "2", "--out", str(tmp_path), *SLOW, "rollout.pipeline_stage_num=2"],
        capture_output=True,
        text=True,
        timeout=300,
        env=ENV,
    )
    assert out.returncode == 0, out.stderr
    lines = [line for line in _lines(out.stderr) if line.startswith("envfleet:")]
    done = {m.group(1): float(m.group(2)) for m in (re.match(r"envfleet: (.*?), ([\d.]+)s$", line) for line in lines) if m}
    # Two stages of two envs, one env per shard: four shards.
    assert "starting Ray" in done and "starting the workers" in done, lines
    assert "starting the simulators: 4 of 4 shard(s) started" in done, lines
    assert done["first reset: 4 of 4 shard(s) reset"] >= 2.0, lines  # each shard's reset sleeps 2 s
    # In a log no line is rewritten: no carriage returns or escapes, and the phases come in order.
    assert "\r" not in out.stderr and "\033[" not in out.stderr
    order = [
        next(i for i, line in enumerate(lines) if line.startswith(f"envfleet: {p}"))
        for p in ("starting Ray", "starting the workers", "starting the simulators", "first reset")
    ]
    assert order == sorted(order), lines


def test_a_terminal_gets_one_line_updated_in_place(tmp_path: object) -> None:
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [*ENVFLEET, "rollout", "--steps", "2", "--out", str(tmp_path), *SLOW],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=follower,
        env=ENV,
    )
    os.close(follower)
    seen = b""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the child closed its end
                break
            if not chunk:
                break
            seen += chunk
        elif proc.poll() is not None:
            break
    os.close(leader)
    assert proc.wait(timeout=60) == 0
    text = seen.decode("utf-8", "replace")
    # The running phase is redrawn in place (carriage return, erase line) with its seconds ticking ...
    assert "\r\x1b[K" in text
    assert re.search(r"envfleet: first reset: \d of 2 shard\(s\) reset \(\d+s\)", text), text[-2000:]
    # ... and each phase ends on a line of its own with its time.
    assert re.search(r"envfleet: first reset: 2 of 2 shard\(s\) reset, [\d.]+s\r?\n", text), text[-2000:]


def test_the_worker_answers_startup_status_while_its_shards_start() -> None:
    cfg = load_config(
        data={"train": {"simulator_type": "toy", "num_envs": 2, "toy": {"build_sleep_s": 2.0}}, "rollout": {"pipeline_stage_num": 1}}
    )
    worker = EnvWorker(cfg)
    try:
        worker.init_worker()
        assert worker.startup_status() == [[{"started": False, "reset": False, "in_flight": None, "for_s": 0.0, "says": ""}] * 2]
        starting = threading.Thread(target=worker.init_simulator)
        starting.start()
        time.sleep(0.8)
        during = worker.startup_status()
        starting.join(timeout=120)
        after = worker.startup_status()
    finally:
        worker.close()
    assert [s["in_flight"] for s in during[0]] == ["init", "init"] and not any(s["started"] for s in during[0])
    assert all(s["for_s"] > 0 for s in during[0])
    assert [(s["started"], s["reset"], s["in_flight"]) for s in after[0]] == [(True, False, None)] * 2


def test_no_progress_prints_no_startup_lines(tmp_path: object) -> None:
    out = subprocess.run(
        [*ENVFLEET, "rollout", "--no-progress", "--steps", "1", "--out", str(tmp_path), "train.simulator_type=toy", "train.num_envs=1"],
        capture_output=True,
        text=True,
        timeout=300,
        env=ENV,
    )
    assert out.returncode == 0, out.stderr
    assert not [line for line in _lines(out.stderr) if line.startswith("envfleet:")], out.stderr
