"""``ProcessEnvManager``: one stage's envs as shard processes, observations through shared memory.

The stage's ``num_envs`` envs are split into shards of the backend's
``envs_per_process``; each shard is a fresh Python process
(:mod:`envfleet.shards.server`) that builds its own simulator. A call is sent to every
shard first and then awaited, so shards work in parallel. Images are written once
by the child into shared memory owned by this object; only small arrays come back
over the socket.

A shard that dies or misses its deadline is killed, rebuilt and reset to the
state ids its envs last reset to; the call it failed returns, for its envs, the
fresh reset's observations, zero rewards, ``truncations`` True at the last
sub-step and ``infos["sim_restarted"]`` True. Too many restarts in a window raise
:class:`~envfleet.errors.RestartLimitError`.

>>> mgr = ProcessEnvManager(cfg, stage_id=0)         # doctest: +SKIP
>>> mgr.start_simulator()                            # doctest: +SKIP
>>> mgr.reset_envs_to_state_ids(np.arange(4))        # doctest: +SKIP
>>> out = mgr.chunk_step(np.zeros((4, 8, 7), np.float32))  # doctest: +SKIP
>>> mgr.close()                                      # doctest: +SKIP
"""

from __future__ import annotations

import logging
import os
import pickle
import socket
import subprocess
import threading
import time
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from ..env import ChunkStepResult, EnvContext, ResetResult
from ..errors import EnvFleetSimulatorError, InvalidInputError, RestartLimitError
from ..plugins import BackendSpec, get_backend
from ..validation import StateTable, as_env_ids, check_actions, check_reset_ids
from .handle import RestartBudget, ShardHandle, ShardSet
from .interpreter import shard_command
from .messages import Command, Outcome, RemoteError, Reply
from .recycling import RecyclingPool
from .replies import ReplyMerger
from .shm import ShmBlock, ShmLayout
from .wire import Channel

__all__ = ["ProcessEnvManager", "ManagerStats"]

log = logging.getLogger(__name__)


@dataclass
class ManagerStats:
    """Where one stage's time went, and how often shards were restarted."""

    calls: int = 0
    wall_s: float = 0.0  # total time inside chunk_step / reset calls
    sim_s: float = 0.0  # of which the slowest shard spent inside the simulator
    restarts: int = 0
    # One entry per restart, the most recent 100: stage, shard, envs, cause, exit (code or
    # signal), stderr_tail (the simulator's last lines), time, n (this restart's number).
    restart_log: list[dict[str, Any]] = field(default_factory=list)

    @property
    def transfer_s(self) -> float:
        """Time not spent in the simulator: messaging, shared-memory copies, bookkeeping."""
        return max(self.wall_s - self.sim_s, 0.0)

    def as_dict(self) -> dict[str, Any]:
        """Plain numbers, for metrics."""
        return {"calls": self.calls, "wall_s": self.wall_s, "sim_s": self.sim_s, "transfer_s": self.transfer_s, "restarts": self.restarts}


