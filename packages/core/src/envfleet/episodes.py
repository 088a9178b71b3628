"""Episode bookkeeping shared by backends: flags, rewards, finished envs, auto-reset.

The semantics every backend follows (documented in docs/concepts.md):

- A sub-step whose success check passes is a *termination*; the reward is
  ``reward_coef`` at that sub-step (0 otherwise).
- When an episode's length reaches ``max_episode_steps`` the sub-step is a *truncation*.
- An env whose episode ended (termination, unless ``ignore_terminations``, or
  truncation) is *finished*: it is not simulated any more, its reward is 0 and the
  flag that ended it stays True on every later sub-step, until its next reset.
- With ``auto_reset``, finished envs are reset at the end of the chunk to the next
  state id of a seeded cycle; the infos of that chunk still describe the episode
  that ended, and ``reset_state_id`` says where each env went (-1: not reset).

Infos per env at the end of each chunk: ``success_once`` (success at any sub-step of the
episode), ``success_at_end`` (success at its latest simulated sub-step: for an episode that
ended, at its last), ``success_at_reset`` (the task was already solved by the initial
state, when the backend can tell), ``episode_return``, ``episode_length``, ``state_id``,
``task_id``, ``episode_done`` (finished now), ``episode_ended`` (finished during this
chunk) and ``reset_state_id``; for a backend that reports failures (``record(fail=...)``) or its own
terminations (``record(terminated=...)``), whose terminations are then not all successes, ``success``
``[n, chunk]``: success per sub-step.

A backend calls :meth:`EpisodeTracker.begin` on reset, :meth:`EpisodeTracker.active`
before each sub-step (simulate only those envs), :meth:`EpisodeTracker.record` after
it, and :meth:`EpisodeTracker.end_chunk` after the last one. A backend that steps its envs one
at a time (the gymnasium backend) may instead keep each sub-step's results and account the whole
chunk with one :meth:`EpisodeTracker.record_chunk`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .env import ChunkStepResult
from .states import StateCycle  # its home until states.py gathered every way of choosing a state

__all__ = ["EpisodeTracker", "StateCycle", "ChunkFlags", "restarted_rows"]

#: Up to this many env sub-steps a chunk, :meth:`EpisodeTracker.record_chunk` runs env by env in Python.
_SMALL_CHUNK = 64


@dataclass
class ChunkFlags:
    """The per-sub-step outputs of one chunk and the envs that finished in it."""

    rewards: np.ndarray  # float32 [n, chunk]
    terminations: np.ndarray  # bool [n, chunk]
    truncations: np.ndarray  # bool [n, chunk]
    ended: np.ndarray  # bool [n]: episode ended during this chunk
    infos: dict[str, np.ndarray]
    #: bool [n, chunk], success per sub-step, kept only for a backend that reports failures
    #: (then its terminations are not all successes); ``infos["success"]``.
    successes: np.ndarray | None = None

    def to_result(self, obs: dict[str, Any], task_descriptions: list[str]) -> ChunkStepResult:
        """The chunk's :class:`~envfleet.env.ChunkStepResult`: these flags and infos with ``obs`` and ``task_descriptions``."""
        return ChunkStepResult(
            obs=obs,
            task_descriptions=task_descriptions,
            rewards=self.rewards,
            terminations=self.terminations,
            truncations=self.truncations,
            infos=self.infos,
        )


def restarted_rows(num_envs: int, chunk: int) -> ChunkFlags:
    """The flags of ``num_envs`` rows whose simulator was rebuilt during a chunk of ``chunk`` sub-steps:
    no reward, no termination, and a truncation at the last sub-step (the episode did not go on).

    >>> restarted_rows(2, 3).truncations.tolist()
    [[False, False, True], [False, False, True]]
    """
    truncations = np.zeros((num_envs, chunk), dtype=bool)
    truncations[:, -1:] = True
    return ChunkFlags(
        rewards=np.zeros((num_envs, chunk), dtype=np.float32),
        terminations=np.zeros((num_envs, chunk), dtype=bool),
        truncations=truncations,
        ended=np.ones(num_envs, dtype=bool),
        infos={},
    )


