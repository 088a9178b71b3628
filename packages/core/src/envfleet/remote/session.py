"""One client connection of ``envfleet serve``: authenticate, open one stage, answer its calls.

A connection is one session and holds at most one stage (mode, stage id, rank). It is
request-reply: the next request is read only once the last reply is written, so a client
that stops reading holds at most one reply in the server's memory, and a reply that cannot
be written within ``send_timeout_s`` ends the session. When a session ends, for whatever
reason, its stage's manager is closed and its shard processes and shared memory freed.
"""

from __future__ import annotations

import hmac
import logging
import socket
import ssl
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ClosedEnvironmentError, EnvFleetError, EnvFleetSimulatorError, InvalidInputError, LifecycleError, RestartLimitError
from ..options import Mode
from .wire import VERSION, Frame, FrameLimits, WireError, error_frame, prefixed, read_frame, write_frame

if TYPE_CHECKING:
    from .server import EnvServer

__all__ = ["Session"]

log = logging.getLogger("envfleet.remote.server")

_HELLO_LIMITS = FrameLimits(header=4096, payload=0)


class _Refused(Exception):
    """Ends a session after an error frame was sent."""


class Session:
    """Serves one connection until it closes, errs fatally, idles out or the server stops."""

    def __init__(self, server: EnvServer, sock: socket.socket, peer: str) -> None:
        self.server = server
        self.sock = sock
        self.peer = peer
        self.key: tuple[str, int, int] | None = None
        self.manager: Any = None
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
        manager, self.manager = self.manager, None
        if manager is not None:
            try:
                manager.close()
            finally:
                self.server.release(self.key, self)
                log.info("client %s: stage %s freed", self.peer, self.key)

    def _send(self, frame: Frame) -> None:
        self.sock.settimeout(self.server.options.send_timeout_s)
        write_frame(self.sock, frame)

    def _refuse(self, code: str, message: str, **extra: Any) -> None:
        try:
            self._send(error_frame(code, message, fatal=True, **extra))
        except OSError:
            pass
        raise _Refused

    def _handshake(self) -> None:
        options = self.server.options
        deadline = time.monotonic() + options.auth_timeout_s
        if isinstance(self.sock, ssl.SSLSocket):
            self.sock.settimeout(options.auth_timeout_s)
            try:
                self.sock.do_handshake()
            except (ssl.SSLError, OSError) as exc:
                log.warning("client %s: refused: TLS handshake failed (%s)", self.peer, exc)
                raise _Refused from None
        try:
            hello = read_frame(self.sock, _HELLO_LIMITS, max(deadline - time.monotonic(), 0.001))
        except WireError as exc:
            log.warning("client %s: refused before authentication: %s", self.peer, exc)
            self._refuse(exc.code if exc.code == "version" else "auth", f"refused before authentication: {exc}", server_version=VERSION)
        except (EOFError, TimeoutError, OSError) as exc:
            log.warning("client %s: refused: no hello within %.0f s (%s)", self.peer, options.auth_timeout_s, exc or type(exc).__name__)
            raise _Refused from None
        token = hello.get("token")
        if hello.type != "hello":
            log.warning("client %s: refused: first message %r, expected 'hello'", self.peer, hello.type[:32])
            self._refuse("auth", f"the first message must be 'hello' with the token, got {hello.type[:32]!r}")
        if options.token is not None and not (isinstance(token, str) and hmac.compare_digest(token.encode(), options.token)):
            log.warning("client %s: refused: %s token", self.peer, "missing" if token is None else "wrong")
            self._refuse("auth", "authentication failed: missing or wrong token")
        self._send(Frame("welcome", self.server.welcome()))

    def _limits(self) -> FrameLimits:
        """The largest request now: a little before a stage is open; then the stage's largest actions (or ids)."""
        payload = 64 * 1024
        if self.manager is not None:
            chunk = self.manager.num_action_chunks or 4096  # null: any chunk length per call
            payload += 4 * int(self.manager.num_envs) * int(chunk) * int(self.manager.action_dim) + 24 * int(self.manager.num_envs)
        return FrameLimits(header=64 * 1024, payload=min(payload, self.server.options.max_payload))

    def _serve(self) -> None:
        while not self.server.stopping:
            try:
                frame = read_frame(self.sock, self._limits(), self.server.options.idle_timeout_s)
            except WireError as exc:
                if exc.fatal:
                    self._refuse(exc.code, str(exc), server_version=VERSION)
                self._send(error_frame(exc.code, str(exc)))
                continue
            if frame.type == "bye":  # answered once the stage is free, so the client may open it again at once
                self.release()
                self._send(Frame("bye"))
                return
            handler = self._handlers.get(frame.type)
            if handler is None:
                self._send(
                    error_frame("type", f"unknown message type {frame.type[:32]!r}; expected one of {sorted([*self._handlers, 'bye'])}")
                )
                continue
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
        key = (mode, stage_id, rank)
        holder = self.server.hold(key, self)
        if holder is not None:
            return error_frame(
                "busy", f"stage {stage_id} ({mode}, rank {rank}) is held by client {holder.peer}; it is freed when that client leaves"
            )
        self.key = key
        try:
            self.manager = self.server.manager_factory(self.server.cfg, stage_id=stage_id, rank=rank, mode=mode)
        except BaseException:
            self.server.release(key, self)
            raise
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
        result = manager.chunk_step(actions)
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
        from ..fingerprint import protocol

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
