"""``EnvfleetVectorEnv``: a gymnasium 1.x ``VectorEnv`` over one stage's :class:`~envfleet.ProcessEnvManager`.

The face translates and owns nothing else: every reset and step goes to the manager,
whose shard processes run the simulator, write images to shared memory, render only
the sub-step that is handed out, and are restarted when they crash or hang.

Steps (``step=``):

- ``"chunk"`` (the default): one ``step`` is one chunk. The action space is
  ``(num_action_chunks, action_dim)`` per env, the observation is the one after the
  chunk's last sub-step (the only one rendered with ``render: last``), the reward is the
  chunk's sum, and ``terminated`` / ``truncated`` say whether the episode ended within
  the chunk. The per-sub-step arrays are in the infos: ``chunk_rewards``,
  ``chunk_terminations``, ``chunk_truncations`` (``[num_envs, chunk]``).
- ``"action"``: one ``step`` is one action (``(action_dim,)`` per env): a chunk of one,
  so every step's observation is rendered. A loop that reads the observation only every
  ``n`` actions (LeRobot's ``n_action_steps``) sets ``actor.model.num_action_chunks: n``
  and steps chunks instead; nothing else is rendered for it.

Spaces (``spaces=``): ``"env"`` (the default) presents the env's own spaces where the backend
declares them (``BackendSpec.spaces``: the gymnasium backend's env without images, :mod:`envfleet.spaces`):
its own observation space (a ``Box``, a ``Discrete``, a ``Dict`` with its own keys) and its own action
space, a chunk of it with ``step="chunk"`` (:func:`envfleet.spaces.chunked`); actions are taken in
that space's form (an integer per env for ``Discrete``). Every other backend, an env with images, and
``"flat"`` give envfleet's ``Dict`` layout: every key of the observation spec, and
``Box(-1, 1, (chunk, action_dim))`` actions.

Autoreset (``autoreset_mode=``, gymnasium's :class:`~gymnasium.vector.AutoresetMode`):
``NextStep`` (gymnasium's default), ``SameStep`` (``final_obs`` / ``final_info`` in the
infos) and ``Disabled`` (stepping an env whose episode ended is an error; reset it with
``reset(options={"reset_mask": ...})``). The simulator's own ``train.auto_reset`` stays
off: the face decides when an env is reset, with partial resets of the manager.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from ..env import ObservationSpec
from ..errors import ConfigError, InvalidInputError
from ..faces import StateWalk, as_config, check_face_execution
from ..plugins import BackendSpec
from ..remote.config import build_manager
from ..spaces import OwnSpaces, own_spaces
from ..validation import to_numpy
from .infos import chunk_infos, masked_infos, merge_infos, object_column
from .spaces import space

__all__ = ["SPACES", "STEP_MODES", "EnvfleetVectorEnv", "make_vector_env"]

#: What one ``step`` of the VectorEnv is: a whole chunk of actions, or one action.
STEP_MODES = ("chunk", "action")
#: Which spaces the VectorEnv presents: the env's own where the backend declares them, or envfleet's Dict layout.
SPACES = ("env", "flat")

_RESET_OPTIONS = ("reset_mask", "state_ids", "task_ids")


def _autoreset(mode: Any) -> AutoresetMode:
    if isinstance(mode, AutoresetMode):
        return mode
    for member in AutoresetMode:
        if mode in (member.value, member.name):
            return member
    names = ", ".join(f"{m.value!r}" for m in AutoresetMode)
    raise ValueError(f"autoreset_mode must be a gymnasium.vector.AutoresetMode or one of {names}, got {mode!r}")


def observation_space(spec: ObservationSpec) -> gym.spaces.Dict:
    """One env's observation space: a uint8 ``Box(0, 255)`` per image, an unbounded ``Box`` per other array."""
    spaces: dict[str, gym.Space[Any]] = {}
    for key, arr in spec.items():
        dtype = np.dtype(arr.dtype)
        if dtype == np.uint8:
            spaces[key] = gym.spaces.Box(0, 255, arr.shape, np.uint8)
        elif dtype.kind == "f":
            spaces[key] = gym.spaces.Box(-np.inf, np.inf, arr.shape, dtype)
        else:
            info = np.iinfo(dtype) if dtype.kind in "iu" else None
            low, high = (info.min, info.max) if info is not None else (0, 1)
            spaces[key] = gym.spaces.Box(low, high, arr.shape, dtype)
    return gym.spaces.Dict(spaces)


