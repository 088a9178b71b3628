"""envfleet.validation: the checks every env call's ids and actions go through."""

from __future__ import annotations

import numpy as np
import pytest

from envfleet.errors import InvalidInputError
from envfleet.validation import StateTable, as_ids, check_actions, check_reset_ids


def test_check_actions_accepts_huge_finite_values_and_names_the_bad_one() -> None:
    huge = np.full((2, 3, 7), 3e38, np.float32)  # finite, but their sum overflows to inf
    assert np.array_equal(check_actions(huge, 2, 7, 3), huge)
    for bad in (np.inf, -np.inf, np.nan):
        acts = np.zeros((2, 3, 7), np.float32)
        acts[1, 2, 5] = bad
        with pytest.raises(InvalidInputError, match=r"actions\[1, 2, 5\] is"):
            check_actions(acts, 2, 7, 3)


@pytest.mark.parametrize("shape", [(2, 3), (3, 3, 7), (2, 3, 6)], ids=["2-d", "wrong-num-envs", "wrong-action-dim"])
def test_check_actions_names_the_expected_shape(shape: tuple[int, ...]) -> None:
    with pytest.raises(InvalidInputError, match=r"actions must have shape \[num_envs=2, chunk, action_dim=7\]"):
        check_actions(np.zeros(shape, np.float32), 2, 7)


def test_check_actions_takes_any_chunk_unless_told_and_returns_float32() -> None:
    out = check_actions(np.zeros((2, 5, 7), np.float64), 2, 7)
    assert out.dtype == np.float32 and out.shape == (2, 5, 7)
    with pytest.raises(InvalidInputError, match="chunk=3"):
        check_actions(np.zeros((2, 5, 7), np.float32), 2, 7, chunk=3)
    with pytest.raises(InvalidInputError, match="float dtype"):
        check_actions(np.zeros((2, 5, 7), np.int64), 2, 7)


def test_as_ids_takes_whole_floats_and_refuses_the_rest() -> None:
    assert as_ids("state_ids", np.array([1.0, 2.0]), 2).dtype == np.int64
    with pytest.raises(InvalidInputError, match="state_ids must be integers"):
        as_ids("state_ids", np.array([1.5, 2.0]), 2)
    with pytest.raises(InvalidInputError, match=r"task_ids must have shape \(3,\)"):
        as_ids("task_ids", [1, 2], 3)


def test_contiguous_table_says_out_of_range_and_names_the_task() -> None:
    table = StateTable.contiguous([0, 0, 1, 1])
    state_ids, task_ids = check_reset_ids(table, [3, 0], [1, 0], num_envs=2)
    assert state_ids.tolist() == [3, 0] and task_ids is not None and task_ids.tolist() == [1, 0]
    with pytest.raises(InvalidInputError, match=r"state id 4 \(env 1 of stage 2\) is out of range: expected 0..3"):
        check_reset_ids(table, [0, 4], num_envs=2, where=" of stage 2")
    with pytest.raises(InvalidInputError, match="env 0: task id 0 does not match state id 2, which belongs to task 1"):
        check_reset_ids(table, [2, 0], [0, 0], num_envs=2)


def test_sparse_table_lists_the_known_ids() -> None:
    table = StateTable([10, 20, 30], [0, 1, 1])
    assert table.tasks_of(np.array([30, 10])).tolist() == [1, 0]
    with pytest.raises(InvalidInputError, match=r"state id 11 \(env 0\) is unknown: expected one of the 3 ids .* \(10..30\)"):
        table.check(np.array([11]))
