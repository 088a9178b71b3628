"""Shared settings of the Isaac tests."""

from __future__ import annotations

import os
import time
from typing import Any

from envfleet.shards.shm import SHM_PREFIX

#: Generous deadlines: a cold Warp kernel cache makes the first build and step take minutes.
SLOW_START = {"start_timeout_s": 900.0, "step_timeout_s": 600.0}


def pusher_train(**extra: Any) -> dict[str, Any]:
    """A ``train`` section for the project's pusher task."""
    return {"simulator_type": "isaac", "task_name": "Envfleet-Pusher-v0", **SLOW_START, **extra}


def segments_of(pid: int) -> set[str]:
    """envfleet shared-memory segments created by process ``pid`` (their names carry it).

    The Isaac tests check their own processes' segments rather than all of /dev/shm:
    other jobs on a shared machine create and free segments at the same time.
    """
    prefix = f"{SHM_PREFIX}{pid}_"
    try:
        return {n for n in os.listdir("/dev/shm") if n.startswith(prefix)}
    except FileNotFoundError:  # pragma: no cover - not Linux
        return set()


def assert_no_segments_left(pid: int, timeout_s: float = 10.0) -> None:
    """Fail if process ``pid`` still owns envfleet segments after ``timeout_s``."""
    deadline = time.time() + timeout_s
    while segments_of(pid) and time.time() < deadline:
        time.sleep(0.1)
    left = segments_of(pid)
    assert not left, f"leaked shared-memory segments of pid {pid}: {sorted(left)}"
