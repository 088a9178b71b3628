"""Helpers for tests that start Ray: loopback-only local clusters and socket checks."""

from __future__ import annotations

import os
import re
import subprocess


def listening_sockets_of(pids: set[int]) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket in LISTEN state owned by ``pids``, from `ss`."""
    out = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        parts = line.split()
        local = parts[3]
        owner_pids = {int(p) for p in re.findall(r"pid=(\d+)", line)}
        if owner_pids & pids:
            addr, _, port = local.rpartition(":")
            found.append((addr.strip("[]").removeprefix("::ffff:"), int(port)))
    return found


def ray_pids() -> set[int]:
    """Pids of Ray's processes on this machine (raylet, gcs, workers)."""
    pids = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "ray" in cmd and ("raylet" in cmd or "gcs_server" in cmd or "default_worker" in cmd or "ray::" in cmd):
            pids.add(int(pid))
    return pids
