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


#: Ray's node health checks, tightened so that a killed node is declared dead in a few
#: seconds (Ray's defaults take about 20 s); loose enough for a loaded 2-core machine.
FAST_NODE_DEATH = {
    "health_check_initial_delay_ms": 1000,
    "health_check_period_ms": 1000,
    "health_check_timeout_ms": 2000,
    "health_check_failure_threshold": 4,
}


def loopback_cluster(num_cpus: float = 1, system_config: dict | None = None, **head_args: object):
    """A ``ray.cluster_utils.Cluster`` whose every node binds to 127.0.0.1; the driver is not connected yet."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    from ray._private import ray_constants  # noqa: PLC2701 (Ray has no public switch for it)

    ray_constants.ENABLE_RAY_CLUSTER = False
    from ray.cluster_utils import Cluster

    args = {"num_cpus": num_cpus, "node_ip_address": "127.0.0.1", "include_dashboard": False, **head_args}
    if system_config:
        args["_system_config"] = system_config
    return Cluster(initialize_head=True, head_node_args=args)
