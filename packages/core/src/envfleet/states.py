"""Which fixed initial state an env starts from next: every way envfleet chooses, in one module.

- :class:`StateTable`: the state ids a backend can reset to and the task of each; checks reset arguments.
- :class:`StateCycle`: a seeded walk per env, for ``auto_reset`` inside a backend (depends only on
  ``(seed, rank, stage, env index)``).
- :class:`StateWalk`: one seeded walk shared by a face's envs (gymnasium, TorchRL), when the caller
  names no states.
- :class:`ResetPlan`: verl-vla's pool: filtered by tasks, trials and one id; train draws and the eval
  queue dealt over every ``(rank, stage)``.
- :func:`interleaved_schedule`: trial-major order (trial 0 of every task, then trial 1, ...), for
  ``envfleet rollout``.

The old homes (:mod:`envfleet.validation`, :mod:`envfleet.episodes`, :mod:`envfleet.faces`) re-export
their names.

>>> walk = StateWalk(np.arange(4), seed=0)
>>> sorted(walk.take(4).tolist())
[0, 1, 2, 3]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import ConfigError, InvalidInputError

__all__ = ["StateTable", "StateCycle", "StateWalk", "ResetPlan", "interleaved_schedule"]


class StateTable:
    """The state ids an env can reset to, and the task each belongs to.

    :param state_ids: every id :meth:`~envfleet.env.Env.get_all_state_ids` returns.
    :param task_ids: the task of each of them (:meth:`~envfleet.env.Env.get_state_task_ids`).
    """

    def __init__(self, state_ids: Any, task_ids: Any) -> None:
        self.state_ids = np.asarray(state_ids, dtype=np.int64)
        task_arr = np.asarray(task_ids, dtype=np.int64)
        if task_arr.shape != self.state_ids.shape:
            raise ValueError(f"one task id per state id: {task_arr.shape} task ids for {self.state_ids.shape} state ids")
        self._contiguous = bool(np.array_equal(self.state_ids, np.arange(len(self.state_ids))))
        self._task_of = task_arr if self._contiguous else None
        self._tasks = {int(s): int(t) for s, t in zip(self.state_ids, task_arr)}

    @classmethod
    def contiguous(cls, task_of_state: Any) -> StateTable:
        """State ids ``0..len(task_of_state)-1``; id ``i`` belongs to task ``task_of_state[i]``."""
        tasks = np.asarray(task_of_state, dtype=np.int64)
        return cls(np.arange(len(tasks), dtype=np.int64), tasks)

    def __len__(self) -> int:
        return len(self.state_ids)

    def task_of(self, state_id: int) -> int:
        """The task of a known state id."""
        return self._tasks[int(state_id)]

    def tasks_of(self, state_ids: np.ndarray) -> np.ndarray:
        """The task of each of ``state_ids`` (known ids), as int64."""
        if self._task_of is not None:
            return self._task_of[state_ids]
        return np.array([self._tasks[int(s)] for s in state_ids], dtype=np.int64)

    def check(self, state_ids: np.ndarray, task_ids: np.ndarray | None = None, where: str = "") -> None:
        """Every id is known and each task id, when given, is its state's task.

        :param where: added after the env's number in the message, e.g. ``" of stage 1"``.
        :raises InvalidInputError: naming the first bad env, the id and what was expected.
        """
        if self._task_of is not None:
            bad = np.nonzero((state_ids < 0) | (state_ids >= len(self._task_of)))[0]
            if bad.size:
                i = int(bad[0])
                raise InvalidInputError(
                    f"state id {int(state_ids[i])} (env {i}{where}) is out of range: expected 0..{len(self._task_of) - 1}"
                )
        else:
            for i, sid in enumerate(state_ids):
                if int(sid) not in self._tasks:
                    lo, hi = (int(self.state_ids.min()), int(self.state_ids.max())) if len(self) else (0, -1)
                    raise InvalidInputError(
                        f"state id {int(sid)} (env {i}{where}) is unknown: expected one of the "
                        f"{len(self)} ids from get_all_state_ids() ({lo}..{hi})"
                    )
        if task_ids is None:
            return
        expected = self.tasks_of(state_ids)
        wrong = np.nonzero(task_ids != expected)[0]
        if wrong.size:
            i = int(wrong[0])
            raise InvalidInputError(
                f"env {i}{where}: task id {int(task_ids[i])} does not match state id {int(state_ids[i])}, "
                f"which belongs to task {int(expected[i])}"
            )


class StateCycle:
    """A seeded, endless walk over state ids, one independent walk per env.

    The walk of env ``i`` depends only on ``(seed, rank, stage_id, env index)``, not on
    how envs are split over processes.
    """

    def __init__(self, state_ids: np.ndarray, seed: int, rank: int, stage_id: int, env_indices: np.ndarray) -> None:
        self._ids = np.asarray(state_ids, dtype=np.int64)
        if self._ids.size == 0:
            raise ValueError("StateCycle needs at least one state id")
        self._orders = [
            np.random.default_rng([int(seed), int(rank), int(stage_id), int(e)]).permutation(self._ids.size) for e in env_indices
        ]
        self._pos = np.zeros(len(self._orders), dtype=np.int64)

    def next(self, env: int) -> int:
        """The next state id for local env ``env``."""
        order = self._orders[env]
        value = int(self._ids[order[self._pos[env] % order.size]])
        self._pos[env] += 1
        return value

    def get_state(self) -> np.ndarray:
        """Positions of each env's walk."""
        return self._pos.copy()

    def load_state(self, pos: np.ndarray) -> None:
        """Restore :meth:`get_state`."""
        self._pos = np.asarray(pos, dtype=np.int64).copy()


