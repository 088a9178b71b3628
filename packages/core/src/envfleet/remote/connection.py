"""The client's end of one ``envfleet serve`` session: dial (connect, TLS, hello, open) and ask (a request, its reply).

:class:`Connection` is what :class:`~envfleet.remote.client.RemoteEnvManager` talks through and
what its :class:`~envfleet.remote.lease.LeaseKeeper` pings through: one request and its reply at
a time, under a lock, so the keeper's ``ping`` goes between the caller's requests and the wire
stays request then reply. A server ``error`` comes back as the matching exception; a stage that
was taken or whose lease ran out (``taken``, ``lease``) is a :class:`RemoteStageLostError`, and
every later request gets it again: a connection never steps envs it no longer holds.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from typing import Any

from ..errors import EnvFleetError, EnvFleetSimulatorError, InvalidInputError, RestartLimitError, SimulatorStoppedError
from ..shards.recycling import RecyclingPool
from .wire import SOCKET_BUFFER, VERSION, Frame, FrameLimits, WireError, read_frame, write_frame

__all__ = ["Connection", "RemoteConnectionError", "RemoteRefusedError", "RemoteStageLostError"]


class RemoteConnectionError(EnvFleetError, ConnectionError):
    """The server could not be reached, stopped answering, or broke the protocol."""


class RemoteRefusedError(EnvFleetError, PermissionError):
    """The server refused: ``code`` is ``auth`` (token), ``version`` (wire version) or ``busy`` (stage held);
    ``taken`` or ``lease`` for a :class:`RemoteStageLostError`."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class RemoteStageLostError(RemoteRefusedError):
    """This client no longer holds its stage: ``code`` ``taken`` (``taken_by`` names the client that
    took it) or ``lease`` (the server heard nothing for its lease and freed it). Make a new manager."""

    def __init__(self, code: str, message: str, taken_by: str | None = None) -> None:
        super().__init__(code, message)
        self.taken_by = taken_by


_ERRORS: dict[str, type[Exception]] = {
    "input": InvalidInputError,
    "state": SimulatorStoppedError,
    "restart_limit": RestartLimitError,
    "simulator": EnvFleetSimulatorError,
}
_REPLY_LIMITS = FrameLimits(header=16 << 20, payload=1 << 34)


class Connection:
    """One session with the server at ``host:port``; :meth:`dial` (again, after a loss) makes it.

    :param address: ``host:port``, as given (for messages).
    :param token: the server's token, or None.
    :param ssl_context: TLS when set; ``server_hostname`` is checked against the certificate.
    """

    def __init__(
        self,
        address: str,
        host: str,
        port: int,
        token: str | None,
        ssl_context: ssl.SSLContext | None,
        server_hostname: str,
        connect_timeout_s: float,
    ) -> None:
        self.address, self.host, self.port = address, host, port
        self._token = token
        self._ssl = ssl_context
        self._server_hostname = server_hostname
        self.connect_timeout_s = connect_timeout_s
        self.sock: socket.socket | None = None
        #: The server's lease (from its welcome): a session with a stage must send a request within it.
        self.lease_s: float | None = None
        #: When the last reply was read (time.monotonic()); the keeper pings when this is old.
        self.last_io = time.monotonic()
        #: Set once the stage was taken or its lease ran out; raised again by every later request.
        self.lost: RemoteStageLostError | None = None
        self.lock = threading.Lock()  # one request and its reply at a time: the caller's or the keeper's
        self._pool = RecyclingPool()  # the replies' payloads, reused once their arrays are dropped

    def dial(self, open_fields: dict[str, Any], open_timeout_s: float) -> Frame:
        """Connect, authenticate and open the stage; the ``opened`` reply."""
        try:
            raw = socket.create_connection((self.host, self.port), timeout=self.connect_timeout_s)
        except OSError as exc:
            raise RemoteConnectionError(f"cannot connect to envfleet server {self.address}: {exc}") from None
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)  # a step's reply arrives without waiting for window updates
        sock: socket.socket = raw
        try:
            if self._ssl is not None:
                sock = self._ssl.wrap_socket(raw, server_hostname=self._server_hostname)
            self.sock = sock
            hello = Frame("hello", {"token": self._token, "client": "envfleet.remote", "wire_version": VERSION})
            welcome = self.ask(hello, "welcome", self.connect_timeout_s)
            self.lease_s = float(welcome.get("lease_s"))
            return self.ask(Frame("open", open_fields), "opened", open_timeout_s)
        except ssl.SSLError as exc:
            self.drop()
            raise RemoteConnectionError(f"TLS with envfleet server {self.address} failed: {exc}") from None
        except BaseException:
            self.drop()
            raise

    def drop(self) -> None:
        """Close the socket (the server ends the session and frees the stage)."""
        sock, self.sock = self.sock, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    def ask(self, frame: Frame, expect: str, timeout: float) -> Frame:
        """Send ``frame`` and read its reply, waiting for a request of the keeper's in flight."""
        with self.lock:
            return self.exchange(frame, expect, timeout)

    def exchange(self, frame: Frame, expect: str, timeout: float) -> Frame:
        """:meth:`ask` with :attr:`lock` already held; a server ``error`` is raised as the matching exception."""
        if self.lost is not None:
            raise RemoteStageLostError(self.lost.code, str(self.lost), self.lost.taken_by)
        if self.sock is None:
            raise RemoteConnectionError(f"not connected to envfleet server {self.address}")
        try:
            self.sock.settimeout(timeout)
            write_frame(self.sock, frame)
            reply = read_frame(self.sock, _REPLY_LIMITS, timeout, self._pool)
        except (OSError, EOFError) as exc:  # TimeoutError is an OSError
            self.drop()
            what = "did not answer in time" if isinstance(exc, TimeoutError) else f"connection lost ({exc or type(exc).__name__})"
            raise RemoteConnectionError(f"envfleet server {self.address}: {frame.type}: {what}") from None
        except WireError as exc:
            self.drop()
            if exc.code == "version":
                raise RemoteRefusedError(
                    "version", f"envfleet server {self.address} speaks wire version {exc.peer_version}, this client {VERSION}: {exc}"
                ) from None
            raise RemoteConnectionError(f"envfleet server {self.address} sent a bad frame: {exc}") from None
        self.last_io = time.monotonic()
        if reply.type == "error":
            code, message = str(reply.get("code")), str(reply.get("message"))
            if reply.get("fatal"):
                self.drop()
            if code in ("taken", "lease"):
                taken_by = reply.get("taken_by")
                self.lost = RemoteStageLostError(
                    code, f"envfleet server {self.address}: {message}", None if taken_by is None else str(taken_by)
                )
                raise self.lost
            if code in ("auth", "version", "busy"):
                raise RemoteRefusedError(code, f"envfleet server {self.address} refused: {message}")
            raise _ERRORS.get(code, EnvFleetError)(f"envfleet server {self.address}: {message}")
        if reply.type != expect:
            self.drop()
            raise RemoteConnectionError(f"envfleet server {self.address} answered {frame.type!r} with {reply.type!r}, expected {expect!r}")
        return reply
