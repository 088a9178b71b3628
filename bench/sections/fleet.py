"""The `fleet` section of `nox -s bench` (bench/run.py fleet): a group of many workers on a Ray cluster.

A ``ray.cluster_utils.Cluster`` on this machine (loopback only): the head node runs the
driver, four simulator nodes of ``{"sim": 16}`` hold the workers (a quarter of a logical
CPU each). The env is the toy backend with ``toy.frozen`` (a step simulates nothing), so
what is timed is envfleet's and Ray's own cost per call.

Environment variables for a short check (the defaults are the full section):
``ENVFLEET_BENCH_FLEET_WORKERS`` (comma-separated sizes, e.g. ``1,4,16``),
``ENVFLEET_BENCH_FLEET_REPS`` (a factor on the calls per size, e.g. ``0.2``),
``ENVFLEET_BENCH_FLEET_SLEEP_MS`` (the step of the "sleeping toy" rows, 20 by default; 0 leaves
them out) and ``ENVFLEET_BENCH_FLEET_RESERVE_GIB`` (memory left to the rest of the machine, 4 by default:
a size whose workers would leave less is skipped, and the section says so).
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import numpy as np
from common import write
from configs import toy_overrides

SIM_NODES = 4
SLOTS = 16  # workers per simulator node
WORKERS = tuple(int(w) for w in os.environ.get("ENVFLEET_BENCH_FLEET_WORKERS", "1,4,16,64").split(","))
STAGES = (1, 2)
MAX_STAGED_WORKERS = 16  # sizes above this run 1 stage only (64 x 2 stages: 128 actors' worth of simulators)
REPS = float(os.environ.get("ENVFLEET_BENCH_FLEET_REPS", "1"))
# A second view, never instead of the zero-cost rows: a toy whose chunk step sleeps (train.toy.step_sleep_s),
# like a simulator that waits on a device, so that the actors' wall time is not 2 cores' worth of work.
SLEEP_S = float(os.environ.get("ENVFLEET_BENCH_FLEET_SLEEP_MS", "20")) / 1e3
ZERO_COST = "zero-cost"
RESERVE = float(os.environ.get("ENVFLEET_BENCH_FLEET_RESERVE_GIB", "4")) * 2**30
OBJECT_STORE_BYTES = 256 * 2**20  # per node: results of 2 toy envs are small, and 5 nodes' default 30% of RAM each oversubscribe /dev/shm
FAST_NODE_DEATH = {
    "health_check_initial_delay_ms": 1000,
    "health_check_period_ms": 1000,
    "health_check_timeout_ms": 2000,
    "health_check_failure_threshold": 4,
}


def _cluster() -> Any:
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    from ray._private import ray_constants  # noqa: PLC2701 (Ray has no public switch for it)

    ray_constants.ENABLE_RAY_CLUSTER = False
    from ray.cluster_utils import Cluster

    return Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 2,
            "resources": {"driver": 4},
            "node_ip_address": "127.0.0.1",
            "include_dashboard": False,
            "_system_config": {**FAST_NODE_DEATH, "prestart_worker_first_driver": False},
        },
    )


def _toy_label(sleep_s: float) -> str:
    return ZERO_COST if sleep_s <= 0 else f"sleeping {sleep_s * 1e3:g} ms"


def _cfg(stages: int, sleep_s: float = 0.0) -> Any:
    from envfleet.config import load_config

    extra = ["train.toy.frozen=true", "train.toy.envs_per_process=2", f"rollout.pipeline_stage_num={stages}"]
    if sleep_s > 0:
        extra.append(f"train.toy.step_sleep_s={sleep_s}")
    return load_config(overrides=toy_overrides(2, 16, 8, *extra))


def _add_sim_node(cluster: Any) -> Any:
    return cluster.add_node(num_cpus=SLOTS, resources={"sim": SLOTS}, node_ip_address="127.0.0.1", object_store_memory=OBJECT_STORE_BYTES)


def _pss(pid: int) -> int:
    """Proportional set size of ``pid`` in bytes (shared pages split among their users)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("Pss:"))
    except (OSError, StopIteration):
        return 0


