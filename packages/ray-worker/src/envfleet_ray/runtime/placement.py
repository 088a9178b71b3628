"""Where a group's workers may run: the bundle of one worker, checked against the cluster.

A worker's bundle is ``{"CPU": cpus, "GPU": gpus, "memory": bytes, **resources}``:
``resources`` are the custom Ray resources a node offers (``ray start --resources
'{"sim": 8}'``), which is how a cluster keeps simulators on its CPU nodes and off the
policy's GPU nodes. ``labels`` selects nodes by their Ray labels (``ray start --labels``)
instead or as well.

A request no alive node can hold is a :class:`PlacementError` at once, naming the
bundle and what each node offers; a request that fits but is not granted in time (the
cluster is busy) is one after ``timeout_s``. Neither waits in Ray's scheduler for ever.

>>> bundle_shape(cpus=0.5, resources={"sim": 1})  # doctest: +SKIP
{'CPU': 0.5, 'sim': 1.0}
"""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping, Sequence
from typing import Any

import ray
from ray.exceptions import GetTimeoutError
from ray.util.placement_group import PlacementGroup, placement_group, placement_group_table, remove_placement_group

from envfleet.errors import EnvFleetError

__all__ = [
    "PlacementError",
    "STRATEGIES",
    "alive_nodes",
    "raylet_answers",
    "bundle_shape",
    "check_feasible",
    "describe_nodes",
    "reserve",
    "unplaced_bundles",
    "wait_placed",
]

#: The placement strategies Ray knows (see ``ray.util.placement_group``).
STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


class PlacementError(EnvFleetError, RuntimeError):
    """The cluster cannot place (or could not, in time) the group's workers.

    The message names the bundle asked for and what each alive node offers.
    """


def bundle_shape(
    cpus: float = 1.0, gpus: float = 0.0, memory: float | None = None, resources: Mapping[str, float] | None = None
) -> dict[str, float]:
    """One worker's bundle; raises :class:`ValueError` for a negative amount or a key Ray reserves."""
    shape: dict[str, float] = {"CPU": float(cpus)}
    if gpus:
        shape["GPU"] = float(gpus)
    if memory:
        shape["memory"] = float(memory)
    for key, amount in (resources or {}).items():
        if key in ("CPU", "GPU", "memory"):
            raise ValueError(f"resources[{key!r}]: use cpus_per_worker / gpus_per_worker / memory_per_worker for {key}")
        if not isinstance(amount, (int, float)) or amount <= 0:
            raise ValueError(f"resources[{key!r}] must be a positive number, got {amount!r}")
        shape[str(key)] = float(amount)
    if any(v < 0 for v in shape.values()):
        raise ValueError(f"a worker's bundle cannot ask for a negative amount: {shape}")
    return shape


def alive_nodes() -> list[dict[str, Any]]:
    """Ray's record of every alive node (``NodeID``, ``NodeManagerAddress``, ``Resources``, ``Labels``)."""
    return [n for n in ray.nodes() if n.get("Alive")]


def raylet_answers(node: Mapping[str, Any], timeout_s: float = 1.0) -> bool:
    """Whether the raylet of ``node`` (a record of :func:`alive_nodes`) accepts a TCP connection.

    Ray's record of a node lags its loss by its health checks (seconds): a worker on a lost
    node can be reported dead while the node is still listed alive. A raylet that refuses,
    or does not answer within ``timeout_s``, tells the loss at once."""
    try:
        with socket.create_connection((str(node["NodeManagerAddress"]), int(node["NodeManagerPort"])), timeout=timeout_s):
            return True
    except (OSError, KeyError, ValueError):
        return False


def describe_nodes(nodes: Sequence[Mapping[str, Any]] | None = None) -> str:
    """One line per node: short id, address, total resources (for error messages)."""
    nodes = alive_nodes() if nodes is None else nodes
    if not nodes:
        return "no alive node"
    lines = []
    for n in nodes:
        res = {k: v for k, v in n.get("Resources", {}).items() if not k.startswith(("node:", "bundle_group", "object_store"))}
        labels = {k: v for k, v in (n.get("Labels") or {}).items() if not k.startswith("ray.io/")}
        lines.append(f"{n['NodeID'][:8]} at {n.get('NodeManagerAddress', '?')}: {res}" + (f" labels {labels}" if labels else ""))
    return "; ".join(lines)


