"""verl's module-level DataProto helpers: batch-dim folding and padding to a divisor (``collate_fn`` is in :mod:`.proto`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from ..errors import DataProtoError
from .proto import DataProto
from .values import new_tensordict

if TYPE_CHECKING:
    pass

__all__ = ["fold_batch_dim", "pad_dataproto_to_divisor", "unfold_batch_dim", "unpad_dataproto"]

_D = TypeVar("_D", bound=DataProto)


def fold_batch_dim(data: _D, new_batch_size: int) -> _D:
    """Fold ``[bsz, ...]`` into ``[new_batch_size, bsz // new_batch_size, ...]``: groups of consecutive rows become one row."""
    n = len(data)
    if new_batch_size <= 0 or n % new_batch_size:
        raise DataProtoError(f"fold_batch_dim: {n} rows cannot fold into {new_batch_size} rows of equal size")
    group = n // new_batch_size
    batch = None
    if data.batch is not None:
        batch = new_tensordict(
            {str(k): v.reshape(new_batch_size, group, *v.shape[1:]) for k, v in data.batch.items()},
            batch_size=[new_batch_size],
            device=data.batch.device,
        )
    non_tensor = {k: v.reshape(new_batch_size, group, *v.shape[1:]) for k, v in data.non_tensor_batch.items()}
    return type(data)(batch=batch, non_tensor_batch=non_tensor, meta_info=dict(data.meta_info))


def unfold_batch_dim(data: _D, batch_dims: int = 2) -> _D:
    """Inverse of :func:`fold_batch_dim`: the first ``batch_dims`` dims of every entry become one batch dim."""
    if batch_dims < 1:
        raise DataProtoError(f"unfold_batch_dim: batch_dims must be >= 1, got {batch_dims}")
    columns = {} if data.batch is None else {str(k): v for k, v in data.batch.items()}
    lead: tuple[int, ...] | None = None
    lead_key = ""
    for key, value in [*columns.items(), *data.non_tensor_batch.items()]:
        shape = tuple(value.shape[:batch_dims])
        if len(shape) < batch_dims:
            raise DataProtoError(f"unfold_batch_dim: {key!r} has shape {tuple(value.shape)}, fewer than batch_dims={batch_dims} dims")
        if lead is None:
            lead, lead_key = shape, key
        elif shape != lead:
            raise DataProtoError(f"unfold_batch_dim: {key!r} has leading dims {shape}, {lead_key!r} has {lead}")
    rows = math.prod(lead) if lead is not None else 0
    batch = None
    if data.batch is not None:
        batch = new_tensordict(
            {k: v.reshape(rows, *v.shape[batch_dims:]) for k, v in columns.items()}, batch_size=[rows], device=data.batch.device
        )
    non_tensor = {k: v.reshape(rows, *v.shape[batch_dims:]) for k, v in data.non_tensor_batch.items()}
    return type(data)(batch=batch, non_tensor_batch=non_tensor, meta_info=dict(data.meta_info))


def pad_dataproto_to_divisor(data: _D, size_divisor: int) -> tuple[_D, int]:
    """Pad by repeating rows from the start so ``len`` divides by ``size_divisor``; return the pad size.

    ``meta_info`` is kept as it is (verl pads by concatenating, which also doubles
    the ``metrics`` lists).
    """
    if size_divisor <= 0:
        raise DataProtoError(f"pad_dataproto_to_divisor: size_divisor must be positive, got {size_divisor}")
    n = len(data)
    pad = (-n) % size_divisor
    if pad == 0:
        return data, 0
    index = np.concatenate([np.arange(n), np.arange(pad) % n])
    return data.select_idxs(index), pad


def unpad_dataproto(data: _D, pad_size: int) -> _D:
    """Undo :func:`pad_dataproto_to_divisor`: drop the last ``pad_size`` rows."""
    if not 0 <= pad_size <= len(data):
        raise DataProtoError(f"unpad_dataproto: pad_size must be between 0 and the length {len(data)}, got {pad_size}")
    return data if pad_size == 0 else data.slice(0, len(data) - pad_size)
