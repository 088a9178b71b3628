"""The local lane: ``env_interact_step`` between a driver and an EnvWorker on the same node, without Ray's task path.

A step of a small batch is dominated by Ray's own round trip to an actor, which costs
several times the step itself (docs/benchmarks.md, "The Ray actor hop"). When a worker runs on the
driver's node, :class:`~envfleet_ray.runtime.group.EnvWorkerGroup` opens a lane to it: a
Unix socket per stage, served by a thread inside the actor that calls the worker's
own ``env_interact_step``. Ray still creates, places, watches and restarts the
actor; only the step's data takes the shorter road.

- The socket lives in the abstract namespace (no file to leave behind; it goes away
  with the process). A connection must come from the same user (``SO_PEERCRED``)
  and present the 32-byte token the worker handed out through Ray; the worker
  confirms with one byte, so that a refused lane fails at connection time and the
  group uses Ray's path instead.
- A message is a pickle (protocol 5) whose large buffers travel out of band: they
  are written with one ``sendmsg`` and read into fresh ``bytearray`` objects, so a
  received array is writable and was copied only by the kernel.
- Replies on one connection come back in the order of the requests; a stage's
  calls run one after another (the worker's stage lock), stages in parallel (one
  connection and one serving thread each).
- The lane closing in the middle of a call means the actor process is gone: the
  group then asks Ray why and handles it as any dead worker.
"""

from __future__ import annotations

import hmac
import logging
import math
import os
import pickle
import secrets
import select
import socket
import struct
import threading
from typing import Any

from envfleet.shards.messages import Outcome

__all__ = ["LaneServer", "LaneClient", "LaneClosed"]

log = logging.getLogger(__name__)

_HEAD = struct.Struct("!QI")  # pickle length, number of out-of-band buffers; then one !Q length per buffer
_TOKEN_BYTES = 32
_OOB_MIN = 1 << 16  # buffers smaller than this stay inside the pickle
_PEERCRED = struct.Struct("3i")  # pid, uid, gid
_ACK = b"\x01"
_HANDSHAKE_S = 30.0

#: The one worker method a lane serves.
LANE_METHOD = "env_interact_step"


class LaneClosed(ConnectionError):
    """The other end of a lane went away (for a worker: its process exited)."""


# ---------------------------------------------------------------------- framing
def _send(sock: socket.socket, obj: Any) -> None:
    buffers: list[pickle.PickleBuffer] = []

    def oob(buf: pickle.PickleBuffer) -> bool:
        # Returning True keeps a buffer in band: small ones cost less there.
        if buf.raw().nbytes < _OOB_MIN:
            return True
        buffers.append(buf)
        return False

    body = pickle.dumps(obj, protocol=5, buffer_callback=oob)
    raws = [b.raw() for b in buffers]
    head = _HEAD.pack(len(body), len(raws)) + struct.pack(f"!{len(raws)}Q", *(r.nbytes for r in raws))
    parts = [memoryview(head), memoryview(body), *raws]
    while parts:
        sent = sock.sendmsg(parts)
        while parts and sent >= parts[0].nbytes:
            sent -= parts[0].nbytes
            parts.pop(0)
        if sent:
            parts[0] = parts[0][sent:]


def _recv_exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise LaneClosed("the other end closed the lane")
        got += k
    return buf


def _recv(sock: socket.socket) -> Any:
    body_len, nbuf = _HEAD.unpack(_recv_exact(sock, _HEAD.size))
    sizes = struct.unpack(f"!{nbuf}Q", _recv_exact(sock, 8 * nbuf))
    body = _recv_exact(sock, body_len)
    buffers = [_recv_exact(sock, size) for size in sizes]
    return pickle.loads(body, buffers=buffers)


def _wait_readable(sock: socket.socket, timeout: float | None) -> bool:
    if timeout is None:
        return True
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(max(0, math.ceil(timeout * 1000))))


