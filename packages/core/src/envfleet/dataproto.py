"""``DataProto``: the batch that travels between trainer, worker group and workers.

It has the whole surface of verl's ``verl.protocol.DataProto`` (verl at commit
b178a3c): every method, and the module-level helpers :func:`pad_dataproto_to_divisor`,
:func:`unpad_dataproto`, :func:`fold_batch_dim`, :func:`unfold_batch_dim`,
:func:`collate_fn` and :func:`list_of_dict_to_dict_of_list`, plus
:class:`DataProtoConfig` for automatic padding. Code written against one works with
the other, and :meth:`DataProto.from_verl` / :meth:`DataProto.to_verl` convert in
one call.

- ``batch``: a :class:`tensordict.TensorDict` with one batch dimension;
- ``non_tensor_batch``: ``dict[str, numpy.ndarray]``, dim 0 = batch (strings as object arrays);
- ``meta_info``: a plain dict. :meth:`DataProto.concat` merges ``meta_info["metrics"]``
  of the parts into a dict of lists, as verl does; every other key must agree.

A check that fails raises :class:`envfleet.errors.DataProtoError`, which is both a
``ValueError`` and an ``AssertionError`` (what verl raises), and names the key and
the sizes. Numeric data is always held as tensors or numeric numpy arrays, never as
Python objects per element, so pickling through Ray costs a memcpy per array (the
format is :mod:`envfleet.dataproto_pickle`'s).

>>> import numpy as np, torch
>>> d = DataProto.from_dict({"x": torch.zeros(4, 2)}, {"name": np.array(list("abcd"), dtype=object)})
>>> len(d), d[1:3].non_tensor_batch["name"].tolist()
(4, ['b', 'c'])
>>> DataProto.concat([d.select(meta_info_keys=[]) for _ in range(2)]).batch["x"].shape
torch.Size([8, 2])
"""

from __future__ import annotations

import copy
import math
import os
import pickle
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

import numpy as np
import torch
from tensordict import TensorDict

from .dataproto_pickle import join_after_reduce, pack_state, split_for_reduce, unpack_state
from .errors import DataProtoError, DataProtoKeyError

__all__ = [
    "AUTO_PADDING_KEY",
    "DataProto",
    "DataProtoConfig",
    "DataProtoItem",
    "collate_fn",
    "fold_batch_dim",
    "list_of_dict_to_dict_of_list",
    "pad_dataproto_to_divisor",
    "unfold_batch_dim",
    "unpad_dataproto",
]

AUTO_PADDING_KEY = "_verl_auto_padding"
"""The ``meta_info`` key that turns padding on for one DataProto (verl's name, so it survives conversion)."""