def _fits(node: Mapping[str, Any], shape: Mapping[str, float], labels: Mapping[str, str] | None) -> int:
    """How many bundles of ``shape`` the node could hold when empty (0: none)."""
    total = node.get("Resources", {})
    node_labels = node.get("Labels") or {}
    if labels and any(node_labels.get(k) != v for k, v in labels.items()):
        return 0
    counts = [int(total.get(k, 0.0) // v + 1e-9) for k, v in shape.items() if v > 0]
    return min(counts) if counts else 1 << 30


def check_feasible(
    shape: Mapping[str, float], count: int, strategy: str = "PACK", labels: Mapping[str, str] | None = None, what: str = "the group"
) -> None:
    """Raise :class:`PlacementError` if the alive nodes, even empty, cannot hold ``count`` bundles of ``shape``."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    nodes = alive_nodes()
    fits = [_fits(n, shape, labels) for n in nodes]
    selector = f" on nodes labelled {dict(labels)}" if labels else ""
    if strategy == "STRICT_SPREAD":
        ok, need = sum(1 for f in fits if f > 0) >= count, f"{count} distinct nodes that each hold one"
    elif strategy == "STRICT_PACK":
        ok, need = any(f >= count for f in fits), f"one node that holds all {count}"
    else:
        ok, need = sum(fits) >= count, f"room for {count} in all (the nodes hold {sum(fits)})"
    if not ok:
        raise PlacementError(
            f"{what} needs {count} bundles of {dict(shape)}{selector} ({strategy}): {need}, and no alive node set can give "
            f"that. Nodes: {describe_nodes(nodes)}. Start nodes with those resources (ray start --resources / --labels), "
            "or lower num_workers or the per-worker amounts"
        )


def reserve(
    shapes: Sequence[Mapping[str, float]], strategy: str, labels: Mapping[str, str] | None, timeout_s: float, check: bool = True
) -> PlacementGroup:
    """A placement group of ``shapes`` (one bundle per worker), ready; or :class:`PlacementError`.

    :param check: first check that the alive nodes could hold it at all (:func:`check_feasible`);
        turn off when an autoscaler will add the nodes (the wait is then bounded by ``timeout_s``).
    """
    if check:
        check_feasible(shapes[0], len(shapes), strategy, labels)
    kwargs: dict[str, Any] = {"bundle_label_selector": [dict(labels) for _ in shapes]} if labels else {}
    pg = placement_group([dict(s) for s in shapes], strategy=strategy, **kwargs)
    try:
        ray.get(pg.ready(), timeout=timeout_s)
    except GetTimeoutError:
        remove_placement_group(pg)
        raise PlacementError(
            f"the cluster could not grant {len(shapes)} bundles of {dict(shapes[0])} ({strategy}) within {timeout_s:g} s; "
            f"available now: {ray.available_resources()}; nodes: {describe_nodes()}. Lower cpus_per_worker or num_workers, "
            "or wait for the resources other jobs hold"
        ) from None
    return pg


def unplaced_bundles(pg: PlacementGroup) -> list[int]:
    """Indices of the bundles of ``pg`` that sit on no alive node (after a node loss, until Ray moves them)."""
    table = placement_group_table(pg)
    placed = table.get("bundles_to_node_id", {}) or {}
    alive = {n["NodeID"] for n in alive_nodes()}
    return [i for i in range(len(table.get("bundles", {}))) if placed.get(i) not in alive]


def wait_placed(pg: PlacementGroup, indices: Sequence[int], timeout_s: float, poll_s: float = 0.1) -> list[int]:
    """Wait until the bundles ``indices`` of ``pg`` are placed on alive nodes; returns those still unplaced."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = sorted(set(indices) & set(unplaced_bundles(pg)))
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(poll_s)
