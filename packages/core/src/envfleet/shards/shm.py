"""Shared-memory blocks that carry a shard's observations from child to parent.

The parent creates (and alone unlinks) one segment per shard, laid out from the
backend's observation spec; the child maps the same segment by name and writes
each observation once. Segment names start with :data:`SHM_PREFIX` so that leak
checks can find them in ``/dev/shm``.

Should the parent die without closing (SIGKILL, or Ray killing a worker's children
together with Python's resource tracker), the detached :mod:`envfleet.shards.janitor`
unlinks its segments.

The child maps the segment with ``shm_open`` + ``mmap`` rather than
``multiprocessing.shared_memory.SharedMemory``: on Python < 3.13 the latter
registers the segment with the child's own resource tracker, which would unlink
it when the child dies, and a crashed shard could then not be rebuilt.
"""

from __future__ import annotations

import mmap
import os
import secrets
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from ..env import ArraySpec, ObservationSpec
from . import janitor

__all__ = ["SHM_PREFIX", "ShmLayout", "ShmBlock", "attach"]

SHM_PREFIX = "envfleet_"
_ALIGN = 64


class ShmLayout:
    """Offsets of each observation array of ``num_envs`` envs inside one segment."""

    def __init__(self, spec: ObservationSpec, num_envs: int) -> None:
        self.spec = dict(spec)
        self.num_envs = int(num_envs)
        self.offsets: dict[str, int] = {}
        offset = 0
        for key, arr in self.spec.items():
            self.offsets[key] = offset
            size = arr.nbytes_per_env * self.num_envs
            offset += (size + _ALIGN - 1) // _ALIGN * _ALIGN
        self.nbytes = max(offset, _ALIGN)

    def views(self, buf: Any) -> dict[str, np.ndarray]:
        """Numpy views of every array inside ``buf``."""
        out = {}
        for key, arr in self.spec.items():
            count = int(np.prod(arr.shape, dtype=np.int64)) * self.num_envs
            flat = np.frombuffer(buf, dtype=arr.dtype, count=count, offset=self.offsets[key])
            out[key] = flat.reshape((self.num_envs, *arr.shape))
        return out

    def to_wire(self) -> dict[str, Any]:
        """A picklable description (sent to the child)."""
        return {"spec": {k: (v.shape, v.dtype) for k, v in self.spec.items()}, "num_envs": self.num_envs}

    @classmethod
    def from_wire(cls, wire: dict[str, Any]) -> ShmLayout:
        """Inverse of :meth:`to_wire`."""
        return cls({k: ArraySpec(tuple(s), d) for k, (s, d) in wire["spec"].items()}, wire["num_envs"])


class ShmBlock:
    """A segment owned by the parent: created here, unlinked here."""

    def __init__(self, layout: ShmLayout, tag: str = "") -> None:
        self.layout = layout
        name = f"{SHM_PREFIX}{os.getpid()}_{tag}{secrets.token_hex(4)}"
        self._shm: shared_memory.SharedMemory | None = shared_memory.SharedMemory(name=name, create=True, size=layout.nbytes)
        self.name = self._shm.name
        # If this process is killed before close(), the detached janitor unlinks the segment.
        janitor.register(self.name)
        self.arrays = layout.views(self._shm.buf)
        self.bytes = byte_views(self.arrays)

    def close(self) -> None:
        """Drop the mapping and unlink the segment. Safe to call twice."""
        shm, self._shm = self._shm, None
        if shm is None:
            return
        _release(self.bytes)
        self.bytes = {}
        self.arrays = {}
        try:
            shm.close()
        except BufferError:
            # A caller still holds a view; the segment is unlinked anyway and the
            # memory goes when the last view does.
            pass
        try:
            shm.unlink()
        except FileNotFoundError:
            pass
        janitor.unregister(self.name)


def byte_views(arrays: dict[str, np.ndarray]) -> dict[str, memoryview]:
    """Each (C-contiguous) array's memory as a flat byte view."""
    # The same memory as flat bytes: copies between byte views are a plain memcpy, far less
    # code than numpy's assignment, which matters when every call starts with cold caches
    # (nine processes on two cores). Used by the shard's writes and the manager's copies.
    return {key: arr.data.cast("B") for key, arr in arrays.items()}


def _release(views: dict[str, memoryview]) -> None:
    # Views hold the mapping: they go first, so that it can close.
    for view in views.values():
        view.release()


class _ChildMapping:
    def __init__(self, name: str, layout: ShmLayout) -> None:
        import _posixshmem  # noqa: PLC2701 (the module SharedMemory itself uses)

        fd = _posixshmem.shm_open("/" + name, os.O_RDWR, mode=0o600)
        try:
            self._mmap = mmap.mmap(fd, layout.nbytes)
        finally:
            os.close(fd)
        self.arrays = layout.views(self._mmap)
        self.bytes = byte_views(self.arrays)

    def close(self) -> None:
        _release(self.bytes)
        self.bytes = {}
        self.arrays = {}
        try:
            self._mmap.close()
        except BufferError:
            pass


def attach(name: str, layout: ShmLayout) -> _ChildMapping:
    """Map the parent's segment ``name`` in a child, without taking ownership."""
    return _ChildMapping(name, layout)
