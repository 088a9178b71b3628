"""The wire between a manager and its shards: framed pickles on a socket, small arrays as raw bytes.

Two things make a call on many shards cheap:

- :class:`Channel` sends one pickle per message with an 8-byte length in front, in
  one ``write``, and reads a small message with one ``read`` (a
  ``multiprocessing.Connection`` needs two reads and a pickler object per message).
- :class:`ArrayPacker` sends the per-env arrays of a reply (rewards, flags,
  infos) as one byte string, field after field. Shards of one stage share a
  :class:`Layout`, so the parent joins the bytes of all shards and puts them in
  field order with one gather (:meth:`Layout.join`), each field of the whole stage
  a view of it, instead of unpacking a dozen arrays per shard. The layout travels
  only when it changes, and a shard whose arrays match the last layout packs them
  without rebuilding it.
"""

from __future__ import annotations

import math
import os
import pickle
import select
import socket
import struct
from typing import Any

import numpy as np

__all__ = ["Channel", "ArrayPacker", "Layout", "layout_of", "split_reply"]

_HEADER = struct.Struct("!Q")
_READ_SIZE = 1 << 16
_SPLIT_WRITE = 1 << 16  # above this, the header and the body are written separately (no concatenation copy)

Fields = tuple[tuple[str, str, tuple[int, ...]], ...]

# A reply's arrays share one namespace: a step's flags are named f.rewards, f.terminations,
# f.truncations and each info i.<name>, so that an info may be called "rewards" too. Only this
# module writes (ArrayPacker) and reads (split_reply) the names.
_FLAG = "f."
_INFO = "i."


class Channel:
    """One end of a socket carrying length-prefixed pickles. Blocking; one message at a time."""

    #: What :meth:`recv_within` returns when nothing arrived in time.
    TIMEOUT: Any = object()

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._sock = socket.socket(fileno=fd)  # for non-blocking reads; owns the fd
        self._poller = select.poll()
        self._poller.register(fd, select.POLLIN)
        self._pending = b""
        self._closed = False

    def send(self, obj: Any) -> None:
        """Pickle ``obj`` and write it. Raises ``OSError`` when the other end is gone."""
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        header = _HEADER.pack(len(data))
        if len(data) <= _SPLIT_WRITE:
            self._write_all(memoryview(header + data))
        else:
            self._write_all(memoryview(header))
            self._write_all(memoryview(data))

    def _write_all(self, view: memoryview) -> None:
        while view:
            written = os.write(self.fd, view)
            view = view[written:]

    def poll(self, timeout: float) -> bool:
        """Whether a message (or EOF) can be read within ``timeout`` seconds."""
        if self._pending:
            return True
        return bool(self._poller.poll(max(0, math.ceil(timeout * 1000))))

    def recv_within(self, timeout: float) -> Any:
        """The next message, or :attr:`TIMEOUT` if none starts arriving within ``timeout`` seconds.

        A message that is already there costs one ``recv`` and no ``poll``.
        """
        if not self._pending:
            try:
                first = self._sock.recv(_READ_SIZE, socket.MSG_DONTWAIT)
            except BlockingIOError:
                if not self._poller.poll(max(0, math.ceil(timeout * 1000))):
                    return self.TIMEOUT
                first = os.read(self.fd, _READ_SIZE)
            if not first:
                raise EOFError("the other end closed the channel")
            self._pending = first
        return self.recv()

    def recv(self) -> Any:
        """Read one message. Raises ``EOFError`` when the other end closed."""
        buf: bytes | bytearray = self._pending or os.read(self.fd, _READ_SIZE)
        if not buf:
            raise EOFError("the other end closed the channel")
        if len(buf) < _HEADER.size:
            buf = self._read_more(bytearray(buf), _HEADER.size)
        (size,) = _HEADER.unpack_from(buf)
        end = _HEADER.size + size
        if len(buf) < end:
            buf = self._read_more(bytearray(buf), end)
        self._pending = bytes(buf[end:])
        return pickle.loads(memoryview(buf)[_HEADER.size : end])

    def _read_more(self, buf: bytearray, need: int) -> bytearray:
        while len(buf) < need:
            more = os.read(self.fd, max(need - len(buf), _READ_SIZE))
            if not more:
                raise EOFError("the other end closed the channel in the middle of a message")
            buf += more
        return buf

    def close(self) -> None:
        """Close the socket. Safe to call twice."""
        if not self._closed:
            self._closed = True
            try:
                self._poller.unregister(self.fd)
            except (KeyError, ValueError):
                pass
            self._sock.close()


