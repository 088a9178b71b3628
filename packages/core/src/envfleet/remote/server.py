"""``EnvServer``: the stages of one config behind a TCP (optionally TLS) socket.

Each accepted connection is a :class:`~envfleet.remote.session.Session` on a thread of its
own; who gets one is :mod:`envfleet.remote.admission`'s business. A stage (mode, stage id,
rank) is held by one session at a time, on a lease: a second client that asks for a held stage
gets a ``busy`` error while its holder's lease runs, and takes it over at once from a holder past
its lease, or from any holder not in a call when it asks to (``take``). The stage is freed (its
shard processes stopped, its shared memory unlinked) as soon as its session ends or misses its
lease. docs/remote.md describes the protocol; ``envfleet serve`` is the command that runs this.

>>> server = EnvServer(cfg, ServeOptions(port=0, token=b"s3cret"))   # doctest: +SKIP
>>> server.start(); print(server.address)                           # doctest: +SKIP
>>> server.stop()                                                   # doctest: +SKIP
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from omegaconf import DictConfig

from ..execution import describe
from ..shards.manager import ProcessEnvManager
from .admission import RateLimitedLog, StrangerBudget
from .session import Session
from .wire import SOCKET_BUFFER, VERSION, error_frame, write_frame

__all__ = ["EnvServer", "ServeOptions", "is_loopback"]

log = logging.getLogger("envfleet.remote.server")


@dataclass
class ServeOptions:
    """How a server listens and what it bounds."""

    host: str = "127.0.0.1"
    port: int = 0  # 0: any free port (the address says which)
    token: bytes | None = None  # None: no authentication (loopback only, with --insecure)
    ssl_context: ssl.SSLContext | None = None
    max_connections: int = 16  # open connections at once, authenticated or not; more are refused
    max_unauthenticated: int | None = None  # of them, not yet authenticated (below the total); None: half the total
    auth_timeout_s: float = 5.0  # a connection that has not authenticated by then is closed
    lease_s: float = 30.0  # a session that holds a stage and sends no request for this long loses the stage
    idle_timeout_s: float = 3600.0  # a session without a stage and with no request for this long is closed
    send_timeout_s: float = 60.0  # a reply the client does not take within this long ends its session
    max_payload: int = 256 * 1024 * 1024  # a cap on the largest request payload; the open stage's actions set the usual one
    max_ranks: int = 64  # ranks a client may name (each rank's stage is its own set of envs)

    @property
    def strangers(self) -> int:
        """The cap on unauthenticated connections: ``max_unauthenticated``, or half of ``max_connections``."""
        return self.max_connections // 2 if self.max_unauthenticated is None else self.max_unauthenticated


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (127.0.0.0/8, ::1, ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class EnvServer:
    """Serves the stages of ``cfg`` (from :func:`~envfleet.config.load_config`).

    :param cfg: the loaded config; each session builds its stage's manager from it.
    :param options: where to listen and the limits.
    :param manager_factory: ``(cfg, stage_id=, rank=, mode=) -> manager``;
        :class:`~envfleet.shards.manager.ProcessEnvManager` by default.
    """

    def __init__(self, cfg: DictConfig, options: ServeOptions, manager_factory: Callable[..., Any] | None = None) -> None:
        if manager_factory is None:
            manager_factory = ProcessEnvManager
        self.cfg = cfg
        self.options = options
        self.manager_factory = manager_factory
        self.stage_num = int(cfg.rollout.pipeline_stage_num)
        if options.lease_s <= 0:
            raise ValueError(f"the lease must be longer than 0 s, got {options.lease_s}")
        self.stopping = False
        #: Guards the held stages, the stranger budget and each session's lease fields.
        self.lock = threading.Lock()
        self.budget = StrangerBudget(options.max_connections, options.strangers)
        #: Warnings about connections that have not authenticated: drops, refusals (rate-limited).
        self.strangers_log = RateLimitedLog(log)
        self._held: dict[tuple[str, int, int], Session] = {}
        self._sessions: dict[Session, threading.Thread] = {}
        self._listener: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Bind and start accepting connections (in a background thread)."""
        family = socket.AF_INET6 if ":" in self.options.host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.options.host, self.options.port))
        listener.listen(64)
        self._listener = listener
        self._accept_thread = threading.Thread(target=self._accept_loop, name="envfleet-serve-accept", daemon=True)
        self._accept_thread.start()
        log.info(
            "serving %s on %s (wire version %d, tls %s, lease %g s, %d connections of which %d unauthenticated)",
            self.cfg.train.simulator_type, self.address, VERSION, self.tls, self.options.lease_s,
            self.options.max_connections, self.options.strangers,
        )  # fmt: skip

    @property
    def tls(self) -> bool:
        """Whether connections are TLS."""
        return self.options.ssl_context is not None

    @property
    def address(self) -> str:
        """``host:port`` the server listens on."""
        assert self._listener is not None, "start() first"
        host, port = self._listener.getsockname()[:2]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def stop(self, timeout: float = 30.0) -> None:
        """Stop accepting, end every session and free every stage. Safe to call twice."""
        self.stopping = True
        if self._listener is not None:
            try:  # shutdown wakes the thread blocked in accept(); close alone does not, on Linux
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._listener.close()
        with self.lock:
            sessions = dict(self._sessions)
        for session in sessions:
            session.wake(socket.SHUT_RDWR)
        for session, thread in sessions.items():
            if thread.ident is not None:  # started (the accept loop starts it just after listing it)
                thread.join(timeout)
            session.release()
        if self._accept_thread is not None:
            self._accept_thread.join(timeout)

    # ------------------------------------------------------------------ connections
    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self.stopping:
            try:
                sock, peer_addr = self._listener.accept()
            except OSError:
                return  # the listener was closed: stop() was called
            peer = f"{peer_addr[0]}:{peer_addr[1]}"
            self._tune(sock)
            if self.options.ssl_context is not None:
                try:
                    sock = self.options.ssl_context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
                except (ssl.SSLError, OSError) as exc:
                    self.strangers_log.warning("client %s: refused: TLS setup failed (%s)", peer, exc)
                    sock.close()
                    continue
            session = Session(self, sock, peer)
            with self.lock:
                admitted, victim, age = self.budget.arrive(session, time.monotonic())
                if admitted:
                    self._sessions[session] = threading.Thread(
                        target=self._run, args=(session,), name=f"envfleet-serve-{peer}", daemon=True
                    )
            if not admitted:
                self.strangers_log.warning(
                    "client %s: refused: all %d connections are authenticated sessions", peer, self.options.max_connections
                )
                self._turn_away(sock, f"the server has {self.options.max_connections} connections open; try again later")
                continue
            if victim is not None:
                self.strangers_log.warning(
                    "client %s: dropped before authentication after %.1f s: the unauthenticated connections (at most %d of %d) "
                    "were full when %s connected",
                    victim.peer, age, self.options.strangers, self.options.max_connections, peer,
                )  # fmt: skip
                victim.drop()
            self._sessions[session].start()

    def _run(self, session: Session) -> None:
        try:
            session.run()
        finally:
            with self.lock:
                self._sessions.pop(session, None)
                self.budget.leave(session)

    @staticmethod
    def _tune(sock: socket.socket) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # A step's reply (megabytes of images) goes into the kernel in one write, not in
        # autotuned slices; the kernel caps it at net.core.wmem_max, and it bounds what a
        # client that stops reading can hold.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER)
        # A peer that vanishes without closing (a host powered off) is noticed within about a minute.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for name, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3)):
            if hasattr(socket, name):
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)

    def _turn_away(self, sock: socket.socket, message: str) -> None:
        if self.options.ssl_context is None:  # over TLS the client could not read a plain frame
            try:
                sock.settimeout(1.0)
                write_frame(sock, error_frame("busy", message, fatal=True))
            except OSError:
                pass
        sock.close()

    # ------------------------------------------------------------------ stages
    def hold(self, key: tuple[str, int, int], session: Session, take: bool = False) -> tuple[Session | None, Session | None]:
        """Give ``key`` to ``session``: ``(holder, taken_from)``.

        ``holder``: another session that keeps the stage (``session`` does not get it), or None.
        ``taken_from``: the session the stage was taken from (past its lease, or any holder not in a
        call with ``take``), now marked taken by ``session``; its stage is for the caller to free.
        """
        with self.lock:
            holder = self._held.get(key)
            if holder is None or holder is session:
                self._held[key] = session
                return None, None
            lapsed = holder.lapsed(time.monotonic())
            if holder.busy or not (take or lapsed):
                return holder, None
            holder.taken_by = session.peer
            holder.taken_why = f"its lease of {self.options.lease_s:g} s ran out" if lapsed else "the new holder asked to take it"
            self._held[key] = session
            return None, holder

    def release(self, key: tuple[str, int, int] | None, session: Session) -> bool:
        """``session`` no longer holds ``key``; False when it did not (another session took it)."""
        with self.lock:
            if key is not None and self._held.get(key) is session:
                del self._held[key]
                return True
            return False

    def held(self) -> dict[tuple[str, int, int], str]:
        """The stages held now, each with its client's address (for tests and logs)."""
        with self.lock:
            return {key: session.peer for key, session in self._held.items()}

    def welcome(self) -> dict[str, Any]:
        """The fields of the ``welcome`` message."""
        try:
            envfleet_version = version("envfleet")
        except PackageNotFoundError:
            envfleet_version = "unknown"
        return {
            "wire_version": VERSION,
            "lease_s": float(self.options.lease_s),
            "envfleet_version": envfleet_version,
            "simulator_type": str(self.cfg.train.simulator_type),
            "stages": self.stage_num,
            "modes": [m for m in ("train", "val") if self.cfg.get(m) is not None],
        }

    @staticmethod
    def stage_facts(manager: Any) -> dict[str, Any]:
        """The fields of the ``opened`` message: the stage's sizes, observation spec and backend facts."""
        spec = manager.spec
        return {
            "num_envs": int(manager.num_envs),
            "action_dim": int(manager.action_dim),
            "num_action_chunks": manager.num_action_chunks,
            "obs_spec": {name: [list(s.shape), str(s.dtype)] for name, s in manager.obs_spec.items()},
            "supports_state": None,  # known once the shards run; see 'started'
            "step_timeout_s": float(manager.step_timeout_s),
            "reset_timeout_s": float(manager.reset_timeout_s),
            "start_timeout_s": float(manager.start_timeout_s),
            "execution": describe(manager.env_cfg),  # None: mode chunk, as it is
            "backend": {
                "name": str(spec.name),
                "package": None if spec.package is None else str(spec.package),
                "implements": sorted(str(k) for k in spec.implements),
                "action_dim": spec.action_dim,
                "result_packages": [str(p) for p in spec.result_packages],
                "renderer": spec.renderer,
                "description": str(getattr(spec, "description", "") or ""),
            },
        }
