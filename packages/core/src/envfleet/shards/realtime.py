"""``train.execution.clock: wall`` inside a shard: the envs step on while the policy thinks.

One job: the shard's control loop. Between the manager's commands the shard steps its envs one
sub-step at a time (at ``target_step_hz``, or as fast as the simulator runs) from each env's queue
of actions, checking for the next command after each sub-step. A call (:meth:`WallExecutor.exchange`)
hands in each env's new chunk, computed from the observation the last call returned; it replaces
the queue at the next sub-step boundary, aligned to that observation (the sub-steps already run
since then are the delay: the chunk starts at that index), and the call returns once ``horizon``
sub-steps have run since that observation, with what ran. No round trip per sub-step: the loop runs
here, next to the simulator, and on the shard's one thread, the one that built the simulator (GL
contexts and many simulators belong to the thread that made them).

The loop runs at most ``horizon`` sub-steps past the last observation: a policy slower than that
finds the envs waiting there. Without ``target_step_hz`` it also waits while no env has an action
queued (a simulator has nothing to run); with it, envs whose queues are empty apply ``on_empty``
(hold or zeros) at the paced rate, as a robot's controller would. Besides what ran, a result says
how long the loop waited for the chunk in that call (``infos["env_wait_s"]``), when each sub-step
started (``infos["substep_t"]``, the shard's ``time.monotonic()``) and the rate they ran at
(``infos["substep_hz"]``).

Between calls each sub-step is one ``chunk_step`` of length 1 of the backend: it is a control tick
after which the next chunk may arrive, so it renders. ``wall_tick: k`` runs up to ``k`` queued
sub-steps per backend call instead (one render each), and a chunk arriving meanwhile takes over
at the end of that run, still aligned to its observation. Once a call's chunk is in, no other can
arrive before the window ends: without pacing, the rest of the window runs as one ``chunk_step``
(render-last renders only the observation handed out), and its sub-steps share that call's time
in ``substep_t``.
"""

