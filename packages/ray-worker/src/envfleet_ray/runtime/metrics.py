"""Per-task episode statistics: one type, filled by the worker and summed by the group, and the merge of the workers' metrics.

For each task: ``episodes``; ``successes`` (success at any sub-step of the episode,
``success_once``) and ``success_rate``; ``successes_at_end`` (success at the episode's
last sub-step) and ``success_at_end_rate``; ``successful_at_reset`` (episodes whose
initial state already passed the success check: it should be 0); ``mean_return`` and
``mean_length``. With terminations on (LIBERO's protocol: an episode ends at its first
success) the two success counts are equal; with ``ignore_terminations`` they differ. Where
the backend groups its tasks (``BackendSpec.task_groups``, e.g. LIBERO-plus's perturbation
dimensions), each row has its ``group`` and :func:`group_rows` sums the rows per group.

>>> a, b = TaskStats(episodes=2, successes=1, length_sum=30), TaskStats(episodes=1, successes=1, length_sum=10)
>>> a.add(b).as_dict()["success_rate"]
0.6666666666666666
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from envfleet.fingerprint import fingerprint

__all__ = ["TaskStats", "EpisodeMetrics", "group_rows", "merge_per_task", "merge_metrics"]


@dataclass
class TaskStats:
    """Counts of one task's finished episodes."""

    episodes: int = 0
    successes: int = 0
    successes_at_end: int = 0
    successful_at_reset: int = 0
    return_sum: float = 0.0
    length_sum: float = 0.0
    description: str = ""
    group: str | None = None  # the backend's group of the task (BackendSpec.task_groups); None: ungrouped

    def add(self, other: TaskStats) -> TaskStats:
        """Add ``other``'s counts to these (the first description seen is kept); returns self."""
        self.episodes += other.episodes
        self.successes += other.successes
        self.successes_at_end += other.successes_at_end
        self.successful_at_reset += other.successful_at_reset
        self.return_sum += other.return_sum
        self.length_sum += other.length_sum
        self.description = self.description or other.description
        self.group = self.group or other.group
        return self

    def as_dict(self) -> dict[str, Any]:
        """Counts and rates, as plain values (what ``finish_rollout`` returns per task)."""
        eps = self.episodes
        return {
            "description": self.description,
            "episodes": eps,
            "successes": self.successes,
            "success_rate": self.successes / eps if eps else 0.0,
            "successes_at_end": self.successes_at_end,
            "success_at_end_rate": self.successes_at_end / eps if eps else 0.0,
            "successful_at_reset": self.successful_at_reset,
            "mean_return": self.return_sum / eps if eps else 0.0,
            "mean_length": self.length_sum / eps if eps else 0.0,
            **({"group": self.group} if self.group is not None else {}),
        }

    @classmethod
    def from_dict(cls, row: Mapping[str, Any]) -> TaskStats:
        """Undo :meth:`as_dict` (sums are rebuilt from the means)."""
        eps = int(row["episodes"])
        return cls(
            episodes=eps,
            successes=int(row["successes"]),
            successes_at_end=int(row.get("successes_at_end", 0)),
            successful_at_reset=int(row.get("successful_at_reset", 0)),
            return_sum=float(row["mean_return"]) * eps,
            length_sum=float(row["mean_length"]) * eps,
            description=str(row.get("description", "")),
            group=None if row.get("group") is None else str(row["group"]),
        )


class EpisodeMetrics:
    """What a worker counts between two ``finish_rollout`` calls: per-task stats, steps and chunks."""

    def __init__(self) -> None:
        self.per_task: dict[int, TaskStats] = collections.defaultdict(TaskStats)
        self.env_steps = 0
        self.chunks = 0
        self.worker_s = 0.0
        self.execution: dict[str, Any] | None = None  # mode realtime: what ran (execution_stats)

    def add_step(self, infos: Mapping[str, np.ndarray], descriptions: list[str], n: int, chunk: int) -> None:
        """Count a step of ``n`` envs; ``descriptions`` are those of the episodes that ran during it."""
        self.chunks += 1
        self.env_steps += int(n * chunk)
        if "action_source" in infos:
            self.execution = add_execution(self.execution, infos)
        ended = infos.get("episode_ended")
        if ended is None:
            return
        at_end = infos.get("success_at_end", infos["success_once"])
        at_reset = infos.get("success_at_reset")
        for i in np.nonzero(np.asarray(ended))[0]:
            stats = self.per_task[int(infos["task_id"][i])]
            stats.episodes += 1
            stats.successes += int(bool(infos["success_once"][i]))
            stats.successes_at_end += int(bool(at_end[i]))
            stats.successful_at_reset += int(at_reset is not None and bool(at_reset[i]))
            stats.return_sum += float(infos["episode_return"][i])
            stats.length_sum += int(infos["episode_length"][i])
            if i < len(descriptions):
                stats.description = descriptions[i]

    def per_task_dict(self) -> dict[int, dict[str, Any]]:
        """Every task's :meth:`TaskStats.as_dict`, by task id."""
        return {task: stats.as_dict() for task, stats in sorted(self.per_task.items())}