def _descendants(pid: int) -> list[int]:
    """``pid``'s child processes and theirs (shards, multiprocessing's resource tracker)."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                kids = [int(k) for k in fh.read().split()]
        except OSError:
            continue
        for kid in kids:
            out += [kid, *_descendants(kid)]
    return out


def _worker_bytes(group: Any) -> float:
    """Mean PSS of one worker: its actor process and every process under it (its simulators)."""
    total = 0
    for info in group.node_info():
        total += sum(_pss(p) for p in {info["pid"], *_descendants(info["pid"])})
    return total / group.num_workers


def _skip(skipped: list[str], why: str) -> None:
    skipped.append(why)
    print(f"fleet: skipped {why}", flush=True)


def _available() -> int:
    with open("/proc/meminfo") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("MemAvailable:"))


def _step_data(group: Any, stage: int) -> Any:
    from envfleet.dataproto import DataProto

    acts = np.zeros((group.num_workers * group.num_envs, group._chunk, 7), np.float32)
    return DataProto.from_dict(non_tensors={"actions": acts}, meta_info={"stage_id": stage})


def _reset(group: Any) -> None:
    from envfleet.dataproto import DataProto

    rows = group.num_workers * group.stage_num * group.num_envs
    group.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": np.arange(rows) % 30})).get()


RELAY, PER_WORKER = "node relay", "Ray call per worker"


def _per_call(group: Any, calls: int, routes: tuple[str, ...] = (RELAY,)) -> dict[str, tuple[float, float]]:
    """Per route: wall seconds and driver CPU seconds per step call, every stage in turn, each waited for.

    With both routes, the same workers are timed through their nodes' relays and through
    one Ray call each, in turns (the relays are bypassed for the second).
    """
    data = [_step_data(group, s) for s in range(group.stage_num)]
    walls: dict[str, list[float]] = {r: [] for r in routes}
    cpus: dict[str, list[float]] = {r: [] for r in routes}

    def timed(route: str, calls: int) -> tuple[float, float]:
        restore = group.routes.bypass_relays() if route != RELAY else (lambda: None)
        try:
            w0, c0 = time.perf_counter(), time.process_time()
            for i in range(calls):
                _ = group.env_interact_step(data[i % len(data)]).get().batch  # the trainer reads the tensors
            return (time.perf_counter() - w0) / calls, (time.process_time() - c0) / calls
        finally:
            restore()

    for route in routes:  # a first call each way, untimed
        timed(route, len(data))
    for _ in range(3):
        for route in routes:
            wall, cpu = timed(route, calls)
            walls[route].append(wall)
            cpus[route].append(cpu)
    return {r: (float(np.median(walls[r])), float(np.median(cpus[r]))) for r in routes}


def _pipelined(group: Any, rounds: int) -> float:
    """Wall seconds per stage step when every stage is submitted before any is read (EnvLoop's order)."""
    data = [_step_data(group, s) for s in range(group.stage_num)]
    t0 = time.perf_counter()
    for _ in range(rounds):
        futures = [group.env_interact_step(d) for d in data]
        for f in futures:
            f.get()
    return (time.perf_counter() - t0) / (rounds * group.stage_num)


def run() -> None:
    """Fixed cost per call against workers and stages, cross-node against the local lane, node-loss recovery."""
    import ray

    from envfleet_ray.runtime.group import EnvWorkerGroup

    cluster = _cluster()
    rows: list[dict[str, Any]] = []
    extra: dict[str, Any] = {}
    try:
        nodes = [_add_sim_node(cluster) for _ in range(SIM_NODES)]
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False, logging_level="WARNING")
        base: dict[tuple[str, str, int], tuple[float, float]] = {}  # (toy, route, workers) -> (wall, driver CPU) at 1 stage
        per_worker = 0.0  # bytes, measured at the last size
        skipped: list[str] = []
        views = [(stages, 0.0) for stages in STAGES] + ([(1, SLEEP_S)] if SLEEP_S > 0 else [])
        for stages, sleep_s in views:
            cfg = _cfg(stages, sleep_s)
            toy = _toy_label(sleep_s)
            for workers in WORKERS:
                if stages > 1 and workers > MAX_STAGED_WORKERS:
                    _skip(skipped, f"{workers} workers x {stages} stages (sizes above {MAX_STAGED_WORKERS} workers run 1 stage)")
                    continue
                need = workers * per_worker * stages
                if per_worker and _available() - need < RESERVE:
                    _skip(
                        skipped,
                        f"{workers} workers x {stages} stages (needs ~{need / 2**30:.1f} GiB at {per_worker / 2**20:.0f} MiB "
                        f"per worker stage, {_available() / 2**30:.1f} GiB available, {RESERVE / 2**30:.0f} GiB kept free)",
                    )
                    continue
                t0 = time.perf_counter()
                group = EnvWorkerGroup(cfg, num_workers=workers, cpus_per_worker=0.25, resources={"sim": 1}, strategy="SPREAD")
                try:
                    group.init_worker()
                    group.init_simulator()
                    _reset(group)
                    start_s = time.perf_counter() - t0
                    per_worker = _worker_bytes(group) / stages
                    calls = max(5, int(max(20, 400 // workers) * REPS))
                    relays = len(group.relay_ranks)
                    # Where relays carry steps, the same workers are also timed one Ray call each.
                    timed = _per_call(group, calls, (RELAY, PER_WORKER) if relays else (RELAY,))
                    piped = _pipelined(group, max(3, int(max(10, 200 // workers) * REPS))) if stages > 1 else timed[RELAY][0]
                finally:
                    group.shutdown()
                for route, (wall, cpu) in timed.items():
                    if stages == 1:
                        base[(toy, route, workers)] = (wall, cpu)
                    rows.append(
                        {
                            "toy": toy,
                            "workers": workers,
                            "stages": stages,
                            "envs": workers * stages * 2,
                            "route": f"{relays} node relays" if route == RELAY and relays else PER_WORKER,
                            "start (s)": start_s,
                            "step wall (ms)": wall * 1e3,
                            "per worker (ms)": wall * 1e3 / workers,
                            "driver CPU (ms)": cpu * 1e3,
                            "driver CPU per worker (ms)": cpu * 1e3 / workers,
                            "pipelined per stage (ms)": piped * 1e3 if route == RELAY else "-",
                            "MiB per worker": per_worker * stages / 2**20,
                        }
                    )
                    print(rows[-1], flush=True)
        extra["ratio_top_to_4"] = _ratios(base)
        extra["skipped"] = skipped
        extra["lane"] = _lane_against_cross_node()
        extra["recovery"] = _recovery(cluster, nodes)
    finally:
        ray.shutdown()
        cluster.shutdown()
    lane, rec = extra["lane"], extra["recovery"]
    write(
        "fleet",
        rows,
        [
            f"A Ray cluster of {SIM_NODES} simulator nodes ({SLOTS} slots each) and a head node on this machine (loopback); "
            "toy backend with toy.frozen (no simulation), 2 envs per worker stage, 16x16 images, chunk 8. "
            "The machine's 2 cores are shared by every node and worker: at 64 workers the wall time is the work of 64 actors "
            "on 2 cores, not the group's fan-out.",
            "route: a node that holds two or more workers gets a relay, which reaches them over local lanes (one Ray call "
            "per node); where relays carry the steps, the same workers are also timed with one Ray call each, in turns "
            "(at 4 workers on 4 nodes there is one route).",
            "Target (issue #28): the group's cost at 64 workers <= 8x its cost at 4 workers, read at 1 stage: "
            + "; ".join(
                f"{r['toy']} toy, {r['route']}, at {r['workers']} workers: driver CPU {r['cpu_ratio']:.1f}x, "
                f"step wall {r['wall_ratio']:.1f}x"
                for r in extra["ratio_top_to_4"]
            )
            + "."
            + (f" Skipped: {'; '.join(skipped)}." if skipped else ""),
            f"toy: {ZERO_COST} rows simulate nothing (the group's and Ray's own cost); "
            + (
                f"{_toy_label(SLEEP_S)} rows sleep that long per chunk step (a simulator that waits on a device), a second view."
                if SLEEP_S > 0
                else ""
            ),
            "driver CPU: CPU seconds of the driver process per call (the group's split, submission, waiting and concat, "
            "and Ray's threads in the driver).",
            f"One worker, 1 stage: local lane (worker on the driver's node) {lane['lane_ms']:.2f} ms, "
            f"Ray's task path on the driver's node {lane['local_ray_ms']:.2f} ms, "
            f"Ray's task path to another node {lane['cross_node_ms']:.2f} ms per step.",
            f"Node loss: {rec['lost']} of {rec['workers']} workers on the killed node (SIGKILL of its raylet). "
            f"Ray declared the node dead {rec['detect_s']:.1f} s after the kill (health checks every 1 s, 4 misses); "
            f"recreating, init and the last reset then took {rec['recreate_s']:.2f} s against "
            f"{rec['start_s']:.2f} s for the same number of workers started fresh "
            f"({rec['recreate_s'] / rec['start_s']:.2f}x; target <= 2x). "
            "Ray's default health checks (every 3 s, 5 misses) put detection near 15-20 s on a real cluster.",
        ],
        extra,
    )


def _ratios(base: dict[tuple[str, str, int], tuple[float, float]]) -> list[dict[str, Any]]:
    """Per toy and route: the largest size's wall and driver CPU over their values at 4 workers."""
    out = []
    for toy, route in dict.fromkeys((t, r) for t, r, _ in base):
        top = max(w for t, r, w in base if (t, r) == (toy, route))
        # At 4 workers on 4 nodes no node holds two: its one route (timed as RELAY) is a Ray call per worker.
        four = base.get((toy, route, 4)) or base.get((toy, RELAY, 4))
        if four is None or top == 4:
            continue
        (wall, cpu), (wall4, cpu4) = base[(toy, route, top)], four
        out.append({"toy": toy, "route": route, "workers": top, "wall_ratio": wall / wall4, "cpu_ratio": cpu / cpu4})
    return out


def _lane_against_cross_node() -> dict[str, float]:
    from envfleet_ray.runtime.group import EnvWorkerGroup

    cfg = _cfg(1)
    out: dict[str, list[float]] = {"lane_ms": [], "local_ray_ms": [], "cross_node_ms": []}
    groups = {
        "lane_ms": EnvWorkerGroup(cfg, cpus_per_worker=0.25, resources={"driver": 1}),
        "local_ray_ms": EnvWorkerGroup(cfg, cpus_per_worker=0.25, resources={"driver": 1}, local_lane=False),
        "cross_node_ms": EnvWorkerGroup(cfg, cpus_per_worker=0.25, resources={"sim": 1}),
    }
    try:
        for g in groups.values():
            g.init_worker()
            g.init_simulator()
            _reset(g)
        for _ in range(5):  # alternate, so that a slow spell of the machine hits all three
            for key, g in groups.items():
                out[key].append(_per_call(g, max(10, int(100 * REPS)))[RELAY][0] * 1e3)
    finally:
        for g in groups.values():
            g.shutdown()
    return {k: float(np.median(v)) for k, v in out.items()}


def _recovery(cluster: Any, nodes: list[Any]) -> dict[str, Any]:
    """Kill one simulator node under a 16-worker group mid-step; compare recovery with a fresh start."""
    from envfleet_ray.runtime.group import EnvWorkerGroup

    cfg = _cfg(1)
    workers = min(16, max(WORKERS))  # a short check with fewer sizes loses a node of fewer workers
    group = EnvWorkerGroup(cfg, num_workers=workers, cpus_per_worker=0.25, resources={"sim": 1}, strategy="SPREAD", max_restarts=workers)
    try:
        group.init_worker()
        group.init_simulator()
        _reset(group)
        infos = group.node_info()
        victim = infos[0]["node_id"]
        lost = sum(1 for i in infos if i["node_id"] == victim)
        node = next(n for n in nodes if n.node_id == victim)
        killed = time.time()
        # The host vanishes: its workers with its raylet. Killing the raylet alone leaves its
        # workers answering direct calls for a while, and a step then finds only some dead.
        for info in infos:
            if info["node_id"] == victim:
                os.kill(info["pid"], signal.SIGKILL)
        cluster.remove_node(node, allow_graceful=False)
        group.env_interact_step(_step_data(group, 0)).get()
        rec = group.recoveries[-1]
        lost = len(rec["ranks"])
    finally:
        group.shutdown()
    # The same number of workers started fresh, as the recovery does: create, init, reset.
    t0 = time.perf_counter()
    fresh = EnvWorkerGroup(cfg, num_workers=lost, cpus_per_worker=0.25, resources={"sim": 1})
    try:
        fresh.init_worker()
        fresh.init_simulator()
        _reset(fresh)
        start_s = time.perf_counter() - t0
    finally:
        fresh.shutdown()
    return {"workers": workers, "lost": lost, "detect_s": rec["at"] - killed, "recreate_s": rec["recreate_s"], "start_s": start_s}
