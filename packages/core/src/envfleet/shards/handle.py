"""The manager's side of one shard process: its handle, its restart budget, and their teardown.

A :class:`ShardHandle` holds what the manager knows about one shard: which envs
it runs, its process, socket and shared memory, and the last reset (to replay after
a restart). It is also the one way a request reaches a shard:
:meth:`ShardHandle.send` a command with its typed argument
(:mod:`envfleet.shards.messages`), then :meth:`ShardHandle.reply_within` a
:class:`Deadline` returns the :class:`~envfleet.shards.messages.Reply`. A
:class:`RestartBudget` counts the shard's restarts in a sliding window.
:class:`ShardSet` is everything that must go when the manager goes, so that
``close()`` and garbage collection free the same things.
"""

from __future__ import annotations

import collections
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import Any, NamedTuple

import numpy as np

from . import janitor
from .messages import Argument, Command, ErrorKind, InitRequest, Outcome, RemoteError, Reply
from .shm import ShmBlock, ShmLayout
from .wire import Channel, Layout, layout_of

__all__ = ["Deadline", "Packed", "RestartBudget", "ShardHandle", "ShardSet"]

_STDERR_TAIL_LINES = 20


class RestartBudget:
    """How many restarts a shard may have within a window of time.

    :param max_restarts: restarts allowed within ``window_s``; one more exhausts the budget.
    :param window_s: the length of the sliding window, in seconds.
    """

    def __init__(self, max_restarts: int, window_s: float) -> None:
        self.max_restarts = max_restarts
        self.window_s = window_s
        self._times: collections.deque[float] = collections.deque()

    def spend(self) -> int:
        """Count one restart now; return how many fall within the window."""
        now = time.monotonic()
        self._times.append(now)
        while self._times and now - self._times[0] > self.window_s:
            self._times.popleft()
        return len(self._times)

    @property
    def exhausted(self) -> bool:
        """Whether the restarts within the window are more than allowed."""
        return len(self._times) > self.max_restarts


class Deadline(NamedTuple):
    """A point in time (``time.monotonic()``) to answer by, and the seconds it was set to (for messages)."""

    at: float
    seconds: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        """``seconds`` from now."""
        return cls(time.monotonic() + seconds, seconds)

    def left(self) -> float:
        """Seconds until the deadline (negative once past)."""
        return self.at - time.monotonic()


class Packed(NamedTuple):
    """A shard's reset or step reply, unpacked by its handle (see :mod:`envfleet.shards.wire`)."""

    layout: Layout | None  #: how ``raw`` holds the per-env arrays (None: no arrays)
    raw: bytes  #: the per-env arrays, field after field
    others: dict[str, Any]  #: the infos that are not per-env arrays
    descriptions: list[str]  #: each env's task description