def group_rows(per_task: Mapping[Any, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per group, in the order groups first appear: episodes, successes (any step and at the end), the rate;
    empty where no row has a ``group``.

    >>> group_rows({0: {"group": "camera", "episodes": 2, "successes": 1, "successes_at_end": 1}})["camera"]["success_rate"]
    0.5
    """
    out: dict[str, dict[str, Any]] = {}
    for row in per_task.values():
        if row.get("group") is None:
            continue
        g = out.setdefault(str(row["group"]), {"episodes": 0, "successes": 0, "successes_at_end": 0})
        g["episodes"] += int(row["episodes"])
        g["successes"] += int(row["successes"])
        g["successes_at_end"] += int(row.get("successes_at_end", 0))
    for g in out.values():
        g["success_rate"] = g["successes"] / g["episodes"] if g["episodes"] else 0.0
    return out


def merge_per_task(parts: Iterable[Mapping[Any, Mapping[str, Any]]]) -> dict[int, dict[str, Any]]:
    """Sum several workers' ``per_task`` dicts into one."""
    total: dict[int, TaskStats] = {}
    for part in parts:
        for task, row in part.items():
            total.setdefault(int(task), TaskStats()).add(TaskStats.from_dict(row))
    return {task: stats.as_dict() for task, stats in sorted(total.items())}


def _group_fingerprint(per_worker: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The group's fingerprint: the workers' protocol (all of them, if they differ) and every state id any used."""
    protocols = [m["protocol"] for m in per_worker if "protocol" in m]
    if not protocols:
        return None
    distinct = [p for i, p in enumerate(protocols) if p not in protocols[:i]]
    parts = distinct[0] if len(distinct) == 1 else {"workers_differ": distinct}
    return fingerprint(parts, (i for m in per_worker for i in m.get("state_ids_used", [])))


#: ``infos["action_source"]``'s values by name (envfleet.execution.ActionSource).
SOURCES = ("previous", "current", "hold", "zero")


def add_execution(stats: dict[str, Any] | None, infos: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """``stats`` (None: none yet) with a realtime step's ``action_source`` and ``action_delay`` counted in:
    sub-steps per source, and calls per delay (each env's call one)."""
    stats = stats or {"sub_steps": dict.fromkeys(SOURCES, 0), "delays": {}}
    source = np.asarray(infos["action_source"]).reshape(-1)
    for code, name in enumerate(SOURCES):
        stats["sub_steps"][name] += int((source == code).sum())
    for delay in np.asarray(infos["action_delay"]).reshape(-1).tolist():
        stats["delays"][str(int(delay))] = stats["delays"].get(str(int(delay)), 0) + 1
    return stats


def merge_execution(parts: Iterable[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The workers' :func:`add_execution` counts summed (None where no worker ran realtime)."""
    total: dict[str, Any] | None = None
    for part in parts:
        if part is None:
            continue
        total = total or {"sub_steps": dict.fromkeys(SOURCES, 0), "delays": {}}
        for name, count in part["sub_steps"].items():
            total["sub_steps"][name] += int(count)
        for delay, count in part["delays"].items():
            total["delays"][delay] = total["delays"].get(delay, 0) + int(count)
    return total


def merge_metrics(per_worker: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Sum the workers' finish_rollout metrics into one."""
    times = {k: sum(m["time"][k] for m in per_worker) for k in ("simulator_s", "transfer_s", "worker_s")}
    per_task = merge_per_task(m["per_task"] for m in per_worker)
    return {
        "execution": merge_execution(m.get("execution") for m in per_worker),
        "per_task": per_task,
        "per_group": group_rows(per_task),
        "episodes": sum(m["episodes"] for m in per_worker),
        "successes": sum(m["successes"] for m in per_worker),
        "env_steps": sum(m["env_steps"] for m in per_worker),
        "sim_restarts": sum(m["sim_restarts"] for m in per_worker),
        "restart_causes": [c for m in per_worker for c in m.get("restart_causes", [])],
        "warnings": [f"worker {m['rank']}: {w}" for m in per_worker for w in m.get("warnings", [])],
        "fingerprint": _group_fingerprint(per_worker),
        "time": times,
        "videos": [v for m in per_worker for v in m["videos"]],
        "datasets": [d for m in per_worker for d in m.get("datasets", [])],
    }
