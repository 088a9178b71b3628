"""First-ready stepping: step the envs that are ready, return the ones that finish first.

:class:`FirstReady` is the machinery behind :meth:`ProcessEnvManager.send_chunk
<envfleet.shards.manager.ProcessEnvManager.send_chunk>` and :meth:`~envfleet.shards.manager.ProcessEnvManager.recv_chunk`.
It keeps one :class:`Slot` per shard, each in one :class:`Phase`: idle (its last result delivered,
ready for actions), stepping, restarting (starting, then replaying its last reset), or done (a
result waiting for ``recv_chunk``). The rules (docs/concepts.md, "First-ready stepping"):

- The unit is the shard: its ``envs_per_process`` envs are one simulator stepped as one batch, so
  ``send_chunk`` takes all of a shard's envs or none, and a result holds whole shards.
- A shard waits, idle, between its result and its next actions: its observations stay in its
  shared memory until ``recv_chunk`` copies them into the result, and a result is a copy that
  nothing overwrites (arrays are reused only once the caller dropped them,
  :class:`~envfleet.shards.recycling.RecyclingPool`).
- Auto-reset is the backend's, inside the shard's own chunk: the chunk that ends an episode
  returns after the reset, with the reset's observations (as in lockstep); the other shards go on
  meanwhile. Each shard gets the same calls with the same actions as in lockstep, so each env's
  episode is the lockstep one, bit for bit.
- A shard that dies or misses ``step_timeout_s`` is killed and started again in the background,
  then reset to its last reset's state ids; its chunk comes back, when that reset is done, as
  lockstep reports it: the reset's observations, zero rewards, truncated at the last sub-step and
  ``infos["sim_restarted"]`` True. The other shards keep returning results meanwhile.
"""

from __future__ import annotations

import enum
import select
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..env import ChunkStepResult
from ..errors import InvalidInputError, SimulatorStoppedError
from .calls import ShardCalls, replay_reset
from .handle import Deadline, Packed, ShardHandle
from .messages import Command, Outcome, StepRequest
from .recycling import RecyclingPool
from .replies import ReplyMerger

__all__ = ["FirstReady", "Phase", "ReadyChunk", "Slot"]


def _no_ids() -> np.ndarray:
    return np.zeros(0, dtype=np.int64)


@dataclass
class ReadyChunk(ChunkStepResult):
    """A :class:`~envfleet.env.ChunkStepResult` of some envs: row ``j`` is env ``env_ids[j]`` of the stage."""

    env_ids: np.ndarray = field(default_factory=_no_ids)  #: int64 ``[rows]``, ascending


class Phase(enum.Enum):
    """Where a shard is in first-ready stepping."""

    IDLE = "idle"  #: its last result delivered: ready for actions
    STEPPING = "stepping"  #: a chunk sent, its reply not yet read
    STARTING = "starting"  #: restarting: the new process builds its env
    RESETTING = "resetting"  #: restarting: the new process replays the last reset
    DONE = "done"  #: a result waits for recv_chunk


@dataclass
class Slot:
    """One shard's state in first-ready stepping."""

    shard: ShardHandle
    phase: Phase = Phase.IDLE
    deadline: Deadline | None = None
    chunk: int = 0  #: the chunk length of the actions in flight or of the waiting result
    reply: Packed | None = None
    restarted: bool = False
    done_at: float = 0.0  #: when its result arrived (``time.monotonic()``)
    sim_s: float = 0.0  #: the simulator time of its last chunk


@dataclass(frozen=True)
class _Rows:
    index: int
    num_envs: int
    env_slice: slice


