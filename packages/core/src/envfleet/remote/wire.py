"""The network wire of ``envfleet serve``: length-prefixed frames, a JSON header and raw array bytes.

A frame is a 16-byte prefix, a UTF-8 JSON object (the header) and a payload::

    prefix  = magic b"EFRM" | version u16 | reserved u16 (0) | header length u32 | payload length u32   (big-endian)
    header  = {"type": str, "arrays": [[name, dtype, shape], ...], ...message fields}
    payload = the arrays' bytes, C order, little-endian, one after another, no padding

Nothing is unpickled: an array is rebuilt from its dtype name (one of :data:`DTYPES`), its
shape and its bytes, and the lengths must add up to the payload length exactly. Every
length is checked against a limit before anything is allocated. docs/remote.md gives every
message; :class:`Frame` and :func:`read_frame` / :func:`write_frame` are the whole codec.
"""

from __future__ import annotations

import json
import math
import socket
import ssl
import struct
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ConfigError, EnvFleetError
from ..shards.recycling import RecyclingPool

__all__ = [
    "parse_address",
    "VERSION",
    "MAGIC",
    "DTYPES",
    "Frame",
    "FrameLimits",
    "WireError",
    "read_frame",
    "write_frame",
    "encode_frame",
]

#: 2: leases (a session with a stage must send a request within the welcome's ``lease_s``) and takeover.
VERSION = 2
MAGIC = b"EFRM"
_PREFIX = struct.Struct("!4sHHII")
PREFIX_SIZE = _PREFIX.size
MAX_NDIM = 8
MAX_ARRAYS = 256
#: SO_SNDBUF (server) and SO_RCVBUF (client) of a connection, in bytes: a step's reply in one go.
SOCKET_BUFFER = 4 << 20
_IOV_MAX = 512  # pieces per sendmsg: at most MAX_ARRAYS arrays and the prefix, under any system's IOV_MAX (1024 on Linux)

#: The dtypes an array may have on the wire (all little-endian where it matters).
DTYPES: dict[str, np.dtype[Any]] = {
    name: np.dtype(name).newbyteorder("<")
    for name in ("bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64", "float16", "float32", "float64")
}


