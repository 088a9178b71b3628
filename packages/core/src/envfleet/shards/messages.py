"""The messages between a manager and its shard processes.

A request is ``(command, argument)``: ``command`` is a :class:`Command`'s value
(a plain string on the wire), ``argument`` what that command takes. The shard
answers every request with one reply, ``("ok", payload, sim_s)`` or
``("err", kind, message, traceback)``; the manager reads it as a :class:`Reply`,
adding the two outcomes only it can see: the process died, or it did not answer
in time. Plain tuples and strings travel so that each message pickles small and
fast; the types on either side say what they hold.

=================  ===========================================  ==========================================
command            argument                                     payload of the ``ok`` reply
=================  ===========================================  ==========================================
``init``           factory, cfg, ctx, shm_name, layout          state ids, their task ids, supports_state, pid
``reset``          ``{"state_ids", "task_ids"}``                a packed reply (:mod:`envfleet.shards.wire`)
``reset_some``     ``{"env_ids", "state_ids", "task_ids"}``     a packed reply, as ``reset``'s
``step``           (action bytes, their shape)                  a packed reply
``get_state``      ``{}``                                       the env's state
``load_state``     ``{"state"}``                                ``None``
``flush_video``    ``{"subdir"}``                               the paths written
``renderer_info``  ``{}``                                       GL platform, vendor, renderer
``close``          ``{}``                                       ``None``; the shard then exits
=================  ===========================================  ==========================================
"""

from __future__ import annotations

from enum import Enum
from typing import Any, NamedTuple

__all__ = ["Command", "Outcome", "RemoteError", "Reply", "ok_message", "err_message"]


class Command(str, Enum):
    """What a shard can be asked to do: the allow-list its server dispatches from."""

    INIT = "init"
    RESET = "reset"
    RESET_SOME = "reset_some"  #: reset the listed envs of the shard (possibly none); the others keep their episodes
    STEP = "step"
    GET_STATE = "get_state"
    LOAD_STATE = "load_state"
    FLUSH_VIDEO = "flush_video"
    RENDERER_INFO = "renderer_info"
    CLOSE = "close"


class Outcome(Enum):
    """How a request to a shard ended."""

    OK = "ok"  #: the command ran; the reply holds its payload
    ERR = "err"  #: the command raised; the reply holds a :class:`RemoteError`
    DIED = "died"  #: the process is gone; the reply holds how it ended
    HUNG = "hung"  #: no answer before the deadline; the reply says which deadline


class RemoteError(NamedTuple):
    """An exception raised in a shard, as it travels back."""

    kind: str  #: ``"invalid"`` for an :class:`~envfleet.errors.InvalidInputError`, else ``"error"``
    message: str  #: ``"ExceptionType: text"``
    traceback: str


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


def err_message(error: RemoteError) -> tuple[str, str, str, str]:
    """The shard's wire form of a failed reply."""
    return (Outcome.ERR.value, *error)
