"""Small tools for Isaac Lab's data: nested dicts of tensors (scene states) and arrays of any kind as torch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

# Imports inside functions: warp loads in the shard only, where Isaac Lab's tensors are (seconds of start-up
# elsewhere).

__all__ = ["State", "as_torch", "assign_rows", "map_arrays"]

State = dict[str, Any]  # scene.get_state()'s nested dict of tensors


def map_arrays(tree: Any, fn: Callable[[Any], Any]) -> Any:
    """Apply ``fn`` to every array (tensor or numpy) of a nested dict (scene states)."""
    if isinstance(tree, dict):
        return {k: map_arrays(v, fn) for k, v in tree.items()}
    if isinstance(tree, (torch.Tensor, np.ndarray)):
        return fn(tree)
    return tree


def assign_rows(dst: Any, src: Any, rows: torch.Tensor) -> None:
    """``dst[rows] = src[rows]`` for every tensor of two nested dicts of the same shape."""
    if isinstance(dst, dict):
        for key in dst:
            assign_rows(dst[key], src[key], rows)
    elif isinstance(dst, torch.Tensor):
        dst[rows] = src[rows]


def as_torch(value: Any) -> torch.Tensor:
    """A torch view of a tensor, an Isaac Lab 3 ``ProxyArray`` or a Warp array."""
    if isinstance(value, torch.Tensor):
        return value
    view = getattr(value, "torch", None)
    if isinstance(view, torch.Tensor):
        return view
    import warp as wp

    return wp.to_torch(value)
