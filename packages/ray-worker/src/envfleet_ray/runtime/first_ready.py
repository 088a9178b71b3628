"""``FirstReadyGroup``: first-ready stepping of one stage across an :class:`~envfleet_ray.runtime.group.EnvWorkerGroup`.

Each worker steps its envs first-ready (:mod:`envfleet_ray.runtime.ready_calls`, on
:meth:`ProcessEnvManager.send_chunk <envfleet.shards.manager.ProcessEnvManager.send_chunk>`); this
module does the same over the group. An env is named by its **global id**, ``rank * num_envs +
local id`` (the row it has in a lockstep step of the stage). :meth:`FirstReadyGroup.send` starts a
chunk for any ready envs, of any workers; :meth:`FirstReadyGroup.recv` returns the results of
whichever workers are ready: it keeps one ``recv_chunk`` call open per worker with envs in flight
and takes the answers with ``ray.wait``, until ``min_ready`` envs of the whole group are done or
``timeout_s`` has passed. Each row carries its global id in the non-tensor ``env_ids`` column.

The manager's rules hold per worker (docs/concepts.md, "First-ready stepping"): the unit is the
shard, auto-reset is the backend's, a crashed simulator restarts in the background and its envs
come back with ``sim_restarted``. A worker that dies is recreated through the group's own revival
(:meth:`~envfleet_ray.runtime.group.EnvWorkerGroup._revive`, bounded by ``max_restarts``), in a
thread of its own, while the other workers' envs keep returning results. Once it is back, every
env of its stage that had been stepped comes back once with the stand-in rows of a lockstep step
(:meth:`~envfleet_ray.runtime.worker.EnvWorker.restart_step_result`: the last reset's
observations, zero rewards, truncated at the last sub-step, ``sim_restarted`` and
``worker_restarted`` True), and takes actions again after that. A worker recreated by another
call of the group (a lockstep call, another stage's ``FirstReadyGroup``) is noticed the same way.
"""

from __future__ import annotations

import enum
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import ray
from ray.exceptions import RayTaskError

from envfleet.dataproto import DataProto
from envfleet.errors import InvalidInputError
from envfleet.validation import as_env_ids

from .futures import unwrap_task_error
from .recovery import concat_harmonized
from .routes import DEAD_WORKER_ERRORS

# Annotation only: a FirstReadyGroup is a way of stepping one EnvWorkerGroup, which builds it; one object's
# two sides (the group's calls and the first-ready order over them).
if TYPE_CHECKING:
    from .group import EnvWorkerGroup

__all__ = ["EnvPhase", "FirstReadyGroup"]

#: How often a ``recv`` waiting on other workers looks whether a revival has ended.
_REVIVAL_POLL_S = 0.05


class EnvPhase(enum.Enum):
    """Where an env of a :class:`FirstReadyGroup` stands."""

    READY = "ready"  #: its last result delivered: it takes actions
    STEPPING = "stepping"  #: a chunk sent, its result not delivered yet
    RESTARTED = "restarted"  #: its worker died: a sim_restarted row waits for recv (once the worker is recreated)


class _Revival:
    """The group's revival of some dead workers, run in a thread; ``error`` is what it raised."""

    def __init__(self, group: EnvWorkerGroup, dead: dict[int, BaseException]) -> None:
        self.ranks = set(dead)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(group, dead), name="envfleet-revive", daemon=True)
        self.thread.start()

    def _run(self, group: EnvWorkerGroup, dead: dict[int, BaseException]) -> None:
        try:
            group._revive(dead)
        except BaseException as exc:  # handed to the caller's next send or recv
            self.error = exc

    @property
    def done(self) -> bool:
        """Whether the revival has ended, recreated or failed."""
        return not self.thread.is_alive()