class ProcessEnvManager:
    """Runs one stage's envs out of process. Same call surface as :class:`~envfleet.env.Env`.

    :param cfg: the full config from :func:`~envfleet.config.load_config`.
    :param stage_id: which pipeline stage this manager serves.
    :param rank: the worker rank (for seeds, video paths and messages).
    :param mode: ``"train"`` or ``"val"``: which env section to use.
    :param backend: a :class:`~envfleet.plugins.BackendSpec`; looked up from
        ``simulator_type`` when omitted.
    """

    def __init__(
        self,
        cfg: DictConfig,
        stage_id: int = 0,
        rank: int = 0,
        mode: str = "train",
        backend: BackendSpec | None = None,
    ) -> None:
        if mode not in ("train", "val"):
            raise ValueError(f"mode must be 'train' or 'val', got {mode!r}")
        self.cfg = cfg
        self.env_cfg = cfg[mode]
        self.stage_id = int(stage_id)
        self.rank = int(rank)
        self.mode = mode
        self.spec = backend or get_backend(self.env_cfg.simulator_type)
        self.num_envs = int(self.env_cfg.num_envs)
        self.num_action_chunks = int(cfg.actor.model.num_action_chunks)
        self.action_dim = int(cfg.actor.model.action_dim)
        self.obs_spec = self.spec.checked_observation_spec(self.env_cfg, self.num_envs)
        self.step_timeout_s = float(self.env_cfg.step_timeout_s)
        self.start_timeout_s = float(self.env_cfg.start_timeout_s)
        # A reset may build a new scene (LIBERO does, for another task), which can take as
        # long as a start on a loaded machine: it gets a deadline of its own.
        reset_timeout = self.env_cfg.reset_timeout_s
        self.reset_timeout_s = float(reset_timeout) if reset_timeout is not None else max(self.step_timeout_s, self.start_timeout_s)
        self.max_restarts = int(self.env_cfg.max_restarts)
        self.restart_window_s = float(self.env_cfg.restart_window_s)
        self.stats = ManagerStats()
        self.supports_state = False
        self._states: StateTable | None = None
        self._lock = threading.RLock()
        self._running = False
        self._closed = False
        self._replies = ReplyMerger(self.num_envs)
        self._obs_pool = RecyclingPool()
        self._shard_set = ShardSet()
        self._finalizer = weakref.finalize(self, self._shard_set.cleanup)
        size = self.spec.shard_size(self.env_cfg, self.num_envs)
        for index, start in enumerate(range(0, self.num_envs, size)):
            env_slice = slice(start, min(start + size, self.num_envs))
            layout = ShmLayout(self.obs_spec, env_slice.stop - env_slice.start)
            budget = RestartBudget(self.max_restarts, self.restart_window_s)
            self._shard_set.shards.append(ShardHandle(index, env_slice, layout, self._shard_set.log_dir, budget))
        self._cfg_container = OmegaConf.to_container(self.env_cfg, resolve=True)
        self._recorder: Any = None
        if self.env_cfg.video_cfg.save_video:
            from ..video import VideoRecorder

            self._recorder = VideoRecorder(self.env_cfg.video_cfg, self.num_envs)

    # ------------------------------------------------------------------ properties
    @property
    def shards(self) -> list[ShardHandle]:
        """The shard handles (for tests and diagnostics)."""
        return self._shard_set.shards

    @property
    def num_shards(self) -> int:
        """How many processes this stage runs."""
        return len(self._shard_set.shards)

    def shard_pids(self) -> list[int | None]:
        """The pid of each shard process (None when stopped)."""
        return [s.proc.pid if s.proc is not None else None for s in self._shard_set.shards]

    @property
    def running(self) -> bool:
        """Whether the shard processes are up."""
        return self._running

    # ------------------------------------------------------------------ lifecycle
    def start_simulator(self) -> None:
        """Start every shard (in parallel) and restore offloaded state, if any."""
        with self._lock:
            self._check_open()
            if self._running:
                return
            try:
                for shard in self._shard_set.shards:
                    self._launch(shard)
                self._await_init(self._shard_set.shards)
            except BaseException:
                for shard in self._shard_set.shards:
                    shard.free()
                raise
            self._running = True
            saved = [s for s in self._shard_set.shards if s.saved_state is not None]
            if saved:
                self._broadcast(Command.LOAD_STATE, lambda s: {"state": s.saved_state}, saved, self.reset_timeout_s)
                for s in saved:
                    s.saved_state = None
            elif any(s.last_reset is not None for s in self._shard_set.shards):
                warnings.warn(
                    f"backend {self.spec.name!r} has no get_state(): stage {self.stage_id} restarts its episodes "
                    "from their last reset after start_simulator()",
                    stacklevel=2,
                )
                resettable = [s for s in self._shard_set.shards if s.last_reset is not None]
                self._broadcast(
                    Command.RESET, lambda s: {"state_ids": s.last_reset[0], "task_ids": s.last_reset[1]}, resettable, self.reset_timeout_s
                )

    def stop_simulator(self) -> None:
        """Offload: save each shard's state (when supported) and free its process and memory."""
        with self._lock:
            if not self._running:
                return
            if self.supports_state:
                states = self._broadcast(Command.GET_STATE, lambda s: {}, self._shard_set.shards, self.step_timeout_s)
                for shard, state in zip(self._shard_set.shards, states):
                    shard.saved_state = state
            for shard in self._shard_set.shards:
                shard.free(graceful=True)
            self._running = False

    def close(self) -> None:
        """Stop every shard and free all shared memory. Safe to call twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._running = False
            for shard in self._shard_set.shards:
                shard.free(graceful=True)
            if self._recorder is not None:
                self._recorder.close()
            self._finalizer()

    def __enter__(self) -> ProcessEnvManager:
        self.start_simulator()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ Env surface
    def renderer_info(self) -> dict[str, str]:
        """What renders this stage's images (asked of its first shard): GL platform, vendor, renderer."""
        self._check_running()
        return dict(self._broadcast(Command.RENDERER_INFO, lambda s: {}, self._shard_set.shards[:1], self.step_timeout_s)[0])

    def get_all_state_ids(self) -> np.ndarray:
        """Every state id the backend can reset to."""
        self._check_running()
        assert self._states is not None
        return self._states.state_ids.copy()

    def get_state_task_ids(self) -> np.ndarray:
        """The task of each id of :meth:`get_all_state_ids`."""
        return self._states_table().tasks_of(self.get_all_state_ids())

    def check_reset_ids(self, state_ids: Any, task_ids: Any = None) -> tuple[np.ndarray, np.ndarray | None]:
        """``reset_envs_to_state_ids``'s arguments checked against this stage: int64 ``(state_ids, task_ids or None)``.

        :raises InvalidInputError: a wrong shape, an unknown id or a task id that does not match (see
            :func:`envfleet.validation.check_reset_ids`); nothing reaches a simulator.
        """
        return check_reset_ids(self._states_table(), state_ids, task_ids, num_envs=self.num_envs, where=f" of stage {self.stage_id}")

    def _states_table(self) -> StateTable:
        self._check_running()
        assert self._states is not None
        return self._states

    def reset_envs_to_state_ids(self, state_ids: Any, task_ids: Any = None) -> ResetResult:
        """Reset env ``i`` of the stage to ``state_ids[i]``; ``task_ids`` (optional) must match."""
        with self._lock:
            self._check_running()
            state_ids, task_ids = self.check_reset_ids(state_ids, task_ids)
            t0 = time.perf_counter()
            for shard in self._shard_set.shards:
                sl = shard.env_slice
                shard.last_reset = (state_ids[sl].copy(), None if task_ids is None else task_ids[sl].copy())
            obs = self._new_obs()
            restarted, sim_s = self._call_all(Command.RESET, lambda s: {"state_ids": s.last_reset[0], "task_ids": s.last_reset[1]}, obs)
            _, infos, descriptions = self._replies.merge(self.shards, restarted, Command.RESET)
            result = ResetResult(obs=obs, task_descriptions=descriptions, infos=infos)
            self._account(t0, sim_s)
            if self._recorder is not None:
                self._recorder.add(result.obs, result.infos.get("task_id"), None, None)
            return result

    def reset_some_envs(self, env_ids: Any, state_ids: Any, task_ids: Any = None) -> ResetResult:
        """Reset env ``env_ids[j]`` of the stage to ``state_ids[j]``; the other envs keep their episodes.

        Every shard answers (those with no env to reset without touching their simulator), so the
        result holds all envs' observations, task descriptions and infos, as a full reset's. Needs
        one full :meth:`reset_envs_to_state_ids` first, and a backend with
        :meth:`~envfleet.env.Env.reset_some_envs`.
        """
        with self._lock:
            self._check_running()
            env_ids = as_env_ids(env_ids, self.num_envs)
            state_ids, task_ids = check_reset_ids(
                self._states_table(), state_ids, task_ids, num_envs=len(env_ids), where=f" of the reset list of stage {self.stage_id}"
            )
            if any(s.last_reset is None for s in self._shard_set.shards):
                raise RuntimeError(f"stage {self.stage_id}: reset every env once (reset_envs_to_state_ids) before resetting some")
            t0 = time.perf_counter()
            messages: dict[int, dict[str, Any]] = {}
            for shard in self._shard_set.shards:
                sl = shard.env_slice
                mine = (env_ids >= sl.start) & (env_ids < sl.stop)
                local = env_ids[mine] - sl.start
                last_states, last_tasks = shard.last_reset  # type: ignore[misc]
                last_states = last_states.copy()
                last_states[local] = state_ids[mine]
                if last_tasks is not None:
                    last_tasks = last_tasks.copy()
                    last_tasks[local] = self._states_table().tasks_of(state_ids[mine])
                # A shard restarted from now on comes back at these states, the new ones included.
                shard.last_reset = (last_states, last_tasks)
                messages[shard.index] = {
                    "env_ids": local,
                    "state_ids": state_ids[mine],
                    "task_ids": None if task_ids is None else task_ids[mine],
                }
            obs = self._new_obs()
            restarted, sim_s = self._call_all(Command.RESET_SOME, lambda s: messages[s.index], obs)
            _, infos, descriptions = self._replies.merge(self.shards, restarted, Command.RESET)
            self._account(t0, sim_s)
            return ResetResult(obs=obs, task_descriptions=descriptions, infos=infos)

    def chunk_step(self, actions: Any) -> ChunkStepResult:
        """Step every env through ``actions`` ``[num_envs, chunk, action_dim]``."""
        with self._lock:
            self._check_running()
            actions = check_actions(actions, self.num_envs, self.action_dim, self.num_action_chunks)
            chunk = actions.shape[1]
            t0 = time.perf_counter()
            # Raw bytes pickle several times faster than a numpy array; each shard gets a slice.
            raw, row = actions.tobytes(), actions[0].nbytes
            obs = self._new_obs()
            restarted, sim_s = self._call_all(
                Command.STEP, lambda s: (raw[s.env_slice.start * row : s.env_slice.stop * row], (s.num_envs, *actions.shape[1:])), obs
            )
            flags, infos, descriptions = self._replies.merge(self.shards, restarted, Command.STEP, chunk)
            result = ChunkStepResult(
                obs=obs,
                task_descriptions=descriptions,
                rewards=flags["rewards"],
                terminations=flags["terminations"],
                truncations=flags["truncations"],
                infos=infos,
            )
            rewards = result.rewards
            self._account(t0, sim_s)
            if self._recorder is not None:
                self._recorder.add(result.obs, result.infos.get("task_id"), rewards, result.infos.get("success_once"))
            return result

    def flush_video(self, subdir: str) -> list[str]:
        """Write the stage's recorded video to ``{video_base_dir}/rank_{rank}/{subdir}/{n}.mp4``.

        Encoding happens in a background thread; the path is returned at once.
        """
        paths: list[str] = []
        if self._recorder is not None:
            base = os.path.join(str(self.env_cfg.video_cfg.video_base_dir), f"rank_{self.rank}", subdir)
            path = self._recorder.flush(base)
            if path:
                paths.append(path)
        if self._running:
            for reply in self._broadcast(Command.FLUSH_VIDEO, lambda s: {"subdir": subdir}, self._shard_set.shards, self.step_timeout_s):
                paths += list(reply)
        return paths

    def wait_video(self) -> None:
        """Block until every flushed video is written."""
        if self._recorder is not None:
            self._recorder.wait()

    # ------------------------------------------------------------------ checks
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"stage {self.stage_id}: the manager is closed")

    def _check_running(self) -> None:
        self._check_open()
        if not self._running:
            raise RuntimeError(f"stage {self.stage_id}: the simulator is stopped; call start_simulator() (init_simulator()) first")

    # ------------------------------------------------------------------ processes
    def _launch(self, shard: ShardHandle) -> None:
        if shard.block is None:
            shard.block = ShmBlock(shard.layout, tag=f"s{self.stage_id}_{shard.index}_")
        parent_sock, child_sock = socket.socketpair()
        shard.forget_reply()
        # train.simulator_python: the worker's own Python, or a venv of the simulator's (checked once).
        python, env = shard_command(self.env_cfg, self.spec)
        with open(shard.log_path, "ab") as log_fh:
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
        conn = Channel(os.dup(parent_sock.fileno()))
        parent_sock.close()
        shard.proc, shard.conn = proc, conn
        factory = self.spec.env_factory if isinstance(self.spec.env_factory, str) else pickle.dumps(self.spec.env_factory)
        ctx = EnvContext(
            num_envs=shard.num_envs,
            action_dim=self.action_dim,
            num_action_chunks=self.num_action_chunks,
            rank=self.rank,
            stage_id=self.stage_id,
            shard_id=shard.index,
            env_offset=shard.env_slice.start,
            mode=self.mode,
        )
        conn.send(
            (
                Command.INIT.value,
                {
                    "factory": factory,
                    "cfg": self._cfg_container,
                    "ctx": ctx.__dict__,
                    "shm_name": shard.block.name,
                    "layout": shard.layout.to_wire(),
                },
            )
        )

    def _await_init(self, shards: list[ShardHandle]) -> None:
        replies = self._collect(shards, self.start_timeout_s)
        errors: list[Exception] = []
        for shard, (status, payload) in zip(shards, replies):
            if status is Outcome.OK:
                self._on_init(payload)
            elif status is Outcome.DIED:
                errors.append(
                    EnvFleetSimulatorError(
                        f"stage {self.stage_id}, shard {shard.index} (envs {shard.env_range}): the simulator process "
                        f"{payload} while starting. Last lines of its output:\n{shard.stderr_tail()}"
                    )
                )
            else:
                errors.append(self._remote_error(shard, "building the env", payload))
        if errors:
            raise errors[0]

    def _on_init(self, payload: dict[str, Any]) -> None:
        self.supports_state = bool(payload["supports_state"])
        if self._states is None:
            self._states = StateTable(payload["state_ids"], payload["state_task_ids"])

    def _remote_error(self, shard: ShardHandle, doing: str, error: RemoteError) -> Exception:
        kind, message, tb = error
        if kind == "invalid":
            return InvalidInputError(message.split(": ", 1)[-1])
        return EnvFleetSimulatorError(
            f"backend {self.spec.name!r} raised while {doing} (stage {self.stage_id}, shard {shard.index}, envs {shard.env_range}): {message}",
            tb,
        )

    def _collect(self, shards: list[ShardHandle], timeout: float, on_ok: Any = None) -> list[Reply]:
        """Await one :class:`~envfleet.shards.messages.Reply` from each shard.

        Replies are read in shard order: all shards work at once, so by the time the
        first has answered the others mostly have too, and a reply that is already
        there costs one read and no poll. ``on_ok(shard)`` runs
        as soon as a shard answers, while the others still work.
        """
        deadline = time.monotonic() + timeout
        results: list[Reply] = []
        for shard in shards:
            conn = shard.conn
            if conn is None:
                results.append(Reply(Outcome.DIED, "was not running"))
                continue
            try:
                reply = conn.recv_within(deadline - time.monotonic())
            except (EOFError, OSError):
                try:
                    shard.proc.wait(timeout=5.0)  # type: ignore[union-attr]
                except subprocess.TimeoutExpired:
                    pass
                results.append(Reply(Outcome.DIED, shard.exit_description()))
                continue
            if reply is Channel.TIMEOUT:
                results.append(Reply(Outcome.HUNG, f"did not answer within {timeout:g} s"))
                continue
            if reply[0] == Outcome.OK.value:
                _, payload, shard.sim_s = reply
                results.append(Reply(Outcome.OK, payload))
                if on_ok is not None:
                    on_ok(shard)
            else:
                results.append(Reply(Outcome.ERR, RemoteError(*reply[1:])))
        return results

    def _broadcast(self, cmd: Command, make: Any, shards: list[ShardHandle], timeout: float) -> list[Any]:
        """Send ``cmd`` to ``shards`` and return payloads; errors raise (no restart)."""
        for s in shards:
            if s.conn is None:
                raise EnvFleetSimulatorError(f"stage {self.stage_id}, shard {s.index}: not running")
            s.conn.send((cmd.value, make(s)))
        out = []
        first_error: Exception | None = None
        for shard, (status, payload) in zip(shards, self._collect(shards, timeout)):
            if status is Outcome.OK:
                out.append(payload)
            elif first_error is None:
                first_error = (
                    self._remote_error(shard, cmd.value, payload)
                    if status is Outcome.ERR
                    else EnvFleetSimulatorError(f"stage {self.stage_id}, shard {shard.index}: {cmd.value} failed, the process {payload}")
                )
        if first_error is not None:
            raise first_error
        return out

    def _call_all(self, cmd: Command, make: Any, obs: dict[str, np.ndarray]) -> tuple[set[int], float]:
        """Send a reset or step to all shards, then await all; restart the ones that died or hung.

        Each shard's observations are copied into ``obs`` as soon as it answers, so
        the copy overlaps the other shards' work. Each shard's reply is kept on its
        handle (see :meth:`~envfleet.shards.handle.ShardHandle.keep_reply`); a restarted shard holds its fresh reset's reply.
        """
        shards = self._shard_set.shards
        for s in shards:
            try:
                assert s.conn is not None
                s.conn.send((cmd.value, make(s)))
            except (OSError, AssertionError):
                pass  # dead already: handled as a crash below
        timeout = self.reset_timeout_s if cmd in (Command.RESET, Command.RESET_SOME) else self.step_timeout_s
        # Byte views of the result arrays: a shard's part is then one memcpy per key, far less
        # code than numpy's slice assignment. Released before returning, so that they do not
        # count as holders of the arrays (see envfleet.shards.recycling).
        out = {key: (arr.data.cast("B"), arr.nbytes // self.num_envs) for key, arr in obs.items()}
        try:
            return self._await_all(cmd, shards, timeout, out)
        finally:
            for view, _ in out.values():
                view.release()

    def _await_all(
        self, cmd: Command, shards: list[ShardHandle], timeout: float, out: dict[str, tuple[memoryview, int]]
    ) -> tuple[set[int], float]:
        outcomes = self._collect(shards, timeout, on_ok=lambda shard: self._copy_obs(shard, out))
        restarted: set[int] = set()
        first_error: Exception | None = None
        sim_s = 0.0
        for shard, (status, payload) in zip(shards, outcomes):
            if status is Outcome.OK:
                shard.keep_reply(payload)
                sim_s = max(sim_s, shard.sim_s)
            elif status is Outcome.ERR:
                if first_error is None:
                    first_error = self._remote_error(shard, "stepping" if cmd is Command.STEP else "resetting", payload)
            else:
                reply = self._restart(shard, f"{payload} during {cmd.value}")
                restarted.add(shard.index)
                self._copy_obs(shard, out)
                if reply is not None:  # None: never reset, so _launch's empty reply stands
                    shard.keep_reply(reply)
        if first_error is not None:
            raise first_error
        return restarted, sim_s

    def _restart(self, shard: ShardHandle, how: str) -> tuple[Any, ...] | None:
        """Kill, rebuild and re-reset a shard; return its reset reply (None: it was never reset)."""
        while True:
            exit_desc = shard.exit_description() if shard.proc is not None and shard.proc.poll() is not None else how
            tail = shard.stderr_tail()
            shard.kill()
            recent = shard.budget.spend()
            self.stats.restarts += 1
            self.stats.restart_log.append(
                {
                    "stage": self.stage_id,
                    "shard": shard.index,
                    "envs": shard.env_range,
                    "cause": how,
                    "exit": exit_desc,
                    "stderr_tail": tail.splitlines()[-5:],
                    "time": time.time(),
                    "n": self.stats.restarts,
                }
            )
            del self.stats.restart_log[:-100]  # the most recent causes are enough; a long run must not grow
            log.warning("stage %d shard %d (envs %s): %s; restarting", self.stage_id, shard.index, shard.env_range, how)
            if shard.budget.exhausted:
                raise RestartLimitError(
                    f"stage {self.stage_id}, shard {shard.index} (envs {shard.env_range}) failed {recent} times "
                    f"within {self.restart_window_s:g} s (train.max_restarts={self.max_restarts}); last failure: {how} "
                    f"({exit_desc}). Last lines of the simulator's output:\n{tail}"
                )
            try:
                self._launch(shard)
                ((status, payload),) = self._collect([shard], self.start_timeout_s)
                if status is Outcome.ERR:
                    raise self._remote_error(shard, "rebuilding the env after a crash", payload)
                if status is not Outcome.OK:
                    how = f"{payload} while restarting"
                    continue
                self._on_init(payload)
                if shard.last_reset is None:
                    return None
                state_ids, task_ids = shard.last_reset
                assert shard.conn is not None
                shard.conn.send((Command.RESET.value, {"state_ids": state_ids, "task_ids": task_ids}))
                ((status, payload),) = self._collect([shard], self.reset_timeout_s)
                if status is Outcome.OK:
                    return tuple(payload)
                if status is Outcome.ERR:
                    raise self._remote_error(shard, "resetting after a restart", payload)
                how = f"{payload} during the reset after a restart"
            except (OSError, BrokenPipeError) as exc:
                how = f"could not be restarted: {exc}"

    # ------------------------------------------------------------------ results
    def _new_obs(self) -> dict[str, np.ndarray]:
        return {k: self._obs_pool.take(k, (self.num_envs, *s.shape), s.dtype) for k, s in self.obs_spec.items()}

    @staticmethod
    def _copy_obs(shard: ShardHandle, out: dict[str, tuple[memoryview, int]]) -> None:
        """Copy a shard's observations into the result: ``out`` maps each key to (its bytes, bytes per env)."""
        assert shard.block is not None
        start = shard.env_slice.start
        for key, src in shard.block.bytes.items():
            dest, per_env = out[key]
            dest[start * per_env : start * per_env + src.nbytes] = src

    def _account(self, t0: float, sim_s: float) -> None:
        self.stats.calls += 1
        self.stats.wall_s += time.perf_counter() - t0
        self.stats.sim_s += sim_s

    def __repr__(self) -> str:
        return (
            f"ProcessEnvManager(backend={self.spec.name!r}, stage={self.stage_id}, rank={self.rank}, "
            f"num_envs={self.num_envs}, shards={self.num_shards}, running={self._running})"
        )
