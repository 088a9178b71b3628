"""Which fixed initial states an env resets to when the env, not the trainer, chooses them.

verl-vla's env worker picks the states itself (``reset_env`` takes none). This module
does the same over envfleet's fixed initial states (a backend's
:meth:`~envfleet.env.Env.get_all_state_ids` and the task of each), for one pipeline
stage of one worker:

- the *pool*: the states left after the filters ``task_ids`` (those tasks, in that
  order), ``num_trials_per_task`` (the first N trials of each) and ``specific_reset_id``
  (that one state);
- train: states drawn from the pool with replacement, from a generator seeded by
  ``(seed, rank, stage)``;
- eval: the pool in order, each case once (the *benchmark*), dealt over every
  ``(rank, stage)`` process of the job (``rank * stages + stage``) batch by batch, the
  last batch filled from the start; each process walks its share in order, and
  :meth:`ResetPlan.rewind` starts it over. ``eval_episode_id`` is the case's index in
  the benchmark.

>>> plan = ResetPlan(np.arange(6), np.repeat([0, 1], 3), task_ids=[1], seed=0, process=0, processes=1, num_envs=2)
>>> plan.benchmark.tolist(), plan.next_eval(2)[0].tolist()
([3, 4, 5], [3, 4])
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from envfleet.errors import ConfigError

__all__ = ["ResetPlan"]


class ResetPlan:
    """One stage's reset states: the filtered pool, train draws and its share of the eval queue.

    :param state_ids: every state id of the backend.
    :param state_task_ids: the task of each.
    :param task_ids: keep only these tasks (``None``: all), in this order.
    :param num_trials_per_task: keep the first N states of each task (``None``: all).
    :param specific_reset_id: keep only this state id (``None``: no such filter).
    :param seed: the train draws' base seed.
    :param process: this stage's index among all processes, ``rank * stages + stage``.
    :param processes: how many there are, ``world_size * stages``.
    :param num_envs: envs per process.
    :raises ConfigError: a filter names a task or state the backend does not have, or leaves nothing.
    """

    def __init__(
        self,
        state_ids: np.ndarray,
        state_task_ids: np.ndarray,
        *,
        task_ids: Sequence[int] | None = None,
        num_trials_per_task: int | None = None,
        specific_reset_id: int | None = None,
        seed: int = 42,
        process: int = 0,
        processes: int = 1,
        num_envs: int = 1,
    ) -> None:
        ids = np.asarray(state_ids, dtype=np.int64)
        tasks = np.asarray(state_task_ids, dtype=np.int64)
        known = list(dict.fromkeys(tasks.tolist()))
        chosen = known if not task_ids else [int(t) for t in task_ids]
        unknown = [t for t in chosen if t not in known]
        if unknown:
            raise ConfigError(f"simulator task_ids {unknown} are not tasks of this backend (it has tasks {known})")
        per_task = [ids[tasks == t] for t in chosen]
        if num_trials_per_task is not None:
            if int(num_trials_per_task) <= 0:
                raise ConfigError(f"simulator num_trials_per_task must be positive, got {num_trials_per_task}")
            per_task = [p[: int(num_trials_per_task)] for p in per_task]
        pool = np.concatenate(per_task) if per_task else np.zeros(0, np.int64)
        if specific_reset_id is not None:
            if int(specific_reset_id) not in pool.tolist():
                raise ConfigError(
                    f"simulator specific_reset_id {specific_reset_id} is not among the {pool.size} states the other filters keep"
                )
            pool = np.array([int(specific_reset_id)], dtype=np.int64)
        if pool.size == 0:
            raise ConfigError("the simulator's reset filters (task_ids, num_trials_per_task, specific_reset_id) keep no state")
        self.benchmark = pool
        self._task_of = dict(zip(ids.tolist(), tasks.tolist(), strict=True))
        self._case_of = {int(s): i for i, s in enumerate(pool.tolist())}
        self._rng = np.random.default_rng([int(seed), int(process), 0x7672])
        self._queue = _share(pool.size, int(process), int(processes), int(num_envs))
        self._cursor = 0

    def task_of(self, state_ids: np.ndarray) -> np.ndarray:
        """The task id of each state id."""
        return np.array([self._task_of[int(s)] for s in np.asarray(state_ids).reshape(-1)], dtype=np.int64)

    def case_of(self, state_ids: np.ndarray) -> np.ndarray:
        """Each state's index in the benchmark, -1 for a state outside it."""
        return np.array([self._case_of.get(int(s), -1) for s in np.asarray(state_ids).reshape(-1)], dtype=np.int64)

    def next_train(self, count: int) -> np.ndarray:
        """``count`` states drawn from the pool with replacement."""
        return self.benchmark[self._rng.integers(0, self.benchmark.size, size=count)]

    def next_eval(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        """The next ``count`` cases of this process's share: their state ids and benchmark indices."""
        cases = self._queue[(self._cursor + np.arange(count)) % self._queue.size]
        self._cursor = (self._cursor + count) % self._queue.size
        return self.benchmark[cases], cases

    def rewind(self) -> None:
        """Start this process's share of the benchmark over."""
        self._cursor = 0


def _share(size: int, process: int, processes: int, num_envs: int) -> np.ndarray:
    """The benchmark indices one process walks: batch ``b`` of ``processes * num_envs`` slots
    gives process ``p`` the slots ``[p * num_envs, (p + 1) * num_envs)``."""
    slots = processes * num_envs
    batches = -(-size // slots)
    padded = np.resize(np.arange(size, dtype=np.int64), batches * slots)
    return padded.reshape(batches, processes, num_envs)[:, process].reshape(-1)
