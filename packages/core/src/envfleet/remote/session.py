"""One client connection of ``envfleet serve``: authenticate, open one stage, answer its calls, keep its lease.

One job: the server's side of one connection, from its token to its last reply.

A connection is one session and holds at most one stage (mode, stage id, rank). It is
request-reply: the next request is read only once the last reply is written, so a client
that stops reading holds at most one reply in the server's memory, and a reply that cannot
be written within ``send_timeout_s`` ends the session. A session that holds a stage holds it on
a lease: when no request arrives for ``lease_s`` after its last reply (an idle client sends
``ping``), the stage is freed and the client told why (``lease``); another client may take it
from a session past its lease, or from any session not in a call when it asks to (``take``),
and the old holder's next request is answered with ``taken``, naming the new holder. When a
session ends, for whatever reason, its stage's manager is closed and its shard processes and
shared memory freed.
"""

from __future__ import annotations

import hmac
import logging
import socket
import ssl
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ClosedEnvironmentError, EnvFleetError, EnvFleetSimulatorError, InvalidInputError, LifecycleError, RestartLimitError
from ..fingerprint import protocol
from ..options import Mode
from .wire import VERSION, Frame, FrameLimits, WireError, error_frame, prefixed, read_frame, write_frame

# Annotation only: a Session is one connection of the EnvServer that makes it and holds the stages;
# one server's two sides (its listener and registry of stages, and one client's conversation).
if TYPE_CHECKING:
    from .server import EnvServer

__all__ = ["Session"]

log = logging.getLogger("envfleet.remote.server")

_HELLO_LIMITS = FrameLimits(header=4096, payload=0)
_FREE_WAIT_S = 120.0  # how long a taker waits for the stage's old manager, closed by another thread


class _Refused(Exception):
    """Ends a session after an error frame was sent."""


