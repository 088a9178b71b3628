"""``ToyEnv``: a batch of 2-D point masses, each reaching a coloured goal.

Fast, deterministic and pure numpy. State id ``s`` is trial ``s % states_per_task``
of task ``s // states_per_task``; its start and goal positions depend on ``s`` only.
The first two action components move the point (``0.05 * clip(a, -1, 1)`` per
sub-step); success is being within 0.1 of the goal.
"""

from __future__ import annotations

import math
import os
import sys
import time
from typing import Any

import numpy as np

from envfleet.batched_env import BatchedEnv
from envfleet.env import ArraySpec, ChunkStepResult, EnvContext, ObservationSpec, ResetResult
from envfleet.substeps import substep_spec
from envfleet.validation import StateTable, as_env_ids, check_actions, check_reset_ids

from .plugin import DEFAULT_MAX_EPISODE_STEPS, observation_spec

__all__ = ["ToyEnv", "COLOR_NAMES"]

COLOR_NAMES = ["red", "green", "blue", "yellow", "magenta", "cyan", "orange", "purple"]
_COLORS = np.array(
    [(220, 40, 40), (40, 200, 60), (50, 80, 230), (230, 200, 40), (200, 60, 200), (40, 200, 200), (240, 140, 20), (120, 50, 170)],
    dtype=np.uint8,
)
_POINT = np.array([250, 250, 250], dtype=np.uint8)
GOAL_RADIUS = 0.1
SPEED = 0.05


