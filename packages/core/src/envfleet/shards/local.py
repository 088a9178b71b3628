"""``train.in_process``: a stage's envs in the caller's own process, as gymnasium's ``SyncVectorEnv`` runs them.

A :class:`LocalShard` is a :class:`~envfleet.shards.handle.ShardHandle` whose "process" is a
:class:`~envfleet.shards.server.ShardServer` object of this process: a command is not pickled onto a
socket but kept, and run when its reply is asked for, so that the manager's calls, the episode
rules, the observations' shared memory and the replies are those of a shard process, bit for bit.

What it gives up (docs/concepts.md, "Where the envs run"): a crash of the simulator (a segfault) takes
the caller down, and nothing bounds a call's time (no ``step_timeout_s``, no restart of a hung env).
An exception the env raises is an error of the call, as from a shard process.
"""

from __future__ import annotations

import os
import pickle
import time
from typing import Any

from .handle import Deadline, ShardHandle
from .messages import Argument, Command, InitRequest, Outcome, Reply
from .server import ShardServer

__all__ = ["LocalShard"]


class LocalShard(ShardHandle):
    """A shard whose env runs in this process; see the module doc. ``proc`` stays ``None``."""

    local = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.server: ShardServer | None = None
        self._pending: tuple[str, Any] | None = None

    def launch(self, python: str, env: dict[str, str] | None, request: InitRequest) -> None:
        """Make the server object here and queue the init request (run by :meth:`reply_within`); ``python`` and
        ``env`` are this process's own, whatever is passed."""
        self.forget_reply()
        self.server = ShardServer(None)
        self.answered = set()
        self.send(Command.INIT, request)

    def send(self, command: Command, argument: Argument = None) -> None:
        """Queue ``command``: it runs when its reply is asked for, after the other shards got theirs."""
        if self.server is None:
            return
        self.in_flight, self.in_flight_since = command.value, time.monotonic()
        self._pending = (command.value, None if argument is None else tuple(argument))

    def reply_within(self, deadline: Deadline) -> Reply:
        """Run the queued command now; its reply (there is no deadline in the caller's own process)."""
        server, pending, self._pending = self.server, self._pending, None
        if server is None or pending is None:
            return Reply(Outcome.DIED, "was not running")
        cmd, raw = pending
        message = server.handle(cmd, raw, catch=Exception)
        if cmd == Command.GET_STATE.value and message[0] == Outcome.OK.value:
            # What a shard process sends is a copy; the env's own arrays go on changing here.
            message = (message[0], pickle.loads(pickle.dumps(message[1], protocol=pickle.HIGHEST_PROTOCOL)), *message[2:])
        return self.answer(message)

    def exit_description(self) -> str:
        """That the envs run in this process (pid), or that they are stopped."""
        return f"runs in the caller's process (pid {os.getpid()})" if self.server is not None else "stopped"

    def kill(self, graceful: bool = False) -> None:
        """Close the env and detach its shared memory."""
        server, self.server, self._pending = self.server, None, None
        if server is None:
            return
        try:
            server.close(None)
        finally:
            if server.mapping is not None:
                server.mapping.close()
