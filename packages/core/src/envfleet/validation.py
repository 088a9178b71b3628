"""The one place where the ids and actions of an env call are checked.

The manager checks every call before it reaches a shard; a backend checks again
when it is called directly (tests, a user's own loop). Both use these functions,
so a bad input gets the same message wherever it is caught, and it is caught
before anything reaches a simulator (the env stays usable).

>>> from envfleet.validation import StateTable, check_actions, check_reset_ids
>>> table = StateTable.contiguous(np.array([0, 0, 1, 1]))   # ids 0..3, tasks 0, 0, 1, 1
>>> state_ids, task_ids = check_reset_ids(table, [3, 0], [1, 0], num_envs=2)
>>> actions = check_actions(np.zeros((2, 8, 7), np.float32), num_envs=2, action_dim=7)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import InvalidInputError

__all__ = ["StateTable", "as_env_ids", "as_ids", "check_actions", "check_reset_ids"]


def _to_numpy(value: Any) -> Any:
    if type(value) is not np.ndarray and hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor
        return value.detach().cpu().numpy()
    return value


def as_ids(name: str, ids: Any, num_envs: int) -> np.ndarray:
    """``ids`` as int64 ``[num_envs]``: integers, or floats that are whole numbers.

    :param name: what the ids are called in the message (``"state_ids"``, ``"task_ids"``).
    :raises InvalidInputError: the shape is not ``(num_envs,)`` or the values are not integers.
    """
    arr = np.asarray(_to_numpy(ids))
    if arr.shape != (num_envs,):
        raise InvalidInputError(f"{name} must have shape ({num_envs},) (one per env of the stage), got {arr.shape}")
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            return arr.astype(np.int64)
        raise InvalidInputError(f"{name} must be integers, got dtype {arr.dtype}")
    return arr.astype(np.int64)


def as_env_ids(env_ids: Any, num_envs: int) -> np.ndarray:
    """``env_ids`` as int64, 1-D: distinct indices in ``0..num_envs-1`` (possibly none).

    :raises InvalidInputError: not 1-D, not integers, out of range or repeated.
    """
    arr = np.asarray(_to_numpy(env_ids))
    if arr.ndim != 1:
        raise InvalidInputError(f"env_ids must be a 1-D array of env indices, got shape {arr.shape}")
    if arr.size and arr.dtype.kind not in "iu":
        raise InvalidInputError(f"env_ids must be integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    bad = np.nonzero((arr < 0) | (arr >= num_envs))[0]
    if bad.size:
        raise InvalidInputError(f"env id {int(arr[bad[0]])} is out of range: expected 0..{num_envs - 1}")
    if np.unique(arr).size != arr.size:
        raise InvalidInputError(f"env_ids must be distinct, got {arr.tolist()}")
    return arr


def check_actions(actions: Any, num_envs: int, action_dim: int, chunk: int | None = None) -> np.ndarray:
    """Check actions are a finite float array ``[num_envs, chunk, action_dim]``; return them as contiguous float32.

    :param chunk: the chunk length expected; ``None`` accepts any.
    :raises InvalidInputError: saying what was expected and what came.
    """
    actions = _to_numpy(actions)
    if not isinstance(actions, np.ndarray):
        raise InvalidInputError(f"actions must be a numpy array [num_envs, chunk, action_dim], got {type(actions).__name__}")
    if actions.ndim != 3 or actions.shape[0] != num_envs or actions.shape[2] != action_dim or chunk not in (None, actions.shape[1]):
        chunk_text = "chunk" if chunk is None else f"chunk={chunk}"
        raise InvalidInputError(
            f"actions must have shape [num_envs={num_envs}, {chunk_text}, action_dim={action_dim}], got {list(actions.shape)}"
        )
    if actions.dtype.kind != "f":
        raise InvalidInputError(f"actions must have a float dtype (float32 expected), got {actions.dtype}")
    finite = np.isfinite(actions)
    if not finite.all():
        env, k, d = (int(x) for x in np.argwhere(~finite)[0])
        raise InvalidInputError(
            f"actions must be finite: actions[{env}, {k}, {d}] is {actions[env, k, d]} ({int((~finite).sum())} non-finite values)"
        )
    return np.ascontiguousarray(actions, dtype=np.float32)


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


def check_reset_ids(
    table: StateTable, state_ids: Any, task_ids: Any = None, *, num_envs: int, where: str = ""
) -> tuple[np.ndarray, np.ndarray | None]:
    """The arguments of ``reset_envs_to_state_ids``, checked: ``(state_ids, task_ids or None)`` as int64.

    Shape and dtype as :func:`as_ids`, then the ids against ``table`` (:meth:`StateTable.check`).
    """
    state_arr = as_ids("state_ids", state_ids, num_envs)
    task_arr = None if task_ids is None else as_ids("task_ids", task_ids, num_envs)
    table.check(state_arr, task_arr, where)
    return state_arr, task_arr