_D = TypeVar("_D", bound="DataProto")


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
    never pays for it. Methods that return a new DataProto return one of the same
    class, so a subclass survives them (as in verl).
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

    def _like(self: _D, batch: TensorDict | None, non_tensor_batch: Mapping[str, Any], meta_info: dict[str, Any] | None = None) -> _D:
        """A new DataProto of this one's class; ``meta_info`` defaults to a copy of this one's."""
        return type(self)(
            batch=batch, non_tensor_batch=non_tensor_batch, meta_info=dict(self.meta_info) if meta_info is None else meta_info
        )

    # ------------------------------------------------------------------ pickling
    # The format is envfleet.dataproto_pickle's: small numeric arrays packed in one byte
    # string, big ones out of band, the TensorDict rebuilt lazily on the other side.
    def __getstate__(self) -> dict[str, Any]:
        columns, batch_size = self._columns()
        return pack_state(columns, batch_size, self.non_tensor_batch, self.meta_info)

    def __reduce__(self) -> tuple[Any, ...]:
        args: tuple[Any, ...] = split_for_reduce(self.__getstate__())
        if type(self) is not DataProto:
            args = (*args, type(self))
        return (_rebuild_dataproto, args)

    def __setstate__(self, state: dict[str, Any]) -> None:
        columns, batch_size, non_tensors, meta = unpack_state(state)
        self._batch = None
        self._lazy = None if columns is None or batch_size is None else (columns, batch_size)
        self.non_tensor_batch = non_tensors
        self.meta_info = meta

    def save_to_disk(self, filepath: str | os.PathLike[str]) -> None:
        """Pickle this DataProto to ``filepath`` (read it back with :meth:`load_from_disk`)."""
        with open(filepath, "wb") as fh:
            pickle.dump(self, fh, protocol=pickle.HIGHEST_PROTOCOL)

    @staticmethod
    def load_from_disk(filepath: str | os.PathLike[str]) -> DataProto:
        """Read a DataProto written by :meth:`save_to_disk` (or pickled / ``torch.save``-d otherwise)."""
        with open(filepath, "rb") as fh:
            data = pickle.load(fh)
        if not isinstance(data, DataProto):
            raise TypeError(f"{os.fspath(filepath)!r} holds a {type(data).__name__}, not a DataProto")
        return data

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
            batch = TensorDict(tensors, batch_size=[size])
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

    @classmethod
    def from_tensordict(cls: type[_D], tensor_dict: TensorDict, meta_info: Mapping[str, Any] | None = None, num_batch_dims: int = 1) -> _D:
        """Build from a TensorDict as :meth:`to_tensordict` makes one.

        Tensors become ``batch``, ``NonTensorStack`` entries (one value per row) become
        ``non_tensor_batch`` columns and ``NonTensorData`` entries (one value) become
        ``meta_info``. A column whose rows are numpy values of one dtype comes back
        with that dtype (verl's comes back as an object array).
        """
        from tensordict.tensorclass import NonTensorData, NonTensorStack

        if num_batch_dims != 1:
            raise DataProtoError(f"from_tensordict: a DataProto has exactly one batch dimension, got num_batch_dims={num_batch_dims}")
        meta = dict(meta_info or {})
        tensors: dict[str, torch.Tensor] = {}
        non_tensors: dict[str, np.ndarray] = {}
        for key, value in tensor_dict.items():
            name = str(key)
            if isinstance(value, NonTensorStack):
                non_tensors[name] = _stack_rows(list(value.tolist()))
            elif isinstance(value, NonTensorData):
                meta[name] = value.data
            elif isinstance(value, torch.Tensor):
                tensors[name] = value
            else:
                raise DataProtoError(
                    f"from_tensordict: {name!r} is a {type(value).__name__}; a DataProto holds tensors, "
                    "NonTensorStack columns and NonTensorData meta values, not nested TensorDicts"
                )
        return cls.from_dict(tensors, non_tensors, meta)

    def to_tensordict(self) -> TensorDict:
        """One TensorDict holding everything: tensors, a ``NonTensorStack`` per non-tensor column, ``meta_info`` as ``NonTensorData``."""
        from tensordict.tensorclass import NonTensorData, NonTensorStack

        batch = self.batch
        source: dict[str, Any] = {} if batch is None else {str(k): v for k, v in batch.items()}
        for kind, keys in (("non_tensor_batch", self.non_tensor_batch), ("meta_info", self.meta_info)):
            common = sorted(set(source) & set(keys))
            if common:
                raise DataProtoError(f"to_tensordict: {kind} keys {common} are also tensor keys; one TensorDict cannot hold both")
        for key, arr in self.non_tensor_batch.items():
            source[key] = NonTensorStack.from_list([NonTensorData(row) for row in arr])  # type: ignore[misc]
        try:
            out = TensorDict(source, batch_size=[len(self)])
        except IndexError as exc:  # tensordict 0.10 cannot hold an empty NonTensorStack
            raise DataProtoError(
                f"to_tensordict: this tensordict cannot hold the empty non-tensor columns {sorted(self.non_tensor_batch)} "
                "of a DataProto of length 0; drop them first"
            ) from exc
        for key, value in self.meta_info.items():
            out[key] = NonTensorData(value)
        return out

    @classmethod
    def from_verl(cls: type[_D], other: Any) -> _D:
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

    def print_size(self, prefix: str = "") -> None:
        """Print how many GiB the tensors and the non-tensor arrays take (``prefix`` first)."""
        tensors, _ = self._columns()
        tensor_bytes = sum(v.nbytes if isinstance(v, np.ndarray) else v.element_size() * v.numel() for v in tensors.values())
        array_bytes = sum(v.nbytes for v in self.non_tensor_batch.values())
        message = f"Size of tensordict: {tensor_bytes / 1024**3} GB, size of non_tensor_batch: {array_bytes / 1024**3} GB"
        print(f"{prefix}, {message}" if prefix else message)

    def get_data_info(self) -> str:
        """A multi-line description: each tensor's shape, dtype and device, each array's shape and dtype, each meta value's type."""
        lines = ["batch"]
        for key, value in self.batch.items() if self.batch is not None else []:
            if hasattr(value, "shape") and hasattr(value, "dtype") and hasattr(value, "device"):
                lines.append(f"  {key}: {tuple(value.shape)} ({value.dtype}) {value.device}")
            else:
                lines.append(f"  {key}: {type(value).__name__}")
        lines.append("non_tensor_batch")
        lines += [f"  {key}: ndarray{arr.shape} ({arr.dtype})" for key, arr in self.non_tensor_batch.items()]
        lines.append("meta_info")
        lines += [f"  {key}: {_type_info(value)}" for key, value in self.meta_info.items()]
        return "\n".join(lines)

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

    def reorder(self, indices: Sequence[int] | np.ndarray | torch.Tensor) -> None:
        """Put the rows in the order ``indices`` gives, in place (``meta_info`` is kept)."""
        picked = self.select_idxs(indices)
        self.batch = picked.batch
        self.non_tensor_batch = picked.non_tensor_batch

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

    def pop(
        self: _D,
        batch_keys: Iterable[str] | None = None,
        non_tensor_batch_keys: Iterable[str] | None = None,
        meta_info_keys: Iterable[str] | None = None,
    ) -> _D:
        """Remove the named keys from this DataProto and return them as a new one."""
        batch_keys = list(batch_keys or [])
        non_tensor_batch_keys = list(non_tensor_batch_keys or [])
        meta_info_keys = list(meta_info_keys or [])
        tensors: dict[str, torch.Tensor] = {}
        if batch_keys:
            if self.batch is None:
                raise DataProtoKeyError(f"cannot pop batch keys {batch_keys}: this DataProto has no tensors")
            for key in _require_keys("batch", batch_keys, _keys(self.batch)):
                tensors[key] = self.batch.pop(key)  # type: ignore[assignment]
        non_tensors = {
            k: self.non_tensor_batch.pop(k) for k in _require_keys("non_tensor_batch", non_tensor_batch_keys, list(self.non_tensor_batch))
        }
        meta = {k: self.meta_info.pop(k) for k in _require_keys("meta_info", meta_info_keys, list(self.meta_info))}
        return type(self).from_dict(tensors, non_tensors, meta)

    def rename(self: _D, old_keys: str | Sequence[str] | None = None, new_keys: str | Sequence[str] | None = None) -> _D:
        """Rename tensor keys (``batch`` only, as verl's), in place; returns this DataProto.

        Renames happen at once, so ``rename(["a", "b"], ["b", "a"])`` swaps two keys.
        """
        old, new = _key_list("old_keys", old_keys), _key_list("new_keys", new_keys)
        if len(old) != len(new):
            raise DataProtoError(f"rename: new_keys and old_keys must have the same length, got {len(new)} and {len(old)}")
        if not old:
            return self
        batch = self.batch
        if batch is None:
            raise DataProtoKeyError(f"rename: batch has no key(s) {old}: this DataProto has no tensors")
        have = _keys(batch)
        _require_keys("batch", old, have)
        if len(set(new)) != len(new):
            raise DataProtoError(f"rename: new_keys {new} name a key twice")
        taken = sorted(set(new) & (set(have) - set(old)))
        if taken:
            raise DataProtoError(f"rename: batch already has key(s) {taken}; rename or pop them first")
        values = [batch.pop(key) for key in old]
        for key, value in zip(new, values):
            batch[key] = value
        return self

    def union(self: _D, other: DataProto) -> _D:
        """Merge ``other``'s keys into this one (in place, returned). Shared keys must hold equal values."""
        if len(self) and len(other) and len(self) != len(other):
            raise DataProtoError(f"union: batch sizes differ, {len(self)} and {len(other)}")
        if other.batch is not None:
            if self.batch is None:
                self.batch = other.batch
            else:
                for key in other.batch.keys():
                    if key in self.batch.keys() and not _values_equal(self.batch[key], other.batch[key]):
                        raise DataProtoError(f"union: tensor {key!r} differs between the two DataProtos")
                    self.batch[key] = other.batch[key]
        for key, value in other.non_tensor_batch.items():
            if key in self.non_tensor_batch and not _values_equal(self.non_tensor_batch[key], value):
                raise DataProtoError(f"union: non-tensor {key!r} differs between the two DataProtos")
            self.non_tensor_batch[key] = value
        for key, value in other.meta_info.items():
            if key in self.meta_info and not _values_equal(self.meta_info[key], value):
                raise DataProtoError(f"union: meta_info[{key!r}] differs: {self.meta_info[key]!r} vs {value!r}")
            self.meta_info[key] = value
        self.check_consistency()
        return self

    # ------------------------------------------------------------------ batching
    @staticmethod
    def concat(data: Sequence[DataProto]) -> DataProto:
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

    def padding(self, padding_size: int, padding_candidate: str = "") -> None:
        """Append ``padding_size`` copies of the first (``"first"``) or last row (``"last"`` or ``""``), in place."""
        if padding_candidate not in ("", "first", "last"):
            raise DataProtoError(f"padding: padding_candidate must be 'first' or 'last', got {padding_candidate!r}")
        if padding_size < 0:
            raise DataProtoError(f"padding: padding_size must be >= 0, got {padding_size}")
        if padding_size == 0:
            return
        n = len(self)
        if n == 0:
            raise DataProtoError(f"padding: a DataProto of length 0 has no row to repeat ({padding_size} asked)")
        row = 0 if padding_candidate == "first" else n - 1
        padded = self.select_idxs(np.concatenate([np.arange(n), np.full(padding_size, row)]))
        self.batch = padded.batch
        self.non_tensor_batch = padded.non_tensor_batch

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

    def repeat(self: _D, repeat_times: int = 2, interleave: bool = True) -> _D:
        """Repeat every row (``interleave``: a a b b) or the whole batch (a b a b)."""
        if repeat_times < 0:
            raise DataProtoError(f"repeat: repeat_times must be >= 0, got {repeat_times}")
        base = np.arange(len(self))
        index = np.repeat(base, repeat_times) if interleave else np.tile(base, repeat_times)
        return self.select_idxs(index)

    def sample_level_repeat(self: _D, repeat_times: Sequence[int] | np.ndarray | torch.Tensor) -> _D:
        """Repeat row ``i`` ``repeat_times[i]`` times, in order (a list, tuple, array or tensor of one count per row)."""
        if not isinstance(repeat_times, (list, tuple, np.ndarray, torch.Tensor)):
            raise DataProtoError(
                f"sample_level_repeat: repeat_times must be a list, tuple, numpy array or tensor, got {type(repeat_times).__name__}"
            )
        counts = np.asarray(repeat_times.detach().cpu() if isinstance(repeat_times, torch.Tensor) else repeat_times)
        if counts.shape != (len(self),):
            raise DataProtoError(f"sample_level_repeat: repeat_times must hold one count per row ({len(self)}), got shape {counts.shape}")
        if counts.size and (counts.dtype.kind not in "iu" or counts.min() < 0):
            raise DataProtoError(f"sample_level_repeat: repeat_times must be integers >= 0, got {counts.tolist()}")
        return self.select_idxs(np.repeat(np.arange(len(self)), counts.astype(np.int64)))

    def unfold_column_chunks(self: _D, n_split: int, split_keys: Sequence[str] | None = None) -> _D:
        """Cut each row of the ``split_keys`` columns into ``n_split`` rows along dim 1; repeat every other column's rows.

        A row ``[a1, a2, b1, b2]`` of a split key becomes rows ``[a1, a2]`` and
        ``[b1, b2]``; the same row of any other column appears ``n_split`` times.
        Both tensor and non-tensor keys can be split.
        """
        if n_split <= 0:
            raise DataProtoError(f"unfold_column_chunks: n_split must be positive, got {n_split}")
        split = list(split_keys or [])
        batch = self.batch
        have = (_keys(batch) if batch is not None else []) + list(self.non_tensor_batch)
        _require_keys("unfold_column_chunks split_keys", split, have)

        def unfold(key: str, value: Any) -> Any:
            if key not in split:
                return value.repeat_interleave(n_split, dim=0) if isinstance(value, torch.Tensor) else np.repeat(value, n_split, axis=0)
            if value.ndim < 2 or value.shape[1] % n_split:
                raise DataProtoError(
                    f"unfold_column_chunks: {key!r} has shape {tuple(value.shape)}; its dim 1 must divide by n_split={n_split}"
                )
            return value.reshape(value.shape[0] * n_split, value.shape[1] // n_split, *value.shape[2:])

        new_batch = None
        if batch is not None:
            new_batch = TensorDict(
                {str(k): unfold(str(k), v) for k, v in batch.items()}, batch_size=[len(self) * n_split], device=batch.device
            )
        return self._like(new_batch, {k: unfold(k, v) for k, v in self.non_tensor_batch.items()})

    def make_iterator(
        self, mini_batch_size: int, epochs: int, seed: int | None = None, dataloader_kwargs: dict[str, Any] | None = None
    ) -> Iterator[DataProto]:
        """Iterate over mini-batches of ``mini_batch_size`` rows for ``epochs`` epochs, through a torch DataLoader.

        :param mini_batch_size: rows per mini-batch; must divide the length.
        :param epochs: passes over the data.
        :param seed: seeds the DataLoader's generator (the order when ``shuffle=True``).
        :param dataloader_kwargs: passed to ``torch.utils.data.DataLoader`` (``shuffle``, ...).

        Each mini-batch is a DataProto built by :func:`collate_fn`, with this one's ``meta_info``.
        """
        from torch.utils.data import DataLoader

        if mini_batch_size <= 0 or len(self) % mini_batch_size:
            raise DataProtoError(f"make_iterator: mini_batch_size={mini_batch_size} must divide the length {len(self)}")
        if dataloader_kwargs is not None and not isinstance(dataloader_kwargs, dict):
            raise DataProtoError(f"make_iterator: dataloader_kwargs must be a dict, got {type(dataloader_kwargs).__name__}")
        generator = None
        if seed is not None:
            generator = torch.Generator()
            generator.manual_seed(seed)
        loader: Any = DataLoader(
            self,  # type: ignore[arg-type]  # a map-style dataset: __len__ and __getitem__(int)
            batch_size=mini_batch_size,
            collate_fn=collate_fn,
            generator=generator,
            **(dataloader_kwargs or {}),
        )

        def batches() -> Iterator[DataProto]:
            for _ in range(epochs):
                for part in loader:
                    part.meta_info = self.meta_info
                    yield part

        return batches()

    def to(self: _D, device: str | torch.device) -> _D:
        """Move the tensors to ``device`` (in place, returned)."""
        if self.batch is not None:
            self.batch = self.batch.to(device)
        return self

    def __repr__(self) -> str:
        tensors = {} if self.batch is None else {k: (tuple(v.shape), str(v.dtype)) for k, v in self.batch.items()}
        nts = {k: (v.shape, str(v.dtype)) for k, v in self.non_tensor_batch.items()}
        return f"{type(self).__name__}(len={len(self)}, batch={tensors}, non_tensor_batch={nts}, meta_info={sorted(self.meta_info)})"


def _merge_meta_info(parts: Sequence[DataProto]) -> dict[str, Any]:
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


def _rebuild_dataproto(
    inner: bytes | None, tensors: dict[str, Any], non_tensors: dict[str, Any], cls: type[DataProto] | None = None
) -> DataProto:
    """Inverse of :meth:`DataProto.__reduce__`."""
    data = (cls or DataProto).__new__(cls or DataProto)
    data.__setstate__(join_after_reduce(inner, tensors, non_tensors))
    return data


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


def collate_fn(x: Sequence[DataProtoItem]) -> DataProto:
    """Stack rows (:class:`DataProtoItem`) into a DataProto: the DataLoader's collate function of :meth:`DataProto.make_iterator`.

    A non-tensor column whose rows are numpy values of one dtype keeps it; any other
    becomes an object array (verl's always does).
    """
    items = list(x)
    batches = [item.batch for item in items]
    batch: TensorDict | None = None
    if any(b is not None for b in batches):
        if any(b is None for b in batches):
            raise DataProtoError("collate_fn: some items have tensors and some do not")
        batch = torch.stack(batches).contiguous()  # type: ignore[arg-type, assignment]
    rows = list_of_dict_to_dict_of_list([item.non_tensor_batch for item in items])
    return DataProto(batch=batch, non_tensor_batch={k: _stack_rows(v) for k, v in rows.items()})


def fold_batch_dim(data: _D, new_batch_size: int) -> _D:
    """Fold ``[bsz, ...]`` into ``[new_batch_size, bsz // new_batch_size, ...]``: groups of consecutive rows become one row."""
    n = len(data)
    if new_batch_size <= 0 or n % new_batch_size:
        raise DataProtoError(f"fold_batch_dim: {n} rows cannot fold into {new_batch_size} rows of equal size")
    group = n // new_batch_size
    batch = None
    if data.batch is not None:
        batch = TensorDict(
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
        batch = TensorDict(
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
