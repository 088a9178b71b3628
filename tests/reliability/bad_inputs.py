"""Bad input to a worker's two data methods, as data.

The reliability suite runs it through envfleet's group, the verl suite through verl's
``RayWorkerGroup``. Each case names the error it must raise and a fragment of its
message. The fragments assume what both suites use: 2 envs per stage and worker,
2 stages, chunks of 4 actions of size 7, the toy backend.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from envfleet.errors import InvalidInputError

__all__ = ["BadInput", "WORKER_CASES", "actions"]


def actions(rows: int, chunk: int, dim: int = 7, dtype: Any = np.float32) -> np.ndarray:
    """Zero actions ``[rows, chunk, dim]``."""
    return np.zeros((rows, chunk, dim), dtype=dtype)


def _with(value: float, index: tuple[int, int, int]) -> Callable[[int, int], dict[str, Any]]:
    def columns(rows: int, chunk: int) -> dict[str, Any]:
        a = actions(rows, chunk)
        a[index] = value
        return {"actions": a}

    return columns


@dataclass(frozen=True)
class BadInput:
    """One bad call: ``method`` with ``columns(rows, chunk)`` as non-tensors and ``meta`` as meta_info."""

    id: str
    method: str  # "env_interact_step" or "reset_envs_to_state_ids"
    columns: Callable[[int, int], dict[str, Any]]  # (rows of the whole call, chunk) -> non-tensor columns
    fragment: str  # part of the error message
    meta: dict[str, Any] = field(default_factory=lambda: {"stage_id": 0})
    error: type[Exception] = InvalidInputError


STEP, RESET = "env_interact_step", "reset_envs_to_state_ids"
_ZERO = lambda rows, chunk: {"actions": actions(rows, chunk)}  # noqa: E731

# Rows are those of the whole call; the first worker gets the first rows, so an index
# into row 1 or 0 lands on worker 0 whatever the number of workers.
WORKER_CASES = [
    BadInput("stage-out-of-range", STEP, _ZERO, "out of range: this worker has stages 0..1", meta={"stage_id": 2}),
    BadInput("stage-negative", STEP, _ZERO, "out of range", meta={"stage_id": -1}),
    BadInput("stage-not-int", STEP, _ZERO, "must be an int in [0, 2)", meta={"stage_id": 1.5}),
    BadInput("stage-str", STEP, _ZERO, "must be an int", meta={"stage_id": "1"}),
    BadInput("stage-missing", STEP, _ZERO, "stage_id'] is missing", meta={}),
    BadInput("actions-shape", STEP, lambda rows, chunk: {"actions": actions(rows, chunk - 1)}, "got [2, 3, 7]"),
    BadInput("actions-dim", STEP, lambda rows, chunk: {"actions": actions(rows, chunk, dim=6)}, "action_dim=7"),
    BadInput("actions-int", STEP, lambda rows, chunk: {"actions": actions(rows, chunk, dtype=np.int64)}, "float dtype"),
    BadInput("actions-nan", STEP, _with(np.nan, (1, 2, 3)), "actions[1, 2, 3] is nan"),
    BadInput("actions-inf", STEP, _with(-np.inf, (0, 0, 6)), "actions[0, 0, 6] is -inf"),
    BadInput("no-actions", STEP, lambda rows, chunk: {"action": actions(rows, chunk)}, "no 'actions'"),
    BadInput("bad-mode", STEP, _ZERO, "mode must be 'train' or 'val'", meta={"stage_id": 0, "mode": "eval"}),
    BadInput("unknown-state-id", RESET, lambda rows, chunk: {"state_ids": np.r_[np.arange(rows - 1), 999]}, "state id 999", meta={}),
    BadInput(
        "task-mismatch",
        RESET,
        lambda rows, chunk: {"state_ids": np.r_[np.arange(rows - 1), 15], "task_ids": np.zeros(rows, np.int64)},
        "task id 0 does not match state id 15",
        meta={},
    ),
]