class Session:
    """Serves one connection until it closes, errs fatally, idles out, loses its stage or the server stops."""

    def __init__(self, server: EnvServer, sock: socket.socket, peer: str) -> None:
        self.server = server
        self.sock = sock
        self.peer = peer
        self.key: tuple[str, int, int] | None = None
        self.manager: Any = None
        # The lease, under server.lock: in a call (from a request read to its reply written), when
        # the last reply was written, and who took the stage, and why.
        self.busy = False
        self.idle_since = time.monotonic()
        self.taken_by: str | None = None
        self.taken_why = ""
        self.dropped = False  # dropped before authentication, to make room (admission.StrangerBudget)
        self._freed = threading.Event()  # the manager is closed (or there is none)
        self._freed.set()
        self._restarts_sent = 0
        self._handlers = {
            "open": self._open,
            "start": self._start,
            "stop": self._stop,
            "state_ids": self._state_ids,
            "reset": self._reset,
            "reset_some": self._reset_some,
            "step": self._step,
            "renderer_info": self._renderer_info,
            "protocol": self._protocol,
            "flush_video": self._flush_video,
            "ping": lambda frame: Frame("pong"),
        }

    # ------------------------------------------------------------------ life
    def run(self) -> None:
        """Serve the connection; always frees what it held."""
        try:
            self._handshake()
            self._serve()
        except _Refused:
            pass
        except (OSError, EOFError, TimeoutError) as exc:
            log.info("client %s: connection ended (%s)", self.peer, exc or type(exc).__name__)
        except Exception:  # a bug must not take the server down; the session ends and frees its stage
            log.exception("client %s: internal error; the session is closed", self.peer)
        finally:
            self.release()
            try:
                self.sock.close()
            except OSError:
                pass

    def release(self) -> None:
        """Close the held stage's manager (its processes and shared memory) and let another client open it."""
        if self.free_stage():
            log.info("client %s: stage %s freed", self.peer, self.key)
        self.server.release(self.key, self)

    def free_stage(self) -> bool:
        """Close this session's manager, once, whichever thread asks first; the others wait for it.

        True for the caller that closed it.
        """
        with self.server.lock:
            manager, self.manager = self.manager, None
        if manager is None:
            self._freed.wait(_FREE_WAIT_S)
            return False
        try:
            manager.close()
        finally:
            self._freed.set()
        return True

    def wake(self, how: int = socket.SHUT_RD) -> None:
        """End this session's wait for a request (``SHUT_RD``: it may still write its last word)."""
        try:  # the plain socket's shutdown: SSLSocket's drops its TLS state, which the last word needs
            socket.socket.shutdown(self.sock, how)
        except OSError:
            pass

    def drop(self) -> None:
        """Close a connection that has not authenticated, to make room for a newer one."""
        self.dropped = True
        self.wake(socket.SHUT_RDWR)

    def lapsed(self, now: float) -> bool:
        """Whether this session holds a stage and has missed its lease (call under ``server.lock``)."""
        return self.key is not None and not self.busy and now - self.idle_since > self.server.options.lease_s

    def _send(self, frame: Frame, version: int = VERSION) -> None:
        self.sock.settimeout(self.server.options.send_timeout_s)
        write_frame(self.sock, frame, version)

    def _refuse(self, code: str, message: str, version: int = VERSION, **extra: Any) -> None:
        try:
            self._send(error_frame(code, message, fatal=True, **extra), version)
        except OSError:
            pass
        raise _Refused

    def _handshake(self) -> None:
        options = self.server.options

        def warn(message: str, *args: Any) -> None:
            if not self.dropped:  # a dropped connection was logged once, by the accept loop
                self.server.strangers_log.warning(message, *args)

        deadline = time.monotonic() + options.auth_timeout_s
        if isinstance(self.sock, ssl.SSLSocket):
            self.sock.settimeout(options.auth_timeout_s)
            try:
                self.sock.do_handshake()
            except (ssl.SSLError, OSError) as exc:
                warn("client %s: refused: TLS handshake failed (%s)", self.peer, exc)
                raise _Refused from None
        try:
            hello = read_frame(self.sock, _HELLO_LIMITS, max(deadline - time.monotonic(), 0.001))
        except WireError as exc:
            warn("client %s: refused before authentication: %s", self.peer, exc)
            # A peer of an older or newer wire gets the refusal in its own framing, so that it can read it.
            peer_version = exc.peer_version if exc.peer_version is not None and 0 < exc.peer_version < VERSION else VERSION
            code = exc.code if exc.code == "version" else "auth"
            self._refuse(code, f"refused before authentication: {exc}", peer_version, server_version=VERSION)
        except (EOFError, TimeoutError, OSError) as exc:
            warn("client %s: refused: no hello within %g s (%s)", self.peer, options.auth_timeout_s, exc or type(exc).__name__)
            raise _Refused from None
        token = hello.get("token")
        if hello.type != "hello":
            warn("client %s: refused: first message %r, expected 'hello'", self.peer, hello.type[:32])
            self._refuse("auth", f"the first message must be 'hello' with the token, got {hello.type[:32]!r}")
        if options.token is not None and not (
            isinstance(token, str) and hmac.compare_digest(token.encode(errors="surrogatepass"), options.token)
        ):
            warn("client %s: refused: %s token", self.peer, "missing" if token is None else "wrong")
            self._refuse("auth", "authentication failed: missing or wrong token")
        with self.server.lock:
            admitted = self.server.budget.authenticated(self)
        if not admitted:  # dropped between its hello and now
            raise _Refused
        self._send(Frame("welcome", self.server.welcome()))
        self.idle_since = time.monotonic()

    def _limits(self) -> FrameLimits:
        """The largest request now: a little before a stage is open; then the stage's largest actions (or ids)."""
        payload = 64 * 1024
        if self.manager is not None:
            chunk = self.manager.num_action_chunks or 4096  # null: any chunk length per call
            payload += 4 * int(self.manager.num_envs) * int(chunk) * int(self.manager.action_dim) + 24 * int(self.manager.num_envs)
        return FrameLimits(header=64 * 1024, payload=min(payload, self.server.options.max_payload))

    def _serve(self) -> None:
        options = self.server.options
        while not self.server.stopping:
            holding = self.key is not None  # a session with a stage waits its lease; without one, the idle timeout
            try:
                frame = read_frame(
                    self.sock, self._limits(), min(options.lease_s, options.idle_timeout_s) if holding else options.idle_timeout_s
                )
            except TimeoutError:
                if holding:
                    self._lapse()
                raise
            except WireError as exc:
                if self.taken_by is not None:
                    self._lost()
                if exc.fatal:
                    self._refuse(exc.code, str(exc), server_version=VERSION)
                self._send(error_frame(exc.code, str(exc)))
                continue
            except (EOFError, OSError):
                if self.taken_by is not None:  # woken by the session that took the stage
                    self._lost()
                raise
            if not self._begin():
                self._lost()
            try:
                if self._answer(frame):
                    return
            finally:
                self._end()

    def _answer(self, frame: Frame) -> bool:
        """Answer one request; True after ``bye``."""
        if frame.type == "bye":  # answered once the stage is free, so the client may open it again at once
            self.release()
            self._send(Frame("bye"))
            return True
        handler = self._handlers.get(frame.type)
        if handler is None:
            self._send(error_frame("type", f"unknown message type {frame.type[:32]!r}; expected one of {sorted([*self._handlers, 'bye'])}"))
            return False
        try:
            reply = handler(frame)
        except InvalidInputError as exc:
            reply = error_frame("input", str(exc))
        except RestartLimitError as exc:
            reply = error_frame("restart_limit", str(exc))
        except EnvFleetSimulatorError as exc:
            reply = error_frame("simulator", str(exc))
        except (LifecycleError, ClosedEnvironmentError) as exc:
            reply = error_frame("state", str(exc))
        except EnvFleetError as exc:
            reply = error_frame("error", f"{type(exc).__name__}: {exc}")
        self._send(reply)
        return False

    # ------------------------------------------------------------------ the lease
    def _begin(self) -> bool:
        """A request arrived: in a call from now on; False when the stage was taken meanwhile."""
        with self.server.lock:
            if self.taken_by is not None:
                return False
            self.busy = True
            return True

    def _end(self) -> None:
        with self.server.lock:
            self.busy = False
            self.idle_since = time.monotonic()

    def _stage_name(self) -> str:
        mode, stage_id, rank = self.key or ("-", -1, -1)
        return f"stage {stage_id} ({mode}, rank {rank})"

    def _lapse(self) -> None:
        """No request within the lease: free the stage and say why (the client reads it with its next request)."""
        idle, lease = time.monotonic() - self.idle_since, self.server.options.lease_s
        log.warning("client %s: %s freed: no request for %.1f s, over its lease of %g s", self.peer, self._stage_name(), idle, lease)
        self.free_stage()  # still held while it closes: a client that takes it meanwhile waits for the close
        if not self.server.release(self.key, self):
            self._lost()
        self._refuse(
            "lease",
            f"{self._stage_name()} was freed: the server heard nothing from this client for {idle:.1f} s, over its lease of "
            f"{lease:g} s (envfleet serve --lease-s); this connection holds no stage now",
        )

    def _lost(self) -> None:
        """The stage was taken: see it freed and answer with ``taken``, naming the new holder."""
        self.free_stage()
        log.info("client %s: told that %s was taken by client %s", self.peer, self._stage_name(), self.taken_by)
        self._refuse(
            "taken",
            f"{self._stage_name()} was taken by client {self.taken_by} ({self.taken_why}); this connection holds no stage now",
            taken_by=self.taken_by,
        )

    # ------------------------------------------------------------------ handlers
    def _need(self) -> Any:
        if self.manager is None:
            raise LifecycleError("no stage is open on this connection: send 'open' first")
        return self.manager

    def _open(self, frame: Frame) -> Frame:
        if self.manager is not None:
            raise LifecycleError(f"this connection already holds stage {self.key}; one stage per connection")
        mode, stage_id, rank = frame.get("mode", "train"), frame.get("stage_id", 0), frame.get("rank", 0)
        try:
            mode = str(Mode.check(mode))
        except (ValueError, TypeError):
            raise InvalidInputError(f"open: mode must be 'train' or 'val', got {str(mode)[:32]!r}") from None
        stages = self.server.stage_num
        if isinstance(stage_id, bool) or not isinstance(stage_id, int) or not 0 <= stage_id < stages:
            raise InvalidInputError(f"open: stage_id must be an int in [0, {stages}), got {str(stage_id)[:32]}")
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < self.server.options.max_ranks:
            raise InvalidInputError(f"open: rank must be an int in [0, {self.server.options.max_ranks}), got {str(rank)[:32]}")
        if self.server.cfg.get(mode) is None:
            raise InvalidInputError(f"open: the server's config has no {mode!r} section")
        take = frame.get("take", False)
        if not isinstance(take, bool):
            raise InvalidInputError(f"open: take must be true or false, got {str(take)[:32]}")
        key = (mode, stage_id, rank)
        holder, taken = self.server.hold(key, self, take)
        if holder is not None:
            lease = self.server.options.lease_s
            state = "in a call now" if holder.busy else f"its last request ended {time.monotonic() - holder.idle_since:.1f} s ago"
            return error_frame(
                "busy",
                f"stage {stage_id} ({mode}, rank {rank}) is held by client {holder.peer} ({state}); it is freed when that client "
                f"leaves or sends nothing for {lease:g} s (its lease); a client that knows the holder is dead may open it with "
                "take=true" + (", once its call ends" if holder.busy else ""),
                holder=holder.peer,
            )
        if taken is not None:
            log.warning("client %s: took stage %s from client %s (%s)", self.peer, key, taken.peer, taken.taken_why)
            taken.wake()
            taken.free_stage()
        self.key = key
        try:
            manager = self.server.manager_factory(self.server.cfg, stage_id=stage_id, rank=rank, mode=mode)
        except BaseException:
            self.key = None
            self.server.release(key, self)
            raise
        with self.server.lock:
            self._freed.clear()
            self.manager = manager
        log.info("client %s: opened stage %s", self.peer, key)
        return Frame("opened", self.server.stage_facts(self.manager))

    def _start(self, frame: Frame) -> Frame:
        manager = self._need()
        manager.start_simulator()
        return Frame("started", {"supports_state": bool(manager.supports_state)})

    def _stop(self, frame: Frame) -> Frame:
        self._need().stop_simulator()
        return Frame("stopped")

    def _state_ids(self, frame: Frame) -> Frame:
        manager = self._need()
        return Frame("state_ids", arrays={"state_ids": manager.get_all_state_ids(), "task_ids": manager.get_state_task_ids()})

    def _ids(self, frame: Frame, name: str, required: bool = True) -> np.ndarray | None:
        value = frame.arrays.get(name)
        if value is None:
            if required:
                raise InvalidInputError(f"{frame.type}: array {name!r} (int64 [n]) is missing")
            return None
        if value.dtype != np.int64 or value.ndim != 1:
            raise InvalidInputError(f"{frame.type}: {name} must be int64 [n], got {value.dtype} {list(value.shape)}")
        return value

    def _reset(self, frame: Frame) -> Frame:
        manager = self._need()
        result = manager.reset_envs_to_state_ids(self._ids(frame, "state_ids"), self._ids(frame, "task_ids", required=False))
        return self._result(manager, result, None)

    def _reset_some(self, frame: Frame) -> Frame:
        manager = self._need()
        env_ids, state_ids = self._ids(frame, "env_ids"), self._ids(frame, "state_ids")
        result = manager.reset_some_envs(env_ids, state_ids, self._ids(frame, "task_ids", required=False))
        return self._result(manager, result, None)

    def _step(self, frame: Frame) -> Frame:
        manager = self._need()
        actions = frame.arrays.get("actions")
        if actions is None:
            raise InvalidInputError("step: array 'actions' (float32 [num_envs, chunk, action_dim]) is missing")
        if actions.dtype != np.float32:
            raise InvalidInputError(f"step: actions must be float32, got {actions.dtype}")
        delays = frame.arrays.get("delays")
        if delays is not None and (delays.dtype != np.int64 or delays.ndim != 1):
            raise InvalidInputError(f"step: delays must be int64 [num_envs], got {delays.dtype} {list(delays.shape)}")
        result = manager.chunk_step(actions, delays)
        flags = {"rewards": result.rewards, "terminations": result.terminations, "truncations": result.truncations}
        return self._result(manager, result, flags)

    def _result(self, manager: Any, result: Any, flags: dict[str, np.ndarray] | None) -> Frame:
        arrays = prefixed("obs.", result.obs)
        objects: dict[str, Any] = {}
        for name, value in result.infos.items():
            arr = np.asarray(value)
            if arr.dtype.kind in "biuf":
                arrays["info." + name] = arr
            else:
                objects[name] = [str(v) for v in arr.reshape(-1).tolist()]
        if flags is not None:
            arrays.update(prefixed("flag.", flags))
        stats = manager.stats
        new = [entry for entry in stats.restart_log if entry.get("n", 0) > self._restarts_sent]
        self._restarts_sent = stats.restarts
        fields = {
            "task_descriptions": [str(d) for d in result.task_descriptions],
            "object_infos": objects,
            "stats": {"sim_s": stats.sim_s, "wall_s": stats.wall_s, "restarts": stats.restarts},
            "restart_log": [
                {str(k): (v if isinstance(v, (int, float, str, bool)) or v is None else str(v)) for k, v in e.items()} for e in new
            ],
        }
        return Frame("result", fields, arrays)

    def _renderer_info(self, frame: Frame) -> Frame:
        return Frame("renderer", {"info": self._need().renderer_info()})

    def _protocol(self, frame: Frame) -> Frame:
        manager = self._need()
        try:
            renderer = manager.renderer_info()
        except Exception as exc:  # a renderer we cannot describe is part of the record too
            renderer = {"error": f"{type(exc).__name__}: {exc}"}
        return Frame("protocol", {"protocol": protocol(manager.env_cfg, manager.spec, renderer)})

    def _flush_video(self, frame: Frame) -> Frame:
        subdir = frame.get("subdir")
        if not isinstance(subdir, str) or not subdir or "/" in subdir or "\\" in subdir or subdir.startswith("."):
            raise InvalidInputError(f"flush_video: subdir must be a plain folder name, got {str(subdir)[:64]!r}")
        manager = self._need()
        paths = manager.flush_video(subdir)
        manager.wait_video()
        return Frame("videos", {"paths": [str(p) for p in paths]})