class Layout:
    """Where each array of a shard's reply sits in its bytes: field by field, each ``[num_envs, *shape]``."""

    def __init__(self, fields: Fields, num_envs: int) -> None:
        self.fields = fields
        self.num_envs = num_envs
        self.entries: list[tuple[str, np.dtype[Any], tuple[int, ...], int, int]] = []
        offset = 0
        for name, dtype_str, shape in fields:
            dtype = np.dtype(dtype_str)
            size = num_envs * int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            self.entries.append((name, dtype, tuple(shape), offset, size))
            offset += size
        self.nbytes = offset
        self._plans: dict[int, Any] = {}
        self._split_plans: dict[int, Any] = {}

    def unpack(self, raw: bytes) -> dict[str, np.ndarray]:
        """One shard's bytes as ``{name: array}`` (writable copies)."""
        buf = np.frombuffer(raw, dtype=np.uint8)
        return {
            name: buf[offset : offset + size].view(dtype).reshape(self.num_envs, *shape).copy()
            for name, dtype, shape, offset, size in self.entries
        }

    def join(self, raws: list[bytes]) -> dict[str, np.ndarray]:
        """The bytes of several shards with this layout, in order, as ``{name: array}`` over all their envs.

        One gather (``take``) puts the bytes in field-major order, so that each field
        of the whole stage is a contiguous, aligned, writable view of that one copy.
        """
        plan = self._plans.get(len(raws))
        if plan is None:
            plan = self._plans[len(raws)] = self._join_plan(len(raws))
        perm, slots = plan
        flat = np.frombuffer(b"".join(raws), dtype=np.uint8).take(perm)
        return {name: flat[start:stop].view(dtype).reshape(shape) for name, start, stop, dtype, shape in slots}

    def join_split(self, raws: list[bytes]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """:meth:`join` then :func:`split_reply`, in one pass: each field an array made straight over the
        gathered bytes, under its own name (per layout and shard count, the names are split once)."""
        plan = self._split_plans.get(len(raws))
        if plan is None:
            perm, slots = self._plans.get(len(raws)) or self._join_plan(len(raws))
            self._plans[len(raws)] = (perm, slots)
            plan = self._split_plans[len(raws)] = (perm, _split_slots(slots))
        perm, (flag_slots, info_slots) = plan
        flat = np.frombuffer(b"".join(raws), dtype=np.uint8).take(perm)
        ndarray = np.ndarray
        flags = {name: ndarray(shape, dtype, flat, start) for name, start, dtype, shape in flag_slots}
        infos = {name: ndarray(shape, dtype, flat, start) for name, start, dtype, shape in info_slots}
        return flags, infos

    def _join_plan(self, count: int) -> tuple[np.ndarray, list[tuple[str, int, int, np.dtype[Any], tuple[int, ...]]]]:
        # Fields are placed widest dtype first: each block's size is a multiple of its
        # itemsize, so every later block starts aligned for its own dtype.
        order = sorted(range(len(self.entries)), key=lambda i: -self.entries[i][1].itemsize)
        pieces: list[np.ndarray] = []
        starts: dict[int, int] = {}
        position = 0
        for i in order:
            _, _, _, offset, size = self.entries[i]
            starts[i] = position
            pieces += [np.arange(shard * self.nbytes + offset, shard * self.nbytes + offset + size) for shard in range(count)]
            position += size * count
        perm = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.intp)
        slots = [
            (name, starts[i], starts[i] + size * count, dtype, (count * self.num_envs, *shape))
            for i, (name, dtype, shape, _, size) in enumerate(self.entries)
        ]
        return perm, slots


def _split_slots(slots: list[tuple[str, int, int, np.dtype[Any], tuple[int, ...]]]) -> tuple[list[Any], list[Any]]:
    """A join plan's slots as ``(flag slots, info slots)``, each ``(name without its prefix, start, dtype, shape)``."""
    flags, infos = [], []
    for name, start, _, dtype, shape in slots:
        if name.startswith(_FLAG):
            flags.append((name[len(_FLAG) :], start, dtype, shape))
        elif name.startswith(_INFO):
            infos.append((name[len(_INFO) :], start, dtype, shape))
    return flags, infos


