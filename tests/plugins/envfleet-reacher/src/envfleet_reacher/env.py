"""The reacher simulator: ``num_envs`` two-link arms in one MuJoCo model, each with its own data.

State id ``s`` is trial ``s % trials`` of target ``s // trials``: the target sits at one of
``targets`` points on a circle, the trial picks the arm's start angles. Success is the
fingertip within 2 cm of the target.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")  # before mujoco is imported: it fixes the GL platform then

import mujoco

from envfleet.env import ChunkStepResult, Env, EnvContext, ResetResult
from envfleet.episodes import EpisodeTracker, StateCycle
from envfleet.errors import InvalidInputError

from .plugin import observation_spec

XML = """
<mujoco model="reacher">
  <option timestep="0.01"/>
  <default><geom contype="0" conaffinity="0"/><joint damping="0.01"/></default>
  <worldbody>
    <light pos="0 0 1" dir="0 0 -1"/>
    <geom type="plane" size="0.3 0.3 0.01" rgba="0.85 0.85 0.8 1"/>
    <camera name="top" pos="0 0 0.6"/>
    <body name="upper" pos="0 0 0.02">
      <joint name="shoulder" type="hinge" axis="0 0 1"/>
      <geom type="capsule" fromto="0 0 0 0.1 0 0" size="0.012" rgba="0.2 0.4 0.8 1"/>
      <body name="fore" pos="0.1 0 0">
        <joint name="elbow" type="hinge" axis="0 0 1" limited="true" range="-2.8 2.8"/>
        <geom type="capsule" fromto="0 0 0 0.1 0 0" size="0.01" rgba="0.2 0.7 0.4 1"/>
        <site name="tip" pos="0.11 0 0" size="0.01"/>
      </body>
    </body>
    <body name="target" mocap="true" pos="0.1 0.1 0.02">
      <geom type="sphere" size="0.018" rgba="0.9 0.2 0.2 1"/>
    </body>
  </worldbody>
  <actuator>
    <motor joint="shoulder" gear="0.05" ctrllimited="true" ctrlrange="-1 1"/>
    <motor joint="elbow" gear="0.05" ctrllimited="true" ctrlrange="-1 1"/>
  </actuator>
</mujoco>
"""
SUCCESS_RADIUS = 0.02
TARGET_RADIUS = 0.15
DEFAULT_MAX_EPISODE_STEPS = 50


class ReacherEnv(Env):
    """The reacher backend's Env. See the module doc."""

    supports_state = True

    def __init__(self, cfg: Any, ctx: EnvContext) -> None:
        rc = cfg.reacher
        self.num_envs = ctx.num_envs
        self.action_dim = 2
        self.targets, self.trials, self.frame_skip = int(rc.targets), int(rc.trials), int(rc.frame_skip)
        self.spec = observation_spec(cfg, ctx.num_envs)
        h, w = self.spec["full_image"].shape[:2]
        self.render_all = str(cfg.render) == "all"  # the guide's toy renders every sub-step only when asked
        self.model = mujoco.MjModel.from_xml_string(XML)
        self.data = [mujoco.MjData(self.model) for _ in range(self.num_envs)]
        self.renderer = mujoco.Renderer(self.model, height=h, width=w)
        self.tip = self.model.site("tip").id
        self.tracker = EpisodeTracker(
            self.num_envs, cfg.max_episode_steps or DEFAULT_MAX_EPISODE_STEPS, cfg.reward_coef, cfg.ignore_terminations
        )
        # auto_reset as the guide of its day showed it: finished envs go to the next state id of a seeded cycle.
        self.cycle = (
            StateCycle(self.get_all_state_ids(), cfg.seed, ctx.rank, ctx.stage_id, ctx.env_offset + np.arange(self.num_envs))
            if cfg.auto_reset
            else None
        )
        self.obs = {k: np.zeros((self.num_envs, *s.shape), dtype=s.dtype) for k, s in self.spec.items()}

    def observation_spec(self) -> dict:
        return dict(self.spec)

    def get_all_state_ids(self) -> np.ndarray:
        return np.arange(self.targets * self.trials, dtype=np.int64)

    def get_state_task_ids(self) -> np.ndarray:
        return self.get_all_state_ids() // self.trials

    def reset_envs_to_state_ids(self, state_ids: np.ndarray, task_ids: np.ndarray | None = None) -> ResetResult:
        state_ids = np.asarray(state_ids, dtype=np.int64)
        total = self.targets * self.trials
        if state_ids.shape != (self.num_envs,) or state_ids.min() < 0 or state_ids.max() >= total:
            raise InvalidInputError(f"expected {self.num_envs} state ids in 0..{total - 1}, got {state_ids.tolist()}")
        if task_ids is not None and not np.array_equal(np.asarray(task_ids), state_ids // self.trials):
            raise InvalidInputError(f"task ids {np.asarray(task_ids).tolist()} do not match state ids {state_ids.tolist()}")
        for i, sid in enumerate(state_ids.tolist()):
            self._reset_one(i, sid)
        self._render(range(self.num_envs))
        return ResetResult(obs=self._copy_obs(), task_descriptions=self._descriptions())

    def chunk_step(self, actions: np.ndarray) -> ChunkStepResult:
        if actions.ndim != 3 or actions.shape[0] != self.num_envs or actions.shape[2] != self.action_dim:
            raise InvalidInputError(f"actions must have shape [{self.num_envs}, chunk, {self.action_dim}], got {list(actions.shape)}")
        t = self.tracker
        t.start_chunk(actions.shape[1])
        for k in range(actions.shape[1]):
            live = t.active()
            for i in np.nonzero(live)[0].tolist():
                self.data[i].ctrl[:] = np.clip(actions[i, k], -1.0, 1.0)
                mujoco.mj_step(self.model, self.data[i], nstep=self.frame_skip)
            t.record(k, live, self._distance() < SUCCESS_RADIUS)
            if self.render_all:
                self._render(np.nonzero(live)[0].tolist())
        if not self.render_all:
            self._render(range(self.num_envs))
        flags = t.end_chunk()
        if self.cycle is not None and flags.ended.any():
            ended = np.nonzero(flags.ended)[0].tolist()
            for i in ended:
                sid = self.cycle.next(i)
                self._reset_one(i, sid)
                flags.infos["reset_state_id"][i] = sid
            self._render(ended)
        return flags.to_result(self._copy_obs(), self._descriptions())

    def get_state(self) -> Any:
        return {
            "sim": [(d.qpos.copy(), d.qvel.copy(), d.mocap_pos.copy(), d.time) for d in self.data],
            "tracker": self.tracker.get_state(),
            "cycle": None if self.cycle is None else self.cycle.get_state(),
            "obs": {k: v.copy() for k, v in self.obs.items()},
        }

    def load_state(self, state: Any) -> None:
        for d, (qpos, qvel, mocap, time) in zip(self.data, state["sim"]):
            d.qpos[:], d.qvel[:], d.mocap_pos[:], d.time = qpos, qvel, mocap, time
            mujoco.mj_forward(self.model, d)
        self.tracker.load_state(state["tracker"])
        if self.cycle is not None and state["cycle"] is not None:
            self.cycle.load_state(state["cycle"])
        for key, value in state["obs"].items():
            self.obs[key][...] = value

    def close(self) -> None:
        if self.renderer is not None:
            self.renderer.close()
            self.renderer = None

    def _reset_one(self, i: int, sid: int) -> None:
        d = self.data[i]
        mujoco.mj_resetData(self.model, d)
        task = sid // self.trials
        angle = 2 * np.pi * task / self.targets + 0.4
        d.mocap_pos[0] = (TARGET_RADIUS * np.cos(angle), TARGET_RADIUS * np.sin(angle), 0.02)
        rng = np.random.default_rng(sid)
        d.qpos[:] = (rng.uniform(-np.pi, np.pi), rng.uniform(-2.0, 2.0))
        mujoco.mj_forward(self.model, d)
        self.tracker.begin(np.array([i]), np.array([sid]), np.array([task]))

    def _distance(self) -> np.ndarray:
        return np.array([np.linalg.norm(d.site_xpos[self.tip][:2] - d.mocap_pos[0][:2]) for d in self.data])

    def _render(self, envs: Any) -> None:
        for i in envs:
            d = self.data[i]
            self.renderer.update_scene(d, camera="top")
            self.obs["full_image"][i] = self.renderer.render()
            tip = d.site_xpos[self.tip][:2] - d.mocap_pos[0][:2]
            self.obs["state"][i] = (*d.qpos, *d.qvel, *tip)

    def _descriptions(self) -> list[str]:
        return [f"reach target {t} (task {t})" if t >= 0 else "" for t in self.tracker.task_ids.tolist()]

    def _copy_obs(self) -> dict[str, np.ndarray]:
        return {k: v.copy() for k, v in self.obs.items()}
