"""Opt-in: envfleet's action transforms (envfleet.execution) bit for bit against verl-vla's own functions.

Set ``ENVFLEET_VERL_VLA`` to a verl-vla checkout (its ``src/verl_vla``; never committed here).
verl-vla's ``envs/action_executor.py`` (commit 8a18e3f) is loaded unmodified from it: its
``interpolate_action_chunk``, ``smooth_action_chunk_overlap`` and ``smooth_serial_action_chunks``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

import numpy as np
import pytest

from envfleet.execution import interpolate, smooth_overlap, smooth_serial

CHECKOUT = os.environ.get("ENVFLEET_VERL_VLA")

pytestmark = pytest.mark.skipif(not CHECKOUT, reason="set ENVFLEET_VERL_VLA to a verl-vla checkout (github.com/verl-project/verl-vla)")


@pytest.fixture(scope="module")
def theirs() -> Any:
    assert CHECKOUT is not None
    path = os.path.join(CHECKOUT, "src", "verl_vla", "envs", "action_executor.py")
    if not os.path.isfile(path):
        pytest.fail(f"ENVFLEET_VERL_VLA={CHECKOUT!r} has no src/verl_vla/envs/action_executor.py")
    spec = importlib.util.spec_from_file_location("verl_vla_action_executor", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[spec.name]
        raise
    return module


def _chunk(seed: int, n: int = 3, steps: int = 8, dim: int = 7, dtype: Any = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (n, steps, dim)).astype(dtype)


def _bits(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("factor", [2, 3, 5])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_interpolation_is_verl_vlas_bit_for_bit(theirs, factor: int, dtype: Any) -> None:
    for seed in range(5):
        actions = _chunk(seed, steps=4 + seed, dtype=dtype)
        values = np.zeros(actions.shape[:2], dtype=np.float32)
        want, _ = theirs.interpolate_action_chunk(actions, values, factor=factor)
        _bits(interpolate(actions, factor), want)


def test_overlap_smoothing_is_verl_vlas_bit_for_bit(theirs) -> None:
    for seed, (queued, incoming) in enumerate([(1, 8), (3, 5), (8, 3), (0, 4), (6, 6)]):
        previous, new = _chunk(seed, steps=queued), _chunk(seed + 100, steps=incoming)
        _bits(smooth_overlap(previous, new), theirs.smooth_action_chunk_overlap(previous, new))


@pytest.mark.parametrize("valid", [None, [True, False, True], [False, False, False]])
def test_serial_smoothing_is_verl_vlas_bit_for_bit(theirs, valid: list[bool] | None) -> None:
    mask = None if valid is None else np.array(valid)
    for seed, (execution, blend) in enumerate([(4, 2), (5, 3), (2, 6)]):
        previous, plan = _chunk(seed, steps=8), _chunk(seed + 7, steps=8)
        want = theirs.smooth_serial_action_chunks(previous, plan, execution_steps=execution, blend_steps=blend, previous_valid=mask)
        _bits(smooth_serial(previous, plan, execution, blend, mask), want)
        first = theirs.smooth_serial_action_chunks(None, plan, execution_steps=execution, blend_steps=blend, previous_valid=None)
        _bits(smooth_serial(None, plan, execution, blend, None), first)