class StateWalk:
    """An endless walk over every state id: a permutation shuffled by the seed, reshuffled when used up.

    Envs that start new episodes together take the next ids in env order.

    >>> walk = StateWalk(np.arange(4), seed=0)
    >>> sorted(walk.take(4).tolist())
    [0, 1, 2, 3]
    """

    def __init__(self, state_ids: np.ndarray, seed: int) -> None:
        self.state_ids = np.asarray(state_ids, dtype=np.int64)
        self.seed(seed)

    def seed(self, seed: int) -> None:
        """Start a new walk, shuffled by ``seed``."""
        self._rng = np.random.default_rng(int(seed))
        self._order = np.zeros(0, dtype=np.int64)
        self._pos = 0

    def take(self, count: int) -> np.ndarray:
        """The next ``count`` state ids."""
        out = np.empty(int(count), dtype=np.int64)
        for j in range(int(count)):
            if self._pos >= len(self._order):
                self._order = self._rng.permutation(self.state_ids)
                self._pos = 0
            out[j] = self._order[self._pos]
            self._pos += 1
        return out


def interleaved_schedule(state_ids: np.ndarray, task_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Order state ids as trial 0 of every task, then trial 1 of every task, and so on."""
    state_ids = np.asarray(state_ids)
    task_ids = np.asarray(task_ids)
    trial = np.zeros(len(state_ids), dtype=np.int64)
    seen: dict[int, int] = {}
    for i, t in enumerate(task_ids):
        trial[i] = seen.get(int(t), 0)
        seen[int(t)] = trial[i] + 1
    order = np.lexsort((task_ids, trial))
    return state_ids[order], task_ids[order]


class ResetPlan:
    """One stage's reset states: the filtered pool, train draws and its share of the eval queue.

    verl-vla's env worker picks the states itself (``reset_env`` takes none); this does the same
    over a backend's fixed initial states, for one pipeline stage of one worker:

    - the *pool*: the states left after the filters ``task_ids`` (those tasks, in that order),
      ``num_trials_per_task`` (the first N trials of each) and ``specific_reset_id`` (that one state);
    - train: states drawn from the pool with replacement, from a generator seeded by ``(seed, rank, stage)``;
    - eval: the pool in order, each case once (the *benchmark*), dealt over every ``(rank, stage)``
      process of the job (``rank * stages + stage``) batch by batch, the last batch filled from the
      start; each process walks its share in order, and :meth:`rewind` starts it over.
      ``eval_episode_id`` is the case's index in the benchmark.

    >>> plan = ResetPlan(np.arange(6), np.repeat([0, 1], 3), task_ids=[1], seed=0, process=0, processes=1, num_envs=2)
    >>> plan.benchmark.tolist(), plan.next_eval(2)[0].tolist()
    ([3, 4, 5], [3, 4])

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