def split_reply(arrays: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """A reply's arrays (:meth:`Layout.unpack` or :meth:`Layout.join`) as ``(flags, infos)``, each by its own name."""
    flags: dict[str, np.ndarray] = {}
    infos: dict[str, np.ndarray] = {}
    for key, value in arrays.items():
        if key.startswith(_FLAG):
            flags[key[len(_FLAG) :]] = value
        elif key.startswith(_INFO):
            infos[key[len(_INFO) :]] = value
    return flags, infos


_LAYOUTS: dict[tuple[Fields, int], Layout] = {}


def layout_of(fields: Fields, num_envs: int) -> Layout:
    """The (cached) :class:`Layout` of ``fields`` for ``num_envs`` envs: equal layouts are the same object."""
    key = (fields, num_envs)
    layout = _LAYOUTS.get(key)
    if layout is None:
        layout = _LAYOUTS[key] = Layout(fields, num_envs)
    return layout


class ArrayPacker:
    """Shard side: the per-env arrays of a reply (rewards, flags, infos) as one byte string.

    :meth:`pack` returns ``(fields or None, bytes, others)``: ``fields`` ((name,
    dtype, per-env shape) of each array, in order: the flags as ``f.rewards``,
    ``f.terminations``, ``f.truncations``, then each info as ``i.<name>``) only when
    they differ from the ones sent last; ``others`` holds the infos that are not a
    numeric array with one row per env (strings, scalars), to be pickled as is.
    """

    _FLAG_NAMES = tuple(_FLAG + name for name in ("rewards", "terminations", "truncations"))

    def __init__(self) -> None:
        self._sent: tuple[Any, ...] | None = None
        # The last call's info names, and the dtype and shape of each packed array, when it
        # packed every info (no "others"): a call that matches them takes the fast path.
        self._names: tuple[str, ...] | None = None
        self._dtypes: list[np.dtype[Any]] = []
        self._shapes: list[tuple[int, ...]] = []

    def pack(self, num_envs: int, infos: dict[str, Any], flags: tuple[np.ndarray, ...] = ()) -> tuple[Fields | None, bytes, dict[str, Any]]:
        """Pack ``flags`` (rewards, terminations, truncations, or none) and ``infos`` of ``num_envs`` envs."""
        if self._names is not None and tuple(infos) == self._names:
            # The usual step: the same arrays as last time, with new values. bytes.join reads
            # each array's buffer directly (one C loop instead of a tobytes() per array) and
            # refuses anything that is not a C-contiguous buffer, which then takes the slow path.
            values = [*flags, *infos.values()]
            try:
                if [v.dtype for v in values] == self._dtypes and [v.shape for v in values] == self._shapes:
                    return None, b"".join(values), {}
            except (AttributeError, TypeError):  # a value that is not an array, or not contiguous
                pass
        return self._pack_slow(num_envs, infos, flags)

    def _pack_slow(
        self, num_envs: int, infos: dict[str, Any], flags: tuple[np.ndarray, ...]
    ) -> tuple[Fields | None, bytes, dict[str, Any]]:
        names = list(self._FLAG_NAMES[: len(flags)])
        arrays = list(flags)
        others: dict[str, Any] = {}
        for name, value in infos.items():
            arr = value if type(value) is np.ndarray else np.asarray(value)
            if arr.dtype.kind in "biuf" and arr.ndim and arr.shape[0] == num_envs:
                names.append(_INFO + name)
                arrays.append(arr)
            else:
                others[name] = value
        dtypes = [arr.dtype for arr in arrays]
        shapes = [arr.shape for arr in arrays]
        raws = [arr.tobytes() for arr in arrays]
        key = (tuple(names), tuple(dtypes), tuple(shapes))
        fields = None
        if key != self._sent:
            self._sent = key
            fields = tuple((name, dtype.str, shape[1:]) for name, dtype, shape in zip(names, dtypes, shapes))
        # Every info packed (none among the others): the next call may take the fast path.
        self._names = None if others else tuple(infos)
        self._dtypes, self._shapes = dtypes, shapes
        return fields, b"".join(raws), others