class ShardHandle:
    """Parent-side handle of one shard process.

    :param index: the shard's number within its stage.
    :param env_slice: the stage's envs this shard runs.
    :param layout: its observations' place in shared memory.
    :param log_dir: where its output goes (``shard{index}.log``).
    :param budget: its restart budget.
    """

    def __init__(self, index: int, env_slice: slice, layout: ShmLayout, log_dir: str, budget: RestartBudget) -> None:
        self.index = index
        self.env_slice = env_slice
        self.num_envs = env_slice.stop - env_slice.start
        self.layout = layout
        self.budget = budget
        self.block: ShmBlock | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.conn: Channel | None = None
        self.log_path = os.path.join(log_dir, f"shard{index}.log")
        self.last_reset: tuple[np.ndarray, np.ndarray | None] | None = None
        self.saved_state: Any = None
        self.sim_s = 0.0  # seconds the last command spent in the simulator
        # The layout and the task descriptions of a reset/step reply travel only when they change
        # (see envfleet.shards.wire): the last ones of this process, for the replies that omit them.
        self._layout: Layout | None = None
        self.descriptions: list[str] = [""] * self.num_envs
        # What the process is doing, for a start-up display read from another thread: the command in
        # flight (None: idle), since when (time.monotonic()), and the commands answered since it started.
        self.in_flight: str | None = None
        self.in_flight_since = 0.0
        self.answered: set[str] = set()

    @property
    def env_range(self) -> str:
        """The stage's envs this shard runs, for messages: ``"3"`` or ``"2..5"``."""
        sl = self.env_slice
        return f"{sl.start}" if sl.stop - sl.start == 1 else f"{sl.start}..{sl.stop - 1}"

    def launch(self, python: str, env: dict[str, str] | None, request: InitRequest) -> None:
        """Start the shard process under ``python`` (environment ``env``) and send it ``request``.

        Its answer (the state ids, or why the env could not be built) is read with :meth:`reply_within`.
        """
        parent_sock, child_sock = socket.socketpair()
        self.forget_reply()
        with open(self.log_path, "ab") as log_fh:
            proc = subprocess.Popen(
                [python, "-m", "envfleet.shards.server", str(child_sock.fileno()), str(os.getpid())],
                pass_fds=(child_sock.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=log_fh,
                stderr=log_fh,
                env=env,
                close_fds=True,
            )
        child_sock.close()
        self.conn = Channel(os.dup(parent_sock.fileno()))
        parent_sock.close()
        self.proc = proc
        self.answered = set()
        self.send(Command.INIT, request)

    def send(self, command: Command, argument: Argument = None) -> None:
        """Send ``command`` with its argument (the type :data:`~envfleet.shards.messages.ARGUMENTS` names).

        A shard that is gone is not an error here: :meth:`reply_within` then reports it as DIED.
        """
        if self.conn is None:
            return
        self.in_flight, self.in_flight_since = command.value, time.monotonic()
        try:
            self.conn.send((command.value, None if argument is None else tuple(argument)))
        except OSError:
            pass  # the reply's read sees the process gone

    def reply_within(self, deadline: Deadline) -> Reply:
        """The shard's answer to the last :meth:`send`, or how it failed to give one by ``deadline``."""
        conn = self.conn
        if conn is None:
            return Reply(Outcome.DIED, "was not running")
        try:
            message = conn.recv_within(deadline.left())
        except (EOFError, OSError):
            try:
                self.proc.wait(timeout=5.0)  # type: ignore[union-attr]
            except subprocess.TimeoutExpired:
                pass
            return Reply(Outcome.DIED, self.exit_description())
        if message is Channel.TIMEOUT:
            return Reply(Outcome.HUNG, f"did not answer within {deadline.seconds:g} s")
        return self.answer(message)

    def answer(self, message: tuple[Any, ...]) -> Reply:
        """The :class:`~envfleet.shards.messages.Reply` of a message the shard sent (ok or an error)."""
        done, self.in_flight = self.in_flight, None
        if message[0] == Outcome.OK.value:
            _, payload, self.sim_s = message
            if done is not None:
                self.answered.add(done)
            return Reply(Outcome.OK, payload)
        _, kind, type_name, text, tb = message
        return Reply(Outcome.ERR, RemoteError(ErrorKind(kind), type_name, text, tb))

    def unpack(self, payload: tuple[Any, ...]) -> Packed:
        """A reset/step reply's payload ``(fields or None, array bytes, other infos, descriptions or None)``
        as a :class:`Packed`, the omitted layout and descriptions filled in from the last reply."""
        fields, raw, others, descriptions = payload
        if fields is not None:
            self._layout = layout_of(fields, self.num_envs)
        if descriptions is not None:
            self.descriptions = descriptions
        return Packed(self._layout, raw, others, self.descriptions)

    def no_reply(self) -> Packed:
        """What a shard that has not been reset since it started answers for its envs: no arrays."""
        return Packed(None, b"", {}, self.descriptions)

    def forget_reply(self) -> None:
        """Forget the last reply's layout (a new process sends its own)."""
        self._layout = None

    def exit_description(self) -> str:
        """How the process ended, in words (or that it runs, or never started)."""
        if self.proc is None:
            return "not started"
        code = self.proc.poll()
        if code is None:
            return "running"
        if code < 0:
            try:
                return f"killed by signal {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exited with code {code}"

    def stderr_tail(self, lines: int = _STDERR_TAIL_LINES) -> str:
        """The last lines of the process's output."""
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(size - 16384, 0))
                text = fh.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def kill(self, graceful: bool = False) -> None:
        """End the process (asking it to close first when ``graceful``) and close the socket."""
        proc, conn = self.proc, self.conn
        if proc is not None and proc.poll() is None and graceful and conn is not None:
            try:
                self.send(Command.CLOSE)
                if conn.poll(5.0):
                    conn.recv()
                proc.wait(timeout=5.0)
            except Exception:
                pass
        if proc is not None and proc.poll() is None:
            proc.kill()
            try:
                proc.wait(timeout=10.0)
            except subprocess.TimeoutExpired:  # pragma: no cover - a process in D state
                pass
        if conn is not None:
            try:
                conn.close()
            except OSError:
                pass
        self.proc = None
        self.conn = None

    def free(self, graceful: bool = False) -> None:
        """:meth:`kill`, then free the shared memory."""
        self.kill(graceful)
        if self.block is not None:
            self.block.close()
            self.block = None


class ShardSet:
    """A stage's shard handles and their log directory: everything that must go when the manager goes.

    It holds no reference to the manager, so a finalizer can call :meth:`cleanup`.
    """

    def __init__(self) -> None:
        self.shards: list[ShardHandle] = []
        # The owner's pid in the name, as in the segments' names: whoever looks for leftovers can tell whose
        # they are. The janitor removes the directory if this process is killed before cleanup().
        self.log_dir = tempfile.mkdtemp(prefix=f"envfleet_logs_{os.getpid()}_")
        janitor.register_dir(self.log_dir)

    def cleanup(self) -> None:
        """Free every shard and remove the logs."""
        for shard in self.shards:
            shard.free()
        if os.path.isdir(self.log_dir):
            shutil.rmtree(self.log_dir, ignore_errors=True)
            janitor.unregister_dir(self.log_dir)