from __future__ import annotations

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
        self.num_envs, self.action_dim = n, int(action_dim)
        self.horizon = int(sub_steps) if execution.horizon is None else int(execution.horizon)
        self.hold = str(execution.on_empty) == "hold"
        self.smooth = bool(execution.smooth_overlap)
        self.period = None if execution.target_step_hz is None else 1.0 / float(execution.target_step_hz)
        self.tick = int(execution.get("wall_tick", 1))
        self.queue = np.zeros((n, max(int(sub_steps), self.horizon), self.action_dim), np.float32)
        self.pos = np.zeros(n, np.int64)  # queue[i, pos[i]:end[i]] runs next
        self.end = np.zeros(n, np.int64)
        self.last = np.zeros((n, self.action_dim), np.float32)
        self.reset()

    def reset(self, env_ids: Any = None) -> None:
        """Forget every queue (a reset of every env follows); with ``env_ids``, only those envs' (a reset of some)."""
        n, h = self.num_envs, self.horizon
        if env_ids is not None:
            self.pos[env_ids] = self.end[env_ids]
            self.last[env_ids] = 0.0
            return
        self.pos[:] = 0
        self.end[:] = 0
        self.last[:] = 0.0
        self.started = False  # a chunk arrived since the last reset
        self.current = False  # the queue holds the chunk of the call in flight (else the previous call's)
        self.ran = 0  # sub-steps run since the last observation handed out
        self.delays = np.zeros(n, np.int64)
        self.rewards = np.zeros((n, h), np.float32)
        self.terminations = np.zeros((n, h), bool)
        self.truncations = np.zeros((n, h), bool)
        self.applied = np.zeros((n, h, self.action_dim), np.float32)
        self.source = np.zeros((n, h), np.int8)
        self.step_t = np.zeros(h, np.float64)  # when each sub-step of the window started (time.monotonic())
        self.idle_since: float | None = None  # when the loop ran out of work in this window
        self.wait_s = 0.0
        self.result: Any = None
        self.next_tick: float | None = None

    # .............................................................................................. between calls
    def run_until_command(self, channel: Any) -> None:
        """Step while there is work and no command waits on ``channel``; return when one does (or may)."""
        while self._can_step():
            if self.period is not None and self.next_tick is not None:
                if channel.poll(max(self.next_tick - time.monotonic(), 0.0)):
                    return
            elif channel.poll(0.0):
                return
            queued = int((self.end - self.pos).max())
            self._step(max(1, min(self.tick, self.horizon - self.ran, queued)))
        if self.ran < self.horizon and self.idle_since is None:
            self.idle_since = time.monotonic()  # nothing to run: the envs wait for the next chunk

    # .............................................................................................. the call
    def exchange(self, chunk: np.ndarray) -> tuple[Any, dict[str, Any], tuple[np.ndarray, ...]]:
        """Hand in each env's chunk ``[n, sub_steps, A]``; return ``(the last sub-step's result, infos, flags)``
        once ``horizon`` sub-steps have run since the last observation."""
        if self.idle_since is not None:
            self.wait_s += time.monotonic() - self.idle_since
            self.idle_since = None
        self._apply(chunk)
        if self.period is None and self.ran < self.horizon:
            self._step(self.horizon - self.ran)  # no command can come before the window ends: one backend call, one render
        while self.ran < self.horizon:
            self._step()
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
        self.ran, self.wait_s, self.current = 0, 0.0, False
        self.rewards[:] = 0.0
        self.terminations[:] = False
        self.truncations[:] = False
        return self.result, infos, flags

    # .............................................................................................. the loop
    def _apply(self, chunk: np.ndarray) -> None:
        """The arrived chunk replaces each env's queue, aligned to the last observation: it starts at index ``ran``."""
        incoming = chunk[:, min(self.ran, chunk.shape[1]) :].copy()
        if self.smooth:
            for i in np.flatnonzero(self.end > self.pos):
                incoming[i : i + 1] = smooth_overlap(self.queue[i : i + 1, self.pos[i] : self.end[i]], incoming[i : i + 1])
        length = incoming.shape[1]
        if length > self.queue.shape[1]:  # a longer chunk than any before (no fixed chunk length)
            self.queue = np.zeros((self.num_envs, length, self.action_dim), np.float32)
        self.queue[:, :length] = incoming
        self.pos[:] = 0
        self.end[:] = length
        self.delays[:] = self.ran
        self.started = self.current = True

    def _can_step(self) -> bool:
        if self.ran >= self.horizon:
            return False
        return bool((self.end > self.pos).any()) or (self.period is not None and self.started)

    def _next(self) -> tuple[np.ndarray, np.ndarray]:
        """The next sub-step's action and its source, per env; the queues advance."""
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

    def _step(self, count: int = 1) -> None:
        """Run ``count`` sub-steps in one backend call (its render-last renders the last only)."""
        slot = self.ran
        window = slice(slot, slot + count)
        for k in range(slot, slot + count):
            self.applied[:, k], self.source[:, k] = self._next()
        if self.period is not None:
            now = time.monotonic()
            if self.next_tick is not None and now < self.next_tick:
                time.sleep(self.next_tick - now)
            self.next_tick = max(self.next_tick or 0.0, time.monotonic() - self.period) + self.period
        started = time.monotonic()
        result = self.env.chunk_step(self.applied[:, window])
        # Sub-steps run in one call share its time evenly.
        self.step_t[window] = started + (time.monotonic() - started) * np.arange(count) / count
        self.rewards[:, window] = np.asarray(result.rewards, np.float32)
        self.terminations[:, window] = np.asarray(result.terminations, bool)
        self.truncations[:, window] = np.asarray(result.truncations, bool)
        ended = (self.terminations[:, window] | self.truncations[:, window]).any(axis=1)
        self.pos[ended] = self.end[ended]  # an ended episode's queue is dropped
        self.ran = slot + count
        if self.ran == self.horizon:
            # The observation handed out: copied, since the loop steps on once the call has it.
            obs = {key: np.array(value, copy=True) for key, value in result.obs.items()}
            self.result = (obs, list(result.task_descriptions), dict(result.infos))
