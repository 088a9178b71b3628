"""``LiberoEnv``: LIBERO tasks as an envfleet :class:`~envfleet.env.Env`.

Built by the manager inside a shard process (``env_factory`` names this module), so
the GL platform is chosen, and MuJoCo, robosuite and LIBERO are imported, here and
only here. Constructing a ``LiberoEnv`` reads the suite's task list and init-state
files and nothing else; the MuJoCo env of a task is built on the first reset to it.

State ids: the suite's fixed initial states, numbered task by task in suite order,
trials in file order: ``state_id = first_id[task] + trial``.

Reset of one env to a state id (the protocol of LIBERO's evaluations, made exact):

1. if the env's task changes, build a new LIBERO env for the task (on the task's
   scene, compiled once per process and shared by its envs: :mod:`.scenes`);
   otherwise reuse it;
2. ``env.seed(train.seed)`` (fixture placement is drawn from the global NumPy RNG
   and is not part of the init state, so it must be re-seeded before every reset);
3. ``reset()``: the first reset of a freshly built env is LIBERO's default hard
   reset; a reused env gets a soft reset (``hard_reset=False``) completed by what
   a soft reset alone leaves behind (see :meth:`LiberoSim._soft_reset`). Either way
   an episode is bit-identical to one in a freshly built, seeded, hard-reset env;
4. ``set_init_state(init_states[trial])``;
5. ``train.settle_steps`` steps of ``[0, 0, 0, 0, 0, 0, -1]``; the observation after
   them is what the reset returns.

Repeated *hard* resets of one env are not reproducible in LIBERO: each re-runs
``_load_model``, which appends another open/close (or turn-on/off) sampler to
``object_property_initializers`` without clearing the list, so every hard reset
draws more random numbers before placing the fixtures, and in scenes with a drawer,
microwave or stove in the initial state the fixtures land elsewhere each time
(libero_10 task 9: the microwave moves by ~2 cm between resets, seed or not).
Soft resets do not grow the list, which is one more reason to reuse the env.

``render: last`` renders the cameras only where an observation is handed out (end
of a reset, last sub-step of a chunk, the sub-step an episode ends), by swapping
the camera observables' sensor functions; robosuite's sampling clocks run exactly
as with ``render: all``, so the images are bit-identical to it. A section that records
a frame per sub-step (``train.record.frames: step``) hands out every sub-step's
observation (:mod:`envfleet.substeps`): its envs render every sub-step, and
the envs of sections that do not record keep ``render: last`` as it is.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from envfleet.batched_env import BatchedEnv
from envfleet.env import ChunkStepResult, EnvContext, ResetResult
from envfleet.plugins import backend_section
from envfleet.substeps import substep_spec
from envfleet.validation import StateTable, as_env_ids, check_actions, check_reset_ids

from .actions import ACTION_DIM, SETTLE_ACTIONS, apply_action_transform
from .gl import configure_gl
from .plugin import DEFAULT_MAX_EPISODE_STEPS, camera_names, check_suite, observation_spec, physics_mode
from .scenes import scene_cache
from .sim import LiberoSim, _log
from .suites import SuiteIndex, TaskInfo, suite_index

# Imports inside functions: robosuite loads in the shard only, when an env is built: listing backends and the
# parent stay light.

__all__ = ["TaskInfo", "SuiteIndex", "LiberoSim", "LiberoEnv", "make_state8"]


def make_state8(obs: dict[str, Any]) -> np.ndarray:
    """The 8-dim proprio state VLA pipelines use: eef pos, eef axis-angle, gripper finger qpos."""
    from robosuite.utils import transform_utils as T

    # robosuite's eef quat is xyzw already; quat2axisangle clips quat[3] in place, hence the copy.
    axis_angle = T.quat2axisangle(np.array(obs["robot0_eef_quat"], copy=True))
    return np.concatenate([obs["robot0_eef_pos"], axis_angle, obs["robot0_gripper_qpos"]]).astype(np.float32)


class LiberoEnv(BatchedEnv):
    """``num_envs`` LIBERO envs of one suite, stepped one after another in this process.

    Envs of one task share the task's compiled model and render context (:mod:`.scenes`);
    ``train.libero.envs_per_process`` says how many envs a shard process holds.

    :param cfg: the env section (``train`` / ``val``), with the backend's own keys at ``cfg.libero``.
    :param ctx: where this object sits in the fleet (seeds of the auto-reset cycle).
    """

    supports_state = True

    def __init__(self, cfg: Any, ctx: EnvContext) -> None:
        self.suite_name = check_suite(cfg)
        self.cameras = camera_names(cfg)
        self.num_envs = int(ctx.num_envs)
        self.action_dim = ACTION_DIM
        self.ctx = ctx
        lib = backend_section(cfg, "libero")
        self.mujoco_gl = str(lib.get("mujoco_gl", "egl"))
        self.height = int(cfg.init_params.camera_heights)
        self.width = int(cfg.init_params.camera_widths)
        self.flip = bool(cfg.flip_images)
        self.render_all = cfg.render == "all"
        self.seed = int(cfg.seed)
        self.settle_steps = int(cfg.settle_steps)
        self.settle_action = SETTLE_ACTIONS[str(lib.get("settle_action", "open"))]
        self.action_transform = str(cfg.action_transform)
        self.physics = physics_mode(cfg)
        self._spec = observation_spec(cfg, self.num_envs)
        t0 = time.perf_counter()
        self.suite = suite_index(cfg)
        _log(
            f"suite {self.suite_name}: {len(self.suite.tasks)} tasks, {self.suite.num_states} states (read in {time.perf_counter() - t0:.1f} s)"
        )
        self.states = StateTable.contiguous(self.suite.state_task_ids())
        self.max_episode_steps = int(cfg.max_episode_steps or DEFAULT_MAX_EPISODE_STEPS[self.suite_name])
        self.init_episodes(cfg, ctx, self.max_episode_steps)
        # With train.record.frames: step, the observation of every sub-step too (substep/<key>).
        self.init_observations({**self._spec, **substep_spec(cfg, self._spec, ctx.num_action_chunks)})
        self.render_substeps = bool(self.substep_keys)
        self.sims: list[LiberoSim | None] = [None] * self.num_envs
        self._closed = False

    # ------------------------------------------------------------------ protocol
    def renderer_info(self) -> dict[str, str]:
        """The GL platform chosen for this process and the GL strings of a built simulator's context.

        Also ``physics`` when ``physics: fast`` had to fall back to LIBERO's own step loop; the
        fast loop itself is not recorded: its episodes are LIBERO's, bit for bit.
        """
        info = {"platform": os.environ.get("MUJOCO_GL", self.mujoco_gl)}
        sim = next((sim for sim in self.sims if sim is not None), None)
        if sim is not None:
            info.update(sim.gl_strings())
            if sim.fast_refusal is not None:
                info["physics"] = f"libero step loop ({sim.fast_refusal})"
            elif sim.lean_refusal is not None:
                info["physics"] = f"fast step loop, robosuite's controller ({sim.lean_refusal})"
        return info

    def task_description(self, task_id: int) -> str:
        """The task's instruction, from the suite's instruction source (:mod:`.suites`)."""
        return self.suite.tasks[task_id].instruction

    def reset_envs_to_state_ids(self, state_ids: np.ndarray, task_ids: np.ndarray | None = None) -> ResetResult:
        """Reset env ``i`` to ``state_ids[i]`` with the protocol in the module doc."""
        self._check_open()
        state_ids, _ = check_reset_ids(self.states, state_ids, task_ids, num_envs=self.num_envs)
        for i, sid in enumerate(state_ids):
            self._reset_one(i, int(sid))
        return ResetResult(
            obs=self.observations(),
            task_descriptions=self._descriptions(),
            infos={"state_id": self.tracker.state_ids.copy(), "task_id": self.tracker.task_ids.copy()},
        )

    def reset_some_envs(self, env_ids: np.ndarray, state_ids: np.ndarray, task_ids: np.ndarray | None = None) -> ResetResult:
        """Reset env ``env_ids[j]`` to ``state_ids[j]`` as :meth:`reset_envs_to_state_ids` does; the others run on."""
        self._check_open()
        env_ids = as_env_ids(env_ids, self.num_envs)
        state_ids, _ = check_reset_ids(self.states, state_ids, task_ids, num_envs=len(env_ids))
        for i, sid in zip(env_ids.tolist(), state_ids.tolist()):
            self._reset_one(i, sid)
        return ResetResult(
            obs=self.observations(),
            task_descriptions=self._descriptions(),
            infos={"state_id": self.tracker.state_ids.copy(), "task_id": self.tracker.task_ids.copy()},
        )

    def chunk_step(self, actions: np.ndarray) -> ChunkStepResult:
        """Step every env through ``actions`` ``[num_envs, chunk, 7]``; see :mod:`envfleet.episodes`."""
        self._check_open()
        # Checked only: the caller's values (float64 included) are what LIBERO steps with.
        check_actions(actions, self.num_envs, self.action_dim)
        env_actions = apply_action_transform(actions, self.action_transform)
        chunk = actions.shape[1]
        t = self.tracker
        t.start_chunk(chunk)
        for k in range(chunk):
            live = t.active()
            success = np.zeros(self.num_envs, dtype=bool)
            for i in np.nonzero(live)[0]:
                success[i] = self._step_one(int(i), env_actions[i, k], last_of_chunk=k == chunk - 1)
                self.keep_substep(int(i), k)
            t.record(k, live, success)
        flags = t.end_chunk()
        if self.cycle is not None and flags.ended.any():
            ended = np.nonzero(flags.ended)[0]
            for i, sid in zip(ended, self.next_state_ids(ended)):
                self._reset_one(int(i), int(sid))
                flags.infos["reset_state_id"][i] = sid
        return flags.to_result(self.observations(), self._descriptions())

    def get_state(self) -> Any:
        """Per env: task and :meth:`LiberoSim.snapshot`; plus episode counters, cycle and last observations."""
        self._check_open()
        return {
            **self.episode_state(),
            "envs": [None if sim is None else {"task": sim.task.index, "snap": sim.snapshot()} for sim in self.sims],
        }

    def load_state(self, state: Any) -> None:
        """Rebuild each env's task (seeded, as at its reset, so the model is the same) and restore its snapshot."""
        self._check_open()
        for i, saved in enumerate(state["envs"]):
            if saved is None:
                continue
            task = int(saved["task"])
            sim = self._sim_for(i, task)
            # The seeded reset recreates the model the snapshot was taken with; the
            # snapshot then overwrites every piece of state the next step reads.
            sim.reset(self.suite.tasks[task].init_states[0], self.seed, 0, render_all=False, render_final=False)
            sim.restore(saved["snap"])
        self.load_episode_state(state)

    def close(self) -> None:
        """Close every MuJoCo env. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        for i, sim in enumerate(self.sims):
            if sim is not None:
                sim.close()
                self.sims[i] = None
        cache = scene_cache()
        if cache.in_use() == 0:
            cache.close()

    # ------------------------------------------------------------------ internals
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("LiberoEnv is closed")

    def _sim_for(self, i: int, task: int) -> LiberoSim:
        sim = self.sims[i]
        if sim is not None and sim.task.index == task:
            return sim
        if sim is not None:
            # The old task's scene stays cached while other envs use it (or as the idle one).
            sim.close()
            self.sims[i] = None
        # The GL platform is settled before the first simulator import, not in __init__:
        # listing state ids must stay cheap (the EGL check spawns a process).
        configure_gl(self.mujoco_gl)
        sim = LiberoSim(self.suite.tasks[task], self.cameras, self.height, self.width, self.physics)
        self.sims[i] = sim
        return sim

    def _reset_one(self, i: int, sid: int) -> None:
        task, trial = self.suite.locate(sid)
        sim = self._sim_for(i, task)
        obs = sim.reset(
            self.suite.tasks[task].init_states[trial], self.seed, self.settle_steps, self.render_all, settle_action=self.settle_action
        )
        self._write_obs(i, obs, images=True, state_id=sid, step=0)
        # LIBERO's initial states should never already solve the task; report it if one does.
        self.tracker.begin(np.array([i]), np.array([sid]), np.array([task]), np.array([bool(sim.check_success())]))

    def _step_one(self, i: int, action: np.ndarray, last_of_chunk: bool) -> bool:
        """One sub-step of env ``i``; returns LIBERO's success check after it.

        Images are rendered where they are handed out: the chunk's last sub-step and the
        sub-step an episode ends. Truncation is known in advance; success is not, so
        with lazy rendering the step is snapshotted first and, if it succeeds (and so
        ends the episode), replayed from the snapshot with the cameras on. MuJoCo is
        deterministic, so the replay reaches the same state and renders the images
        ``render: all`` would have.
        """
        sim = self.sims[i]
        assert sim is not None
        t = self.tracker
        render = self.render_all or self.render_substeps or last_of_chunk or t.length[i] + 1 >= self.max_episode_steps
        snap = None if render or t.ignore_terminations else sim.snapshot()
        obs = sim.step(action, render=render)
        success = sim.check_success()
        if success and snap is not None:
            sim.restore(snap)
            obs = sim.step(action, render=True)
            success = sim.check_success()
            render = True
        self._write_obs(i, obs, images=render, state_id=int(t.state_ids[i]), step=int(t.length[i]) + 1)
        return success

    def _write_obs(self, i: int, obs: dict[str, Any], images: bool, state_id: int, step: int) -> None:
        """Env ``i``'s observation; ``step``: the episode's step it is from (0 after the reset)."""
        self.obs["state"][i] = make_state8(obs)
        if not images:
            return
        sim = self.sims[i]
        noise = 0 if sim is None or sim.task.plus is None else int(sim.task.plus.noise)
        for key, cam in zip(("full_image", "wrist_image"), self.cameras):
            img = obs[f"{cam}_image"]
            if noise and cam == "agentview":
                from .plus.noise import corrupt, frame_rng

                # LIBERO-plus corrupts the agentview image only, as robosuite renders it (before any flip);
                # seeded by the state id and the step, so a frame is the same in any run and render mode.
                img = corrupt(img, noise, frame_rng(self.seed, state_id, step))
            # robosuite images are in OpenGL order (bottom row first); VLA pipelines rotate by 180 degrees.
            self.obs[key][i] = img[::-1, ::-1] if self.flip else img

    def _descriptions(self) -> list[str]:
        return self.descriptions(self.task_description)
