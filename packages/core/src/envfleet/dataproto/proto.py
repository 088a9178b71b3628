"""The :class:`DataProto` class: envfleet's part and verl's surface together, and what builds one of this class from outside.

Its pickling, ``make_iterator`` and the :func:`collate_fn` it batches with (verl's collate_fn
builds a DataProto, never a subclass).

Pickles name ``envfleet.dataproto.DataProto`` and ``envfleet.dataproto._rebuild_dataproto``
(the paths of the single module this package replaced), so a DataProto saved with
:meth:`DataProto.save_to_disk` by either layout loads with the other.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch

from ..errors import DataProtoError
from .core import DataProtoItem
from .pickling import join_after_reduce, pack_state, split_for_reduce, unpack_state
from .values import _stack_rows, list_of_dict_to_dict_of_list
from .verl_surface import VerlSurface

if TYPE_CHECKING:
    from tensordict import TensorDict

# Imports inside functions: torch's data module loads only for make_iterator, not with every DataProto.

__all__ = ["DataProto", "collate_fn"]


class DataProto(VerlSurface):
    """A batch of tensors, non-tensor arrays and meta information. See the module doc.

    ``DataProto(batch=None, non_tensor_batch=None, meta_info=None)``, as verl's.
    A DataProto made by :meth:`from_arrays` or unpickled holds its numeric columns
    as arrays and builds ``batch`` (a TensorDict over the same memory) the first
    time it is read, so one that only passes through (a Ray actor's return value)
    never pays for it. Methods that return a new DataProto return one of the same
    class, so a subclass survives them (as in verl).
    """

    # ------------------------------------------------------------------ pickling
    # The format is envfleet.dataproto.pickling's: small numeric arrays packed in one byte
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


def _rebuild_dataproto(
    inner: bytes | None, tensors: dict[str, Any], non_tensors: dict[str, Any], cls: type[DataProto] | None = None
) -> DataProto:
    """Inverse of :meth:`DataProto.__reduce__`."""
    data = (cls or DataProto).__new__(cls or DataProto)
    data.__setstate__(join_after_reduce(inner, tensors, non_tensors))
    return data


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