class FirstReady:
    """First-ready stepping over one stage's shards (see the module doc).

    :param calls: the stage's :class:`~envfleet.shards.calls.ShardCalls` (transport and restart budget).
    :param merger: the manager's :class:`~envfleet.shards.replies.ReplyMerger` (its info dtypes fill restarted rows).
    :param obs_spec: the stage's observation spec.
    :param action_dim: the action size.
    :param chunk: the fixed chunk length, or None (any, the same for every chunk in flight).
    """

    def __init__(self, calls: ShardCalls, merger: ReplyMerger, obs_spec: dict[str, Any], action_dim: int, chunk: int | None) -> None:
        self.calls = calls
        self.merger = merger
        self.obs_spec = obs_spec
        self.action_dim = action_dim
        self.fixed_chunk = chunk
        self.slots = [Slot(shard) for shard in calls.shards]
        self.num_envs = calls.stage_envs
        self.stage_id = calls.context.stage_id
        self._shard_of = np.repeat(np.arange(len(self.slots)), [s.num_envs for s in calls.shards])
        self._pool = RecyclingPool()
        self.sim_busy_s = 0.0  #: simulator seconds of every chunk returned, summed over shards

    # ------------------------------------------------------------------ state
    @property
    def busy(self) -> bool:
        """Whether a chunk is in flight or a result waits for :meth:`recv`."""
        return any(slot.phase is not Phase.IDLE for slot in self.slots)

    def check_idle(self, what: str) -> None:
        """Raise unless every shard is idle: ``what`` (a lockstep call) needs them all.

        :raises InvalidInputError: saying which envs still have chunks in flight or results waiting.
        """
        pending = [s for s in self.slots if s.phase is not Phase.IDLE]
        if pending:
            envs = ", ".join(s.shard.env_range for s in pending)
            raise InvalidInputError(
                f"stage {self.stage_id}: {what} needs every env idle, but envs {envs} have first-ready chunks in flight "
                "or results waiting: recv_chunk them first"
            )

    def forget(self) -> None:
        """Every shard idle again (after its processes were stopped)."""
        for slot in self.slots:
            slot.phase, slot.reply, slot.deadline, slot.restarted = Phase.IDLE, None, None, False

    # ------------------------------------------------------------------ send
    def send(self, env_ids: np.ndarray, actions: np.ndarray) -> None:
        """Step the shards of ``env_ids`` (checked: distinct, in range) through ``actions`` ``[len(env_ids), chunk, action_dim]``.

        Everything is checked before anything is sent.

        :raises InvalidInputError: no env, an env whose shard is not wholly given, an env not ready,
            or a chunk length other than the one of the chunks in flight.
        """
        if env_ids.size == 0:
            raise InvalidInputError("send_chunk needs at least one env id, got none")
        if any(slot.shard.last_reset is None for slot in self.slots):
            raise SimulatorStoppedError(f"stage {self.stage_id}: reset every env once (reset_envs_to_state_ids) before send_chunk")
        chunk = int(actions.shape[1])
        shard_ids = np.unique(self._shard_of[env_ids])
        for index in shard_ids.tolist():
            slot = self.slots[index]
            sl = slot.shard.env_slice
            given = np.count_nonzero((env_ids >= sl.start) & (env_ids < sl.stop))
            if given != slot.shard.num_envs:
                raise InvalidInputError(
                    f"stage {self.stage_id}: envs {slot.shard.env_range} share one simulator process (envs_per_process) and step "
                    f"together, so send_chunk takes all {slot.shard.num_envs} of them or none; got {given}"
                )
            if slot.phase is not Phase.IDLE:
                why = "its result waits for recv_chunk" if slot.phase is Phase.DONE else f"its chunk is still {slot.phase.value}"
                raise InvalidInputError(
                    f"stage {self.stage_id}: env(s) {slot.shard.env_range} not ready for actions: {why}. "
                    "send_chunk takes only envs whose last result recv_chunk (or a lockstep call) returned"
                )
        others = {s.chunk for s in self.slots if s.phase is not Phase.IDLE}
        if others and others != {chunk}:
            raise InvalidInputError(
                f"stage {self.stage_id}: chunks of {sorted(others)} sub-steps are in flight; send_chunk's actions have {chunk}: "
                "one recv_chunk result holds chunks of one length"
            )
        order = np.argsort(env_ids, kind="stable")
        ordered_ids, ordered = env_ids[order], actions[order]
        for index in shard_ids.tolist():
            slot = self.slots[index]
            sl = slot.shard.env_slice
            rows = np.ascontiguousarray(ordered[(ordered_ids >= sl.start) & (ordered_ids < sl.stop)])
            slot.shard.send(Command.STEP, StepRequest(rows.tobytes(), rows.shape))
            slot.phase, slot.chunk, slot.restarted = Phase.STEPPING, chunk, False
            slot.deadline = Deadline.after(self.calls.step_timeout_s)

    # ------------------------------------------------------------------ receive
    def recv(self, min_ready: int, timeout_s: float | None = None, max_ready: int | None = None) -> ReadyChunk:
        """The results of at least ``min_ready`` envs (whole shards, earliest first, at most ``max_ready``
        envs when given), or, with ``timeout_s``, of every env done by then (possibly none).

        :raises InvalidInputError: ``min_ready`` below 1, above the stage's envs, or above the envs that
            have chunks in flight or results waiting (it would wait for ever); ``max_ready`` below ``min_ready``.
        """
        if isinstance(min_ready, bool) or not isinstance(min_ready, (int, np.integer)) or not 1 <= min_ready <= self.num_envs:
            raise InvalidInputError(f"min_ready must be an integer in 1..{self.num_envs} (the stage's envs), got {min_ready!r}")
        if max_ready is not None and (isinstance(max_ready, bool) or not isinstance(max_ready, (int, np.integer)) or max_ready < min_ready):
            raise InvalidInputError(f"max_ready must be an integer >= min_ready={min_ready}, or None; got {max_ready!r}")
        pending = sum(s.shard.num_envs for s in self.slots if s.phase is not Phase.IDLE)
        if min_ready > pending:
            raise InvalidInputError(
                f"stage {self.stage_id}: min_ready={min_ready}, but only {pending} envs have chunks in flight or results waiting: "
                "send_chunk more envs first, or ask for fewer"
            )
        user = None if timeout_s is None else Deadline.after(float(timeout_s))
        while True:
            self._advance()
            if self._done_envs() >= min_ready or (user is not None and user.left() <= 0):
                break
            self._wait(user)
        return self._deliver(max_ready)

    def _done_envs(self) -> int:
        return sum(s.shard.num_envs for s in self.slots if s.phase is Phase.DONE)

    def _wait(self, user: Deadline | None) -> None:
        """Block until a busy shard's socket has something, a shard's deadline passes, or ``user``'s does."""
        poller = select.poll()
        ends = [] if user is None else [user.at]
        for slot in self.slots:
            if slot.phase in (Phase.STEPPING, Phase.STARTING, Phase.RESETTING) and slot.shard.conn is not None:
                poller.register(slot.shard.conn.fd, select.POLLIN)
                if slot.deadline is not None:
                    ends.append(slot.deadline.at)
        left = min(ends) - time.monotonic() if ends else 1.0
        poller.poll(max(0, int(np.ceil(max(left, 0.0) * 1000))))

    def _advance(self) -> None:
        """Read every reply that is there, restart the shards that died or hung; a backend's error raises."""
        for slot in self.slots:
            if slot.phase not in (Phase.STEPPING, Phase.STARTING, Phase.RESETTING):
                continue
            shard, deadline = slot.shard, slot.deadline
            assert deadline is not None
            conn = shard.conn
            if conn is not None and not conn.poll(0) and deadline.left() > 0:
                continue  # still working
            status, payload = shard.reply_within(deadline if conn is not None else Deadline.after(0))
            if status is Outcome.OK:
                self._on_ok(slot, payload)
            elif status is Outcome.ERR:
                # The backend raised: the error goes to the caller, the shard is idle again (as after a
                # lockstep call that raised); one that failed to rebuild is stopped, and restarted when next sent a chunk.
                stepping, slot.phase = slot.phase is Phase.STEPPING, Phase.IDLE
                if not stepping:
                    shard.kill()
                raise self.calls._remote_error(shard, "stepping" if stepping else "restarting after a crash", payload)
            else:
                self._restart(slot, f"{payload} during {'step' if slot.phase is Phase.STEPPING else 'a restart'}")

    def _on_ok(self, slot: Slot, payload: Any) -> None:
        shard = slot.shard
        if slot.phase is Phase.STARTING:
            self.calls._on_init(payload)
            shard.send(Command.RESET, replay_reset(shard))
            slot.phase, slot.deadline = Phase.RESETTING, Deadline.after(self.calls.reset_timeout_s)
            return
        slot.reply = shard.unpack(payload)
        slot.sim_s = shard.sim_s
        self.sim_busy_s += shard.sim_s
        slot.restarted = slot.phase is Phase.RESETTING
        slot.phase, slot.deadline, slot.done_at = Phase.DONE, None, time.monotonic()

    def _restart(self, slot: Slot, how: str) -> None:
        """Kill the shard, count the restart (raises past the budget) and start it again in the background."""
        while True:
            self.calls._retire(slot.shard, how)
            try:
                self.calls.launch(slot.shard)
                break
            except OSError as exc:
                how = f"could not be restarted: {exc}"
        slot.phase, slot.deadline = Phase.STARTING, Deadline.after(self.calls.start_timeout_s)

    # ------------------------------------------------------------------ deliver
    def _deliver(self, max_ready: int | None) -> ReadyChunk:
        done = sorted((s for s in self.slots if s.phase is Phase.DONE), key=lambda s: s.done_at)
        chosen: list[Slot] = []
        count = 0
        for slot in done:
            if max_ready is not None and count + slot.shard.num_envs > max_ready and chosen:
                break
            chosen.append(slot)
            count += slot.shard.num_envs
        chosen.sort(key=lambda s: s.shard.index)
        rows, offset = [], 0
        for slot in chosen:
            rows.append(_Rows(slot.shard.index, slot.shard.num_envs, slice(offset, offset + slot.shard.num_envs)))
            offset += slot.shard.num_envs
        obs = {k: self._pool.take(f"{k}/{count}", (count, *s.shape), s.dtype) for k, s in self.obs_spec.items()}
        for key, arr in obs.items() if chosen else ():
            dest = arr.data.cast("B")
            try:
                for slot, row in zip(chosen, rows):
                    assert slot.shard.block is not None
                    src = slot.shard.block.bytes[key]
                    start = row.env_slice.start * (src.nbytes // slot.shard.num_envs)
                    dest[start : start + src.nbytes] = src
            finally:
                dest.release()
        chunk = chosen[0].chunk if chosen else (self.fixed_chunk or 0)
        replies = [slot.reply for slot in chosen if slot.reply is not None]
        restarted = {slot.shard.index for slot in chosen if slot.restarted}
        if chosen:
            flags, infos, descriptions = self.merger.merge(rows, replies, restarted, Command.STEP, chunk, num_rows=count)
        else:
            flags = {
                "rewards": np.zeros((0, chunk), np.float32),
                "terminations": np.zeros((0, chunk), bool),
                "truncations": np.zeros((0, chunk), bool),
            }
            infos, descriptions = {"sim_restarted": np.zeros(0, bool)}, []
        env_ids = np.concatenate([np.arange(s.shard.env_slice.start, s.shard.env_slice.stop) for s in chosen]) if chosen else _no_ids()
        for slot in chosen:
            slot.phase, slot.reply, slot.restarted = Phase.IDLE, None, False
        return ReadyChunk(obs=obs, task_descriptions=descriptions, **flags, infos=infos, env_ids=env_ids.astype(np.int64))
