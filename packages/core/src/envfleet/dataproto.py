"""``DataProto``: the batch that travels between trainer, worker group and workers.

It has the same surface as verl's ``verl.protocol.DataProto`` so that code written
against one works with the other, and :meth:`DataProto.from_verl` /
:meth:`DataProto.to_verl` convert in one call.

- ``batch``: a :class:`tensordict.TensorDict` with one batch dimension;
- ``non_tensor_batch``: ``dict[str, numpy.ndarray]``, dim 0 = batch (strings as object arrays);
- ``meta_info``: a plain dict.

Numeric data is always held as tensors or numeric numpy arrays, never as Python
objects per element, so pickling through Ray costs a memcpy per array.

>>> import numpy as np, torch
>>> d = DataProto.from_dict({"x": torch.zeros(4, 2)}, {"name": np.array(list("abcd"), dtype=object)})
>>> len(d), d[1:3].non_tensor_batch["name"].tolist()
(4, ['b', 'c'])
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from .dataproto_pickle import join_after_reduce, pack_state, split_for_reduce, unpack_state

__all__ = ["DataProto", "DataProtoItem", "pad_dataproto_to_divisor", "unpad_dataproto"]


def _as_numpy(name: str, value: Any) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, (list, tuple)):
        arr = np.empty(len(value), dtype=object)
        arr[:] = list(value)
        # Numbers in a list become a numeric array; strings and mixed stay objects.
        try:
            numeric = np.asarray(value)
        except (ValueError, TypeError):
            return arr
        return numeric if numeric.dtype.kind in "biuf" else arr
    raise TypeError(f"non_tensor_batch[{name!r}] must be a numpy array or a list, got {type(value).__name__}")


def _values_equal(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if isinstance(a, (np.ndarray, torch.Tensor)) or isinstance(b, (np.ndarray, torch.Tensor)):
        try:
            return bool(np.array_equal(np.asarray(a), np.asarray(b)))
        except Exception:
            return False
    try:
        return bool(a == b)
    except Exception:
        return False


@dataclass
class DataProtoItem:
    """One row of a :class:`DataProto` (what an integer index returns)."""

    batch: TensorDict | None = None
    non_tensor_batch: dict[str, Any] = field(default_factory=dict)
    meta_info: dict[str, Any] = field(default_factory=dict)


class DataProto:
    """A batch of tensors, non-tensor arrays and meta information. See the module doc.

    ``DataProto(batch=None, non_tensor_batch=None, meta_info=None)``, as verl's.
    A DataProto made by :meth:`from_arrays` or unpickled holds its numeric columns
    as arrays and builds ``batch`` (a TensorDict over the same memory) the first
    time it is read, so one that only passes through (a Ray actor's return value)
    never pays for it.
    """

    def __init__(
        self,
        batch: TensorDict | None = None,
        non_tensor_batch: Mapping[str, Any] | None = None,
        meta_info: dict[str, Any] | None = None,
    ) -> None:
        self._batch = batch
        self._lazy: tuple[dict[str, Any], int] | None = None
        self.non_tensor_batch: dict[str, np.ndarray] = {k: _as_numpy(k, v) for k, v in (non_tensor_batch or {}).items()}
        self.meta_info: dict[str, Any] = {} if meta_info is None else meta_info
        self.check_consistency()

    @property
    def batch(self) -> TensorDict | None:
        """The tensors, a :class:`tensordict.TensorDict` with one batch dimension (or None)."""
        if self._lazy is not None:
            columns, size = self._lazy
            self._lazy = None
            self._batch = TensorDict(
                {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in columns.items()}, batch_size=[size]
            )
        return self._batch

    @batch.setter
    def batch(self, value: TensorDict | None) -> None:
        """Replace the tensors."""
        self._lazy = None
        self._batch = value

    def _columns(self) -> tuple[dict[str, Any], int | None]:
        """The tensor columns (numpy arrays or tensors) and the batch size, without building the TensorDict."""
        if self._lazy is not None:
            return self._lazy
        if self._batch is None:
            return {}, None
        return dict(self._batch.items()), int(self._batch.batch_size[0])

    # ------------------------------------------------------------------ pickling
    # The format is envfleet.dataproto_pickle's: small numeric arrays packed in one byte
    # string, big ones out of band, the TensorDict rebuilt lazily on the other side.
    def __getstate__(self) -> dict[str, Any]:
        columns, batch_size = self._columns()
        return pack_state(columns, batch_size, self.non_tensor_batch, self.meta_info)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_dataproto, split_for_reduce(self.__getstate__()))

    def __setstate__(self, state: dict[str, Any]) -> None:
        columns, batch_size, non_tensors, meta = unpack_state(state)
        self._batch = None
        self._lazy = None if columns is None or batch_size is None else (columns, batch_size)
        self.non_tensor_batch = non_tensors
        self.meta_info = meta

    # ------------------------------------------------------------------ building
    @classmethod
    def from_dict(
        cls,
        tensors: Mapping[str, torch.Tensor] | None = None,
        non_tensors: Mapping[str, Any] | None = None,
        meta_info: Mapping[str, Any] | None = None,
        num_batch_dims: int = 1,
    ) -> DataProto:
        """Build from a dict of tensors (same dim 0) and a dict of numpy arrays / lists."""
        if num_batch_dims != 1:
            raise ValueError(f"DataProto has exactly one batch dimension; got num_batch_dims={num_batch_dims}")
        tensors = dict(tensors or {})
        non_tensors = {k: _as_numpy(k, v) for k, v in (non_tensors or {}).items()}
        size = _common_size(tensors, non_tensors)
        batch = None
        if tensors:
            for key, value in tensors.items():
                if not isinstance(value, torch.Tensor):
                    raise TypeError(f"tensors[{key!r}] must be a torch.Tensor, got {type(value).__name__}")
            batch = TensorDict(tensors, batch_size=[size])
        return cls(batch=batch, non_tensor_batch=non_tensors, meta_info=dict(meta_info or {}))

    @classmethod
    def from_arrays(
        cls,
        arrays: Mapping[str, Any],
        non_tensors: Mapping[str, Any] | None = None,
        meta_info: Mapping[str, Any] | None = None,
    ) -> DataProto:
        """Build from numpy arrays (or tensors) that become ``batch``, sharing their memory.

        The TensorDict is built when ``batch`` is first read; until then pickling (a
        Ray return value) reads the arrays directly.
        """
        columns = dict(arrays)
        non_tensor = {k: _as_numpy(k, v) for k, v in (non_tensors or {}).items()}
        for key, value in columns.items():
            if not isinstance(value, (np.ndarray, torch.Tensor)):
                raise TypeError(f"arrays[{key!r}] must be a numpy array or a torch.Tensor, got {type(value).__name__}")
            if isinstance(value, np.ndarray) and value.dtype.kind not in "biufc":
                raise TypeError(f"arrays[{key!r}] must be numeric to become a tensor, got dtype {value.dtype}")
        size = _common_size(columns, non_tensor)
        data = cls(non_tensor_batch=non_tensor, meta_info=dict(meta_info or {}))
        if columns:
            data._lazy = (columns, size)
        return data

    @classmethod
    def from_single_dict(cls, data: Mapping[str, Any], meta_info: Mapping[str, Any] | None = None) -> DataProto:
        """Build from one dict, sorting tensors from numpy arrays / lists."""
        tensors = {k: v for k, v in data.items() if isinstance(v, torch.Tensor)}
        others = {k: v for k, v in data.items() if not isinstance(v, torch.Tensor)}
        return cls.from_dict(tensors, others, meta_info)

    @classmethod
    def from_verl(cls, other: Any) -> DataProto:
        """Convert a ``verl.protocol.DataProto`` (or anything with the same three fields)."""
        return cls(
            batch=None if other.batch is None else other.batch.clone(recurse=False),
            non_tensor_batch=dict(other.non_tensor_batch),
            meta_info=dict(other.meta_info),
        )

    def to_verl(self) -> Any:
        """Convert to ``verl.protocol.DataProto`` (needs verl installed)."""
        try:
            from verl.protocol import DataProto as VerlDataProto  # type: ignore[import-not-found]
        except ImportError as exc:
            raise ImportError("to_verl() needs verl: pip install verl") from exc
        return VerlDataProto(batch=self.batch, non_tensor_batch=dict(self.non_tensor_batch), meta_info=dict(self.meta_info))

    # ------------------------------------------------------------------ checks
    def check_consistency(self) -> None:
        """Raise ``ValueError`` naming the key when arrays disagree on the batch size."""
        if self._batch is not None and len(self._batch.batch_size) != 1:
            raise ValueError(f"DataProto.batch must have one batch dimension, got batch_size={list(self._batch.batch_size)}")
        tensors, size = self._columns()
        _common_size(tensors, self.non_tensor_batch, batch_size=size)

    def __len__(self) -> int:
        if self._lazy is not None:
            return self._lazy[1]
        if self.batch is not None:
            return int(self.batch.batch_size[0])
        for value in self.non_tensor_batch.values():
            return int(value.shape[0])
        return 0

    # ------------------------------------------------------------------ indexing
    def __getitem__(self, item: Any) -> DataProto | DataProtoItem:
        if isinstance(item, (int, np.integer)):
            index = int(item)
            if not -len(self) <= index < len(self):
                raise IndexError(f"index {index} out of range for a DataProto of length {len(self)}")
            return DataProtoItem(
                batch=None if self.batch is None else self.batch[index],
                non_tensor_batch={k: v[index] for k, v in self.non_tensor_batch.items()},
                meta_info=self.meta_info,
            )
        if isinstance(item, slice):
            return self.slice(item.start, item.stop, item.step)
        if isinstance(item, (list, np.ndarray, torch.Tensor)):
            return self.select_idxs(item)
        raise TypeError(f"DataProto indices must be int, slice, list or array, got {type(item).__name__}")

    def slice(self, start: int | None = None, end: int | None = None, step: int | None = None) -> DataProto:
        """Rows ``start:end:step`` as a new DataProto (views, no copy)."""
        sl = slice(start, end, step)
        return DataProto(
            batch=None if self.batch is None else self.batch[sl],
            non_tensor_batch={k: v[sl] for k, v in self.non_tensor_batch.items()},
            meta_info=dict(self.meta_info),
        )

    def select_idxs(self, idxs: Sequence[int] | np.ndarray | torch.Tensor) -> DataProto:
        """Rows by an integer index array or a boolean mask."""
        index = np.asarray(idxs.cpu() if isinstance(idxs, torch.Tensor) else idxs)
        if index.dtype == bool:
            if index.shape != (len(self),):
                raise ValueError(f"boolean mask must have shape ({len(self)},), got {index.shape}")
            index = np.nonzero(index)[0]
        index = index.astype(np.int64)
        tindex = torch.from_numpy(index)
        return DataProto(
            batch=None if self.batch is None else self.batch[tindex],
            non_tensor_batch={k: v[index] for k, v in self.non_tensor_batch.items()},
            meta_info=dict(self.meta_info),
        )

    # ------------------------------------------------------------------ key selection
    def select(
        self,
        batch_keys: Iterable[str] | None = None,
        non_tensor_batch_keys: Iterable[str] | None = None,
        meta_info_keys: Iterable[str] | None = None,
        deepcopy: bool = False,
    ) -> DataProto:
        """A DataProto holding only the named keys (all of a kind when ``None``)."""
        batch = self.batch
        if batch_keys is not None and batch is not None:
            batch = batch.select(*_check_keys("batch", batch_keys, _keys(batch)))
        non_tensor = self.non_tensor_batch
        if non_tensor_batch_keys is not None:
            keys = _check_keys("non_tensor_batch", non_tensor_batch_keys, list(non_tensor))
            non_tensor = {k: non_tensor[k] for k in keys}
        meta = self.meta_info
        if meta_info_keys is not None:
            keys = _check_keys("meta_info", meta_info_keys, list(meta))
            meta = {k: meta[k] for k in keys}
        out = DataProto(batch=batch, non_tensor_batch=dict(non_tensor), meta_info=dict(meta))
        return copy.deepcopy(out) if deepcopy else out

    def pop(
        self,
        batch_keys: Iterable[str] | None = None,
        non_tensor_batch_keys: Iterable[str] | None = None,
        meta_info_keys: Iterable[str] | None = None,
    ) -> DataProto:
        """Remove the named keys from this DataProto and return them as a new one."""
        batch_keys = list(batch_keys or [])
        non_tensor_batch_keys = list(non_tensor_batch_keys or [])
        meta_info_keys = list(meta_info_keys or [])
        tensors: dict[str, torch.Tensor] = {}
        if batch_keys:
            if self.batch is None:
                raise KeyError(f"cannot pop batch keys {batch_keys}: this DataProto has no tensors")
            for key in _check_keys("batch", batch_keys, _keys(self.batch)):
                tensors[key] = self.batch.pop(key)  # type: ignore[assignment]
        non_tensors = {
            k: self.non_tensor_batch.pop(k) for k in _check_keys("non_tensor_batch", non_tensor_batch_keys, list(self.non_tensor_batch))
        }
        meta = {k: self.meta_info.pop(k) for k in _check_keys("meta_info", meta_info_keys, list(self.meta_info))}
        return DataProto.from_dict(tensors, non_tensors, meta)

    def union(self, other: DataProto) -> DataProto:
        """Merge ``other``'s keys into this one (in place, returned). Shared keys must agree."""
        if len(self) and len(other) and len(self) != len(other):
            raise ValueError(f"union: batch sizes differ, {len(self)} and {len(other)}")
        if other.batch is not None:
            if self.batch is None:
                self.batch = other.batch
            else:
                for key in other.batch.keys():
                    if key in self.batch.keys() and not torch.equal(self.batch[key], other.batch[key]):
                        raise ValueError(f"union: tensor {key!r} differs between the two DataProtos")
                    self.batch[key] = other.batch[key]
        for key, value in other.non_tensor_batch.items():
            if key in self.non_tensor_batch and not _values_equal(self.non_tensor_batch[key], value):
                raise ValueError(f"union: non-tensor {key!r} differs between the two DataProtos")
            self.non_tensor_batch[key] = value
        for key, value in other.meta_info.items():
            if key in self.meta_info and not _values_equal(self.meta_info[key], value):
                raise ValueError(f"union: meta_info[{key!r}] differs: {self.meta_info[key]!r} vs {value!r}")
            self.meta_info[key] = value
        self.check_consistency()
        return self

    # ------------------------------------------------------------------ batching
    @staticmethod
    def concat(data: Sequence[DataProto]) -> DataProto:
        """Concatenate along the batch dim. ``meta_info`` must agree on shared keys."""
        data = list(data)
        if not data:
            raise ValueError("concat needs at least one DataProto, got an empty list")
        meta: dict[str, Any] = {}
        for i, part in enumerate(data):
            for key, value in part.meta_info.items():
                if key in meta and not _values_equal(meta[key], value):
                    raise ValueError(f"concat: meta_info[{key!r}] disagrees: {meta[key]!r} (earlier parts) vs {value!r} (part {i})")
                meta.setdefault(key, value)
        columns = [p._columns() for p in data]
        has_batch = [size is not None for _, size in columns]
        if any(has_batch) and not all(has_batch):
            raise ValueError("concat: some parts have tensors and some do not")
        merged: dict[str, Any] = {}
        if all(has_batch):
            keys = list(columns[0][0])
            for i, (part_columns, _) in enumerate(columns[1:], 1):
                if set(part_columns) != set(keys):
                    raise ValueError(f"concat: part {i} has tensor keys {sorted(part_columns)}, part 0 has {sorted(keys)}")
            for key in keys:
                values = [part_columns[key] for part_columns, _ in columns]
                if all(isinstance(v, np.ndarray) for v in values):
                    merged[key] = np.concatenate(values, axis=0)
                else:
                    merged[key] = torch.cat([torch.from_numpy(v) if isinstance(v, np.ndarray) else v for v in values], dim=0)
        nt_keys = set(data[0].non_tensor_batch)
        for i, part in enumerate(data[1:], 1):
            if set(part.non_tensor_batch) != nt_keys:
                raise ValueError(f"concat: part {i} has non-tensor keys {sorted(part.non_tensor_batch)}, part 0 has {sorted(nt_keys)}")
        non_tensor = {k: np.concatenate([p.non_tensor_batch[k] for p in data], axis=0) for k in data[0].non_tensor_batch}
        out = DataProto(non_tensor_batch=non_tensor, meta_info=meta)
        if all(has_batch):
            out._lazy = (merged, sum(size for _, size in columns if size is not None))
        return out

    def chunk(self, chunks: int) -> list[DataProto]:
        """Split into ``chunks`` equal parts; the length must divide evenly."""
        if chunks <= 0 or len(self) % chunks:
            raise ValueError(f"chunk: a DataProto of length {len(self)} cannot be split into {chunks} equal chunks")
        return self.split(len(self) // chunks)

    def split(self, split_size: int) -> list[DataProto]:
        """Split into parts of ``split_size`` rows (the last may be shorter)."""
        if split_size <= 0:
            raise ValueError(f"split_size must be positive, got {split_size}")
        return [self.slice(i, i + split_size) for i in range(0, len(self), split_size)]

    def repeat(self, repeat_times: int = 2, interleave: bool = True) -> DataProto:
        """Repeat every row (``interleave``: a a b b) or the whole batch (a b a b)."""
        n = len(self)
        base = np.arange(n)
        index = np.repeat(base, repeat_times) if interleave else np.tile(base, repeat_times)
        return self.select_idxs(index)

    def to(self, device: str | torch.device) -> DataProto:
        """Move the tensors to ``device`` (in place, returned)."""
        if self.batch is not None:
            self.batch = self.batch.to(device)
        return self

    def __repr__(self) -> str:
        tensors = {} if self.batch is None else {k: (tuple(v.shape), str(v.dtype)) for k, v in self.batch.items()}
        nts = {k: (v.shape, str(v.dtype)) for k, v in self.non_tensor_batch.items()}
        return f"DataProto(len={len(self)}, batch={tensors}, non_tensor_batch={nts}, meta_info={sorted(self.meta_info)})"


def _common_size(tensors: Mapping[str, torch.Tensor], non_tensors: Mapping[str, np.ndarray], batch_size: int | None = None) -> int:
    first_key = "batch_size" if batch_size is not None else None
    size = batch_size
    for kind, items in (("tensor", tensors), ("non-tensor", non_tensors)):
        for key, value in items.items():
            if value.ndim == 0:
                raise ValueError(f"{kind} {key!r} is a scalar; every entry needs a batch dimension")
            n = int(value.shape[0])
            if size is None:
                size, first_key = n, key
            elif n != size:
                raise ValueError(f"batch size mismatch: {kind} {key!r} has {n} rows, {first_key!r} has {size}")
    return 0 if size is None else size


def _rebuild_dataproto(inner: bytes | None, tensors: dict[str, Any], non_tensors: dict[str, Any]) -> DataProto:
    """Inverse of :meth:`DataProto.__reduce__`."""
    data = DataProto.__new__(DataProto)
    data.__setstate__(join_after_reduce(inner, tensors, non_tensors))
    return data


def _keys(td: TensorDict) -> list[str]:
    return [str(k) for k in td.keys()]


def _check_keys(kind: str, wanted: Iterable[str], have: list[str]) -> list[str]:
    wanted = list(wanted)
    missing = [k for k in wanted if k not in have]
    if missing:
        raise KeyError(f"{kind} has no key(s) {missing}; it has {sorted(have)}")
    return wanted


def pad_dataproto_to_divisor(data: DataProto, size_divisor: int) -> tuple[DataProto, int]:
    """Pad by repeating rows from the start so ``len`` divides ``size_divisor``; return the pad size."""
    if size_divisor <= 0:
        raise ValueError(f"size_divisor must be positive, got {size_divisor}")
    pad = (-len(data)) % size_divisor
    if pad == 0:
        return data, 0
    if len(data) == 0:
        raise ValueError("cannot pad an empty DataProto")
    index = np.concatenate([np.arange(len(data)), np.arange(pad) % len(data)])
    return data.select_idxs(index), pad


def unpad_dataproto(data: DataProto, pad_size: int) -> DataProto:
    """Undo :func:`pad_dataproto_to_divisor`."""
    return data if pad_size == 0 else data.slice(0, len(data) - pad_size)
