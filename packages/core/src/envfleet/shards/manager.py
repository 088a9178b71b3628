"""``ProcessEnvManager``: one stage's envs as shard processes, observations through shared memory.

One job: the ``Env`` surface of one stage, over its shards. The stage's ``num_envs`` envs are
split into shards of the backend's ``envs_per_process``; each shard is a fresh Python process
(:mod:`envfleet.shards.server`) that builds its own simulator. A call is sent to every shard
first and then awaited, so shards work in parallel. Images are written once by the child into
shared memory owned by this object; only small arrays come back over the socket.

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

import os
import threading
import time
import warnings
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np
from omegaconf import DictConfig

from ..env import ChunkStepResult, EnvContext, ResetResult
from ..errors import ClosedEnvironmentError, ConfigError, InvalidInputError, SimulatorStoppedError
from ..execution import Schedule, interpolate, is_realtime, is_wall_clock, window
from ..options import Mode
from ..plugins import BackendSpec, get_backend
from ..recording.stage import stage_recorder
from ..substeps import split_substeps
from ..validation import StateTable, as_env_ids, check_actions, check_reset_ids
from ..video import VideoRecorder
from .calls import ManagerStats, ShardCalls, replay_reset
from .handle import RestartBudget, ShardHandle, ShardSet
from .local import LocalShard
from .messages import Command, FlushVideoRequest, LoadStateRequest, ResetSomeRequest, StepRequest
from .ready import FirstReady, ReadyChunk
from .recycling import RecyclingPool
from .replies import ReplyMerger
from .shm import ShmLayout

if TYPE_CHECKING:
    from ..env import Env, EnvSurface

__all__ = ["ProcessEnvManager", "ManagerStats"]


class ProcessEnvManager:
    """Runs one stage's envs out of process. Same call surface as :class:`~envfleet.env.Env`
    (both satisfy :class:`~envfleet.env.EnvSurface`).

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
        self.mode = str(Mode.check(mode))
        self.cfg = cfg
        self.env_cfg = cfg[self.mode]
        self.stage_id = int(stage_id)
        self.rank = int(rank)
        self.spec = backend or get_backend(self.env_cfg.simulator_type)
        self.num_envs = int(self.env_cfg.num_envs)
        chunk = cfg.actor.model.num_action_chunks  # None: each call's actions set the chunk length
        self.num_action_chunks = None if chunk is None else int(chunk)
        self.action_dim = int(cfg.actor.model.action_dim)
        self.obs_spec = self.spec.checked_observation_spec(self.env_cfg, self.num_envs)
        # The backend's own check of action values (BackendSpec.action_check), before any shard gets them.
        self._action_check = None if self.spec.action_check is None else self.spec.action_check(self.env_cfg)
        self.stats = ManagerStats()
        self._lock = threading.RLock()
        self._running = False
        self._closed = False
        self._replies = ReplyMerger(self.num_envs)
        self._obs_pool = RecyclingPool()
        self._shard_set = ShardSet()
        self._finalizer = weakref.finalize(self, self._shard_set.cleanup)
        self._dataset = stage_recorder(self)  # a recording.StageRecorder when train.record.format is set, else None
        self._layout_spec = {**self.obs_spec, **(self._dataset.substep_spec if self._dataset else {})}  # + envfleet.substeps
        #: Whether the envs run in this process (``train.in_process``, :mod:`envfleet.shards.local`): one shard of them all.
        self.in_process = self.spec.runs_in_process(self.env_cfg, self.mode, self.num_action_chunks)
        size = self.num_envs if self.in_process else self.spec.shard_size(self.env_cfg, self.num_envs)
        handle = LocalShard if self.in_process else ShardHandle
        for index, start in enumerate(range(0, self.num_envs, size)):
            env_slice = slice(start, min(start + size, self.num_envs))
            layout = ShmLayout(self._layout_spec, env_slice.stop - env_slice.start)
            budget = RestartBudget(int(self.env_cfg.max_restarts), float(self.env_cfg.restart_window_s))
            self._shard_set.shards.append(handle(index, env_slice, layout, self._shard_set.log_dir, budget))
        context = EnvContext(0, self.action_dim, self.num_action_chunks, rank=self.rank, stage_id=self.stage_id, mode=self.mode)
        self._calls = ShardCalls(self._shard_set.shards, self.spec, self.env_cfg, context, self.stats)
        self.step_timeout_s = self._calls.step_timeout_s
        self.start_timeout_s = self._calls.start_timeout_s
        self.reset_timeout_s = self._calls.reset_timeout_s
        self._ready = FirstReady(self._calls, self._replies, self.obs_spec, self.action_dim, self.num_action_chunks)
        stream = (self.rank, self.stage_id, 0 if self.mode == "train" else 1)
        # clock wall: the shards run the schedule themselves (envfleet.shards.realtime); here only the interpolation.
        self._wall = _wall_clock(self.env_cfg, self.num_action_chunks)
        self._schedule = None
        if self._wall is None:
            self._schedule = _schedule(self.env_cfg, self.num_envs, self.action_dim, self.num_action_chunks, stream, self.spec)
        elif self._dataset is not None and self._dataset.substep_spec:
            raise ConfigError(
                f"{self.mode}.record.frames: step and {self.mode}.execution.clock: wall do not go together: the wall clock's "
                "control loop hands out one observation a call; record per chunk (frames: chunk), or use clock: sim"
            )
        if self._schedule is not None and self._dataset is not None and self._dataset.substep_spec:
            if self._schedule.steps_per_call != self.num_action_chunks:
                raise ConfigError(
                    f"{self.mode}.record.frames: step records actor.model.num_action_chunks ({self.num_action_chunks}) frames a call, "
                    f"but {self.mode}.execution runs {self._schedule.steps_per_call} sub-steps a call (horizon, interpolation or "
                    "serial smoothing): record per chunk (frames: chunk), or keep the chunk's length"
                )
        self._recorder: Any = None
        if self.env_cfg.video_cfg.save_video:
            self._recorder = VideoRecorder(self.env_cfg.video_cfg, self.num_envs, self.obs_spec)

    # ------------------------------------------------------------------ properties
    @property
    def shards(self) -> list[ShardHandle]:
        """The shard handles (for tests and diagnostics)."""
        return self._shard_set.shards

    @property
    def num_shards(self) -> int:
        """How many processes this stage runs."""
        return len(self._shard_set.shards)

    @property
    def chunk(self) -> int:
        """The configured chunk length, for callers that need one fixed.

        :raises ConfigError: ``actor.model.num_action_chunks`` is null (any length per call)."""
        if self.num_action_chunks is None:
            raise ConfigError("this needs a fixed chunk length: set actor.model.num_action_chunks (it is null, any length per call)")
        return self.num_action_chunks

    def shard_pids(self) -> list[int | None]:
        """The pid of each shard process (None when stopped)."""
        return [s.proc.pid if s.proc is not None else None for s in self._shard_set.shards]

    @property
    def running(self) -> bool:
        """Whether the shard processes are up."""
        return self._running

    @property
    def supports_state(self) -> bool:
        """Whether the backend saves and restores its state (so :meth:`stop_simulator` keeps the episodes)."""
        return self._calls.supports_state

    # ------------------------------------------------------------------ lifecycle
    def start_simulator(self) -> None:
        """Start every shard (in parallel) and restore offloaded state, if any."""
        with self._lock:
            self._check_open()
            if self._running:
                return
            try:
                for shard in self._shard_set.shards:
                    self._calls.launch(shard)
                self._calls.await_init(self._shard_set.shards)
            except BaseException:
                for shard in self._shard_set.shards:
                    shard.free()
                raise
            self._running = True
            saved = [s for s in self._shard_set.shards if s.saved_state is not None]
            if saved:
                self._calls.broadcast(Command.LOAD_STATE, lambda s: LoadStateRequest(s.saved_state), saved, self.reset_timeout_s)
                for s in saved:
                    s.saved_state = None
            elif any(s.last_reset is not None for s in self._shard_set.shards):
                warnings.warn(
                    f"backend {self.spec.name!r} has no get_state(): stage {self.stage_id} restarts its episodes "
                    "from their last reset after start_simulator()",
                    stacklevel=2,
                )
                resettable = [s for s in self._shard_set.shards if s.last_reset is not None]
                self._calls.broadcast(Command.RESET, replay_reset, resettable, self.reset_timeout_s)

    def stop_simulator(self) -> None:
        """Offload: save each shard's state (when supported) and free its process and memory."""
        with self._lock:
            if not self._running:
                return
            self._ready.check_idle("stop_simulator")
            if self.supports_state:
                states = self._calls.broadcast(Command.GET_STATE, lambda s: None, self._shard_set.shards, self.step_timeout_s)
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
            if self._dataset is not None:  # first, while the shards can still say what renders (the fingerprint)
                self._dataset.close(renderer=self.renderer_info if self._running else None)
            self._closed = True
            self._running = False
            self._ready.forget()
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
        self._ready.check_idle("renderer_info")
        return dict(self._calls.broadcast(Command.RENDERER_INFO, lambda s: None, self._shard_set.shards[:1], self.step_timeout_s)[0])

    def get_all_state_ids(self) -> np.ndarray:
        """Every state id the backend can reset to."""
        return self._states_table().state_ids.copy()

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
        assert self._calls.states is not None
        return self._calls.states

    def reset_envs_to_state_ids(self, state_ids: Any, task_ids: Any = None) -> ResetResult:
        """Reset env ``i`` of the stage to ``state_ids[i]``; ``task_ids`` (optional) must match."""
        with self._lock:
            self._check_running()
            self._ready.check_idle("reset_envs_to_state_ids")
            state_ids, task_ids = self.check_reset_ids(state_ids, task_ids)
            t0 = time.perf_counter()
            for shard in self._shard_set.shards:
                sl = shard.env_slice
                shard.last_reset = (state_ids[sl].copy(), None if task_ids is None else task_ids[sl].copy())
            if self._schedule is not None:
                self._schedule.reset()
            obs = self._new_obs()
            replies, restarted, sim_s = self._calls.call_all(Command.RESET, replay_reset, obs)
            split_substeps(obs)
            _, infos, descriptions = self._replies.merge(self.shards, replies, restarted, Command.RESET)
            result = ResetResult(obs=obs, task_descriptions=descriptions, infos=infos)
            self._account(t0, sim_s)
            if self._recorder is not None:
                self._recorder.add(result.obs, result.infos.get("task_id"), None, None)
            if self._dataset is not None:
                self._dataset.on_reset(result, state_ids)
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
            self._ready.check_idle("reset_some_envs")
            env_ids = as_env_ids(env_ids, self.num_envs)
            state_ids, task_ids = check_reset_ids(
                self._states_table(), state_ids, task_ids, num_envs=len(env_ids), where=f" of the reset list of stage {self.stage_id}"
            )
            if any(s.last_reset is None for s in self._shard_set.shards):
                raise SimulatorStoppedError(f"stage {self.stage_id}: reset every env once (reset_envs_to_state_ids) before resetting some")
            t0 = time.perf_counter()
            requests: dict[int, ResetSomeRequest] = {}
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
                requests[shard.index] = ResetSomeRequest(local, state_ids[mine], None if task_ids is None else task_ids[mine])
            if self._schedule is not None:
                self._schedule.reset(env_ids)
            obs = self._new_obs()
            replies, restarted, sim_s = self._calls.call_all(Command.RESET_SOME, lambda s: requests[s.index], obs)
            split_substeps(obs)
            _, infos, descriptions = self._replies.merge(self.shards, replies, restarted, Command.RESET)
            self._account(t0, sim_s)
            result = ResetResult(obs=obs, task_descriptions=descriptions, infos=infos)
            if self._dataset is not None:
                self._dataset.on_reset(result, state_ids, env_ids)
            return result

    def chunk_step(self, actions: Any, delays: Any = None) -> ChunkStepResult:
        """Step every env through ``actions`` ``[num_envs, chunk, action_dim]``.

        Under ``train.execution`` (:mod:`envfleet.execution`) the chunk is scheduled first: in
        ``mode: realtime`` the sub-steps run are the previous chunk's queue until the delay, then this
        chunk's, for ``horizon`` sub-steps, and the result's infos say what ran. ``delays`` (``[num_envs]``
        sub-steps) is each env's delay for this call, with ``train.execution.delay: caller`` only.

        :raises InvalidInputError: bad actions or delays; nothing is stepped.
        """
        with self._lock:
            self._check_running()
            self._ready.check_idle("chunk_step")
            actions = check_actions(actions, self.num_envs, self.action_dim, self.num_action_chunks)
            if self._action_check is not None and len(self._shard_set.shards) > 1:
                # One shard checks every action before any of its envs steps; several must all be checked here first.
                self._action_check(actions)
            ran: dict[str, np.ndarray] = {}
            command, chunk = Command.STEP, actions.shape[1]
            if self._wall is not None:
                if delays is not None:
                    raise InvalidInputError(
                        f"a call gave its own delays, but {self.mode}.execution.clock is wall: the wall clock measures them"
                    )
                factor, chunk = self._wall
                actions, command = interpolate(actions, factor), Command.EXCHANGE
                if actions.shape[1] < chunk:
                    raise InvalidInputError(f"a chunk must cover the horizon ({chunk} sub-steps), got {actions.shape[1]} sub-steps")
            elif self._schedule is not None:
                actions, ran = self._schedule.plan(actions, delays)
                chunk = actions.shape[1]
            elif delays is not None:
                raise InvalidInputError(
                    f"a call gave its own delays, but {self.mode}.execution.mode is chunk: delays need mode realtime, delay caller"
                )
            t0 = time.perf_counter()
            # Raw bytes pickle several times faster than a numpy array; each shard gets a slice.
            raw, row = actions.tobytes(), actions[0].nbytes
            obs = self._new_obs()
            replies, restarted, sim_s = self._calls.call_all(
                command,
                lambda s: StepRequest(raw[s.env_slice.start * row : s.env_slice.stop * row], (s.num_envs, *actions.shape[1:])),
                obs,
            )
            substeps = split_substeps(obs)
            flags, infos, descriptions = self._replies.merge(self.shards, replies, restarted, Command.STEP, chunk)
            result = ChunkStepResult(
                obs=obs,
                task_descriptions=descriptions,
                rewards=flags["rewards"],
                terminations=flags["terminations"],
                truncations=flags["truncations"],
                infos=infos,
            )
            self._account(t0, sim_s)
            if self._wall is not None:
                actions = infos["applied_action"]
            if self._schedule is not None:
                ended = np.asarray(result.terminations.any(axis=1) | result.truncations.any(axis=1), dtype=bool)
                if "sim_restarted" in infos:
                    ended |= np.asarray(infos["sim_restarted"], dtype=bool)
                self._schedule.done(ended)
                infos.update(ran)
            if self._recorder is not None:
                self._recorder.add(result.obs, result.infos.get("task_id"), result.rewards, result.infos.get("success_once"))
            if self._dataset is not None:
                self._dataset.on_step(actions, result, substeps)
            return result

    # ------------------------------------------------------------------ first-ready stepping
    def send_chunk(self, env_ids: Any, actions: Any) -> None:
        """Start a chunk for the envs ``env_ids`` (ready ones: their last result returned) and return at once.

        ``actions[j]`` ``[chunk, action_dim]`` is env ``env_ids[j]``'s. Envs that share a process
        (``envs_per_process``) step together: give all of them or none. Collect the results with
        :meth:`recv_chunk`; until then, lockstep calls raise. See :mod:`envfleet.shards.ready`.

        :raises InvalidInputError: bad ids or actions, an env not ready, part of a shard's envs, or a
            chunk length other than the one in flight; nothing is sent, the manager stays usable.
        """
        with self._lock:
            self._check_running()
            if self._recorder is not None:
                raise ConfigError(
                    "first-ready stepping does not record the stage's video (train.video_cfg.save_video is on): "
                    "turn it off, or step in lockstep (chunk_step)"
                )
            if self._schedule is not None or self._wall is not None:
                raise ConfigError(
                    f"first-ready stepping (send_chunk) and {self.mode}.execution (mode {self.env_cfg.execution.mode}) do not go "
                    "together: a schedule of actions needs every env's chunk at each call; step in lockstep (chunk_step), "
                    "or use mode: chunk"
                )
            env_ids = as_env_ids(env_ids, self.num_envs)
            actions = check_actions(actions, len(env_ids), self.action_dim, self.num_action_chunks)
            if self._action_check is not None:
                self._action_check(actions)
            self._ready.send(env_ids, actions)

    def recv_chunk(self, min_ready: int, timeout_s: float | None = None, max_ready: int | None = None) -> ReadyChunk:
        """The results of the first envs to finish the chunks :meth:`send_chunk` started.

        Waits until at least ``min_ready`` envs are done and returns every env done by then (whole
        shards, at most ``max_ready`` envs when given, the earliest first), in a
        :class:`~envfleet.shards.ready.ReadyChunk` whose ``env_ids`` names each row's env. With
        ``timeout_s``, returns at that deadline whatever is done (possibly no row). The other envs keep
        simulating. A shard that died or hung is restarted meanwhile, and its envs' rows come back with
        ``infos["sim_restarted"]`` True, as in :meth:`chunk_step`.

        :raises InvalidInputError: ``min_ready`` below 1, above the stage's envs, or above the envs in flight.
        """
        with self._lock:
            self._check_running()
            t0 = time.perf_counter()
            result = self._ready.recv(min_ready, timeout_s, max_ready)
            self._account(t0, 0.0)
            return result

    @property
    def first_ready(self) -> FirstReady:
        """The first-ready state of each shard (for tests, diagnostics and benchmarks)."""
        return self._ready

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
            self._ready.check_idle("flush_video")
            for reply in self._calls.broadcast(
                Command.FLUSH_VIDEO, lambda s: FlushVideoRequest(subdir), self._shard_set.shards, self.step_timeout_s
            ):
                paths += list(reply)
        return paths

    def flush_dataset(self, meta: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """Wait until the stage's finished episodes are written; merge ``meta`` into the dataset's
        ``meta/envfleet.json``. Returns where the dataset is and what it holds; None when not recording."""
        return None if self._dataset is None else self._dataset.flush(meta)

    def wait_video(self) -> None:
        """Block until every flushed video is written."""
        if self._recorder is not None:
            self._recorder.wait()

    # ------------------------------------------------------------------ checks
    def _check_open(self) -> None:
        if self._closed:
            raise ClosedEnvironmentError(f"stage {self.stage_id}: the manager is closed; make a new one")

    def _check_running(self) -> None:
        self._check_open()
        if not self._running:
            raise SimulatorStoppedError(f"stage {self.stage_id}: the simulator is stopped; call start_simulator() (init_simulator()) first")

    # ------------------------------------------------------------------ results
    def _new_obs(self) -> dict[str, np.ndarray]:
        return {k: self._obs_pool.take(k, (self.num_envs, *s.shape), s.dtype) for k, s in self._layout_spec.items()}

    def _account(self, t0: float, sim_s: float) -> None:
        self.stats.calls += 1
        self.stats.wall_s += time.perf_counter() - t0
        self.stats.sim_s += sim_s

    def __repr__(self) -> str:
        where = f"backend={self.spec.name!r}, stage={self.stage_id}, rank={self.rank}, num_envs={self.num_envs}"
        shards = "in_process" if self.in_process else f"shards={self.num_shards}"
        return f"ProcessEnvManager({where}, {shards}, running={self._running})"


def _wall_clock(section: Any, chunk: int | None) -> tuple[int, int] | None:
    """``(interpolation factor, horizon in sub-steps)`` of a section on ``clock: wall``; None otherwise."""
    return window(section.execution, chunk) if is_wall_clock(section) else None


def _schedule(
    section: Any, num_envs: int, action_dim: int, chunk: int | None, stream: tuple[int, ...], spec: BackendSpec
) -> Schedule | None:
    """The stage's :class:`~envfleet.execution.Schedule` in simulated time, or None where each call's chunk runs as it is."""
    execution = section.get("execution")
    if execution is None or not (is_realtime(section) or execution.interpolation.enable or execution.serial_smoothing.enable):
        return None
    return Schedule(execution, num_envs, action_dim, chunk or 0, int(section.seed), stream, spec.control_fps)


if TYPE_CHECKING:  # the type checker holds both classes to the one surface they share

    def _same_surface(manager: ProcessEnvManager, env: Env) -> tuple[EnvSurface, EnvSurface]:
        return manager, env
