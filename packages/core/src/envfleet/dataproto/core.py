"""The part of :class:`~envfleet.dataproto.DataProto` that envfleet itself uses.

One job: the batch envfleet builds and moves (fields, indexing, ``concat``, ``chunk``).

Its three fields, building from tensors or arrays (the TensorDict built lazily),
indexing, key selection, ``concat`` (merging ``metrics``) and ``chunk``: what the
worker, the group and the loop call. verl's wider surface is
:mod:`envfleet.dataproto.verl_surface`, on top of this class.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, overload

import numpy as np
import torch

from ..errors import DataProtoError, DataProtoKeyError
from .values import _as_numpy, _common_size, _keys, _require_keys, _values_equal, list_of_dict_to_dict_of_list, new_tensordict

if TYPE_CHECKING:
    from tensordict import TensorDict

__all__ = ["AUTO_PADDING_KEY", "DataProtoConfig", "DataProtoCore", "DataProtoItem"]


AUTO_PADDING_KEY = "_verl_auto_padding"
"""The ``meta_info`` key that turns padding on for one DataProto (verl's name, so it survives conversion)."""
_D = TypeVar("_D", bound="DataProtoCore")


class _DataProtoConfigMeta(type):
    """Holds the process-wide padding switch as a class property, as verl's does."""

    _auto_padding: bool = False
    auto_padding_key: str = AUTO_PADDING_KEY

    @property
    def auto_padding(cls) -> bool:
        """True when set here or when the environment variable ``VERL_AUTO_PADDING`` is ``1`` or ``true``."""
        by_env = os.environ.get("VERL_AUTO_PADDING", "FALSE").upper() in ("TRUE", "1")
        return by_env or cls._auto_padding

    @auto_padding.setter
    def auto_padding(cls, enabled: bool) -> None:
        if not isinstance(enabled, bool):
            raise DataProtoError(f"DataProtoConfig.auto_padding must be True or False, got {enabled!r} ({type(enabled).__name__})")
        cls._auto_padding = enabled


class DataProtoConfig(metaclass=_DataProtoConfigMeta):
    """Process-wide DataProto settings: ``DataProtoConfig.auto_padding = True`` lets every DataProto chunk unevenly.

    A single DataProto turns it on with ``from_dict(..., auto_padding=True)`` (the key
    :data:`AUTO_PADDING_KEY` in its ``meta_info``); see :meth:`DataProto.is_padding_enabled`.
    """


@dataclass
class DataProtoItem:
    """One row of a :class:`DataProto` (what an integer index returns)."""

    batch: TensorDict | None = None
    non_tensor_batch: dict[str, Any] = field(default_factory=dict)
    meta_info: dict[str, Any] = field(default_factory=dict)


class DataProtoCore:
    """The fields, building, indexing, selection and batching of :class:`~envfleet.dataproto.DataProto` (see there)."""

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
            self._batch = new_tensordict(
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

    def tensor_keys(self) -> frozenset[str]:
        """The names of the tensor columns, read without building the TensorDict (a DataProto that
        came through Ray or pickling holds arrays until ``batch`` is read)."""
        return frozenset(str(k) for k in self._columns()[0])

    def _like(self: _D, batch: TensorDict | None, non_tensor_batch: Mapping[str, Any], meta_info: dict[str, Any] | None = None) -> _D:
        """A new DataProto of this one's class; ``meta_info`` defaults to a copy of this one's."""
        return type(self)(
            batch=batch, non_tensor_batch=non_tensor_batch, meta_info=dict(self.meta_info) if meta_info is None else meta_info
        )

    # ------------------------------------------------------------------ building
    @classmethod
    def from_dict(
        cls: type[_D],
        tensors: Mapping[str, torch.Tensor] | None = None,
        non_tensors: Mapping[str, Any] | None = None,
        meta_info: Mapping[str, Any] | None = None,
        num_batch_dims: int = 1,
        auto_padding: bool = False,
    ) -> _D:
        """Build from a dict of tensors (same dim 0) and a dict of numpy arrays / lists.

        :param num_batch_dims: must be 1: a DataProto has one batch dimension (verl's
            check_consistency rejects any other); fold rows with :func:`fold_batch_dim`.
        :param auto_padding: let this DataProto chunk unevenly (see :meth:`is_padding_enabled`).
        """
        if num_batch_dims != 1:
            raise DataProtoError(
                f"from_dict: a DataProto has exactly one batch dimension, got num_batch_dims={num_batch_dims}; "
                "fold rows into groups with fold_batch_dim() instead"
            )
        tensors = dict(tensors or {})
        non_tensors = {k: _as_numpy(k, v) for k, v in (non_tensors or {}).items()}
        size = _common_size(tensors, non_tensors)
        batch = None
        if tensors:
            for key, value in tensors.items():
                if not isinstance(value, torch.Tensor):
                    raise TypeError(f"tensors[{key!r}] must be a torch.Tensor, got {type(value).__name__}")
            batch = new_tensordict(tensors, batch_size=[size])
        meta = dict(meta_info or {})
        if auto_padding:
            meta[AUTO_PADDING_KEY] = True
        return cls(batch=batch, non_tensor_batch=non_tensors, meta_info=meta)

    @classmethod
    def from_arrays(
        cls: type[_D],
        arrays: Mapping[str, Any],
        non_tensors: Mapping[str, Any] | None = None,
        meta_info: Mapping[str, Any] | None = None,
    ) -> _D:
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
    def from_single_dict(
        cls: type[_D], data: Mapping[str, Any], meta_info: Mapping[str, Any] | None = None, auto_padding: bool = False
    ) -> _D:
        """Build from one dict, sorting tensors from numpy arrays / lists."""
        tensors = {k: v for k, v in data.items() if isinstance(v, torch.Tensor)}
        others = {k: v for k, v in data.items() if not isinstance(v, torch.Tensor)}
        return cls.from_dict(tensors, others, meta_info, auto_padding=auto_padding)

    # ------------------------------------------------------------------ checks and facts
    def check_consistency(self) -> None:
        """Raise :class:`~envfleet.errors.DataProtoError` naming the key when arrays disagree on the batch size."""
        if self._batch is not None and len(self._batch.batch_size) != 1:
            raise DataProtoError(f"DataProto.batch must have one batch dimension, got batch_size={list(self._batch.batch_size)}")
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
    @overload
    def __getitem__(self, item: int | np.integer) -> DataProtoItem: ...

    @overload
    def __getitem__(self: _D, item: slice | list[int] | list[bool] | np.ndarray | torch.Tensor) -> _D: ...

    def __getitem__(self, item: Any) -> Any:
        """An int gives a :class:`DataProtoItem`; a slice, an index list/array or a boolean mask gives a DataProto."""
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

    def slice(self: _D, start: int | None = None, end: int | None = None, step: int | None = None) -> _D:
        """Rows ``start:end:step`` as a new DataProto (views, no copy)."""
        sl = slice(start, end, step)
        return self._like(
            None if self.batch is None else self.batch[sl],
            {k: v[sl] for k, v in self.non_tensor_batch.items()},
        )

    def select_idxs(self: _D, idxs: Sequence[int] | Sequence[bool] | np.ndarray | torch.Tensor) -> _D:
        """Rows by an integer index array or a boolean mask (list, numpy array or tensor)."""
        index = self._row_index(idxs, "select_idxs")
        tindex = torch.from_numpy(index)
        return self._like(
            None if self.batch is None else self.batch[tindex],
            {k: v[index] for k, v in self.non_tensor_batch.items()},
        )

    def _row_index(self, idxs: Any, what: str) -> np.ndarray:
        index = np.asarray(idxs.detach().cpu() if isinstance(idxs, torch.Tensor) else idxs)
        if index.ndim != 1:
            raise DataProtoError(f"{what}: the index must be one-dimensional, got shape {index.shape}")
        if index.dtype == bool:
            if index.shape != (len(self),):
                raise DataProtoError(f"{what}: a boolean mask must have shape ({len(self)},), got {index.shape}")
            return np.nonzero(index)[0]
        if index.size and index.dtype.kind not in "iu":
            raise DataProtoError(f"{what}: the index must hold integers or booleans, got dtype {index.dtype}")
        return index.astype(np.int64)

    # ------------------------------------------------------------------ key selection
    def select(
        self: _D,
        batch_keys: Iterable[str] | None = None,
        non_tensor_batch_keys: Iterable[str] | None = None,
        meta_info_keys: Iterable[str] | None = None,
        deepcopy: bool = False,
    ) -> _D:
        """A DataProto holding only the named keys (all of a kind when ``None``).

        The tensors are shared with this one; ``deepcopy`` copies ``non_tensor_batch``
        and ``meta_info`` (as verl's does). A key that is not there is a
        :class:`~envfleet.errors.DataProtoKeyError` that lists the keys there are.
        """
        batch = self.batch
        if batch_keys is not None:
            wanted = list(batch_keys)
            if batch is None:
                if wanted:
                    raise DataProtoKeyError(f"batch has no key(s) {wanted}: this DataProto has no tensors")
            else:
                batch = batch.select(*_require_keys("batch", wanted, _keys(batch)))
        non_tensor = self.non_tensor_batch
        if non_tensor_batch_keys is not None:
            keys = _require_keys("non_tensor_batch", non_tensor_batch_keys, list(non_tensor))
            non_tensor = {k: non_tensor[k] for k in keys}
        meta = self.meta_info
        if meta_info_keys is not None:
            keys = _require_keys("meta_info", meta_info_keys, list(meta))
            meta = {k: meta[k] for k in keys}
        if deepcopy:
            return self._like(batch, copy.deepcopy(dict(non_tensor)), copy.deepcopy(dict(meta)))
        return self._like(batch, dict(non_tensor), dict(meta))

    # ------------------------------------------------------------------ batching
    @staticmethod
    def concat(data: Sequence[_D]) -> _D:
        """Concatenate along the batch dim; the result has the first part's class.

        ``meta_info`` is merged: the parts' ``"metrics"`` (each a dict or a list of
        dicts; None is skipped) become one dict of lists, in part order, as verl's
        concat does with the workers' metrics. Every other key must hold the same
        value in every part that has it.
        """
        data = list(data)
        if not data:
            raise DataProtoError("concat needs at least one DataProto, got an empty list")
        meta = _merge_meta_info(data)
        columns = [p._columns() for p in data]
        has_batch = [size is not None for _, size in columns]
        if any(has_batch) and not all(has_batch):
            raise DataProtoError(f"concat: parts {[i for i, b in enumerate(has_batch) if not b]} have no tensors and the others do")
        merged: dict[str, Any] = {}
        if all(has_batch):
            keys = list(columns[0][0])
            for i, (part_columns, _) in enumerate(columns[1:], 1):
                if set(part_columns) != set(keys):
                    raise DataProtoError(f"concat: part {i} has tensor keys {sorted(part_columns)}, part 0 has {sorted(keys)}")
            for key in keys:
                values = [part_columns[key] for part_columns, _ in columns]
                if all(isinstance(v, np.ndarray) for v in values):
                    merged[key] = np.concatenate(values, axis=0)
                else:
                    merged[key] = torch.cat([torch.from_numpy(v) if isinstance(v, np.ndarray) else v for v in values], dim=0)
        nt_keys = set(data[0].non_tensor_batch)
        for i, part in enumerate(data[1:], 1):
            if set(part.non_tensor_batch) != nt_keys:
                raise DataProtoError(f"concat: part {i} has non-tensor keys {sorted(part.non_tensor_batch)}, part 0 has {sorted(nt_keys)}")
        non_tensor = {k: np.concatenate([p.non_tensor_batch[k] for p in data], axis=0) for k in data[0].non_tensor_batch}
        out = type(data[0])(non_tensor_batch=non_tensor, meta_info=meta)
        if all(has_batch):
            out._lazy = (merged, sum(size for _, size in columns if size is not None))
        return out

    def is_padding_enabled(self) -> bool:
        """True when this DataProto (``meta_info`` key :data:`AUTO_PADDING_KEY`) or :class:`DataProtoConfig` allows padding."""
        return bool(self.meta_info.get(AUTO_PADDING_KEY, False)) or DataProtoConfig.auto_padding

    def chunk(self: _D, chunks: int) -> list[_D]:
        """Split into ``chunks`` parts along the batch dim; each keeps ``meta_info``.

        The length must divide evenly unless padding is enabled
        (:meth:`is_padding_enabled`); then the parts are as ``torch.chunk`` cuts them
        (every part ``ceil(len / chunks)`` rows, the last shorter), as in verl. Where
        that would give fewer than ``chunks`` parts, the rows are spread as evenly as
        ``numpy.array_split`` spreads them, so there are always ``chunks`` parts.
        """
        if not isinstance(chunks, (int, np.integer)) or chunks <= 0:
            raise DataProtoError(f"chunk: chunks must be a positive integer, got {chunks!r}")
        n = len(self)
        if n % chunks == 0:
            sizes = [n // chunks] * chunks
        elif not self.is_padding_enabled():
            raise DataProtoError(
                f"chunk: a DataProto of length {n} cannot be split into {chunks} equal chunks; pad it first "
                "(pad_dataproto_to_divisor, or padding() with auto_padding on)"
            )
        else:
            sizes = _uneven_sizes(n, int(chunks))
        out, start = [], 0
        for size in sizes:
            out.append(self.slice(start, start + size))
            start += size
        return out

    def split(self: _D, split_size: int) -> list[_D]:
        """Split into parts of ``split_size`` rows (the last may be shorter)."""
        if split_size <= 0:
            raise DataProtoError(f"split: split_size must be positive, got {split_size}")
        return [self.slice(i, i + split_size) for i in range(0, len(self), split_size)]

    def to(self: _D, device: str | torch.device) -> _D:
        """Move the tensors to ``device`` (in place, returned)."""
        if self.batch is not None:
            self.batch = self.batch.to(device)
        return self

    def __repr__(self) -> str:
        tensors = {} if self.batch is None else {k: (tuple(v.shape), str(v.dtype)) for k, v in self.batch.items()}
        nts = {k: (v.shape, str(v.dtype)) for k, v in self.non_tensor_batch.items()}
        return f"{type(self).__name__}(len={len(self)}, batch={tensors}, non_tensor_batch={nts}, meta_info={sorted(self.meta_info)})"


def _merge_meta_info(parts: Sequence[DataProtoCore]) -> dict[str, Any]:
    """concat's ``meta_info``: metrics gathered into a dict of lists, every other key checked for agreement."""
    merged: dict[str, Any] = {}
    first_part: dict[str, int] = {}
    metrics: list[Mapping[str, Any]] = []
    for i, part in enumerate(parts):
        for key, value in part.meta_info.items():
            if key == "metrics":
                if value is None:
                    continue
                items = value if isinstance(value, list) else [value]
                for item in items:
                    if not isinstance(item, Mapping):
                        raise DataProtoError(
                            f"concat: meta_info['metrics'] of part {i} must be a dict or a list of dicts, got an item of type {type(item).__name__}"
                        )
                metrics.extend(items)
            elif key not in merged:
                merged[key] = value
                first_part[key] = i
            elif not _values_equal(merged[key], value):
                raise DataProtoError(
                    f"concat: Conflicting values for meta_info key {key!r}: {merged[key]!r} (part {first_part[key]}) vs {value!r} "
                    f"(part {i}); the parts must agree on every meta_info key but 'metrics'"
                )
    if metrics:
        merged["metrics"] = list_of_dict_to_dict_of_list(metrics)
    return merged


def _uneven_sizes(n: int, chunks: int) -> list[int]:
    """Part sizes for a padded chunk: torch.chunk's when it gives ``chunks`` parts, else numpy.array_split's."""
    step = -(-n // chunks)
    sizes = [min(step, n - start) for start in range(0, n, step)]
    if len(sizes) == chunks:
        return sizes
    base, extra = divmod(n, chunks)
    return [base + (i < extra) for i in range(chunks)]
