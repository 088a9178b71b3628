"""verl's wider :class:`~envfleet.dataproto.DataProto` surface, which envfleet itself does not call.

TensorDict and verl conversion, size reports, ``pop`` / ``rename`` / ``union``,
padding, repeats and ``unfold_column_chunks``, with verl's
semantics (verl at commit b178a3c) and envfleet's errors.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import torch

from ..errors import DataProtoError, DataProtoKeyError
from .core import DataProtoCore
from .values import _key_list, _keys, _require_keys, _stack_rows, _type_info, _values_equal, new_tensordict

if TYPE_CHECKING:
    from tensordict import TensorDict

# Imports inside functions: tensordict's tensorclass and verl load only for the conversions that need them
# (verl is optional).

__all__ = ["VerlSurface"]

_D = TypeVar("_D", bound="VerlSurface")


class VerlSurface(DataProtoCore):
    """The methods of verl's DataProto beyond :class:`~envfleet.dataproto.core.DataProtoCore`."""

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
            out = new_tensordict(source, batch_size=[len(self)])
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

    def reorder(self, indices: Sequence[int] | np.ndarray | torch.Tensor) -> None:
        """Put the rows in the order ``indices`` gives, in place (``meta_info`` is kept)."""
        picked = self.select_idxs(indices)
        self.batch = picked.batch
        self.non_tensor_batch = picked.non_tensor_batch

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

    def union(self: _D, other: DataProtoCore) -> _D:
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
            new_batch = new_tensordict(
                {str(k): unfold(str(k), v) for k, v in batch.items()}, batch_size=[len(self) * n_split], device=batch.device
            )
        return self._like(new_batch, {k: unfold(k, v) for k, v in self.non_tensor_batch.items()})
