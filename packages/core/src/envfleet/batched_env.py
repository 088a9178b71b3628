"""``BatchedEnv``: what a backend's :class:`~envfleet.env.Env` repeats, written once.

Every backend keeps the same five things next to its simulator: the table of its
state ids (a :class:`~envfleet.validation.StateTable`), an
:class:`~envfleet.episodes.EpisodeTracker` (rewards, flags and episode infos), a
:class:`~envfleet.episodes.StateCycle` when ``auto_reset`` is on, host arrays for
the observations that the shard may bind to its shared memory, and the part of a
``get_state()`` snapshot that holds those. A subclass sets ``states``, calls
:meth:`init_episodes` and :meth:`init_observations` in its constructor, and keeps only
what is its own; ``observation_spec``, ``get_all_state_ids`` and ``get_state_task_ids``
are answered from what it set:

>>> class MyEnv(BatchedEnv):                                       # doctest: +SKIP
...     def __init__(self, cfg, ctx):
...         self.num_envs, self.action_dim = ctx.num_envs, ctx.action_dim
...         self.states = StateTable.contiguous(task_of_each_state)
...         self.init_observations(observation_spec(cfg, ctx.num_envs))
...         self.init_episodes(cfg, ctx, max_steps=cfg.max_episode_steps or 300)
...     def get_state(self):
...         return {**self.episode_state(), "sim": self.sim.snapshot()}
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .env import Env, EnvContext, ObservationSpec
from .episodes import EpisodeTracker, StateCycle
from .substeps import PREFIX as SUBSTEP
from .validation import StateTable

__all__ = ["BatchedEnv"]


class BatchedEnv(Env):
    """An :class:`~envfleet.env.Env` with a state table, an episode tracker, a state cycle and observation buffers.

    Attributes the subclass sets, or :meth:`init_episodes` and :meth:`init_observations` do:

    - ``states``: the :class:`~envfleet.validation.StateTable` of every state id and its task
      (set by the subclass, before :meth:`init_episodes`);
    - ``tracker``: the :class:`~envfleet.episodes.EpisodeTracker` of every env;
    - ``cycle``: the :class:`~envfleet.episodes.StateCycle` of ``auto_reset``, or ``None``;
    - ``obs``: the observation arrays ``[num_envs, *spec.shape]``; write into them, and
      return :meth:`observations` as a result's ``obs``.
    """

    states: StateTable
    tracker: EpisodeTracker
    cycle: StateCycle | None
    obs: dict[str, np.ndarray]
    obs_spec: ObservationSpec
    observations_bound: bool = False
    substep_keys: tuple[str, ...] = ()  # the observations kept per sub-step (recording per step), set by init_observations

    def observation_spec(self) -> ObservationSpec:
        """The spec given to :meth:`init_observations`."""
        if not hasattr(self, "obs_spec"):
            raise NotImplementedError(f"{type(self).__name__} has not called init_observations()")
        return dict(self.obs_spec)

    def get_all_state_ids(self) -> np.ndarray:
        """Every state id of :attr:`states`."""
        return self.states.state_ids.copy()

    def get_state_task_ids(self) -> np.ndarray:
        """The task of each state id of :attr:`states`."""
        return self.states.tasks_of(self.states.state_ids)

    def init_episodes(self, cfg: Any, ctx: EnvContext, max_steps: int) -> None:
        """Make the tracker (``max_steps``, ``cfg.reward_coef``, ``cfg.ignore_terminations``) and, with
        ``cfg.auto_reset``, the cycle over :meth:`get_all_state_ids` (call it once those are known)."""
        self.tracker = EpisodeTracker(self.num_envs, max_steps, cfg.reward_coef, cfg.ignore_terminations)
        self.cycle = (
            StateCycle(self.get_all_state_ids(), cfg.seed, ctx.rank, ctx.stage_id, ctx.env_offset + np.arange(self.num_envs))
            if cfg.auto_reset
            else None
        )

    def init_observations(self, spec: ObservationSpec) -> None:
        """Zeroed observation arrays, one per key of ``spec`` (with the ``substep/`` keys of a section that
        records per step, :func:`envfleet.substeps.substep_spec`)."""
        self.obs_spec = dict(spec)
        self.obs = {key: np.zeros((self.num_envs, *s.shape), dtype=s.dtype) for key, s in spec.items()}
        self.observations_bound = False
        self.substep_keys = tuple(key[len(SUBSTEP) :] for key in spec if key.startswith(SUBSTEP))

    def keep_substep(self, i: int, k: int) -> None:
        """Copy env ``i``'s current observation into row ``k`` of its sub-step observations (nothing when
        the section does not record per step). Call it after writing sub-step ``k``'s observation."""
        for key in self.substep_keys:
            self.obs[SUBSTEP + key][i, k] = self.obs[key][i]

    def bind_observation_buffers(self, buffers: dict[str, np.ndarray]) -> bool:
        """Write observations straight into the shard's shared memory from now on: no copy per call.

        Only after :meth:`init_observations`; an env that builds its own observation
        arrays each call keeps them (returns False), and the shard copies them.
        """
        if not hasattr(self, "obs"):
            return False
        for key, value in self.obs.items():
            buffers[key][...] = value
        self.obs = buffers
        self.observations_bound = True
        return True

    def observations(self) -> dict[str, np.ndarray]:
        """A result's ``obs``: the bound arrays themselves (the shard reads them there), else copies."""
        return dict(self.obs) if self.observations_bound else {key: value.copy() for key, value in self.obs.items()}

    def next_state_ids(self, envs: np.ndarray) -> np.ndarray:
        """The state ids that envs ``envs`` (whose episodes ended) auto-reset to, in order (``auto_reset`` only)."""
        assert self.cycle is not None, "next_state_ids() needs train.auto_reset"
        return np.array([self.cycle.next(int(i)) for i in envs], dtype=np.int64)

    def descriptions(self, describe: Callable[[int], str]) -> list[str]:
        """Each env's task description: ``describe(task id)``, or ``""`` for an env never reset."""
        return [describe(int(task)) if task >= 0 else "" for task in self.tracker.task_ids]

    def episode_state(self) -> dict[str, Any]:
        """The shared part of a :meth:`get_state` snapshot: tracker, cycle and (after :meth:`init_observations`) observations."""
        state: dict[str, Any] = {"tracker": self.tracker.get_state(), "cycle": None if self.cycle is None else self.cycle.get_state()}
        if hasattr(self, "obs"):
            state["obs"] = {key: value.copy() for key, value in self.obs.items()}
        return state

    def load_episode_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`episode_state` saved."""
        self.tracker.load_state(state["tracker"])
        if self.cycle is not None and state["cycle"] is not None:
            self.cycle.load_state(state["cycle"])
        for key, value in state.get("obs", {}).items():
            self.obs[key][...] = value
