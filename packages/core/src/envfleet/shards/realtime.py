"""``train.execution.clock: wall`` inside a shard: the envs step on in a loop of their own while the policy thinks.

One job: the shard's control loop. A thread steps the shard's envs one sub-step at a time (at
``target_step_hz``, or as fast as the simulator runs) from each env's queue of actions. A call
(:meth:`WallExecutor.exchange`) hands in each env's new chunk, computed from the observation the
last call returned; it replaces the queue at the next sub-step boundary, aligned to that
observation (the sub-steps already run since then are the delay: the chunk starts at that index),
and the call returns once ``horizon`` sub-steps have run since that observation, with what ran.
No round trip per sub-step: the loop runs here, next to the simulator.

The loop runs at most ``horizon`` sub-steps past the last observation: a policy slower than that
finds the envs waiting there. Besides what ran, a result says how long the loop waited for a chunk in
that call (``infos["env_wait_s"]``), when each sub-step started (``infos["substep_t"]``, the shard's
``time.monotonic()``) and the rate they ran at (``infos["substep_hz"]``). Without ``target_step_hz`` it also waits
while no env has an action queued (a simulator has nothing to run); with it, envs whose queues are
empty apply ``on_empty`` (hold or zeros) at the paced rate, as a robot's controller would.

Each sub-step is one ``chunk_step`` of length 1 of the backend: every sub-step is a control tick
whose observation a call may return, so every one renders.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from ..execution import ActionSource, smooth_overlap

__all__ = ["WallExecutor"]


class WallExecutor:
    """The control loop of one shard's ``env`` (``num_envs`` envs) under ``clock: wall``.

    :param env: the shard's :class:`~envfleet.env.Env`.
    :param execution: the section's ``execution`` (horizon, on_empty, smooth_overlap, target_step_hz).
    :param sub_steps: a chunk's sub-steps (after interpolation).
    :param action_dim: the action size.
    """

    def __init__(self, env: Any, execution: Any, sub_steps: int, action_dim: int) -> None:
        self.env = env
        n = int(env.num_envs)
        self.num_envs, self.sub_steps, self.action_dim = n, int(sub_steps), int(action_dim)
        self.horizon = self.sub_steps if execution.horizon is None else int(execution.horizon)
        self.hold = str(execution.on_empty) == "hold"
        self.smooth = bool(execution.smooth_overlap)
        self.period = None if execution.target_step_hz is None else 1.0 / float(execution.target_step_hz)
        self._cond = threading.Condition()
        self._closed = False
        self._error: BaseException | None = None
        self._pending: np.ndarray | None = None
        self._thread: threading.Thread | None = None
        self._generation = 0  # counts resets: a sub-step that ran across one is not recorded
        self._clear()

    # .............................................................................................. state
    def _clear(self) -> None:
        n, h = self.num_envs, self.horizon
        self.queue = np.zeros((n, max(self.sub_steps, h), self.action_dim), np.float32)
        self.pos = np.zeros(n, np.int64)  # queue[i, pos[i]:end[i]] runs next
        self.end = np.zeros(n, np.int64)
        self.last = np.zeros((n, self.action_dim), np.float32)
        self.started = False  # a chunk arrived since the last reset
        self.current = False  # the queue holds the chunk of the call in flight (else the previous call's)
        self.ran = 0  # sub-steps run since the last observation handed out
        self.in_step = False
        self.delays = np.zeros(n, np.int64)
        self.rewards = np.zeros((n, h), np.float32)
        self.terminations = np.zeros((n, h), bool)
        self.truncations = np.zeros((n, h), bool)
        self.applied = np.zeros((n, h, self.action_dim), np.float32)
        self.source = np.zeros((n, h), np.int8)
        self.step_t = np.zeros(h, np.float64)  # when each sub-step of the window started (time.monotonic())
        self.wait_s = 0.0  # the loop's time waiting for a chunk in this window
        self.result: Any = None
        self.next_tick: float | None = None

    def pause(self, env_ids: Any = None) -> None:
        """Stop at a sub-step boundary and forget every queue (a reset of every env follows); with ``env_ids``,
        only those envs' queues (a reset of some), the others going on."""
        with self._cond:
            if env_ids is not None:
                while self.in_step:
                    self._cond.wait()
                self.pos[env_ids] = self.end[env_ids]
                self.last[env_ids] = 0.0
                return
            self._pending = None
            while self.in_step:
                self._cond.wait()
            self._generation += 1
            self._clear()

    def close(self) -> None:
        """End the loop's thread. Safe to call twice."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(30.0)

    # .............................................................................................. the call
    def exchange(self, chunk: np.ndarray) -> tuple[Any, dict[str, np.ndarray], tuple[np.ndarray, ...]]:
        """Hand in each env's chunk ``[n, sub_steps, A]``; return ``(the last sub-step's result, infos, flags)``
        once ``horizon`` sub-steps have run since the last observation."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="envfleet-wall-clock", daemon=True)
            self._thread.start()
        with self._cond:
            self._raise_if_failed()
            self._pending = chunk
            self._cond.notify_all()
            while self._pending is not None or self.ran < self.horizon:
                self._raise_if_failed()
                self._cond.wait()
            result = self.result
            flags = (self.rewards.copy(), self.terminations.copy(), self.truncations.copy())
            span = float(self.step_t[-1] - self.step_t[0]) if self.horizon > 1 else 0.0
            infos = {
                "applied_action": self.applied.copy(),
                "action_source": self.source.copy(),
                "action_delay": self.delays.copy(),
                "env_wait_s": np.full(self.num_envs, self.wait_s),
                "substep_hz": np.full(self.num_envs, (self.horizon - 1) / span if span > 0 else 0.0),
                "substep_t": np.broadcast_to(self.step_t, (self.num_envs, self.horizon)).copy(),
            }
            self.ran = 0
            self.wait_s = 0.0
            self.current = False
            self.rewards[:] = 0.0
            self.terminations[:] = False
            self.truncations[:] = False
            self._cond.notify_all()
            return result, infos, flags

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"the wall-clock control loop failed: {type(self._error).__name__}: {self._error}") from self._error

    # .............................................................................................. the loop
    def _apply(self, chunk: np.ndarray) -> None:
        """The arrived chunk replaces each env's queue, aligned to the last observation: it starts at index ``ran``."""
        start = min(self.ran, chunk.shape[1])
        incoming = chunk[:, start:]
        if self.smooth:
            for i in np.flatnonzero(self.end > self.pos):
                queued = self.queue[i : i + 1, self.pos[i] : self.end[i]]
                incoming = incoming.copy() if incoming.base is chunk else incoming
                incoming[i : i + 1] = smooth_overlap(queued, incoming[i : i + 1])
        length = incoming.shape[1]
        if length > self.queue.shape[1]:  # a longer chunk than any before (no fixed chunk length)
            self.queue = np.zeros((self.num_envs, length, self.action_dim), np.float32)
        self.queue[:, :length] = incoming
        self.pos[:] = 0
        self.end[:] = length
        self.delays[:] = self.ran
        self.started = True
        self.current = True

    def _can_step(self) -> bool:
        if self.ran >= self.horizon:
            return False
        return bool((self.end > self.pos).any()) or (self.period is not None and self.started)

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    waited = time.monotonic()
                    while not self._closed and self._pending is None and not self._can_step():
                        self._cond.wait()
                    if self._closed:
                        return
                    if self.ran < self.horizon:
                        self.wait_s += time.monotonic() - waited
                    if self._pending is not None:
                        self._apply(self._pending)
                        self._pending = None
                        self._cond.notify_all()
                    if not self._can_step():
                        continue
                    actions, source = self._next_actions()
                    slot, generation = self.ran, self._generation
                    self.in_step = True
                if self.period is not None:
                    now = time.monotonic()
                    if self.next_tick is not None and now < self.next_tick:
                        time.sleep(self.next_tick - now)
                    self.next_tick = max(self.next_tick or 0.0, time.monotonic() - self.period) + self.period
                started = time.monotonic()
                result = self.env.chunk_step(actions[:, None, :])
                with self._cond:
                    self.in_step = False
                    if generation != self._generation:  # a reset meanwhile: what ran belongs to no episode handed out
                        self._cond.notify_all()
                        continue
                    self._record(slot, started, actions, source, result)
                    self._cond.notify_all()
        except BaseException as exc:
            with self._cond:
                self._error = exc
                self.in_step = False
                self._cond.notify_all()

    def _next_actions(self) -> tuple[np.ndarray, np.ndarray]:
        n = self.num_envs
        has = self.end > self.pos
        actions = np.empty((n, self.action_dim), np.float32)
        source = np.full(n, ActionSource.current if self.current else ActionSource.previous, np.int8)
        rows = np.flatnonzero(has)
        actions[rows] = self.queue[rows, self.pos[rows]]
        self.pos[rows] += 1
        empty = ~has
        if empty.any():
            actions[empty] = self.last[empty] if self.hold else 0.0
            source[empty] = ActionSource.hold if self.hold else ActionSource.zero
        self.last = actions.copy()
        return actions, source

    def _record(self, slot: int, started: float, actions: np.ndarray, source: np.ndarray, result: Any) -> None:
        self.step_t[slot] = started
        self.applied[:, slot] = actions
        self.source[:, slot] = source
        self.rewards[:, slot] = np.asarray(result.rewards, np.float32)[:, 0]
        self.terminations[:, slot] = np.asarray(result.terminations, bool)[:, 0]
        self.truncations[:, slot] = np.asarray(result.truncations, bool)[:, 0]
        ended = self.terminations[:, slot] | self.truncations[:, slot]
        self.pos[ended] = self.end[ended]  # an ended episode's queue is dropped
        self.ran = slot + 1
        if self.ran == self.horizon:
            # The observation handed out: copied, since the loop steps on once the call has it.
            obs = {key: np.array(value, copy=True) for key, value in result.obs.items()}
            self.result = (obs, list(result.task_descriptions), dict(result.infos))
