"""The shard process: builds one ``Env`` and serves the manager's commands.

Started by :class:`~envfleet.shards.manager.ProcessEnvManager` as a fresh interpreter
(``python -m envfleet.shards.server FD PARENT_PID``), so the simulator and its renderer
are created here and nothing is inherited from the parent but a socket. Commands
arrive over that socket; observations are written into the parent's shared
memory; only small arrays travel back over the socket, as one byte string
(:mod:`envfleet.shards.wire`).

The process exits when the parent goes away: a thread watches the parent pid and
the socket reports EOF.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from typing import Any

import numpy as np

from ..execution import is_wall_clock
from .messages import (
    ARGUMENTS,
    Command,
    ErrorKind,
    FlushVideoRequest,
    InitRequest,
    LoadStateRequest,
    RemoteError,
    ResetRequest,
    ResetSomeRequest,
    StepRequest,
    err_message,
    ok_message,
)
from .wire import ArrayPacker, Channel

# Imports inside functions: the thread that watches the parent starts before anything is imported that can
# take long (the env's build needs come with the init request), so a shard whose parent dies meanwhile still
# exits.

__all__ = ["ObsWriter", "ShardServer", "main"]


def _watch_parent(parent_pid: int) -> None:
    while True:
        if os.getppid() != parent_pid:
            os._exit(3)
        time.sleep(0.2)


_F32 = np.dtype(np.float32)
_BOOL = np.dtype(bool)


def _as(value: Any, dtype: np.dtype[Any]) -> np.ndarray:
    if type(value) is np.ndarray and value.dtype is dtype:
        return value
    return np.asarray(value, dtype=dtype)


def _batch_scheduling() -> None:
    # A simulator is a CPU-bound batch job: under SCHED_BATCH the kernel does not let a
    # shard that the manager just woke preempt the manager, which goes on sending to the
    # other shards. Throughput is unchanged; docs/benchmarks.md has the figures.
    # ENVFLEET_SCHED_BATCH=0 turns it off.
    if os.environ.get("ENVFLEET_SCHED_BATCH", "1") != "0" and hasattr(os, "SCHED_BATCH"):
        try:
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        except OSError:
            pass


def _check_own_spec(env: Any, buffers: dict[str, np.ndarray]) -> None:
    """An env's own observation_spec(), where it has one, must be the one its backend registered."""
    try:
        own = env.observation_spec()
    except NotImplementedError:
        return
    said = {str(k): (tuple(int(x) for x in v.shape), np.dtype(v.dtype).name) for k, v in own.items()}
    promised = {k: (tuple(a.shape[1:]), a.dtype.name) for k, a in buffers.items()}
    if said != promised:
        raise RuntimeError(
            f"the env's observation_spec() says {said}, but its backend registered {promised} "
            "(BackendSpec.observation_spec, from which envfleet allocates shared memory): make the two agree"
        )


class ObsWriter:
    """Copies an env's observations into the shard's shared memory, checking them against the spec."""

    def __init__(self, buffers: dict[str, np.ndarray], views: dict[str, memoryview]) -> None:
        self.buffers = buffers
        self.views = views  # the same memory as bytes (see envfleet.shards.shm): a copy is a memcpy

    def write(self, obs: dict[str, np.ndarray]) -> None:
        """Copy ``obs`` into shared memory (an array that is already there is left as it is).

        :raises RuntimeError: the keys, shapes or dtypes are not the spec's.
        """
        buffers = self.buffers
        if len(obs) != len(buffers) or not all(key in obs for key in buffers):
            raise RuntimeError(
                f"the env returned observations {sorted(obs)}, but its backend's observation_spec promised {sorted(buffers)}"
            )
        for key, dest in buffers.items():
            src = obs[key]
            if src is dest:
                continue  # the env drew straight into shared memory
            if src.shape != dest.shape or (src.dtype is not dest.dtype and src.dtype != dest.dtype):
                raise RuntimeError(
                    f"observation {key!r}: the env returned {src.dtype}{list(src.shape)}, "
                    f"the observation_spec promised {dest.dtype}{list(dest.shape)}"
                )
            try:
                self.views[key][:] = src.data.cast("B")
            except TypeError:  # not C-contiguous
                dest[...] = src


