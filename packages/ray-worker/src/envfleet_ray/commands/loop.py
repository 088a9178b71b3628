"""``EnvLoop``: the pipelined rollout driver.

With ``S`` stages, the policy computes stage ``s``'s actions while the other
stages' simulators step: for every chunk, stage by stage, the loop waits for the
stage's observations, calls the policy on them and submits the step without
waiting. With equal policy and simulator time per stage, a cycle costs
``max(total env time, total policy time)`` instead of their sum.

Episodes: without ``auto_reset``, when every env of every stage has finished
(terminated or truncated), the loop resets all of them to the next state ids of
its schedule (tasks interleaved, so every task comes up early). With
``auto_reset`` the simulators reset finished envs themselves.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from envfleet.dataproto import DataProto
from envfleet.states import interleaved_schedule

from ..runtime.futures import GroupFuture
from ..runtime.group import EnvWorkerGroup
from .policies import Policy

__all__ = ["EnvLoop", "RolloutStats", "interleaved_schedule"]


@dataclass
class RolloutStats:
    """What a rollout did and where its time went."""

    chunks_per_stage: int = 0
    env_steps: int = 0
    episodes: int = 0
    successes: int = 0
    resets: int = 0
    wall_s: float = 0.0
    first_reset_s: float = 0.0  # the first reset builds the simulators' scenes: a one-time cost
    policy_s: float = 0.0
    wait_s: float = 0.0  # time the driver waited for simulators
    cycle_s: list[float] = field(default_factory=list)  # wall time of each full cycle (every stage stepped once)


class EnvLoop:
    """Drive an :class:`EnvWorkerGroup` with a policy, stages pipelined.

    :param group: the worker group (already ``init_worker()`` / ``init_simulator()``).
    :param policy: ``(obs: DataProto) -> np.ndarray [n, chunk, action_dim]``.
    :param on_progress: called after every stage step with the running :class:`RolloutStats`.
    """

    def __init__(self, group: EnvWorkerGroup, policy: Policy, on_progress: Callable[[RolloutStats], None] | None = None) -> None:
        self.group = group
        self.policy = policy
        self.on_progress = on_progress
        self.stage_num = group.stage_num
        self.num_workers = group.num_workers
        self.num_envs = group.num_envs
        self.chunk = int(group.cfg.actor.model.num_action_chunks)
        self.action_dim = int(group.cfg.actor.model.action_dim)
        self.auto_reset = bool(group.cfg.train.auto_reset)
        ids, tasks = group.get_all_state_ids(), group.get_state_task_ids()
        self._ids, self._tasks = interleaved_schedule(ids, tasks)
        self.stats = RolloutStats()
        self._cursor = 0
        # Rows of stage s in a reset result (worker-major, stage-major within a worker).
        self._stage_rows = [
            np.concatenate(
                [
                    np.arange(
                        r * self.stage_num * self.num_envs + s * self.num_envs, r * self.stage_num * self.num_envs + (s + 1) * self.num_envs
                    )
                    for r in range(self.num_workers)
                ]
            )
            for s in range(self.stage_num)
        ]

    def _next_ids(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        idx = (self._cursor + np.arange(k)) % len(self._ids)
        self._cursor = (self._cursor + k) % len(self._ids)
        return self._ids[idx], self._tasks[idx]

    def reset(self) -> list[DataProto]:
        """Reset every env of every stage to the next state ids; return each stage's observations."""
        ids, tasks = self._next_ids(self.num_workers * self.stage_num * self.num_envs)
        out = self.group.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": ids, "task_ids": tasks})).get()
        return [out.select_idxs(rows) for rows in self._stage_rows]

    def _act(self, obs: DataProto, stage: int, stats: RolloutStats) -> GroupFuture:
        t0 = time.perf_counter()
        actions = np.asarray(self.policy(obs), dtype=np.float32)
        stats.policy_s += time.perf_counter() - t0
        data = DataProto.from_dict(non_tensors={"actions": actions}, meta_info={"stage_id": stage})
        return self.group.env_interact_step(data)

    def run(self, num_chunks: int) -> RolloutStats:
        """Step every stage ``num_chunks`` times (the policy sees each stage's observations in turn).

        The counts are kept in :attr:`stats` as they grow, so a run interrupted (Ctrl-C) still
        tells what it did.
        """
        stats = self.stats = RolloutStats()
        t_start = time.perf_counter()
        try:
            self._run(num_chunks, stats, t_start)
        finally:
            stats.wall_s = time.perf_counter() - t_start
        return stats

    def _run(self, num_chunks: int, stats: RolloutStats, t_start: float) -> None:
        obs = self.reset()
        stats.resets += 1
        stats.first_reset_s = time.perf_counter() - t_start
        done = [np.zeros(self.num_workers * self.num_envs, dtype=bool) for _ in range(self.stage_num)]
        pending: dict[int, GroupFuture] = {}
        for it in range(num_chunks):
            t_cycle = time.perf_counter()
            for s in range(self.stage_num):
                if s in pending:
                    self._collect(s, pending, obs, done, stats)
                if s == 0 and it > 0 and not self.auto_reset and done[0].all():
                    # Stage 0 has finished: collect the other stages (in flight anyway) and,
                    # if every env is finished, start new episodes everywhere.
                    for other in sorted(pending):
                        self._collect(other, pending, obs, done, stats)
                    if all(d.all() for d in done):
                        obs = self.reset()
                        stats.resets += 1
                        done = [np.zeros(self.num_workers * self.num_envs, dtype=bool) for _ in range(self.stage_num)]
                pending[s] = self._act(obs[s], s, stats)
            stats.chunks_per_stage += 1
            stats.cycle_s.append(time.perf_counter() - t_cycle)
        for s in sorted(pending):
            self._collect(s, pending, obs, done, stats)

    def _collect(self, s: int, pending: dict[int, GroupFuture], obs: list[DataProto], done: list[np.ndarray], stats: RolloutStats) -> None:
        """Wait for stage ``s``'s step, count it, and keep its observations and finished flags."""
        t0 = time.perf_counter()
        result = pending.pop(s).get()
        stats.wait_s += time.perf_counter() - t0
        self._account(result, stats)
        assert result.batch is not None
        obs[s] = result
        done[s] = (result.batch["terminations"][:, -1] | result.batch["truncations"][:, -1]).numpy()

    def _account(self, result: DataProto, stats: RolloutStats) -> None:
        assert result.batch is not None
        stats.env_steps += len(result) * int(result.batch["rews"].shape[1])
        if "episode_ended" in result.batch.keys():
            ended = result.batch["episode_ended"].numpy().astype(bool)
            stats.episodes += int(ended.sum())
            stats.successes += int(result.batch["success_once"].numpy().astype(bool)[ended].sum())
        if self.on_progress is not None:
            self.on_progress(stats)

    @staticmethod
    def steps_per_s(stats: RolloutStats) -> float:
        """Env steps per second of stepping (after the first reset, which builds the scenes)."""
        busy = stats.wall_s - stats.first_reset_s
        return stats.env_steps / busy if busy > 0 else 0.0

    def describe(self) -> dict[str, Any]:
        """The loop's shape, for summaries."""
        return {"workers": self.num_workers, "stages": self.stage_num, "num_envs": self.num_envs, "chunk": self.chunk}
