"""The messages between a manager and its shard processes: one typed argument per command.

The manager sends ``(command, argument)`` through
:meth:`~envfleet.shards.handle.ShardHandle.send`; the argument of each command is the
named tuple below, and :data:`ARGUMENTS` says which. On the wire the command is its
plain string and the argument a plain tuple (so that each message pickles small and
fast); the shard's server rebuilds the named tuple before it dispatches. The shard
answers every request with one reply, ``("ok", payload, sim_s)`` or
``("err", kind, type name, message, traceback)``; the manager reads it as a
:class:`Reply` (:meth:`~envfleet.shards.handle.ShardHandle.reply_within`), adding the
two outcomes only it can see: the process died, or it did not answer in time.

=================  ==========================  ==============================================
command            argument                    payload of the ``ok`` reply
=================  ==========================  ==============================================
``init``           :class:`InitRequest`        state ids, their task ids, supports_state
``reset``          :class:`ResetRequest`       a packed reply (:mod:`envfleet.shards.wire`)
``reset_some``     :class:`ResetSomeRequest`   a packed reply, as ``reset``'s
``step``           :class:`StepRequest`        a packed reply
``exchange``       :class:`StepRequest`        a packed reply (``clock: wall``: :mod:`envfleet.shards.realtime`)
``get_state``      ``None``                    the env's state
``load_state``     :class:`LoadStateRequest`   ``None``
``flush_video``    :class:`FlushVideoRequest`  the paths written
``renderer_info``  ``None``                    GL platform, vendor, renderer
``close``          ``None``                    ``None``; the shard then exits
=================  ==========================  ==============================================
"""

from __future__ import annotations

from enum import Enum
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "Command",
    "InitRequest",
    "ResetRequest",
    "ResetSomeRequest",
    "StepRequest",
    "LoadStateRequest",
    "FlushVideoRequest",
    "Argument",
    "ARGUMENTS",
    "ErrorKind",
    "Outcome",
    "RemoteError",
    "Reply",
    "ok_message",
    "err_message",
]


class Command(str, Enum):
    """What a shard can be asked to do: the allow-list its server dispatches from."""

    INIT = "init"
    RESET = "reset"
    RESET_SOME = "reset_some"  #: reset the listed envs of the shard (possibly none); the others keep their episodes
    STEP = "step"
    EXCHANGE = "exchange"  #: clock wall: a chunk into the shard's control loop; the reply once the horizon has run
    GET_STATE = "get_state"
    LOAD_STATE = "load_state"
    FLUSH_VIDEO = "flush_video"
    RENDERER_INFO = "renderer_info"
    CLOSE = "close"


class InitRequest(NamedTuple):
    """Build the env: ``factory(OmegaConf.create(cfg), EnvContext(**ctx))``, observations into ``shm_name``."""

    factory: str  #: ``"module:attr"`` of the backend's env factory
    cfg: dict[str, Any]  #: the env section, resolved, as plain containers
    ctx: dict[str, Any]  #: the fields of the shard's :class:`~envfleet.env.EnvContext`
    shm_name: str  #: the shared-memory block the shard writes observations into
    layout: Any  #: :meth:`~envfleet.shards.shm.ShmLayout.to_wire` of that block


class ResetRequest(NamedTuple):
    """Reset env ``i`` of the shard to ``state_ids[i]`` (``task_ids``, when given, must match)."""

    state_ids: np.ndarray
    task_ids: np.ndarray | None


class ResetSomeRequest(NamedTuple):
    """Reset the shard's envs ``env_ids`` (its own numbering) to ``state_ids``; the others keep their episodes."""

    env_ids: np.ndarray
    state_ids: np.ndarray
    task_ids: np.ndarray | None


class StepRequest(NamedTuple):
    """Step through the float32 actions in ``actions`` (raw bytes pickle several times faster than an array)."""

    actions: bytes
    shape: tuple[int, ...]  #: ``(num_envs, chunk, action_dim)`` of the shard


class LoadStateRequest(NamedTuple):
    """Restore what a ``get_state`` returned."""

    state: Any


class FlushVideoRequest(NamedTuple):
    """Write the shard's own videos under ``subdir``."""

    subdir: str


#: A command's argument: one of the requests above, or None for a command that takes none.
Argument = InitRequest | ResetRequest | ResetSomeRequest | StepRequest | LoadStateRequest | FlushVideoRequest | None

#: The argument type of each command (None: it takes none).
ARGUMENTS: dict[Command, type[Any] | None] = {
    Command.INIT: InitRequest,
    Command.RESET: ResetRequest,
    Command.RESET_SOME: ResetSomeRequest,
    Command.STEP: StepRequest,
    Command.EXCHANGE: StepRequest,
    Command.GET_STATE: None,
    Command.LOAD_STATE: LoadStateRequest,
    Command.FLUSH_VIDEO: FlushVideoRequest,
    Command.RENDERER_INFO: None,
    Command.CLOSE: None,
}


class ErrorKind(str, Enum):
    """Who can fix what a shard raised."""

    INVALID = "invalid"  #: an :class:`~envfleet.errors.InvalidInputError`: the caller's input was wrong
    ERROR = "error"  #: any other exception: the backend (or its simulator) failed


class Outcome(Enum):
    """How a request to a shard ended."""

    OK = "ok"  #: the command ran; the reply holds its payload
    ERR = "err"  #: the command raised; the reply holds a :class:`RemoteError`
    DIED = "died"  #: the process is gone; the reply holds how it ended
    HUNG = "hung"  #: no answer before the deadline; the reply says which deadline


class RemoteError(NamedTuple):
    """An exception raised in a shard, as it travels back."""

    kind: ErrorKind
    type_name: str  #: the exception's class name
    text: str  #: ``str(exception)``
    traceback: str

    @property
    def message(self) -> str:
        """``"ExceptionType: text"``."""
        return f"{self.type_name}: {self.text}"


class Reply(NamedTuple):
    """One shard's answer to one request, as the manager sees it."""

    outcome: Outcome
    #: OK: the command's payload; ERR: a :class:`RemoteError`; DIED and HUNG: what happened, in words.
    payload: Any

    @property
    def ok(self) -> bool:
        """Whether the command ran."""
        return self.outcome is Outcome.OK


def ok_message(payload: Any, sim_s: float) -> tuple[str, Any, float]:
    """The shard's wire form of a successful reply (``sim_s``: seconds spent in the command)."""
    return (Outcome.OK.value, payload, sim_s)


def err_message(error: RemoteError) -> tuple[str, str, str, str, str]:
    """The shard's wire form of a failed reply."""
    return (Outcome.ERR.value, error.kind.value, error.type_name, error.text, error.traceback)
