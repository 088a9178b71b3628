"""``GymnasiumEnv``: ``num_envs`` gymnasium envs in one shard process, each made as ``gymnasium.make`` makes it.

State id ``k`` is ``reset(seed=train.gymnasium.seeds[k])``; there is one task (id 0), whose
description is ``train.gymnasium.task_description`` (default: the id).

A chunk runs each env's actions one sub-step at a time, as gymnasium's vector envs do, with the
episode semantics of every envfleet backend: gymnasium's ``terminated`` and ``truncated`` are
the termination and truncation flags (envfleet's ``max_episode_steps`` truncates too, where it
is shorter than the env's own limit); the env's reward, scaled by ``train.reward_coef``, is the
reward; ``info[success_key]`` is success. An env whose episode ended is not stepped again until
it is reset (``auto_reset``: at the chunk's end, to the next state id of its cycle), since
gymnasium leaves a step after the end undefined.

Images: an entry of the observation is copied from the observation the chunk ends on (the env
rendered it at every sub-step: nothing to skip); with ``render: rgb_array``, ``render()`` is
called only after each env's last sub-step of the chunk (``train.render: all``: after every one).

Actions are checked before any env steps (:meth:`envfleet_gymnasium.carry.ActionLayout.convert`):
a chunk that holds one bad action reaches no env.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from envfleet.batched_env import BatchedEnv
from envfleet.env import ChunkStepResult, EnvContext, ResetResult
from envfleet.validation import StateTable, as_env_ids, check_actions, check_reset_ids

from .carry import Layout, action_layout, get_path, observation_layout
from .case import Case
from .make import describe, describe_frame, make_env, set_gl

__all__ = ["GymnasiumEnv"]


class GymnasiumEnv(BatchedEnv):
    """The gymnasium backend's :class:`~envfleet.env.Env` (a :class:`~envfleet.batched_env.BatchedEnv`). See the module doc."""

    supports_state = False  # a gymnasium env has no snapshot API

    def __init__(self, cfg: Any, ctx: EnvContext) -> None:
        self.case = case = Case.from_section(cfg)
        set_gl(case.mujoco_gl)
        self.num_envs = ctx.num_envs
        self.ctx = ctx
        self.request = case.make_request()
        self.envs: list[Any] = []
        try:
            for _ in range(self.num_envs):
                self.envs.append(make_env(self.request))
            first = self.envs[0]
            frame = None
            if case.render:
                # The frame's shape is known only from a frame: one reset and render, as the spec probe did.
                first.reset(seed=case.seeds[0])
                frame = describe_frame(first.render())
            self.layout: Layout = observation_layout(describe(first.observation_space), frame, case.image_keys, case.state_keys)
            self.actions = action_layout(describe(first.action_space, bounds=True), case.rescale_actions)
        except BaseException:
            self.close()
            raise
        self.action_dim = self.actions.dim
        if int(ctx.action_dim) != self.action_dim:
            self.close()
            raise ValueError(
                f"the env's action space takes actions of size {self.action_dim}, but actor.model.action_dim is {ctx.action_dim}"
            )
        self.render_all = str(cfg.render) == "all"
        self.flip = bool(cfg.flip_images)
        self.success_key = case.success_key
        self._obs_entries = [e for e in self.layout.entries if e.source == "obs"]
        self._render_key = next((e.key for e in self.layout.entries if e.source == "render"), None)
        self._image_keys = {e.key for e in self.layout.entries if e.image}
        self.states = StateTable.contiguous(np.zeros(len(case.seeds), dtype=np.int64))
        # As plugin.horizon, with the registered limit read from the env at hand rather than the probe.
        steps = cfg.get("max_episode_steps") or case.max_episode_steps or getattr(first.spec, "max_episode_steps", None)
        if steps is None:
            self.close()
            raise ValueError(f"{case.name} registers no max_episode_steps and the config sets none: set train.max_episode_steps")
        self.init_episodes(cfg, ctx, int(steps))
        self.init_observations(self.layout.spec())

    # ------------------------------------------------------------------ the Env contract
    def reset_envs_to_state_ids(self, state_ids: np.ndarray, task_ids: np.ndarray | None = None) -> ResetResult:
        state_ids, _ = check_reset_ids(self.states, state_ids, task_ids, num_envs=self.num_envs)
        self._reset_envs(np.arange(self.num_envs), state_ids)
        return ResetResult(obs=self.observations(), task_descriptions=self._descriptions(), infos={"state_id": state_ids.copy()})

    def reset_some_envs(self, env_ids: np.ndarray, state_ids: np.ndarray, task_ids: np.ndarray | None = None) -> ResetResult:
        env_ids = as_env_ids(env_ids, self.num_envs)
        state_ids, _ = check_reset_ids(self.states, state_ids, task_ids, num_envs=len(env_ids))
        self._reset_envs(env_ids, state_ids)
        return ResetResult(
            obs=self.observations(), task_descriptions=self._descriptions(), infos={"state_id": self.tracker.state_ids.copy()}
        )

    def chunk_step(self, actions: np.ndarray) -> ChunkStepResult:
        actions = check_actions(actions, self.num_envs, self.action_dim)
        env_actions = self.actions.convert(actions, self.ctx.env_offset)  # every action checked before any env steps
        chunk = actions.shape[1]
        n = self.num_envs
        t = self.tracker
        t.start_chunk(chunk)
        # Sub-step after sub-step, env after env, as SyncVectorEnv steps; each result kept in a list and
        # the chunk accounted once (EpisodeTracker.record_chunk), not one tracker update per sub-step.
        left = t.steps_left().tolist()
        ignore = t.ignore_terminations
        key = self.success_key
        envs = self.envs
        rows = [list(env_actions[i]) for i in range(n)]  # numpy scalars / arrays, as SyncVectorEnv passes them
        simulated = np.zeros((n, chunk), dtype=bool)
        reward = np.zeros((n, chunk), dtype=np.float64)
        terminated = np.zeros((n, chunk), dtype=bool)
        truncated = np.zeros((n, chunk), dtype=bool)
        success = np.zeros((n, chunk), dtype=bool)
        last: list[Any] = [None] * n
        live = [i for i in range(n) if left[i] > 0]
        for k in range(chunk):
            if not live:
                break
            going = []
            for i in live:
                obs, r, term, trunc, info = envs[i].step(rows[i][k])
                simulated[i, k] = True
                reward[i, k] = r
                terminated[i, k] = term = bool(term)
                truncated[i, k] = trunc = bool(trunc)
                success[i, k] = bool(info.get(key, False)) if isinstance(info, dict) else False
                last[i] = obs
                if self.render_all:
                    self._write(i, obs)
                if not (trunc or (term and not ignore) or k + 1 >= left[i]):
                    going.append(i)
            live = going
        t.record_chunk(simulated, success, reward, terminated=terminated, truncated=truncated)
        flags = t.end_chunk()
        if not self.render_all:
            # The observation each env ends the chunk on; not one an auto-reset replaces at once.
            replaced = flags.ended if self.cycle is not None else np.zeros(n, dtype=bool)
            for i in range(n):
                if last[i] is not None and not replaced[i]:
                    self._write(i, last[i])
        if self.cycle is not None and flags.ended.any():
            ended = np.nonzero(flags.ended)[0]
            sids = self.next_state_ids(ended)
            self._reset_envs(ended, sids)
            flags.infos["reset_state_id"][ended] = sids
        return flags.to_result(self.observations(), self._descriptions())

    def renderer_info(self) -> dict[str, str]:
        return {"images": "render()" if self.layout.renders else ("observation" if self.layout.images_in_obs() else "none")}

    def close(self) -> None:
        envs, self.envs = getattr(self, "envs", []), []
        for env in envs:
            try:
                env.close()
            except Exception:  # closing is best effort: the others are closed too
                pass

    # ------------------------------------------------------------------ internals
    def _reset_envs(self, env_ids: np.ndarray, state_ids: np.ndarray) -> None:
        """Reset env ``env_ids[j]`` to state ``state_ids[j]``, one after the other; one tracker update for all."""
        at_reset = np.zeros(len(env_ids), dtype=bool)
        for j, (i, sid) in enumerate(zip(env_ids.tolist(), state_ids.tolist())):
            obs, info = self.envs[i].reset(seed=self.case.seeds[sid])
            at_reset[j] = bool(info.get(self.success_key, False)) if isinstance(info, dict) else False
            self._write(i, obs)
        self.tracker.begin(env_ids, state_ids, np.zeros(len(env_ids), dtype=np.int64), at_reset)

    def _write(self, i: int, obs: Any) -> None:
        """Env ``i``'s observation (and, for ``render: rgb_array``, its frame now) into the observation arrays."""
        for entry in self._obs_entries:
            value = np.asarray(get_path(obs, entry.path))
            self.obs[entry.key][i] = value[::-1, ::-1] if (self.flip and entry.key in self._image_keys) else value
        if self._render_key is not None:
            frame = self.envs[i].render()
            self.obs[self._render_key][i] = frame[::-1, ::-1] if self.flip else frame

    def _descriptions(self) -> list[str]:
        description = self.case.description
        return self.descriptions(lambda task: description)