class ShardServer:
    """One shard's env and the commands it serves: over a socket in a shard process (:meth:`serve`),
    or called directly in the caller's process (:mod:`envfleet.shards.local`, ``conn`` None)."""

    def __init__(self, conn: Channel | None) -> None:
        self.conn = conn
        self.env: Any = None
        self.mapping: Any = None
        self.writer: ObsWriter | None = None
        self.packer = ArrayPacker()
        self.sent_descriptions: list[str] | None = None
        self.cfg: Any = None
        self.wall: Any = None  # clock wall: the shard's control loop (envfleet.shards.realtime), made at the first exchange
        # The commands a manager may send: nothing else of this object can be called from outside.
        # Keyed by the plain string that travels (an Enum member hashes by its name, not its value),
        # each with the named tuple its plain-tuple argument is rebuilt as.
        table: dict[Command, Any] = {
            Command.INIT: self.init,
            Command.RESET: self.reset,
            Command.RESET_SOME: self.reset_some,
            Command.STEP: self.step,
            Command.EXCHANGE: self.exchange,
            Command.GET_STATE: self.get_state,
            Command.LOAD_STATE: self.load_state,
            Command.FLUSH_VIDEO: self.flush_video,
            Command.RENDERER_INFO: self.renderer_info,
            Command.CLOSE: self.close,
        }
        self.commands: dict[str, tuple[Any, Any]] = {command.value: (handler, ARGUMENTS[command]) for command, handler in table.items()}

    def _reply(self, descriptions: Any, infos: dict[str, Any], flags: tuple[np.ndarray, ...] = ()) -> tuple[Any, ...]:
        # (fields or None, array bytes, others, descriptions or None): see envfleet.shards.wire.
        # The layout and the descriptions travel only when they change.
        descriptions = list(descriptions)
        if descriptions == self.sent_descriptions:
            descriptions_out = None
        else:
            descriptions_out = self.sent_descriptions = descriptions
        fields, raw, others = self.packer.pack(self.env.num_envs, infos, flags)
        return fields, raw, others, descriptions_out

    def init(self, msg: InitRequest) -> dict[str, Any]:
        """Build the env (the backend's factory) over the shared memory of ``msg``; its state ids."""
        from omegaconf import OmegaConf

        from ..env import EnvContext
        from ..plugins.spec import import_factory
        from .shm import ShmLayout, attach

        layout = ShmLayout.from_wire(msg.layout)
        self.mapping = attach(msg.shm_name, layout)
        factory = import_factory(msg.factory)
        cfg = OmegaConf.create(msg.cfg)
        OmegaConf.set_readonly(cfg, True)  # the parent's validated section, re-wrapped: a value, not for edits
        self.cfg = cfg
        ctx = EnvContext(**msg.ctx)
        if self.conn is not None:  # the shard's log; in the caller's process, its stderr is the caller's
            sys.stderr.write(
                f"envfleet shard: pid {os.getpid()} building {cfg.simulator_type!r} for rank {ctx.rank} stage {ctx.stage_id} "
                f"shard {ctx.shard_id} ({ctx.num_envs} envs from env {ctx.env_offset})\n"
            )
            sys.stderr.flush()
        self.env = factory(cfg, ctx)
        if getattr(self.env, "num_envs", None) != ctx.num_envs:
            raise RuntimeError(f"the backend built {getattr(self.env, 'num_envs', None)} envs, {ctx.num_envs} were asked for")
        _check_own_spec(self.env, self.mapping.arrays)
        self.writer = ObsWriter(self.mapping.arrays, self.mapping.bytes)
        bind = getattr(self.env, "bind_observation_buffers", None)
        # Under the wall clock the loop steps on while the manager reads the shared memory: the env keeps
        # its own arrays, and the observation a call returns is copied there.
        if callable(bind) and not is_wall_clock(cfg):
            bind(self.mapping.arrays)  # the env may now write observations straight into shared memory
        return {
            "state_ids": np.asarray(self.env.get_all_state_ids(), dtype=np.int64),
            "state_task_ids": np.asarray(self.env.get_state_task_ids(), dtype=np.int64),
            "supports_state": bool(getattr(self.env, "supports_state", False)),
        }

    def _pause(self, env_ids: Any = None) -> None:
        if self.wall is not None:
            self.wall.reset(env_ids)

    def reset(self, msg: ResetRequest) -> tuple[Any, ...]:
        """Reset every env to its state id; the reply (observations in shared memory)."""
        self._pause()
        result = self.env.reset_envs_to_state_ids(msg.state_ids, msg.task_ids)
        self.writer.write(result.obs)  # type: ignore[union-attr]
        return self._reply(result.task_descriptions, result.infos)

    def reset_some(self, msg: ResetSomeRequest) -> tuple[Any, ...]:
        """Reset the envs ``msg.env_ids``; the reply, every env's."""
        self._pause(msg.env_ids)
        result = self.env.reset_some_envs(msg.env_ids, msg.state_ids, msg.task_ids)
        self.writer.write(result.obs)  # type: ignore[union-attr]
        return self._reply(result.task_descriptions, result.infos)

    def step(self, msg: StepRequest) -> tuple[Any, ...]:
        """Step every env through its chunk of ``msg.actions``; the reply."""
        result = self.env.chunk_step(np.ndarray(msg.shape, _F32, msg.actions))  # read-only, over the message's bytes
        self.writer.write(result.obs)  # type: ignore[union-attr]
        flags = (_as(result.rewards, _F32), _as(result.terminations, _BOOL), _as(result.truncations, _BOOL))
        return self._reply(result.task_descriptions, result.infos, flags)

    def exchange(self, msg: StepRequest) -> tuple[Any, ...]:
        """``clock: wall``: hand the control loop this call's chunk; the reply of the observation it is aligned to."""
        from .realtime import WallExecutor

        if self.wall is None:
            self.wall = WallExecutor(self.env, self.cfg.execution, msg.shape[1], msg.shape[2])
        chunk = np.frombuffer(msg.actions, _F32).reshape(msg.shape).copy()
        (obs, descriptions, infos), ran, flags = self.wall.exchange(chunk)
        self.writer.write(obs)  # type: ignore[union-attr]
        return self._reply(descriptions, {**infos, **ran}, flags)

    def get_state(self, msg: None) -> Any:
        """The env's saved state (offload)."""
        self._pause()
        return self.env.get_state()

    def load_state(self, msg: LoadStateRequest) -> None:
        """Restore a state :meth:`get_state` gave."""
        self._pause()
        self.env.load_state(msg.state)

    def flush_video(self, msg: FlushVideoRequest) -> list[str]:
        """Write the env's own video under ``msg.subdir``; the paths."""
        return list(self.env.flush_video(msg.subdir))

    def renderer_info(self, msg: None) -> dict[str, str]:
        """What renders this shard's images (GL platform, vendor, renderer, the loaded stack)."""
        from .rendering import current_gl_strings, loaded_render_stack, record

        return record(os.environ, self.env.renderer_info(), current_gl_strings(), loaded_render_stack())

    def close(self, msg: None) -> None:
        """Close the env (safe to call twice)."""
        self.wall = None
        if self.env is not None:
            self.env.close()
            self.env = None

    def handle(self, cmd: str, raw: Any, catch: type[BaseException] = BaseException) -> tuple[Any, ...]:
        """Run one command (``cmd`` and its argument as a plain tuple); its reply message, an error's included.

        :param catch: what is answered as an error; anything else propagates (in the caller's process,
            :mod:`envfleet.shards.local`, a KeyboardInterrupt stays one).
        """
        from ..errors import InvalidInputError

        t0 = time.perf_counter()
        try:
            entry = self.commands.get(cmd)
            if entry is None:
                raise ValueError(f"unknown command {cmd!r}: expected one of {sorted(c.value for c in Command)}")
            handler, argument = entry
            return ok_message(handler(None if argument is None else argument._make(raw)), time.perf_counter() - t0)
        except catch as exc:
            kind = ErrorKind.INVALID if isinstance(exc, InvalidInputError) else ErrorKind.ERROR
            error = RemoteError(kind, type(exc).__name__, str(exc), traceback.format_exc())
            if self.conn is not None:
                sys.stderr.write(error.traceback)
                sys.stderr.flush()
            return err_message(error)

    def serve(self) -> None:
        """Answer the commands that arrive on the socket until it closes or a CLOSE is answered."""
        conn = self.conn
        assert conn is not None, "serve() needs the socket"
        while True:
            if self.wall is not None:
                self.wall.run_until_command(conn)  # clock wall: the envs step on until the next command
            try:
                cmd, raw = conn.recv()
            except (EOFError, OSError):
                return
            reply = self.handle(cmd, raw)
            try:
                conn.send(reply)
            except (EOFError, OSError, BrokenPipeError):
                return
            except Exception as exc:
                conn.send(
                    err_message(
                        RemoteError(ErrorKind.ERROR, type(exc).__name__, f"cannot send the reply to {cmd!r}: {exc}", traceback.format_exc())
                    )
                )
            if cmd == Command.CLOSE.value:
                return


def main(argv: list[str] | None = None) -> None:
    """Entry point: ``python -m envfleet.shards.server FD PARENT_PID``."""
    args = sys.argv[1:] if argv is None else argv
    fd, parent_pid = int(args[0]), int(args[1])
    _batch_scheduling()
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    conn = Channel(fd)
    server = ShardServer(conn)
    try:
        server.serve()
    finally:
        try:
            server.close(None)
        except Exception:
            traceback.print_exc()
        if server.mapping is not None:
            server.mapping.close()
    # Skip interpreter teardown: simulators (EGL, Warp) can hang in atexit handlers.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