class EpisodeTracker:
    """Tracks the episode of each of ``num_envs`` envs. See the module doc."""

    def __init__(
        self,
        num_envs: int,
        max_episode_steps: int,
        reward_coef: float = 1.0,
        ignore_terminations: bool = False,
    ) -> None:
        self.n = int(num_envs)
        self.max_episode_steps = int(max_episode_steps)
        self.reward_coef = float(reward_coef)
        self.ignore_terminations = bool(ignore_terminations)
        self.state_ids = np.full(self.n, -1, dtype=np.int64)
        self.task_ids = np.full(self.n, -1, dtype=np.int64)
        self.length = np.zeros(self.n, dtype=np.int64)
        self.ret = np.zeros(self.n, dtype=np.float32)
        self.success_once = np.zeros(self.n, dtype=bool)
        self.last_success = np.zeros(self.n, dtype=bool)
        self.success_at_reset = np.zeros(self.n, dtype=bool)
        self.done = np.ones(self.n, dtype=bool)  # nothing to simulate before the first reset
        self.end_term = np.zeros(self.n, dtype=bool)
        self.end_trunc = np.zeros(self.n, dtype=bool)
        self._chunk: ChunkFlags | None = None

    def begin(
        self, envs: np.ndarray | slice, state_ids: np.ndarray, task_ids: np.ndarray, success_at_reset: np.ndarray | None = None
    ) -> None:
        """Start new episodes for ``envs`` (indices or a slice).

        :param success_at_reset: whether each initial state already passes the task's success
            check, for a backend that can tell (it should be False: a True is reported as
            ``success_at_reset`` and counted by the worker's metrics, which warn about it).
        """
        self.state_ids[envs] = state_ids
        self.task_ids[envs] = task_ids
        self.length[envs] = 0
        self.ret[envs] = 0.0
        self.success_once[envs] = False
        self.last_success[envs] = False
        self.success_at_reset[envs] = False if success_at_reset is None else success_at_reset
        self.done[envs] = False
        self.end_term[envs] = False
        self.end_trunc[envs] = False

    def active(self) -> np.ndarray:
        """Bool mask of the envs to simulate at the next sub-step."""
        return ~self.done

    def start_chunk(self, chunk: int) -> None:
        """Prepare the flag arrays for a chunk of ``chunk`` sub-steps."""
        self._chunk = ChunkFlags(
            rewards=np.zeros((self.n, chunk), dtype=np.float32),
            terminations=np.zeros((self.n, chunk), dtype=bool),
            truncations=np.zeros((self.n, chunk), dtype=bool),
            ended=np.zeros(self.n, dtype=bool),
            infos={},
        )

    def record(
        self,
        k: int,
        simulated: np.ndarray,
        success: np.ndarray,
        fail: np.ndarray | None = None,
        reward: np.ndarray | None = None,
        *,
        terminated: np.ndarray | None = None,
        truncated: np.ndarray | None = None,
    ) -> None:
        """Account sub-step ``k``: ``simulated`` envs ran it and ``success`` says which succeeded.

        :param fail: envs whose task failed at this sub-step (a termination that is not a success),
            for a simulator that reports failure (ManiSkill's ``info["fail"]``); ``None``: none.
        :param reward: the simulator's own reward of this sub-step, per env, scaled by ``reward_coef``;
            ``None``: ``reward_coef`` on success, else 0.
        :param terminated: for a simulator that says itself when its episodes end (gymnasium's
            ``terminated``): the terminations of this sub-step, whatever ``success`` says (a success
            then ends nothing by itself, and ``infos["success"]`` keeps success per sub-step);
            ``None``: a success (or a ``fail``) is a termination.
        :param truncated: envs the simulator truncated at this sub-step (gymnasium's ``truncated``),
            besides those that reach ``max_episode_steps``; ``None``: none.
        """
        c = self._chunk
        assert c is not None, "start_chunk() first"
        # Whole-array masks, no index arrays: a dozen ufunc calls whatever the batch size.
        sim = np.asarray(simulated, dtype=bool)
        succ = np.asarray(success, dtype=bool) & sim
        if terminated is not None:
            term = np.asarray(terminated, dtype=bool) & sim
        else:
            term = succ if fail is None else succ | (np.asarray(fail, dtype=bool) & sim)
        self.length += sim
        if reward is None:
            reward = succ * np.float32(self.reward_coef)
        else:
            reward = np.where(sim, np.asarray(reward, dtype=np.float32) * np.float32(self.reward_coef), np.float32(0))
        self.ret += reward
        self.success_once |= succ
        self.last_success = np.where(sim, succ, self.last_success)
        if fail is not None or terminated is not None:
            if c.successes is None:
                c.successes = np.zeros_like(c.terminations)
            c.successes[:, k] = self.last_success  # a finished env keeps its episode's last
        trunc = sim & (self.length >= self.max_episode_steps)
        if truncated is not None:
            trunc |= np.asarray(truncated, dtype=bool) & sim
        ends = trunc | term if not self.ignore_terminations else trunc
        if not self.ignore_terminations:
            self.end_term |= term
        self.end_trunc |= trunc
        self.done |= ends
        c.ended |= ends
        c.rewards[:, k] = reward
        # Envs finished before this sub-step keep the flag that ended them.
        c.terminations[:, k] = np.where(sim, term, self.end_term)
        c.truncations[:, k] = np.where(sim, trunc, self.end_trunc)

    def steps_left(self) -> np.ndarray:
        """Per env, the sub-steps its episode may still run before ``max_episode_steps`` truncates it (0: finished)."""
        return (self.max_episode_steps - self.length) * ~self.done  # a running episode is shorter than the limit

    def record_chunk(
        self,
        simulated: np.ndarray,
        success: np.ndarray,
        reward: np.ndarray | None = None,
        *,
        terminated: np.ndarray | None = None,
        truncated: np.ndarray | None = None,
    ) -> None:
        """Account a whole chunk at once: the same as :meth:`record` for each of its sub-steps, with
        ``[n, chunk]`` arrays (``simulated[:, k]`` the envs that ran sub-step ``k``, and so on), for a
        backend that steps its envs one by one and has their results only as it goes.

        The caller runs each env from the chunk's first sub-step on (``simulated[i]`` is a run of True
        from the start, none for an env already finished), and none after its episode ended: a
        termination (unless ``ignore_terminations``), a truncation, or :meth:`steps_left` sub-steps."""
        c = self._chunk
        assert c is not None, "start_chunk() first"
        sim = np.asarray(simulated, dtype=bool)
        n, chunk = sim.shape
        if chunk == 0:
            return
        if n * chunk <= _SMALL_CHUNK:
            self._record_chunk_small(c, sim, success, reward, terminated, truncated)
            return
        succ = np.asarray(success, dtype=bool) & sim
        term = np.asarray(terminated, dtype=bool) & sim if terminated is not None else succ
        ran = sim.sum(axis=1)  # sub-steps each env ran: sub-step k ran iff k < ran
        length = self.length[:, None] + np.arange(1, chunk + 1)  # the episode's length after sub-step k, where it ran
        if reward is None:
            rewards = succ * np.float32(self.reward_coef)
        else:
            rewards = np.where(sim, np.asarray(reward, dtype=np.float32) * np.float32(self.reward_coef), np.float32(0))
        # record()'s float32 sums, one sub-step after the other (accumulate adds left to right): the same bits.
        self.ret = np.add.accumulate(np.concatenate([self.ret[:, None], rewards], axis=1), axis=1)[:, -1]
        # last_success after sub-step k: success at the latest sub-step the env ran up to k, else the one before the chunk.
        final = np.where(ran > 0, succ[np.arange(n), np.maximum(ran - 1, 0)], self.last_success)
        last = np.where(sim, succ, final[:, None])
        if terminated is not None:
            c.successes = last
        trunc = sim & (length >= self.max_episode_steps)
        if truncated is not None:
            trunc |= np.asarray(truncated, dtype=bool) & sim
        if self.ignore_terminations:
            ends = trunc
            end_term = self.end_term[:, None]
        else:
            ends = trunc | term
            end_term = self.end_term[:, None] | np.logical_or.accumulate(term, axis=1)
            self.end_term = end_term[:, -1].copy()
        end_trunc = self.end_trunc[:, None] | np.logical_or.accumulate(trunc, axis=1)
        self.end_trunc = end_trunc[:, -1].copy()
        c.rewards[:] = rewards
        c.terminations[:] = np.where(sim, term, end_term)
        c.truncations[:] = np.where(sim, trunc, end_trunc)
        ended = ends.any(axis=1)
        c.ended |= ended
        self.done |= ended
        self.length += ran
        self.success_once |= succ.any(axis=1)
        self.last_success = last[:, -1].copy()

    def _record_chunk_small(self, c: ChunkFlags, sim: np.ndarray, success: Any, reward: Any, terminated: Any, truncated: Any) -> None:
        """:meth:`record_chunk` for a small chunk, env by env in Python: a few dozen numpy calls cost more than
        the loop. The same arithmetic (float32 rewards and sums), so the same bits."""
        n, chunk = sim.shape
        ran = sim.sum(axis=1).tolist()
        succ = np.asarray(success, dtype=bool).tolist()
        term = np.asarray(terminated, dtype=bool).tolist() if terminated is not None else succ
        trunc_in = np.asarray(truncated, dtype=bool).tolist() if truncated is not None else None
        rew = np.asarray(reward, dtype=np.float32).tolist() if reward is not None else None
        coef = np.float32(self.reward_coef)
        zero = np.float32(0)
        ignore = self.ignore_terminations
        limit = self.max_episode_steps
        length, ret = self.length.tolist(), self.ret.tolist()
        last_success, end_term, end_trunc = self.last_success.tolist(), self.end_term.tolist(), self.end_trunc.tolist()
        rewards = np.zeros((n, chunk), dtype=np.float32)
        terminations = np.zeros((n, chunk), dtype=bool)
        truncations = np.zeros((n, chunk), dtype=bool)
        successes = np.zeros((n, chunk), dtype=bool) if terminated is not None else None
        for i in range(n):
            m, total = ran[i], np.float32(ret[i])
            row_rewards, row_terms, row_truncs, row_succ = [zero] * chunk, [False] * chunk, [False] * chunk, [False] * chunk
            last = last_success[i]
            for k in range(m):
                ok = succ[i][k]
                t = term[i][k] if terminated is not None else ok
                r = (np.float32(rew[i][k]) * coef) if rew is not None else (coef if ok else zero)
                total = total + r
                length[i] += 1
                u = length[i] >= limit or (trunc_in is not None and trunc_in[i][k])
                row_rewards[k], row_terms[k], row_truncs[k] = r, t, u
                last = ok
                row_succ[k] = last
                if t and not ignore:
                    end_term[i] = True
                if u:
                    end_trunc[i] = True
                if u or (t and not ignore):
                    self.done[i] = True
                    c.ended[i] = True
                if ok:
                    self.success_once[i] = True
            for k in range(m, chunk):  # finished envs keep the flag that ended them, and their last success
                row_terms[k], row_truncs[k], row_succ[k] = end_term[i], end_trunc[i], last
            ret[i], last_success[i] = float(total), last  # a float32 as a float: exact, and exact back
            rewards[i] = row_rewards
            terminations[i] = row_terms
            truncations[i] = row_truncs
            if successes is not None:
                successes[i] = row_succ
        c.rewards[:] = rewards
        c.terminations[:] = terminations
        c.truncations[:] = truncations
        if successes is not None:
            c.successes = successes
        self.length = np.asarray(length, dtype=np.int64)
        self.ret = np.asarray(ret, dtype=np.float32)
        self.last_success = np.asarray(last_success, dtype=bool)
        self.end_term = np.asarray(end_term, dtype=bool)
        self.end_trunc = np.asarray(end_trunc, dtype=bool)

    def end_chunk(self) -> ChunkFlags:
        """Finish the chunk: flags, which envs ended, and per-env episode infos."""
        c = self._chunk
        assert c is not None, "start_chunk() first"
        self._chunk = None
        c.infos = {
            "success_once": self.success_once.copy(),
            "success_at_end": self.last_success.copy(),
            "success_at_reset": self.success_at_reset.copy(),
            "episode_return": self.ret.copy(),
            "episode_length": self.length.copy(),
            "state_id": self.state_ids.copy(),
            "task_id": self.task_ids.copy(),
            "episode_done": self.done.copy(),
            "episode_ended": c.ended.copy(),
            "reset_state_id": np.full(self.n, -1, dtype=np.int64),
        }
        if c.successes is not None:
            c.infos["success"] = c.successes
        return c

    def get_state(self) -> dict[str, Any]:
        """Counters, for offload."""
        return {
            k: getattr(self, k).copy()
            for k in (
                "state_ids",
                "task_ids",
                "length",
                "ret",
                "success_once",
                "last_success",
                "success_at_reset",
                "done",
                "end_term",
                "end_trunc",
            )
        }

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`get_state`."""
        for key, value in state.items():
            setattr(self, key, np.array(value, copy=True))