class EnvfleetVectorEnv(VectorEnv):  # type: ignore[misc]
    """A gymnasium ``VectorEnv`` of ``train.num_envs`` envs of one backend; see the module doc.

    :param config: anything :func:`envfleet.load_config` accepts: a YAML path, a dict, a DictConfig.
    :param autoreset_mode: ``"NextStep"``, ``"SameStep"``, ``"Disabled"`` or an ``AutoresetMode``.
    :param step: ``"chunk"`` or ``"action"`` (:data:`STEP_MODES`).
    :param mode: which env section of the config: ``"train"`` or ``"val"``.
    :param render_mode: ``None`` or ``"rgb_array"`` (:meth:`render` hands out the last ``full_image``).
    :param stage_id: the stage this env is (seeds, shared-memory names, messages).
    :param backend: a :class:`~envfleet.plugins.BackendSpec`; looked up from ``simulator_type`` when omitted.
    :param spaces: ``"env"`` (the env's own spaces where the backend declares them) or ``"flat"`` (:data:`SPACES`).
    """

    #: Whether the simulator resets finished envs itself (``train.auto_reset``), as first-ready stepping needs.
    simulator_resets = False

    def __init__(
        self,
        config: Any,
        *,
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        step: str = "chunk",
        mode: str = "train",
        render_mode: str | None = None,
        stage_id: int = 0,
        backend: BackendSpec | None = None,
        spaces: str = "env",
    ) -> None:
        self.closed = True  # until the manager is up: close() then has nothing to free
        if step not in STEP_MODES:
            raise ValueError(f"step must be one of {STEP_MODES} (one step per chunk or per action), got {step!r}")
        if spaces not in SPACES:
            raise ValueError(f"spaces must be one of {SPACES} (the env's own where declared, or envfleet's Dict layout), got {spaces!r}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array' (the images the env already returns), got {render_mode!r}")
        self.autoreset_mode = _autoreset(autoreset_mode)
        self.step_mode = step
        overrides = ["actor.model.num_action_chunks=1"] if step == "action" else []
        cfg = as_config(config, overrides)
        env_cfg = cfg[mode]
        check_face_execution(env_cfg, mode, "the gymnasium face")
        if env_cfg.auto_reset and not self.simulator_resets:
            raise ConfigError(
                f"{mode}.auto_reset is true, but the gymnasium face resets envs itself (autoreset_mode="
                f"{self.autoreset_mode.value!r}): set {mode}.auto_reset: false"
            )
        self.config = cfg
        self.render_mode = render_mode
        self.ignore_terminations = bool(env_cfg.ignore_terminations)
        self.manager = build_manager(cfg, stage_id=stage_id, mode=mode, backend=backend)
        self.num_envs = self.manager.num_envs
        self.chunk = self.manager.chunk
        self.action_dim = self.manager.action_dim
        #: The env's own spaces (:mod:`envfleet.spaces`), or ``None``: envfleet's Dict layout.
        self.own: OwnSpaces | None = None
        try:
            if spaces == "env":
                chunk = self.chunk if step == "chunk" else None
                self.own = own_spaces(self.manager.spec, env_cfg, self.manager.obs_spec, self.action_dim, chunk)
            if self.own is not None:
                self.single_observation_space = space(self.own.observation.desc)
                self.single_action_space = space(self.own.action.desc)
        except BaseException:
            self.manager.close()
            raise
        if self.own is not None:
            self._action_shape: tuple[int, ...] = self.own.action.shape
        else:
            self.single_observation_space = observation_space(self.manager.obs_spec)
            self._action_shape = (self.chunk, self.action_dim) if step == "chunk" else (self.action_dim,)
            self.single_action_space = gym.spaces.Box(-1.0, 1.0, self._action_shape, np.float32)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = {
            "autoreset_mode": self.autoreset_mode,
            "render_modes": ["rgb_array"],
            "render_fps": int(env_cfg.video_cfg.fps),
        }
        self._image_key = next((k for k, s in self.manager.obs_spec.items() if len(s.shape) == 3), None)
        self._obs: dict[str, np.ndarray] | None = None
        self._ended = np.zeros(self.num_envs, dtype=bool)  # the episode ended at the last step
        self._seed = int(env_cfg.seed)
        try:
            self.manager.start_simulator()
            self._walk = StateWalk(self.manager.get_all_state_ids(), self._seed)
        except BaseException:
            self.manager.close()
            raise
        self.closed = False

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset every env, or those of ``options["reset_mask"]``; returns ``(obs, infos)``.

        Options: ``reset_mask`` (bool ``[num_envs]``: reset only these envs), ``state_ids`` (the
        backend's fixed initial states to reset to: one per env, or one per env of the mask) and
        ``task_ids`` (checked against the state ids). Without ``state_ids`` the envs take the next
        states of a walk over every state id, shuffled by ``seed`` (``train.seed`` until one is given).
        """
        self._check_open()
        if seed is not None:
            if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
                raise TypeError(f"seed must be an int (it shuffles the walk over state ids) or None, got {seed!r}")
            super().reset(seed=int(seed))
            self._seed = int(seed)
            self._walk.seed(int(seed))
        options = dict(options or {})
        unknown = sorted(set(options) - set(_RESET_OPTIONS))
        if unknown:
            raise ValueError(f"unknown reset option(s) {unknown}: expected {list(_RESET_OPTIONS)}")
        mask = self._reset_mask(options.get("reset_mask"))
        count = int(mask.sum())
        state_ids = self._ids_for("state_ids", options.get("state_ids"), mask, count)
        task_ids = self._ids_for("task_ids", options.get("task_ids"), mask, count)
        if state_ids is None:
            state_ids = self._walk.take(count)
        if self._obs is None or mask.all():
            result = self.manager.reset_envs_to_state_ids(state_ids, task_ids)
        else:
            result = self.manager.reset_some_envs(np.nonzero(mask)[0], state_ids, task_ids)
        self._obs = dict(result.obs)
        self._ended[mask] = False
        return self._obs_out(), masked_infos(self._reset_values(result), mask)

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """One chunk (``step="chunk"``) or one action (``step="action"``) for every env."""
        self._check_open()
        if self._obs is None:
            raise gym.error.ResetNeeded("call reset() before step(): no env has an episode yet")
        actions = self._chunk_actions(actions)
        pending = self._ended.copy()
        if self.autoreset_mode is AutoresetMode.DISABLED and pending.any():
            envs = np.nonzero(pending)[0].tolist()
            raise gym.error.ResetNeeded(
                f"envs {envs} ended their episodes and autoreset_mode is 'Disabled': reset them first, "
                f"with reset(options={{'reset_mask': mask}}) (mask True at {envs})"
            )
        # An env whose episode ended is not simulated any more (envfleet's episode rule), so
        # stepping it with the others and resetting it afterwards is exact.
        result = self.manager.chunk_step(actions)
        rewards = result.rewards.astype(np.float64).sum(axis=1)
        terminated = result.terminations[:, -1].copy()
        if self.ignore_terminations:
            terminated[:] = False
        truncated = result.truncations[:, -1].copy()
        values = chunk_infos(result)
        obs = dict(result.obs)
        stepped = ~pending
        infos = masked_infos(values, stepped)
        ended = terminated | truncated
        if self.autoreset_mode is AutoresetMode.NEXT_STEP:
            if pending.any():
                reset = self.manager.reset_some_envs(np.nonzero(pending)[0], self._walk.take(int(pending.sum())))
                obs = dict(reset.obs)
                rewards[pending] = 0.0
                terminated[pending] = False
                truncated[pending] = False
                ended = terminated | truncated
                infos = merge_infos(infos, masked_infos(self._reset_values(reset), pending))
        elif self.autoreset_mode is AutoresetMode.SAME_STEP and ended.any():
            final_obs = np.full(self.num_envs, None, dtype=object)
            for i in np.nonzero(ended)[0]:
                final_obs[i] = self._obs_row(obs, int(i))
            final_info = masked_infos(values, ended)
            reset = self.manager.reset_some_envs(np.nonzero(ended)[0], self._walk.take(int(ended.sum())))
            obs = dict(reset.obs)
            # As gymnasium's SyncVectorEnv: a reset env's infos are its reset's, its last step's are final_info.
            infos = merge_infos(masked_infos(values, ~ended), masked_infos(self._reset_values(reset), ended))
            infos.update(final_obs=final_obs, _final_obs=ended.copy(), final_info=final_info, _final_info=ended.copy())
            ended = np.zeros(self.num_envs, dtype=bool)
        self._obs = obs
        self._ended = ended
        return self._obs_out(), rewards, terminated, truncated, infos

    def set_walk(self, state_ids: Any) -> None:
        """Resets without ``state_ids`` (seeded resets, autoresets) draw from ``state_ids`` from now on.

        For example one task's state ids, to keep every episode of these envs on that task. The walk
        starts again, shuffled by the last seed (``train.seed`` until :meth:`reset` gets one).
        """
        self._check_open()
        ids = np.asarray(state_ids, dtype=np.int64)
        known = set(self.manager.get_all_state_ids().tolist())
        if ids.ndim != 1 or len(ids) == 0:
            raise InvalidInputError(f"set_walk() needs a non-empty 1-D list of state ids, got shape {list(ids.shape)}")
        unknown = sorted(set(ids.tolist()) - known)
        if unknown:
            raise InvalidInputError(f"set_walk(): state ids {unknown[:10]} are not the backend's (get_all_state_ids())")
        self._walk = StateWalk(ids, self._seed)

    def render(self) -> tuple[np.ndarray, ...] | None:
        """With ``render_mode="rgb_array"``: each env's latest camera image, as already returned (nothing is rendered again)."""
        self._check_open()
        if self.render_mode is None:
            gym.logger.warn("render() was called with render_mode=None: pass render_mode='rgb_array' to make_vector_env")
            return None
        if self._obs is None or self._image_key is None:
            return None
        return tuple(frame.copy() for frame in self._obs[self._image_key])

    def close_extras(self, **kwargs: Any) -> None:
        """Stop the shard processes and free their shared memory (``close()`` calls it once)."""
        self.manager.close()

    # ------------------------------------------------------------------ helpers
    def _check_open(self) -> None:
        if self.closed:
            raise gym.error.ClosedEnvironmentError("this EnvfleetVectorEnv is closed; make a new one with make_vector_env()")

    def _obs_out(self, obs: dict[str, np.ndarray] | None = None) -> Any:
        """The observation handed out: ``obs`` (the manager's arrays; the last one kept when None) as the
        env's own structure, or as envfleet's Dict layout."""
        obs = self._obs if obs is None else obs
        assert obs is not None
        # Copies: the caller may keep or change them; the face keeps its own for render() and final_obs.
        if self.own is not None:
            return self.own.observation.batch(obs)
        return {key: value.copy() for key, value in obs.items()}

    def _obs_row(self, obs: dict[str, np.ndarray], i: int) -> Any:
        """Env ``i``'s observation alone (``final_obs``), as :meth:`_obs_out` hands it out."""
        if self.own is not None:
            return self.own.observation.row(obs, i)
        return {key: value[i].copy() for key, value in obs.items()}

    def _chunk_actions(self, actions: Any, num_envs: int | None = None) -> np.ndarray:
        """``actions`` (one row per env, or per env of ``num_envs``) as the manager's rows ``[n, chunk, action_dim]``."""
        n = self.num_envs if num_envs is None else num_envs
        if self.own is not None:
            return self.own.action.rows(actions, n)
        arr = np.asarray(to_numpy(actions))
        expected = (n, *self._action_shape)
        if arr.shape != expected:
            raise InvalidInputError(
                f"actions must have shape {list(expected)} (num_envs, "
                + ("chunk, action_dim" if self.step_mode == "chunk" else "action_dim")
                + f", as action_space), got {list(arr.shape)}"
            )
        return arr if self.step_mode == "chunk" else arr[:, None, :]

    def _reset_mask(self, value: Any) -> np.ndarray:
        if value is None:
            return np.ones(self.num_envs, dtype=bool)
        if not isinstance(value, np.ndarray):
            raise TypeError(f"options['reset_mask'] must be a numpy bool array of shape ({self.num_envs},), got {type(value).__name__}")
        if value.shape != (self.num_envs,) or value.dtype != np.bool_:
            raise ValueError(
                f"options['reset_mask'] must be a numpy bool array of shape ({self.num_envs},), got {value.dtype}{list(value.shape)}"
            )
        if not value.any():
            raise ValueError("options['reset_mask'] must be True for at least one env")
        if self._obs is None and not value.all():
            raise ValueError("the first reset() resets every env: options['reset_mask'] must be all True (or left out)")
        return value.copy()

    def _ids_for(self, name: str, value: Any, mask: np.ndarray, count: int) -> np.ndarray | None:
        if value is None:
            return None
        arr = np.asarray(value)
        if arr.shape == (self.num_envs,) and count != self.num_envs:
            return arr[mask]
        if arr.shape != (count,):
            raise InvalidInputError(
                f"options[{name!r}] must have one id per env ({self.num_envs},) or per env of reset_mask ({count},), got shape {arr.shape}"
            )
        return arr

    @staticmethod
    def _reset_values(result: Any) -> dict[str, np.ndarray]:
        values = {key: np.asarray(value) for key, value in result.infos.items()}
        values["task_description"] = object_column(list(result.task_descriptions))
        return values

    def __repr__(self) -> str:
        return f"EnvfleetVectorEnv({self.manager.spec.name!r}, num_envs={self.num_envs}, step={self.step_mode!r}, autoreset_mode={self.autoreset_mode.value!r})"


def make_vector_env(config: Any, **options: Any) -> EnvfleetVectorEnv:
    """A gymnasium ``VectorEnv`` over envfleet: ``config`` as :func:`envfleet.load_config` takes it.

    Options: ``autoreset_mode`` (``"NextStep"``, ``"SameStep"``, ``"Disabled"``), ``step``
    (``"chunk"`` or ``"action"``), ``mode`` (``"train"`` / ``"val"``), ``render_mode``,
    ``stage_id``, ``backend`` and ``spaces`` (``"env"`` or ``"flat"``); see :class:`EnvfleetVectorEnv`.
    The simulator starts here.
    """
    return EnvfleetVectorEnv(config, **options)