class ToyEnv(BatchedEnv):
    """The toy backend's :class:`~envfleet.env.Env`. See the module doc."""

    supports_state = True

    def __init__(self, cfg: Any, ctx: EnvContext) -> None:
        tc = cfg.toy
        if tc.raise_in_constructor:
            raise RuntimeError("toy: train.toy.raise_in_constructor is set, so building the env fails (test hook)")
        if float(tc.build_sleep_s) > 0:
            time.sleep(float(tc.build_sleep_s))
        self.num_envs = ctx.num_envs
        self.action_dim = 7
        self.ctx = ctx
        self.num_tasks = int(tc.num_tasks)
        self.states_per_task = int(tc.states_per_task)
        self.step_cost_s = float(tc.step_cost_s)
        self.step_sleep_s = float(tc.step_sleep_s)
        self.env_sleep_s = float(tc.env_sleep_s)
        self.step_cost_tail = float(tc.step_cost_tail)
        self.reset_sleep_s = float(tc.reset_sleep_s)
        self._cost_seed = (int(cfg.seed), int(ctx.rank), int(ctx.stage_id))
        self.raise_on_step = int(tc.raise_on_step)
        self.exit_on_step = int(tc.exit_on_step)
        self.frozen = bool(tc.frozen)
        self.planted_bug = str(tc.planted_bug)
        self.states = StateTable.contiguous(np.repeat(np.arange(self.num_tasks), self.states_per_task))
        self._frozen_result: ChunkStepResult | None = None
        self.render_all = cfg.render == "all"
        self._spec = observation_spec(cfg, self.num_envs)
        h, w = self._spec["full_image"].shape[:2]
        self._h, self._w = h, w
        self.init_episodes(cfg, ctx, cfg.max_episode_steps or DEFAULT_MAX_EPISODE_STEPS)
        self.pos = np.zeros((self.num_envs, 2))
        self.goal = np.zeros((self.num_envs, 2))
        # train.record.frames: step: every sub-step's observation too (envfleet.substeps).
        self.init_observations({**self._spec, **substep_spec(cfg, self._spec, ctx.num_action_chunks)})
        self._chunks = 0
        # The background and goal stamp are drawn once; a render is two slice writes.
        yy = np.arange(h)[:, None]
        self._background = np.empty((h, w, 3), dtype=np.uint8)
        self._background[...] = np.broadcast_to((60 + 60 * yy / max(h - 1, 1))[..., None], (h, w, 1)).astype(np.uint8)
        r = max(int(GOAL_RADIUS * w / 2), 1)
        sy, sx = np.mgrid[-r : r + 1, -r : r + 1]
        self._disc = (sy**2 + sx**2) <= r * r
        self._r = r
        self._box_r = max(r, 1) - 1  # the point is a filled square of side 2 * _box_r + 1
        # World coordinates of each pixel (the full camera's view), for the depth observation.
        self._px_x = np.broadcast_to(np.linspace(-1.0, 1.0, w)[None, :], (h, w))
        self._px_y = np.broadcast_to(np.linspace(1.0, -1.0, h)[:, None], (h, w))
        self._closed = False

    # ------------------------------------------------------------------ protocol
    def observation_spec(self) -> ObservationSpec:
        if self.planted_bug == "own_spec_differs":
            return {**self._spec, "state": ArraySpec((9,), "float32")}
        return dict(self.obs_spec)  # with the substep/ keys of a section recording per step

    def get_all_state_ids(self) -> np.ndarray:
        return self.states.state_ids.copy()

    def get_state_task_ids(self) -> np.ndarray:
        return self.states.tasks_of(self.states.state_ids)

    def task_description(self, task_id: int) -> str:
        return f"reach the {COLOR_NAMES[task_id % len(COLOR_NAMES)]} goal (task {task_id})"

    def reset_envs_to_state_ids(self, state_ids: np.ndarray, task_ids: np.ndarray | None = None) -> ResetResult:
        state_ids, _ = check_reset_ids(self.states, state_ids, task_ids, num_envs=self.num_envs)
        self._frozen_result = None
        for i, sid in enumerate(state_ids):
            self._reset_one(i, int(sid))
        self._render(np.arange(self.num_envs))
        return ResetResult(obs=self._copy_obs(), task_descriptions=self._descriptions(), infos={"state_id": state_ids.copy()})

    def reset_some_envs(self, env_ids: np.ndarray, state_ids: np.ndarray, task_ids: np.ndarray | None = None) -> ResetResult:
        env_ids = as_env_ids(env_ids, self.num_envs)
        state_ids, _ = check_reset_ids(self.states, state_ids, task_ids, num_envs=len(env_ids))
        self._frozen_result = None
        for i, sid in zip(env_ids.tolist(), state_ids.tolist()):
            self._reset_one(i, sid)
        self._render(env_ids)
        return ResetResult(obs=self._copy_obs(), task_descriptions=self._descriptions(), infos={"state_id": self.tracker.state_ids.copy()})

    def chunk_step(self, actions: np.ndarray) -> ChunkStepResult:
        step_index = self._chunks
        self._chunks += 1
        if step_index == self.exit_on_step:
            sys.stderr.write(f"toy: train.toy.exit_on_step={self.exit_on_step} reached, exiting (test hook)\n")
            sys.stderr.flush()
            os._exit(7)
        if step_index == self.raise_on_step:
            raise RuntimeError(f"toy: train.toy.raise_on_step={self.raise_on_step} reached (test hook)")
        actions = check_actions(actions, self.num_envs, self.action_dim)
        chunk = actions.shape[1]
        if self.step_sleep_s > 0:
            time.sleep(self.step_sleep_s)
        if self.env_sleep_s > 0:
            time.sleep(self.env_sleep_s * sum(self._cost_factor(int(i), step_index) for i in np.nonzero(self.tracker.active())[0]))
        if self.frozen:
            return self._frozen_step(chunk)
        t = self.tracker
        t.start_chunk(chunk)
        touched = np.zeros(self.num_envs, dtype=bool)
        for k in range(chunk):
            live = t.active()
            idx = np.nonzero(live)[0]
            touched |= live
            if self.step_cost_s > 0 and idx.size:
                _busy_wait(self.step_cost_s * idx.size)
            self.pos[idx] = np.clip(self.pos[idx] + SPEED * np.clip(actions[idx, k, :2], -1.0, 1.0), -1.0, 1.0)
            d = self.pos - self.goal
            success = d[:, 0] * d[:, 0] + d[:, 1] * d[:, 1] < GOAL_RADIUS * GOAL_RADIUS
            t.record(k, live, success)
            if (self.render_all or self.substep_keys) and idx.size:
                self._render(idx)
            for i in idx.tolist() if self.substep_keys else ():
                self.keep_substep(i, k)
            if self.planted_bug == "render_last_differs" and not self.render_all and k == chunk - 2:
                self._render(np.nonzero(touched)[0])  # a sub-step too early
        if not self.render_all and self.planted_bug != "render_last_differs":
            self._render(np.nonzero(touched)[0])
        flags = t.end_chunk()
        if self.cycle is not None and flags.ended.any():
            reset = np.nonzero(flags.ended)[0]
            for i, sid in zip(reset.tolist(), self.next_state_ids(reset).tolist()):
                self._reset_one(i, sid)
                flags.infos["reset_state_id"][i] = sid
            self._render(reset)
        return flags.to_result(self._copy_obs(), self._descriptions())

    def get_state(self) -> Any:
        return {**self.episode_state(), "pos": self.pos.copy(), "goal": self.goal.copy(), "chunks": self._chunks}

    def load_state(self, state: Any) -> None:
        self.pos = state["pos"].copy()
        self.goal = state["goal"].copy()
        self.load_episode_state(state)
        self._chunks = int(state["chunks"])

    def close(self) -> None:
        self._closed = True

    # ------------------------------------------------------------------ internals
    def _frozen_step(self, chunk: int) -> ChunkStepResult:
        # train.toy.frozen: nothing moves, no reward, no flag; the same result every call. Like a
        # trivial gymnasium env, it returns its own arrays (a copy of the reset's observations), which
        # the shard copies into shared memory each step.
        if self._frozen_result is None or self._frozen_result.rewards.shape[1] != chunk:
            self.tracker.start_chunk(chunk)
            flags = self.tracker.end_chunk()
            self._frozen_result = flags.to_result({k: v.copy() for k, v in self.obs.items()}, self._descriptions())
        return self._frozen_result

    def _cost_factor(self, i: int, step_index: int) -> float:
        """Env ``i``'s cost factor at its ``step_index``-th chunk: a Pareto draw (>= 1), or 1 without ``step_cost_tail``."""
        if self.step_cost_tail <= 0:
            return 1.0
        rng = np.random.default_rng([*self._cost_seed, self.ctx.env_offset + i, step_index])
        return 1.0 + float(rng.pareto(self.step_cost_tail))

    def _reset_one(self, i: int, sid: int) -> None:
        if self.reset_sleep_s > 0:
            time.sleep(self.reset_sleep_s)
        rng = np.random.default_rng(sid)
        while True:
            start = rng.uniform(-0.8, 0.8, size=2)
            goal = rng.uniform(-0.6, 0.6, size=2)
            if np.linalg.norm(start - goal) > 3 * GOAL_RADIUS:
                break
        self.pos[i] = start
        self.goal[i] = goal
        solved = np.linalg.norm(self.pos[i] - self.goal[i]) < GOAL_RADIUS  # never, by construction; reported if it were
        self.tracker.begin(np.array([i]), np.array([sid]), np.array([sid // self.states_per_task]), np.array([solved]))

    def _descriptions(self) -> list[str]:
        return self.descriptions(self.task_description)

    def _to_px(self, x: float, y: float, cx: float, cy: float, scale: float) -> tuple[int, int]:
        col = int(round(((x - cx) * scale + 1) * 0.5 * (self._w - 1)))
        row = int(round((1 - ((y - cy) * scale + 1) * 0.5) * (self._h - 1)))
        return row, col

    def _stamp(self, img: np.ndarray, row: int, col: int, mask: np.ndarray | None, radius: int, color: Any) -> None:
        # Paint the square of ``radius`` around (row, col), clipped to the image; only ``mask``'s pixels if given.
        r0, r1, c0, c1 = row - radius, row + radius + 1, col - radius, col + radius + 1
        ir0, ir1, ic0, ic1 = max(r0, 0), min(r1, self._h), max(c0, 0), min(c1, self._w)
        if ir0 >= ir1 or ic0 >= ic1:
            return
        if mask is None:
            img[ir0:ir1, ic0:ic1] = color
        else:
            img[ir0:ir1, ic0:ic1][mask[ir0 - r0 : ir1 - r0, ic0 - c0 : ic1 - c0]] = color

    def _draw(
        self,
        img: np.ndarray,
        color: np.ndarray,
        goal: tuple[float, float],
        point: tuple[float, float],
        center: tuple[float, float],
        scale: float,
    ) -> None:
        img[...] = self._background
        self._stamp(img, *self._to_px(*goal, *center, scale), self._disc, self._r, color)
        self._stamp(img, *self._to_px(*point, *center, scale), None, self._box_r, _POINT)

    def _render(self, idx: np.ndarray) -> None:
        wrist = self.obs.get("wrist_image")
        side = self.obs.get("side_image")
        depth = self.obs.get("depth")
        for i in idx.tolist():
            px, py = self.pos[i].tolist()
            gx, gy = self.goal[i].tolist()
            t = int(self.tracker.task_ids[i])
            color = _COLORS[t % len(_COLORS)]
            self._draw(self.obs["full_image"][i], color, (gx, gy), (px, py), (0.0, 0.0), 1.0)
            if wrist is not None:
                # A camera riding on the point: the goal seen from the point, twice as close.
                self._draw(wrist[i], color, (gx, gy), (px, py), (px, py), 2.0)
            if side is not None:
                self._draw(side[i], color, (gx, gy), (px, py), (0.0, 0.0), 0.5)
            if depth is not None:
                distance = np.hypot(self._px_x - px, self._px_y - py)
                if depth.dtype == np.uint8:
                    depth[i] = np.clip(distance * (255.0 / (2 * math.sqrt(2))), 0, 255).astype(np.uint8)
                else:
                    depth[i] = distance
            dx, dy = gx - px, gy - py
            self.obs["state"][i] = (px, py, gx, gy, dx, dy, math.hypot(dx, dy), t / max(self.num_tasks, 1))

    def _copy_obs(self) -> dict[str, np.ndarray]:
        if self.planted_bug == "black_images":
            for key in ("full_image", "wrist_image", "side_image"):
                if key in self.obs:
                    self.obs[key][...] = 0
        return self.observations()


def _busy_wait(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass
