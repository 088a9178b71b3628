"""The manager's side of one shard process: its handle, its restart budget, and their teardown.

A :class:`ShardHandle` holds what the manager knows about one shard: which envs
it runs, its process, socket and shared memory, the last reset (to replay after
a restart) and the last reply (see :mod:`envfleet.shards.replies`). A
:class:`RestartBudget` counts the shard's restarts in a sliding window.
:class:`ShardSet` is everything that must go when the manager goes, so that
``close()`` and garbage collection free the same things.
"""

from __future__ import annotations

import collections
import os
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Any

import numpy as np

from .messages import Command
from .shm import ShmBlock, ShmLayout
from .wire import Channel, Layout, layout_of

__all__ = ["RestartBudget", "ShardHandle", "ShardSet"]

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
        self.sim_s = 0.0
        # The last reset/step reply (see envfleet.shards.wire): the layout of its arrays, their bytes,
        # the infos that are not per-env arrays, and the task descriptions.
        self.reply_layout: Layout | None = None
        self.reply_bytes = b""
        self.reply_other_infos: dict[str, Any] = {}
        self.descriptions: list[str] = [""] * self.num_envs

    @property
    def env_range(self) -> str:
        """The stage's envs this shard runs, for messages: ``"3"`` or ``"2..5"``."""
        sl = self.env_slice
        return f"{sl.start}" if sl.stop - sl.start == 1 else f"{sl.start}..{sl.stop - 1}"

    def keep_reply(self, payload: tuple[Any, ...]) -> None:
        """Keep a reset/step reply ``(fields or None, array bytes, other infos, descriptions or None)``.

        The layout and the descriptions travel only when they change: ``None`` keeps the last ones.
        """
        fields, raw, others, descriptions = payload
        if fields is not None:
            self.reply_layout = layout_of(fields, self.num_envs)
        self.reply_bytes, self.reply_other_infos = raw, others
        if descriptions is not None:
            self.descriptions = descriptions

    def forget_reply(self) -> None:
        """Drop the last reply (a new process starts with none)."""
        self.reply_layout, self.reply_bytes, self.reply_other_infos = None, b"", {}

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
                conn.send((Command.CLOSE.value, {}))
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
        self.log_dir = tempfile.mkdtemp(prefix="envfleet_logs_")

    def cleanup(self) -> None:
        """Free every shard and remove the logs."""
        for shard in self.shards:
            shard.free()
        shutil.rmtree(self.log_dir, ignore_errors=True)
