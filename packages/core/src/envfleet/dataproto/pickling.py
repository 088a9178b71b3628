"""The pickle format of :class:`envfleet.dataproto.DataProto`.

A TensorDict pickles its metadata key by key (milliseconds for a dozen small
tensors), and through Ray every numpy array becomes an out-of-band buffer with its
own bookkeeping. So a DataProto pickles as:

- one byte string holding every numeric array below :data:`PACK_LIMIT` bytes
  (tensors and numeric non-tensor columns alike), each at an aligned offset;
- the bigger numeric arrays as numpy arrays (out of band through Ray: no copy);
- everything else (object arrays such as strings, ``meta_info``) in one inner pickle.

Unpickling makes one writable copy of the packed bytes, views every packed array
into it, and copies big arrays that arrive read-only (Ray's zero-copy buffers), so a
trainer can always write into the tensors it gets.

>>> import numpy as np
>>> state = pack_state({"x": np.arange(3)}, 3, {}, {"k": 1})
>>> columns, size, non_tensors, meta = unpack_state(state)
>>> columns["x"].tolist(), size, meta
([0, 1, 2], 3, {'k': 1})
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

__all__ = ["PACK_LIMIT", "pack_state", "split_for_reduce", "join_after_reduce", "unpack_state"]

PACK_LIMIT = 1 << 20
"""Numeric arrays below this many bytes travel inside one shared byte string."""

_PACK_ALIGN = 64

_NUMPY_SAFE = {
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.complex128,
}


def _append_piece(pieces: list[bytes], offset: int, arr: np.ndarray) -> int:
    """Append ``arr``'s bytes at an aligned offset; return the offset after them."""
    pad = -offset % _PACK_ALIGN
    if pad:
        pieces.append(b"\0" * pad)
        offset += pad
    pieces.append(arr.tobytes())
    return offset + arr.nbytes


def pack_state(
    columns: Mapping[str, Any],
    batch_size: int | None,
    non_tensor_batch: Mapping[str, np.ndarray],
    meta_info: dict[str, Any],
) -> dict[str, Any]:
    """The picklable state of a DataProto from its tensor columns (tensors or arrays) and the rest.

    :param columns: the tensor columns, ``batch``'s items or the arrays a lazy batch is built from.
    :param batch_size: the batch size of ``batch``, or None when there is no ``batch``.
    :param non_tensor_batch: the non-tensor columns.
    :param meta_info: the meta information, pickled as it is.
    """
    packed: list[tuple[str, str, str, tuple[int, ...], int]] = []
    pieces: list[bytes] = []
    offset = 0
    big_tensors: dict[str, Any] = {}
    for key, value in columns.items():
        if isinstance(value, np.ndarray) or (isinstance(value, torch.Tensor) and value.device.type == "cpu" and value.dtype in _NUMPY_SAFE):
            arr = value if isinstance(value, np.ndarray) else value.detach().numpy()
            if arr.nbytes < PACK_LIMIT:
                offset = _append_piece(pieces, offset, arr)
                packed.append(("t", key, arr.dtype.str, arr.shape, offset - arr.nbytes))
                continue
            big_tensors[key] = np.ascontiguousarray(arr)
        else:
            big_tensors[key] = value
    non_tensors: dict[str, Any] = {}
    for key, arr in non_tensor_batch.items():
        if arr.dtype.kind in "biufc" and arr.nbytes < PACK_LIMIT:
            offset = _append_piece(pieces, offset, arr)
            packed.append(("n", key, arr.dtype.str, arr.shape, offset - arr.nbytes))
        else:
            non_tensors[key] = arr
    return {
        "packed": packed,
        "blob": b"".join(pieces),
        "tensors": big_tensors,
        "order": list(columns),
        "batch_size": batch_size,
        "non_tensor_batch": non_tensors,
        "non_tensor_order": list(non_tensor_batch),
        "meta_info": meta_info,
    }


def split_for_reduce(state: dict[str, Any]) -> tuple[bytes | None, dict[str, Any], dict[str, Any]]:
    """Split a state for ``__reduce__``: the small part as one pickle, and the big arrays apart.

    Ray pickles with cloudpickle, whose Python-level hooks visit every object in the
    state; the C pickler does the small part in one call, and Ray only sees one byte
    string plus the big arrays (which it sends out of band without a copy). When the
    small part holds something only cloudpickle handles (a lambda in ``meta_info``),
    the first item is None and the second is the whole state.
    """
    state = dict(state)
    big_tensors = state.pop("tensors")
    rest = state.pop("non_tensor_batch")  # big numeric arrays and object arrays (strings)
    big_non_tensors = {k: v for k, v in rest.items() if v.dtype.kind in "biufc"}
    state["non_tensor_batch"] = {k: v for k, v in rest.items() if k not in big_non_tensors}
    try:
        inner = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # something in meta_info or an object array only cloudpickle handles
        state["tensors"] = big_tensors
        state["non_tensor_batch"] = rest
        return None, state, {}
    return inner, big_tensors, big_non_tensors


def join_after_reduce(inner: bytes | None, tensors: dict[str, Any], non_tensors: dict[str, Any]) -> dict[str, Any]:
    """Inverse of :func:`split_for_reduce`."""
    if inner is None:
        return tensors
    state: dict[str, Any] = pickle.loads(inner)
    state["tensors"] = tensors
    state["non_tensor_batch"].update(non_tensors)
    return state


def unpack_state(state: dict[str, Any]) -> tuple[dict[str, Any] | None, int | None, dict[str, np.ndarray], dict[str, Any]]:
    """Inverse of :func:`pack_state`: ``(columns or None, batch_size, non_tensor_batch, meta_info)``.

    Every array is writable: the packed ones are views of one writable copy of the
    byte string, and big ones that arrive read-only are copied.
    """
    blob = bytearray(state["blob"])
    tensors: dict[str, Any] = {}
    non_tensors: dict[str, Any] = {}
    for kind, key, dtype, shape, offset in state["packed"]:
        arr = np.frombuffer(blob, dtype=dtype, count=math.prod(shape), offset=offset).reshape(shape)
        (tensors if kind == "t" else non_tensors)[key] = arr
    for key, value in state["tensors"].items():
        # Ray hands out read-only zero-copy arrays from its object store; a tensor over one
        # would fail (or corrupt the store) when a trainer writes into it, so those are copied.
        tensors[key] = value.copy() if isinstance(value, np.ndarray) and not value.flags.writeable else value
    non_tensors.update(state["non_tensor_batch"])
    columns = None if state["batch_size"] is None else {k: tensors[k] for k in state["order"]}
    return columns, state["batch_size"], {k: non_tensors[k] for k in state["non_tensor_order"]}, state["meta_info"]
