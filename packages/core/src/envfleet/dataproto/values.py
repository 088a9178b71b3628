"""Column values of a :class:`~envfleet.dataproto.DataProto`: coercion, deep equality, sizes and key checks.

The helpers the DataProto modules share; nothing here knows the class itself.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..errors import DataProtoError, DataProtoKeyError

if TYPE_CHECKING:
    from tensordict import TensorDict

# Imports inside functions: tensordict loads when a batch is first read, not where only numpy columns pass
# (see _tensordict).

__all__ = ["list_of_dict_to_dict_of_list", "new_tensordict"]


def new_tensordict(source: Mapping[str, Any], **kwargs: Any) -> TensorDict:
    """``TensorDict(source, **kwargs)``, importing tensordict on first use.

    tensordict's import pulls in torch._dynamo and sympy (about 80 MiB and 900 modules
    in a process that has torch already): an EnvWorker actor, which only forwards numpy
    columns (a DataProto builds its TensorDict when ``batch`` is first read), never pays for it.
    """
    from tensordict import TensorDict

    return TensorDict(source, **kwargs)


def _object_array(values: Sequence[Any]) -> np.ndarray:
    """An object array of ``values`` as verl builds it: rows of equal length become a 2-D array."""
    try:
        return np.array(values, dtype=object)
    except ValueError:  # a ragged nest numpy cannot shape (arrays of different shapes)
        arr = np.empty(len(values), dtype=object)
        for i, value in enumerate(values):
            arr[i] = value
        return arr


def _as_numpy(name: str, value: Any) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, (list, tuple)):
        # Numbers in a list become a numeric array; strings, dicts and mixed stay objects.
        try:
            numeric = np.asarray(value)
        except (ValueError, TypeError):
            return _object_array(value)
        return numeric if numeric.dtype.kind in "biuf" else _object_array(value)
    raise TypeError(f"non_tensor_batch[{name!r}] must be a numpy array or a list, got {type(value).__name__}")


def _stack_rows(values: list[Any]) -> np.ndarray:
    """Rebuild a column from its rows: numpy rows of one shape and dtype stack; anything else is an object array."""
    if values and all(isinstance(v, np.ndarray) for v in values):
        first = values[0]
        if all(v.shape == first.shape and v.dtype == first.dtype for v in values):
            return np.stack(values)
    elif values and all(isinstance(v, np.generic) for v in values) and len({v.dtype for v in values}) == 1:
        return np.array(values, dtype=values[0].dtype)
    arr = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        arr[i] = value
    return arr


def _values_equal(a: Any, b: Any, _path: set[tuple[int, int]] | None = None) -> bool:
    """Deep equality where NaN equals NaN, dtypes must match, and a cycle compares equal to itself."""
    if a is b:
        return True
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape or a.dtype != b.dtype:
            return False
        same = a == b
        if a.is_floating_point() or a.is_complex():
            same |= a.isnan() & b.isnan()
        return bool(same.all())
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)) or a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.dtype != object:
            return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
        return _all_equal(zip(a.flat, b.flat), a, b, _path)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        if a.keys() != b.keys():
            return False
        return _all_equal(((a[k], b[k]) for k in a), a, b, _path)
    if isinstance(a, (list, tuple)) and type(a) is type(b):
        return len(a) == len(b) and _all_equal(zip(a, b), a, b, _path)
    try:
        return bool(a == b)
    except Exception:
        return False


def _all_equal(pairs: Iterable[tuple[Any, Any]], a: Any, b: Any, path: set[tuple[int, int]] | None) -> bool:
    path = set() if path is None else path
    key = (id(a), id(b))
    if key in path:  # the same pair again on this path: a cycle, equal as far as it goes
        return True
    path.add(key)
    try:
        return all(_values_equal(x, y, path) for x, y in pairs)
    finally:
        path.discard(key)


def _type_info(value: Any) -> str:
    """A short type description for :meth:`DataProto.get_data_info`, looking into containers."""
    if isinstance(value, list):
        inner = sorted({_type_info(v) for v in value[:3]})
        return f"list[{'|'.join(inner) if inner else '...'}]"
    if isinstance(value, tuple):
        return f"tuple({', '.join(_type_info(v) for v in value)})"
    if isinstance(value, dict):
        if not value:
            return "dict"
        key, item = next(iter(value.items()))
        return f"dict[{_type_info(key)}: {_type_info(item)}]"
    if isinstance(value, np.ndarray):
        return f"ndarray{value.shape} ({value.dtype})"
    return type(value).__name__


def _common_size(tensors: Mapping[str, Any], non_tensors: Mapping[str, np.ndarray], batch_size: int | None = None) -> int:
    first_key = "batch_size" if batch_size is not None else None
    size = batch_size
    for kind, items in (("tensor", tensors), ("non-tensor", non_tensors)):
        for key, value in items.items():
            if value.ndim == 0:
                raise DataProtoError(f"{kind} {key!r} is a scalar; every entry needs a batch dimension")
            n = int(value.shape[0])
            if size is None:
                size, first_key = n, key
            elif n != size:
                raise DataProtoError(f"batch size mismatch: {kind} {key!r} has {n} rows, {first_key!r} has {size}")
    return 0 if size is None else size


def _keys(td: TensorDict) -> list[str]:
    return [str(k) for k in td.keys()]


def _key_list(name: str, keys: str | Sequence[str] | None) -> list[str]:
    if keys is None:
        return []
    if isinstance(keys, str):
        return [keys]
    if isinstance(keys, (list, tuple)):
        return list(keys)
    raise TypeError(f"{name} must be a list or a string, got {type(keys).__name__}")


def _require_keys(kind: str, wanted: Iterable[str], have: list[str]) -> list[str]:
    wanted = list(wanted)
    missing = [k for k in wanted if k not in have]
    if missing:
        raise DataProtoKeyError(f"{kind} has no key(s) {missing}; it has {sorted(have)}")
    return wanted


def list_of_dict_to_dict_of_list(list_of_dict: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """``[{"a": 1}, {"a": 2}]`` -> ``{"a": [1, 2]}``; the keys are the first dict's, and a later dict may not add one."""
    if not list_of_dict:
        return {}
    out: dict[str, list[Any]] = {key: [] for key in list_of_dict[0]}
    for i, row in enumerate(list_of_dict):
        for key, item in row.items():
            if key not in out:
                raise DataProtoKeyError(f"list_of_dict_to_dict_of_list: dict {i} has key {key!r}, dict 0 has only {sorted(out)}")
            out[key].append(item)
    return out