class FirstReadyGroup:
    """First-ready stepping of stage ``stage_id`` over every worker of ``group`` (see the module doc).

    Reset the envs through the group first (:meth:`~envfleet_ray.runtime.group.EnvWorkerGroup.reset_envs_to_state_ids`);
    lockstep calls of the same stage raise while chunks are in flight.

    :param group: the group whose workers step.
    :param stage_id: the pipeline stage stepped.
    :param mode: ``"train"`` or ``"val"``.
    """

    def __init__(self, group: EnvWorkerGroup, stage_id: int = 0, mode: str = "train") -> None:
        if isinstance(stage_id, bool) or not isinstance(stage_id, (int, np.integer)) or not 0 <= stage_id < group.stage_num:
            raise InvalidInputError(f"stage_id must be an int in [0, {group.stage_num}), got {stage_id!r}")
        self.group = group
        self.stage_id = int(stage_id)
        self.mode = str(mode)
        self.num_envs = group.num_workers * group.num_envs  #: envs of the stage over the group (global ids 0..num_envs-1)
        self.phase = np.full(self.num_envs, EnvPhase.READY, dtype=object)
        self._touched = np.zeros(self.num_envs, dtype=bool)  # stepped since this object exists
        self._handles = list(group.workers)  # the actor each rank had when last called
        self._calls: dict[int, Any] = {}  # rank -> its open recv_chunk call
        self._held: list[DataProto] = []  # results received, not yet delivered (max_ready)
        self._chunk: int | None = group._chunk
        self._revivals: list[_Revival] = []  # revivals under way

    # ------------------------------------------------------------------ send
    def send(self, env_ids: Any, actions: Any) -> None:
        """Start a chunk for the ready envs ``env_ids`` (global ids) with ``actions`` ``[len(env_ids), chunk, action_dim]``.

        Returns once every worker has taken its part (the simulators step on).

        :raises InvalidInputError: bad or repeated ids, actions of another shape, an env not ready
            (nothing is sent then); what a worker's ``send_chunk`` raises (part of a shard's envs, ...):
            the other workers' parts are sent, and their envs are stepping.
        """
        self._notice_revived()
        ids = as_env_ids(env_ids, self.num_envs)
        if ids.size == 0:
            raise InvalidInputError("send needs at least one env id, got none")
        acts = np.asarray(actions)
        if acts.ndim != 3 or acts.shape[0] != ids.size:
            raise InvalidInputError(f"actions must have shape [len(env_ids)={ids.size}, chunk, action_dim], got {list(acts.shape)}")
        busy = [int(e) for e in ids if self.phase[e] is not EnvPhase.READY]
        if busy:
            why = {
                EnvPhase.STEPPING: "its chunk is in flight or its result waits for recv",
                EnvPhase.RESTARTED: "its worker died: its sim_restarted row waits for recv",
            }
            reasons = "; ".join(f"env {e}: {why[self.phase[e]]}" for e in busy[:8])
            raise InvalidInputError(
                f"stage {self.stage_id}: env(s) {busy} not ready for actions ({reasons}); send takes only envs whose last result recv returned"
            )
        if self._chunk is not None and any(p is EnvPhase.STEPPING for p in self.phase) and acts.shape[1] != self._chunk:
            raise InvalidInputError(f"chunks of {self._chunk} sub-steps are in flight; these actions have {acts.shape[1]}")
        n = self.group.num_envs
        ranks = ids // n
        sent: dict[int, Any] = {}
        for rank in np.unique(ranks).tolist():
            mine = ranks == rank
            part = DataProto.from_dict(
                non_tensors={"env_ids": ids[mine] % n, "actions": acts[mine]}, meta_info={"stage_id": self.stage_id, "mode": self.mode}
            )
            sent[rank] = self.group.workers[rank].send_chunk.remote(part)
        dead: dict[int, BaseException] = {}
        error: BaseException | None = None
        for rank, ref in sent.items():
            self._touched[ids[ranks == rank]] = True
            try:
                ray.get(ref)
            except DEAD_WORKER_ERRORS as exc:
                dead[rank] = exc
            except RayTaskError as exc:
                error = error or unwrap_task_error(exc)
                continue
            self.phase[ids[ranks == rank]] = EnvPhase.STEPPING
        self._chunk = int(acts.shape[1])
        if dead:
            self._revive(dead)
        if error is not None:
            raise error

    # ------------------------------------------------------------------ receive
    def recv(self, min_ready: int, timeout_s: float | None = None, max_ready: int | None = None) -> DataProto:
        """The results of at least ``min_ready`` envs (of any workers), or, with ``timeout_s``, of every
        env done by then (possibly none); at most ``max_ready`` rows (whole shards, as the manager's
        ``max_ready``), the rest kept for the next call. Each worker is asked for at most ``max_ready``
        envs; an answer to a call an earlier ``recv`` opened is never split.

        Rows are in ascending global id; the non-tensor ``env_ids`` column names each row's env.

        :raises InvalidInputError: ``min_ready`` below 1 or above the envs stepping or restarted;
            ``max_ready`` below ``min_ready``.
        """
        self._notice_revived()
        waiting = int(np.count_nonzero(self.phase != EnvPhase.READY))
        if isinstance(min_ready, bool) or not isinstance(min_ready, (int, np.integer)) or not 1 <= min_ready <= self.num_envs:
            raise InvalidInputError(
                f"min_ready must be an integer in 1..{self.num_envs} (the stage's envs over the group), got {min_ready!r}"
            )
        if max_ready is not None and (isinstance(max_ready, bool) or not isinstance(max_ready, (int, np.integer)) or max_ready < min_ready):
            raise InvalidInputError(f"max_ready must be an integer >= min_ready={min_ready}, or None; got {max_ready!r}")
        if min_ready > waiting:
            raise InvalidInputError(
                f"stage {self.stage_id}: min_ready={min_ready}, but only {waiting} envs have chunks in flight or results waiting: "
                "send more envs first, or ask for fewer"
            )
        end = None if timeout_s is None else time.monotonic() + max(float(timeout_s), 0.0)
        while True:
            self._notice_revived()
            self._collect_restarted()
            self._open_calls(max_ready)
            if self._held_rows() >= min_ready or not (self._calls or self._revivals):
                break
            left = None if end is None else max(end - time.monotonic(), 0.0)
            if self._revivals:  # look at them now and then
                left = _REVIVAL_POLL_S if left is None else min(left, _REVIVAL_POLL_S)
            refs = list(self._calls.values())
            if refs:
                ray.wait(refs, num_returns=1, timeout=left)
                done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
                self._take(done)
            elif left:
                time.sleep(left)
            if end is not None and time.monotonic() >= end:
                self._notice_revived()
                self._collect_restarted()
                break
        return self._deliver(max_ready)

    def _open_calls(self, max_ready: int | None) -> None:
        """One ``recv_chunk`` call open on every worker with envs stepping and none open, for at most ``max_ready`` envs."""
        n = self.group.num_envs
        reviving = self._reviving()
        for rank in range(self.group.num_workers):
            if rank in self._calls or rank in reviving:
                continue
            rows = self.phase[rank * n : (rank + 1) * n]
            held = {int(e) for part in self._held for e in part.non_tensor_batch["env_ids"] if e // n == rank}
            stepping = [e for e in range(n) if rows[e] is EnvPhase.STEPPING and rank * n + e not in held]
            if stepping:
                self._calls[rank] = self.group.workers[rank].recv_chunk.remote(self.stage_id, 1, None, max_ready, self.mode)

    def _take(self, done: list[Any]) -> None:
        """Read the answered calls: results are held, dead workers revived, a worker's error raised."""
        by_ref = {ref: rank for rank, ref in self._calls.items()}
        dead: dict[int, BaseException] = {}
        error: BaseException | None = None
        for ref in done:
            rank = by_ref[ref]
            del self._calls[rank]
            try:
                part: DataProto = ray.get(ref)
            except DEAD_WORKER_ERRORS as exc:
                dead[rank] = exc
                continue
            except RayTaskError as exc:
                error = error or unwrap_task_error(exc)
                continue
            part.non_tensor_batch["env_ids"] = part.non_tensor_batch["env_ids"] + rank * self.group.num_envs
            self._held.append(part)
        if dead:
            self._revive(dead)
        if error is not None:
            raise error

    def _held_rows(self) -> int:
        return sum(len(part) for part in self._held)

    # ------------------------------------------------------------------ dead workers
    def _revive(self, dead: dict[int, BaseException]) -> None:
        """Start recreating the workers ``dead`` not recreated nor being recreated (the group's revival, in a
        thread); their stepped envs are restarted from now on, their rows come once the workers are back."""
        reviving = self._reviving()
        fresh = {r: exc for r, exc in dead.items() if self.group.workers[r] is self._handles[r] and r not in reviving}
        for rank in dead:
            self._forget(rank)
        if fresh:
            self._revivals.append(_Revival(self.group, fresh))

    def _notice_revived(self) -> None:
        """Envs of workers recreated since this object last called them: a restarted row waits for each stepped one.

        :raises WorkerDiedError: a revival failed (``max_restarts`` spent, no node for the worker, ...).
        """
        ended = [revival for revival in self._revivals if revival.done]
        self._revivals = [revival for revival in self._revivals if not revival.done]
        for revival in ended:
            if revival.error is not None:
                raise revival.error
        reviving = self._reviving()
        for rank, worker in enumerate(self.group.workers):
            if worker is self._handles[rank] or rank in reviving:
                continue
            self._handles[rank] = worker
            self._forget(rank)

    def _forget(self, rank: int) -> None:
        """Worker ``rank`` died: drop its open call and held rows; its stepped envs are restarted."""
        n = self.group.num_envs
        self._calls.pop(rank, None)
        self._held = [p for p in self._held if not (p.non_tensor_batch["env_ids"] // n == rank).any()]
        for env in range(rank * n, (rank + 1) * n):
            if self._touched[env]:
                self.phase[env] = EnvPhase.RESTARTED

    def _reviving(self) -> set[int]:
        """The ranks being recreated now."""
        return {rank for revival in self._revivals for rank in revival.ranks}

    def _collect_restarted(self) -> None:
        """Hold the stand-in rows of every restarted env (its worker's :meth:`restart_step_result`)."""
        n = self.group.num_envs
        reviving = list(self._reviving())
        restarted = np.nonzero(self.phase == EnvPhase.RESTARTED)[0]
        restarted = restarted[~np.isin(restarted // n, reviving)]
        if restarted.size == 0:
            return
        chunk = self._chunk if self._chunk is not None else 1
        ranks = np.unique(restarted // n).tolist()
        refs = {rank: self.group.workers[rank].restart_step_result.remote(self.stage_id, chunk, self.mode) for rank in ranks}
        for rank, ref in refs.items():
            local = restarted[restarted // n == rank] % n
            part = ray.get(ref).select_idxs(local)
            part.non_tensor_batch["env_ids"] = local + rank * n
            self._held.append(part)
            self.phase[local + rank * n] = EnvPhase.STEPPING  # its row is held: delivered by _deliver

    # ------------------------------------------------------------------ deliver
    def _deliver(self, max_ready: int | None) -> DataProto:
        chosen: list[DataProto] = []
        count = 0
        for part in self._held:
            if max_ready is not None and chosen and count + len(part) > max_ready:
                break
            chosen.append(part)
            count += len(part)
        self._held = self._held[len(chosen) :]
        if not chosen:
            return self._empty()
        out = concat_harmonized(chosen)
        ids = np.asarray(out.non_tensor_batch["env_ids"], dtype=np.int64)
        order = np.argsort(ids, kind="stable")
        out = out.select_idxs(order) if (order != np.arange(len(order))).any() else out
        out.non_tensor_batch["env_ids"] = ids[order]
        out.meta_info = {"stage_id": self.stage_id}
        self.phase[ids] = EnvPhase.READY
        return out

    def _empty(self) -> DataProto:
        """No row: the columns of a result with nothing in them."""
        return DataProto.from_dict(non_tensors={"env_ids": np.zeros(0, dtype=np.int64)}, meta_info={"stage_id": self.stage_id})

    @property
    def busy(self) -> bool:
        """Whether any env has a chunk in flight or a result waiting."""
        return bool((self.phase != EnvPhase.READY).any()) or bool(self._held)
