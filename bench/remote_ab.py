"""The CPU a loopback ``RemoteEnvManager`` call costs on one tree, client and server apart: the
``remote`` section's zero-cost toy (8 envs, two 256x256 images, chunk 1) through a real
``envfleet serve``; prints one JSON line of milliseconds per ``chunk_step``: the client's CPU
(this process), the server's (``envfleet serve`` and its shard processes) and the wall time.

CPU time per call is what a change to the wire's code costs; on a loaded machine the wall time
moves with the load, the CPU time much less. Run each tree's code in its own process, alternated,
with that tree's sources first on PYTHONPATH (``git worktree add --detach /tmp/base COMMIT``)::

    T=/tmp/base; PYTHONPATH=$T/packages/core/src:$T/packages/ray-worker/src:$T/tests/plugins/envfleet-toy/src \\
        .nox/tests/bin/python bench/remote_ab.py $T

It uses the tree's own ``bench/sections/remote.py`` (its ``envfleet serve`` wrapper and sizes),
as ``bench/before_after.py`` runs each tree's own bench.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

CALLS, WARMUP = 1500, 30


def _cpu_s(pid: int) -> float:
    """User and system CPU seconds of ``pid`` and its children (the server's shards)."""
    pids = [pid]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    if int(fh.read().rsplit(")", 1)[1].split()[1]) == pid:
                        pids.append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            continue
    return total / os.sysconf("SC_CLK_TCK")


def main(tree: str) -> None:
    sys.path[:0] = [os.path.join(tree, "bench"), os.path.join(tree, "bench", "sections")]
    import remote
    from configs import toy_overrides

    server = remote._Serve(toy_overrides(remote.N, remote.HW, 1, "train.toy.frozen=true", "train.toy.envs_per_process=8"))
    try:
        with server.manager() as mgr:
            mgr.reset_envs_to_state_ids(np.arange(remote.N))
            actions = np.zeros((remote.N, 1, 7), np.float32)
            for _ in range(WARMUP):
                mgr.chunk_step(actions)
            client0, server0, wall0 = time.process_time(), _cpu_s(server.proc.pid), time.perf_counter()
            for _ in range(CALLS):
                mgr.chunk_step(actions)
            client1, server1, wall1 = time.process_time(), _cpu_s(server.proc.pid), time.perf_counter()
    finally:
        server.close()
    per = 1000.0 / CALLS
    print(
        json.dumps(
            {"client_cpu_ms": (client1 - client0) * per, "server_cpu_ms": (server1 - server0) * per, "wall_ms": (wall1 - wall0) * per}
        )
    )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