class WireError(EnvFleetError, ValueError):
    """A frame that breaks the wire's rules: its ``code`` (see docs/remote.md) and what was wrong.

    ``fatal`` says whether the stream can go on (a bad field) or not (a bad prefix, a
    truncated frame: the next frame's start is unknown). ``peer_version``: for ``version``,
    the version the peer's prefix named (an answer to it is written in that version).
    """

    def __init__(self, code: str, message: str, fatal: bool = True, peer_version: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.fatal = fatal
        self.peer_version = peer_version


@dataclass(frozen=True)
class FrameLimits:
    """The largest header and payload a reader accepts, in bytes."""

    header: int = 64 * 1024
    payload: int = 1 << 30


@dataclass
class Frame:
    """One message: its header fields (``type`` among them) and its named arrays."""

    type: str
    fields: dict[str, Any] = field(default_factory=dict)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        """A header field, or ``default``."""
        return self.fields.get(key, default)


def encode_frame(frame: Frame, version: int = VERSION) -> list[bytes | memoryview]:
    """``frame`` as the pieces to write, in order: prefix and header, then each array's bytes."""
    specs: list[list[Any]] = []
    pieces: list[bytes | memoryview] = []
    total = 0
    for name, value in frame.arrays.items():
        arr = np.ascontiguousarray(value)
        wire = DTYPES.get(arr.dtype.name)
        if wire is None:
            raise WireError("internal", f"array {name!r} has dtype {arr.dtype}, which the wire does not carry (one of {sorted(DTYPES)})")
        if arr.dtype != wire:
            arr = arr.astype(wire)
        specs.append([name, arr.dtype.name, list(arr.shape)])
        pieces.append(memoryview(arr).cast("B") if arr.nbytes else b"")  # type: ignore[arg-type]
        total += arr.nbytes
    header = json.dumps({**frame.fields, "type": frame.type, "arrays": specs}, separators=(",", ":")).encode()
    return [_PREFIX.pack(MAGIC, version, 0, len(header), total) + header, *pieces]


def write_frame(sock: socket.socket, frame: Frame, version: int = VERSION) -> None:
    """Write ``frame`` to ``sock`` without copying its arrays: one ``sendmsg`` of every piece
    (a TLS socket, which has no ``sendmsg``, gets the small pieces joined and the large ones as they are)."""
    pieces = encode_frame(frame, version)
    if isinstance(sock, ssl.SSLSocket) or not hasattr(sock, "sendmsg"):
        _send_pieces(sock, pieces)
        return
    views = [memoryview(piece) for piece in pieces if len(piece)]
    while views:
        sent = sock.sendmsg(views[:_IOV_MAX])
        while views and sent >= len(views[0]):
            sent -= len(views[0])
            views.pop(0)
        if sent:
            views[0] = views[0][sent:]


def _send_pieces(sock: socket.socket, pieces: list[bytes | memoryview]) -> None:
    pending: list[bytes | memoryview] = []
    for piece in pieces:
        if len(piece) >= 1 << 16:
            if pending:
                sock.sendall(b"".join(pending))
                pending = []
            sock.sendall(piece)
        else:
            pending.append(piece)
    if pending:
        sock.sendall(b"".join(pending))


def _recv_exact(sock: socket.socket, n: int, deadline: float | None, started: bool, pool: RecyclingPool | None = None) -> Any:
    # np.empty, not bytearray(n): no zero-fill of a buffer that recv_into overwrites whole; from
    # ``pool``, a buffer whose pages are already mapped (a fresh 3 MB faults in 750 pages).
    buf = np.empty(n, dtype=np.uint8) if pool is None else pool.take("payload", (n,), np.uint8)
    view = memoryview(buf)  # type: ignore[arg-type]
    got = 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no complete frame within the deadline ({got} of {n} bytes read)")
            sock.settimeout(left)
        count = sock.recv_into(view[got:], n - got)
        if count == 0:
            if got == 0 and not started:
                raise EOFError("the peer closed the connection")
            raise WireError("truncated", f"the frame was cut short: {got} of {n} bytes arrived before the connection closed")
        got += count
        started = True
    return buf


def read_frame(sock: socket.socket, limits: FrameLimits, timeout: float | None = None, pool: RecyclingPool | None = None) -> Frame:
    """Read one frame from ``sock`` within ``timeout`` seconds (None: wait for ever).

    ``pool``: the payload is read straight into a buffer from it, reused once every array of an
    earlier frame read into it is dropped (the arrays are views of the payload).

    :raises EOFError: the peer closed before a frame began.
    :raises TimeoutError: the frame did not arrive (whole) in time.
    :raises WireError: the frame breaks a rule; ``code`` says which (``version``,
        ``frame``, ``truncated``, ``header``, ``array``).
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    prefix = _recv_exact(sock, PREFIX_SIZE, deadline, started=False)
    magic, version, reserved, header_len, payload_len = _PREFIX.unpack(prefix.tobytes())
    if magic != MAGIC:
        raise WireError("frame", f"not an envfleet frame: it starts with {bytes(magic)!r}, expected {MAGIC!r}")
    if version != VERSION:
        raise WireError("version", f"the peer speaks wire version {version}; this end speaks version {VERSION} only", peer_version=version)
    if reserved != 0:
        raise WireError("frame", f"the reserved prefix field is {reserved}, expected 0")
    if header_len > limits.header:
        raise WireError("frame", f"header of {header_len} bytes, over the limit of {limits.header}")
    if payload_len > limits.payload:
        raise WireError("frame", f"payload of {payload_len} bytes, over the limit of {limits.payload}")
    header_raw = _recv_exact(sock, header_len, deadline, started=True)
    payload = _recv_exact(sock, payload_len, deadline, started=True, pool=pool) if payload_len else np.empty(0, np.uint8)
    return decode(header_raw.tobytes(), payload)


def decode(header_raw: bytes | bytearray, payload: Any) -> Frame:
    """A frame from its header bytes and payload; the arrays are views of ``payload``.

    The header is strict JSON: a key twice in one object, ``NaN`` or ``Infinity``, or nesting
    deeper than the parser's recursion limit is refused, not read one way here and another
    way by a proxy or a client in another language.

    :raises WireError: a header that is not a JSON object with a string ``type`` and a valid
        ``arrays`` list, or arrays whose sizes do not add up to the payload (not fatal: the
        frame was read whole, so the stream can go on).
    """
    try:
        header = json.loads(bytes(header_raw).decode("utf-8"), object_pairs_hook=_object, parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        raise WireError("header", f"the header is not UTF-8 JSON: {str(exc)[:200]}", fatal=False) from None
    except RecursionError:
        raise WireError("header", "the header's JSON is nested too deep", fatal=False) from None
    if not isinstance(header, dict):
        raise WireError("header", f"the header must be a JSON object, got {type(header).__name__}", fatal=False)
    kind = header.pop("type", None)
    if not isinstance(kind, str) or not kind:
        raise WireError("header", f"the header's 'type' must be a non-empty string, got {kind!r}", fatal=False)
    specs = header.pop("arrays", [])
    arrays = _arrays(specs, payload)
    return Frame(kind, header, arrays)


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        twice = next(key for key, _ in pairs if key in seen or seen.add(key))  # type: ignore[func-returns-value]
        raise ValueError(f"the key {twice[:64]!r} appears twice in one object")
    return obj


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _arrays(specs: Any, payload: Any) -> dict[str, np.ndarray]:
    if not isinstance(specs, list) or len(specs) > MAX_ARRAYS:
        raise WireError("array", f"'arrays' must be a list of at most {MAX_ARRAYS} [name, dtype, shape] entries", fatal=False)
    arrays: dict[str, np.ndarray] = {}
    offset = 0
    for spec in specs:
        if not (isinstance(spec, list) and len(spec) == 3 and isinstance(spec[0], str) and isinstance(spec[1], str)):
            raise WireError("array", f"an array entry must be [name, dtype, shape], got {str(spec)[:80]}", fatal=False)
        name, dtype_name, shape = spec
        dtype = DTYPES.get(dtype_name)
        if dtype is None:
            raise WireError("array", f"array {name[:64]!r}: dtype {dtype_name[:32]!r} is not one of {sorted(DTYPES)}", fatal=False)
        if (
            not isinstance(shape, list)
            or len(shape) > MAX_NDIM
            or not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 1 << 31 for d in shape)
        ):
            raise WireError(
                "array", f"array {name[:64]!r}: shape must be a list of at most {MAX_NDIM} sizes >= 0, got {str(shape)[:80]}", fatal=False
            )
        if name in arrays:
            raise WireError("array", f"array {name[:64]!r} appears twice", fatal=False)
        nbytes = math.prod(shape) * dtype.itemsize
        if offset + nbytes > len(payload):
            raise WireError("array", f"array {name[:64]!r} of {nbytes} bytes runs past the payload's {len(payload)} bytes", fatal=False)
        arrays[name] = payload[offset : offset + nbytes].view(dtype).reshape(shape)
        offset += nbytes
    if offset != len(payload):
        raise WireError("array", f"the arrays take {offset} bytes but the payload has {len(payload)}", fatal=False)
    return arrays


def error_frame(code: str, message: str, fatal: bool = False, **extra: Any) -> Frame:
    """An ``error`` message: its ``code``, a ``message`` for people, and whether the server closes after it."""
    return Frame("error", {"code": code, "message": message, "fatal": fatal, **extra})


def arrays_with_prefix(frame: Frame, prefix: str) -> dict[str, np.ndarray]:
    """The frame's arrays whose names start with ``prefix``, by the rest of their name."""
    return {name[len(prefix) :]: value for name, value in frame.arrays.items() if name.startswith(prefix)}


def prefixed(prefix: str, arrays: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """``arrays`` under names ``prefix + name`` (numeric arrays only; see :data:`DTYPES`)."""
    return {prefix + name: np.asarray(value) for name, value in arrays.items()}


def parse_address(address: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` for IPv6) as ``(host, port)``.

    :raises ConfigError: anything else.
    """
    host, sep, port = str(address).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"remote address {address!r}: expected host:port, e.g. 127.0.0.1:7000")
    return host.strip("[]"), int(port)
