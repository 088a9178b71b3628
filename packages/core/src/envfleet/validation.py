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
from .states import StateTable  # its home until states.py gathered every way of choosing a state

__all__ = ["StateTable", "as_env_ids", "as_ids", "check_actions", "check_delays", "check_reset_ids", "to_numpy"]


def to_numpy(value: Any) -> Any:
    """A torch tensor as a numpy array (detached, on the CPU); anything else as it is."""
    if type(value) is not np.ndarray and hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor
        return value.detach().cpu().numpy()
    return value


def as_ids(name: str, ids: Any, num_envs: int) -> np.ndarray:
    """``ids`` as int64 ``[num_envs]``: integers, or floats that are whole numbers.

    :param name: what the ids are called in the message (``"state_ids"``, ``"task_ids"``).
    :raises InvalidInputError: the shape is not ``(num_envs,)`` or the values are not integers.
    """
    arr = np.asarray(to_numpy(ids))
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
    arr = np.asarray(to_numpy(env_ids))
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
    actions = to_numpy(actions)
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


def check_delays(delays: Any, num_envs: int) -> np.ndarray:
    """Each env's delay for one call (``train.execution.delay: caller``): ``num_envs`` whole numbers of
    sub-steps, as int64. The range (up to the horizon) is the schedule's to check.

    :raises InvalidInputError: saying what was expected and what came.
    """
    delays = to_numpy(delays)
    if not isinstance(delays, np.ndarray) or delays.shape != (num_envs,) or delays.dtype.kind not in "iuf":
        got = f"{delays.dtype}{list(delays.shape)}" if isinstance(delays, np.ndarray) else type(delays).__name__
        raise InvalidInputError(f"delays must be {num_envs} whole numbers of sub-steps, one per env, got {got}")
    if delays.dtype.kind == "f" and not (np.isfinite(delays).all() and (np.mod(delays, 1) == 0).all()):
        raise InvalidInputError(f"delays must be {num_envs} whole numbers of sub-steps, one per env, got {delays.tolist()}")
    return delays.astype(np.int64)


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
