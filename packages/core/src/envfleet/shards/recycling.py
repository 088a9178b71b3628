"""``RecyclingPool``: output arrays that are reused once nobody but the pool holds them.

Copying the observations out of shared memory into freshly allocated arrays
costs several times the copy itself: large allocations come back from the kernel
as new pages, each one faulted in and zeroed. Results are still independent
arrays: an array is reused only when its reference count shows that the caller
dropped every reference (to it and to any view or tensor made from it), so no
one can see it change. A caller that keeps its results simply gets new arrays.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

__all__ = ["RecyclingPool"]


def _pool_baseline() -> int:
    probe: list[np.ndarray] = [np.empty(1)]
    for arr in probe:
        return sys.getrefcount(arr)
    raise AssertionError("unreachable")


class RecyclingPool:
    """Arrays by key, each handed out again once only the pool references it.

    :param keep: how many arrays to keep per key (the oldest is dropped beyond it).
    """

    _BASELINE = _pool_baseline()  # references the pool itself holds while checking (list, loop variable, argument)

    def __init__(self, keep: int = 2) -> None:
        self.keep = keep
        self._arrays: dict[str, list[np.ndarray]] = {}

    def take(self, key: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """An array of ``shape`` and ``dtype`` that no one else references."""
        arrays = self._arrays.setdefault(key, [])
        for arr in arrays:
            if sys.getrefcount(arr) == self._BASELINE and arr.shape == shape and arr.dtype == dtype:
                return arr
        fresh = np.empty(shape, dtype=dtype)
        arrays.append(fresh)
        if len(arrays) > self.keep:
            del arrays[0]
        return fresh