# ---------------------------------------------------------------------- worker side
class LaneServer:
    """Inside the worker: accepts lanes and serves each on its own thread."""

    def __init__(self, worker: Any) -> None:
        self._worker = worker
        self.token = secrets.token_bytes(_TOKEN_BYTES)
        self.address = "\0envfleet-lane-" + secrets.token_hex(12)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.address)
        self._listener.listen(16)
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, name="envfleet-lane-accept", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(conn,), name="envfleet-lane", daemon=True).start()

    def _admit(self, conn: socket.socket) -> bool:
        _, uid, _ = _PEERCRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
        if uid != os.getuid():
            log.warning("lane: refused a connection from uid %d", uid)
            return False
        conn.settimeout(10.0)
        try:
            token = bytes(_recv_exact(conn, _TOKEN_BYTES))
        except (OSError, LaneClosed):
            return False
        conn.settimeout(None)
        if not hmac.compare_digest(token, self.token):
            log.warning("lane: refused a connection with a wrong token")
            return False
        conn.sendall(_ACK)
        return True

    def _serve(self, conn: socket.socket) -> None:
        with self._lock:
            if self._closed:
                conn.close()
                return
            self._conns.add(conn)
        try:
            if not self._admit(conn):
                return
            while True:
                try:
                    method, arg = _recv(conn)
                except (OSError, LaneClosed, EOFError):
                    return
                # A reply is (Outcome value, the return value or the exception), as a shard's is.
                reply: tuple[str, Any]
                try:
                    if method != LANE_METHOD:
                        raise ValueError(f"the lane does not serve {method!r}: it serves {LANE_METHOD} only")
                    reply = (Outcome.OK.value, self._worker.env_interact_step(arg))
                except Exception as exc:
                    reply = (Outcome.ERR.value, exc)
                try:
                    _send(conn, reply)
                except (OSError, LaneClosed):
                    return
                except Exception as exc:  # an exception or result that does not pickle
                    failure = RuntimeError(f"the worker could not send its reply to {method}: {type(exc).__name__}: {exc}")
                    _send(conn, (Outcome.ERR.value, failure))
        finally:
            with self._lock:
                self._conns.discard(conn)
            conn.close()

    def close(self) -> None:
        """Stop accepting and end every lane (their clients see :class:`LaneClosed`). Safe to call twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            conns = list(self._conns)
        self._listener.close()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


# ---------------------------------------------------------------------- driver side
class _Connection:
    def __init__(self, address: str, token: bytes) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(address)
        # The worker answers the token with one byte once it has admitted the connection, so
        # that a refusal (another user, a wrong token) shows here, as an OSError, and the group
        # falls back to Ray's path instead of taking the closed lane for a dead worker.
        self.sock.settimeout(_HANDSHAKE_S)
        try:
            self.sock.sendall(token)
            if self.sock.recv(1) != _ACK:
                raise ConnectionRefusedError("the worker refused the lane")
        except BaseException:
            self.sock.close()
            raise
        self.sock.settimeout(None)
        self.send_lock = threading.Lock()  # guards sent and the socket's write side
        self.lock = threading.Lock()  # guards received, stash and the socket's read side
        self.sent = 0  # requests sent
        self.received = 0  # replies read
        self.stash: dict[int, tuple[str, Any]] = {}
        self.abandoned: set[int] = set()  # calls dropped unread: their replies are discarded
        self.broken: LaneClosed | None = None


class LaneCall:
    """One pending call on a lane; :meth:`result` waits for it."""

    def __init__(self, conn: _Connection, seq: int) -> None:
        self._conn = conn
        self._seq = seq
        self._taken = False

    def __del__(self) -> None:
        # A call dropped without reading its reply (e.g. another worker's error ended the
        # group's get()): its reply must not stay in the stash. No lock here (this may run
        # inside result() of the same thread); the reader re-checks after storing.
        if not self._taken:
            self._conn.abandoned.add(self._seq)
            self._conn.stash.pop(self._seq, None)

    def ready(self) -> bool:
        """Whether :meth:`result` would return (or raise) without waiting."""
        conn = self._conn
        with conn.lock:
            if self._seq in conn.stash or conn.broken is not None:
                return True
            return self._seq == conn.received and _wait_readable(conn.sock, 0.0)

    def result(self, timeout: float | None = None) -> Any:
        """The worker's return value; its exception is raised as is.

        Raises :class:`LaneClosed` when the worker's process went away and
        :class:`TimeoutError` when nothing came within ``timeout`` seconds.
        """
        conn = self._conn
        with conn.lock:
            while self._seq not in conn.stash:
                if conn.broken is not None:
                    raise conn.broken
                if not _wait_readable(conn.sock, timeout):
                    raise TimeoutError(f"the worker did not answer within {timeout:g} s")
                try:
                    reply = _recv(conn.sock)
                except (OSError, LaneClosed, EOFError) as exc:
                    conn.broken = exc if isinstance(exc, LaneClosed) else LaneClosed(f"the lane broke: {exc}")
                    raise conn.broken from None
                seq = conn.received
                conn.received += 1
                conn.stash[seq] = reply
                if seq in conn.abandoned:
                    conn.abandoned.discard(seq)
                    conn.stash.pop(seq, None)
            status, value = conn.stash.pop(self._seq)
            self._taken = True
        if status == Outcome.ERR.value:
            raise value
        return value


class LaneClient:
    """The driver's end of the lanes to one worker: one connection per stage, opened on first use."""

    def __init__(self, address: str, token: bytes) -> None:
        self._address = address
        self._token = token
        self._conns: dict[Any, _Connection] = {}
        self._lock = threading.Lock()

    def connect(self, key: Any) -> _Connection:
        """The connection for ``key``, opened now if needed (``OSError`` when the worker cannot be reached)."""
        with self._lock:
            conn = self._conns.get(key)
            if conn is None or conn.broken is not None:
                conn = self._conns[key] = _Connection(self._address, self._token)
            return conn

    def call(self, key: Any, method: str, arg: Any) -> LaneCall:
        """Send ``method(arg)`` on the connection for ``key`` (a stage); returns at once."""
        try:
            conn = self.connect(key)
        except OSError as exc:
            raise LaneClosed(f"cannot connect to the worker: {exc}") from None
        with conn.send_lock:
            if conn.broken is not None:
                raise conn.broken
            try:
                _send(conn.sock, (method, arg))
            except OSError as exc:
                conn.broken = LaneClosed(f"the lane broke: {exc}")
                raise conn.broken from None
            seq = conn.sent
            conn.sent += 1
        return LaneCall(conn, seq)

    def close(self) -> None:
        """Close every connection. Safe to call twice."""
        with self._lock:
            conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            conn.broken = conn.broken or LaneClosed("the lane was closed")
            conn.sock.close()
