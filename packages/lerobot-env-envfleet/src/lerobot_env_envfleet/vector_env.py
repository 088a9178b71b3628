"""``LeRobotTaskEnv``: one task of an envfleet suite as the ``VectorEnv`` LeRobot's eval loop drives.

It translates between envfleet's gymnasium face (:class:`envfleet.gym.EnvfleetVectorEnv`, which
owns the simulator processes) and what ``lerobot_eval.rollout`` reads, and owns nothing else:

- observations as LeRobot's sim envs return them: ``{"pixels": {camera: uint8 [n, H, W, 3]},
  "agent_pos": float32 [n, D]}`` (envfleet's ``state``), other arrays under their own keys;
  ``preprocess_observation`` turns them into ``observation.images.<camera>`` / ``observation.state``;
- ``call("task_description")`` / ``call("task")`` (the instruction of each env),
  ``call("_max_episode_steps")`` and ``call("render")``, as on gymnasium's vector envs;
- ``infos["is_success"]`` at the step an episode ends (and ``final_info`` with ``SameStep``);
- one action per ``step`` (LeRobot's policies pop one action of their chunk per call). With
  ``n_action_steps = n > 1`` the actions are collected and run as one envfleet chunk of ``n``
  at every ``n``-th step; the steps in between return the last observation, reward 0 and no
  end, so only the observations the policy reads are rendered (docs/faces/lerobot.md).

Each env starts its episodes from the task's fixed initial states in LeRobot's LIBERO order:
env ``i``'s ``k``-th episode starts from the task's trial ``(i + k * n) mod trials``. The
simulator processes start at the first reset and stop at :meth:`close`, so a suite's tasks,
evaluated one after another, never run side by side.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import VectorEnv
from gymnasium.vector.utils import batch_space
from omegaconf import DictConfig

from envfleet.errors import ConfigError, InvalidInputError
from envfleet.gym import make_vector_env
from envfleet.gym.vector_env import observation_space
from envfleet.plugins import get_backend

if TYPE_CHECKING:
    from envfleet.gym import EnvfleetVectorEnv

    # Annotation only: LeRobot's env config makes these envs and they read its fields; one LeRobot env
    # type's two sides (what the user types, what it builds), as LeRobot's own env packages keep them.
    from .config import EnvfleetEnvConfig

__all__ = ["NEW_ROLLOUT_OPTION", "LeRobotTaskEnv", "episode_bound", "grouped_suite_envs", "suite_envs", "task_groups"]

#: The reset option ``lerobot_eval.rollout`` passes at the start of a rollout (lerobot.envs.utils).
NEW_ROLLOUT_OPTION = "lerobot_new_rollout"


def episode_bound(cfg: DictConfig) -> int | None:
    """The episode horizon in sub-steps: ``train.max_episode_steps``, else the backend's default
    (``BackendSpec.max_episode_steps``) where it declares one."""
    if cfg.train.max_episode_steps:
        return int(cfg.train.max_episode_steps)
    spec = get_backend(str(cfg.train.simulator_type))
    return None if spec.max_episode_steps is None else spec.max_episode_steps(cfg.train)


class LeRobotTaskEnv(VectorEnv):  # type: ignore[misc]
    """``num_envs`` envs of one task of one suite, for LeRobot's eval loop; see the module doc."""

    def __init__(self, cfg: DictConfig, env_config: EnvfleetEnvConfig, task_id: int, fleet: EnvfleetVectorEnv | None = None) -> None:
        self.closed = False
        self.config = cfg
        self.task_id = int(task_id)
        self.num_envs = int(cfg.train.num_envs)
        self.n_action_steps = int(env_config.n_action_steps)
        self.camera_names = dict(env_config.camera_names)
        self.autoreset_mode = env_config.autoreset_mode
        horizon = episode_bound(cfg)
        if horizon is None:
            raise ConfigError(
                f"backend {cfg.train.simulator_type!r} does not say its episode horizon here: set --env.episode_length "
                "(LeRobot's rollout needs the step bound of an episode)"
            )
        # A whole number of chunks: the rollout's last step must complete the chunk that ends the episode.
        self._max_episode_steps = math.ceil(horizon / self.n_action_steps) * self.n_action_steps
        spec = get_backend(str(cfg.train.simulator_type)).checked_observation_spec(cfg.train, self.num_envs)
        inner = observation_space(spec).spaces
        pixels = {self.camera_names.get(k, k): s for k, s in inner.items() if len(spec[k].shape) == 3}
        rest = {("agent_pos" if k == "state" else k): s for k, s in inner.items() if len(spec[k].shape) != 3}
        self.single_observation_space = gym.spaces.Dict({"pixels": gym.spaces.Dict(pixels), **rest})
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (int(cfg.actor.model.action_dim),), np.float32)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = {"render_modes": ["rgb_array"], "render_fps": int(cfg.train.video_cfg.fps), "autoreset_mode": self.autoreset_mode}
        self.render_mode = "rgb_array"
        self._fleet = fleet
        self._trials: np.ndarray | None = None
        self._episodes = 0  # full resets so far: the k of the trial order
        self._pending: list[np.ndarray] = []
        self._obs: dict[str, Any] | None = None
        self._descriptions: list[str] = [""] * self.num_envs
        if fleet is not None:
            self._adopt(fleet)

    # ------------------------------------------------------------------ simulator lifetime
    def _adopt(self, fleet: EnvfleetVectorEnv) -> None:
        table = fleet.manager.get_state_task_ids()
        trials = fleet.manager.get_all_state_ids()[table == self.task_id]
        if len(trials) == 0:
            tasks = sorted(set(table.tolist()))
            fleet.close()
            raise InvalidInputError(f"task {self.task_id} is not one of the suite's tasks {tasks} (env.task_ids)")
        fleet.set_walk(trials)  # autoresets stay on this task
        self._fleet, self._trials = fleet, trials

    def _start(self) -> EnvfleetVectorEnv:
        if self.closed:
            raise gym.error.ClosedEnvironmentError(f"the envs of task {self.task_id} are closed; make new ones with make_env()")
        if self._fleet is None:
            self._adopt(
                make_vector_env(self.config, autoreset_mode=self.autoreset_mode, step="chunk", render_mode="rgb_array", spaces="flat")
            )
        assert self._fleet is not None
        return self._fleet

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """Every env to its next initial state of the task (or ``options["state_ids"]``); ``seed`` seeds the autoresets' walk."""
        fleet = self._start()
        options = {k: v for k, v in (options or {}).items() if k != NEW_ROLLOUT_OPTION}
        if isinstance(seed, (list, tuple, range)):
            seed = int(seed[0]) if len(seed) else None  # one walk per VectorEnv: its first env's seed
        if "state_ids" not in options and "reset_mask" not in options:
            assert self._trials is not None
            order = (np.arange(self.num_envs) + self._episodes * self.num_envs) % len(self._trials)
            options["state_ids"] = self._trials[order]
            self._episodes += 1
        obs, infos = fleet.reset(seed=seed, options=options)
        self._pending = []
        self._remember(obs, infos)
        return self._translate(obs), infos

    def step(self, actions: Any) -> tuple[dict[str, Any], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """One action per env (``[num_envs, action_dim]``); runs a chunk every ``n_action_steps`` calls."""
        fleet = self._start()
        if self._obs is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        if hasattr(actions, "detach") and hasattr(actions, "cpu"):  # a torch tensor
            actions = actions.detach().cpu().numpy()
        arr = np.asarray(actions, dtype=np.float32)
        expected = (self.num_envs, int(self.config.actor.model.action_dim))
        if arr.shape != expected:
            raise InvalidInputError(f"actions must have shape {list(expected)} (num_envs, action_dim), got {list(arr.shape)}")
        self._pending.append(arr)
        if len(self._pending) < self.n_action_steps:
            zeros = np.zeros(self.num_envs, dtype=bool)
            return self._translate(self._obs), np.zeros(self.num_envs), zeros, zeros.copy(), {}
        chunk = np.stack(self._pending, axis=1)
        self._pending = []
        obs, rewards, terminated, truncated, infos = fleet.step(chunk)
        self._remember(obs, infos)
        return self._translate(obs), rewards, terminated, truncated, infos

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """As gymnasium's vector envs' ``call``, for the names LeRobot's eval loop asks: one value per env."""
        if name in ("task_description", "task"):
            return tuple(self._descriptions)
        if name == "_max_episode_steps":
            return (self._max_episode_steps,) * self.num_envs
        if name == "render":
            frames = self.render()
            return tuple(frames) if frames is not None else (None,) * self.num_envs
        raise AttributeError(
            f"LeRobotTaskEnv.call({name!r}): envfleet's LeRobot envs answer task_description, task, _max_episode_steps, render"
        )

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """The attributes ``call`` answers, one value per env."""
        return self.call(name)

    def render(self) -> tuple[np.ndarray, ...] | None:
        """Each env's latest first camera image, as already returned (nothing is rendered again)."""
        return None if self._fleet is None or self._obs is None else self._fleet.render()

    def close_extras(self, **kwargs: Any) -> None:
        """Stop the task's simulator processes (LeRobot's eval closes each task's envs after it)."""
        if self._fleet is not None:
            self._fleet.close()

    # ------------------------------------------------------------------ helpers
    def _remember(self, obs: dict[str, Any], infos: dict[str, Any]) -> None:
        self._obs = obs
        if "task_description" in infos:
            mask = infos["_task_description"]
            for i in np.nonzero(mask)[0]:
                self._descriptions[i] = str(infos["task_description"][i])

    def _translate(self, obs: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"pixels": {}}
        for key, value in obs.items():
            if value.ndim == 4:
                out["pixels"][self.camera_names.get(key, key)] = value
            else:
                out["agent_pos" if key == "state" else key] = value
        return out

    def __repr__(self) -> str:
        return f"LeRobotTaskEnv({self.config.train.simulator_type!r}, task_id={self.task_id}, num_envs={self.num_envs}, n_action_steps={self.n_action_steps})"


def suite_envs(cfg: DictConfig, env_config: EnvfleetEnvConfig, task_ids: list[int] | None = None) -> dict[int, LeRobotTaskEnv]:
    """``{task_id: LeRobotTaskEnv}`` for one suite's config. Without ``task_ids`` the first task's
    simulators start now, to list the suite's tasks, and serve that task."""
    if task_ids is not None:
        return {int(t): LeRobotTaskEnv(cfg, env_config, int(t)) for t in task_ids}
    fleet = make_vector_env(cfg, autoreset_mode=env_config.autoreset_mode, step="chunk", render_mode="rgb_array", spaces="flat")
    try:
        tasks = sorted(set(fleet.manager.get_state_task_ids().tolist()))
        first = LeRobotTaskEnv(cfg, env_config, tasks[0], fleet=fleet)
    except BaseException:
        fleet.close()
        raise
    return {tasks[0]: first, **{t: LeRobotTaskEnv(cfg, env_config, t) for t in tasks[1:]}}


def task_groups(cfg: DictConfig) -> dict[int, str]:
    """``{task id: group}``: the backend's grouping of the suite's tasks (``BackendSpec.task_groups``, e.g.
    LIBERO-plus's perturbation dimension), the one ``envfleet rollout`` reports by; empty where it has none."""
    groups = get_backend(str(cfg.train.simulator_type)).task_groups
    return {} if groups is None else {int(task): str(group) for task, group in groups(cfg.train).items()}


def grouped_suite_envs(
    cfg: DictConfig, env_config: EnvfleetEnvConfig, task_ids: list[int] | None = None
) -> dict[str, dict[int, LeRobotTaskEnv]]:
    """``{group: {task_id: LeRobotTaskEnv}}`` for one suite's config whose backend groups its tasks
    (:func:`task_groups`), groups in the order of their first task; empty where it does not.

    The tasks are listed from the config, so no simulator starts here; each task's envs start at their first reset.

    :raises InvalidInputError: a task id the suite does not have.
    """
    of = task_groups(cfg)
    if not of:
        return {}
    ids = sorted(of) if task_ids is None else [int(t) for t in task_ids]
    unknown = [t for t in ids if t not in of]
    if unknown:
        raise InvalidInputError(f"task {unknown[0]} is not one of the suite's {len(of)} tasks ({min(of)} .. {max(of)}) (env.task_ids)")
    out: dict[str, dict[int, LeRobotTaskEnv]] = {}
    for task in ids:
        out.setdefault(of[task], {})[task] = LeRobotTaskEnv(cfg, env_config, task)
    return out
