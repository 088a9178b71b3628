"""``EnvfleetVecEnv``: a Stable-Baselines3 ``VecEnv`` over envfleet's gymnasium face.

SB3 takes its own ``VecEnv`` class, not gymnasium's ``VectorEnv``, so this is a thin shim:
it holds one :class:`~envfleet.gym.EnvfleetVectorEnv` in ``SameStep`` autoreset mode
(gymnasium's name for SB3's rule: an env whose episode ends is reset within the same
step, its last observation handed out beside) and translates.

- ``step_async`` / ``step_wait``: one ``step`` of the face. ``dones`` is
  ``terminated | truncated``; an env that is done has ``infos[i]["terminal_observation"]``
  (its last observation) and ``infos[i]["TimeLimit.truncated"]`` (truncated, not
  terminated: SB3 bootstraps its value), and the observation returned is its new
  episode's first; ``reset_infos[i]`` holds that reset's infos. ``infos`` is SB3's list of
  dicts, one per env, from the face's dict of masked arrays.
- ``reset()``: the seed of :meth:`seed` (SB3 gives env ``i`` ``seed + i``: the face's walk
  over initial states is shuffled by env 0's) and the options of :meth:`set_options`
  (``state_id`` / ``task_id`` per env: the backend's fixed initial states), each used once.
- What a step is (``step="chunk"``, the default, or ``"action"``) and which spaces it presents
  (the env's own, where the backend declares them: ``PPO("MlpPolicy")`` and ``DQN`` run on a
  gymnasium env's ``Box`` observation and ``Discrete`` action) are the gymnasium face's
  decisions: see docs/faces/gymnasium.md.
- The ``num_envs`` envs are one batch behind one face, not ``num_envs`` ``gymnasium.Env``
  objects: ``get_attr`` / ``env_method`` reach the face (one value per env asked for),
  ``set_attr`` / ``env_method`` take every env or none, and ``env_is_wrapped`` is False
  (there is no per-env ``gymnasium.Env`` to wrap; use SB3's ``VecEnvWrapper`` s, e.g.
  ``VecMonitor``).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode
from stable_baselines3.common.vec_env import VecEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvObs, VecEnvStepReturn

from ..errors import ClosedEnvironmentError, InvalidInputError, LifecycleError
from ..gym import EnvfleetVectorEnv
from ..validation import to_numpy

__all__ = ["RESET_OPTIONS", "EnvfleetVecEnv", "make_vec_env"]

#: The keys :meth:`EnvfleetVecEnv.set_options` takes, per env.
RESET_OPTIONS = ("state_id", "task_id")

# The face's infos that are not one env's values of this step.
_NOT_PER_ENV = ("final_obs", "final_info")


def _env_infos(infos: dict[str, Any], num_envs: int) -> list[dict[str, Any]]:
    """gymnasium's dict of masked arrays as SB3's list of one dict per env (masked-out rows left out)."""
    out: list[dict[str, Any]] = [{} for _ in range(num_envs)]
    for key, value in infos.items():
        if key.startswith("_") or key in _NOT_PER_ENV:
            continue
        mask = infos.get(f"_{key}")
        for i in range(num_envs):
            if mask is None or mask[i]:
                out[i][key] = value[i]
    return out


class EnvfleetVecEnv(VecEnv):  # type: ignore[misc]
    """An SB3 ``VecEnv`` of ``train.num_envs`` envs of one backend; see the module doc.

    :param config: anything :func:`envfleet.load_config` accepts: a YAML path, a dict, a DictConfig.
    :param options: the gymnasium face's (:class:`~envfleet.gym.EnvfleetVectorEnv`), passed to it
        unchanged: ``step`` (``"chunk"``, the default, or ``"action"``), ``mode`` (``"train"`` or
        ``"val"``), ``render_mode`` (``None`` or ``"rgb_array"``: :meth:`render` tiles the images
        already returned), ``stage_id``, ``backend`` and ``spaces`` (``"env"``: the env's own where
        the backend declares them; ``"flat"``: envfleet's Dict layout). Not ``autoreset_mode``: SB3's ``VecEnv``
        resets a finished env within the step, which is gymnasium's ``SAME_STEP``.
    """

    def __init__(self, config: Any, **options: Any) -> None:
        if "autoreset_mode" in options:
            raise ValueError(
                f"autoreset_mode={options['autoreset_mode']!r}: SB3's VecEnv resets a finished env within the step "
                "(gymnasium's SAME_STEP, which this shim always uses); leave autoreset_mode out"
            )
        #: The gymnasium face this shim translates; the simulator runs behind it.
        self.vector_env = EnvfleetVectorEnv(config, autoreset_mode=AutoresetMode.SAME_STEP, **options)
        self._actions: np.ndarray | None = None
        self._started = False
        try:
            # SB3's constructor reads render_mode through get_attr, which needs the face above.
            super().__init__(self.vector_env.num_envs, self.vector_env.single_observation_space, self.vector_env.single_action_space)
        except BaseException:
            self.vector_env.close()
            raise

    # ------------------------------------------------------------------ SB3's VecEnv API
    def reset(self) -> VecEnvObs:
        """Reset every env, with the seed and options set since the last reset; returns the observations."""
        self._check_open()
        seed = self._seeds[0]
        options = self._face_options()
        self._reset_seeds()
        self._reset_options()
        obs, infos = self.vector_env.reset(seed=seed, options=options)
        self.reset_infos = _env_infos(infos, self.num_envs)
        self._actions = None
        self._started = True
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        """Check ``actions`` (``[num_envs, *action_space.shape]``) and keep them for :meth:`step_wait`."""
        self._check_open()
        if not self._started:
            raise LifecycleError("call reset() before step(): no env has an episode yet")
        arr = np.asarray(to_numpy(actions))
        expected = (self.num_envs, *(self.action_space.shape or ()))
        if arr.shape != expected:
            if self.vector_env.own is not None:
                what = f"the env's own {self.action_space}"
            else:
                what = "chunk, action_dim" if self.vector_env.step_mode == "chunk" else "action_dim"
            raise InvalidInputError(
                f"actions must have shape {list(expected)} (num_envs, *action_space.shape: {what}), got {list(arr.shape)}"
            )
        self._actions = arr

    def step_wait(self) -> VecEnvStepReturn:
        """Step every env with the actions of :meth:`step_async`; returns ``(obs, rewards, dones, infos)``."""
        self._check_open()
        actions, self._actions = self._actions, None
        if actions is None:
            raise LifecycleError("step_wait() needs a step_async(actions) before it")
        obs, rewards, terminated, truncated, infos = self.vector_env.step(actions)
        dones = terminated | truncated
        out = _env_infos(infos, self.num_envs)
        if dones.any():
            # The face's infos of a reset env are its reset's; the ended step's are in final_info.
            ended_infos = _env_infos(infos["final_info"], self.num_envs)
            for i in np.nonzero(dones)[0].tolist():
                self.reset_infos[i] = out[i]
                out[i] = ended_infos[i]
                out[i]["terminal_observation"] = infos["final_obs"][i]
        for i in range(self.num_envs):
            out[i]["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
        return obs, rewards.astype(np.float32), dones, out

    def close(self) -> None:
        """Stop the shard processes and free their shared memory. Safe to call twice."""
        self.vector_env.close()

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """The face's attribute ``attr_name``, once per env of ``indices`` (the envs share the face)."""
        value = getattr(self.vector_env, attr_name)  # AttributeError as SB3's has_attr() expects
        return [value for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Set ``attr_name`` on the face: every env at once (``indices`` all envs or ``None``)."""
        self._all_envs(indices, f"set_attr({attr_name!r})")
        setattr(self.vector_env, attr_name, value)

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any) -> list[Any]:
        """Call the face's method ``method_name`` once, for every env; its result is repeated once per env."""
        self._check_open()
        self._all_envs(indices, f"env_method({method_name!r})")
        method = getattr(self.vector_env, method_name)
        result = method(*method_args, **method_kwargs)
        return [result for _ in range(self.num_envs)]

    def env_is_wrapped(self, wrapper_class: type, indices: VecEnvIndices = None) -> list[bool]:
        """False for every env: there is no per-env ``gymnasium.Env`` to wrap (wrap this VecEnv instead)."""
        return [False for _ in self._get_indices(indices)]

    def get_images(self) -> Sequence[np.ndarray | None]:
        """Each env's latest camera image, as already returned (``render_mode="rgb_array"``)."""
        self._check_open()
        if self.render_mode != "rgb_array":
            warnings.warn(f"get_images() needs render_mode='rgb_array' (it is {self.render_mode!r}): pass it to make_vec_env", stacklevel=2)
            return [None for _ in range(self.num_envs)]
        frames = self.vector_env.render()
        return list(frames) if frames is not None else [None for _ in range(self.num_envs)]

    # ------------------------------------------------------------------ helpers
    def _check_open(self) -> None:
        if self.vector_env.closed:
            raise ClosedEnvironmentError("this EnvfleetVecEnv is closed; make a new one with make_vec_env()")

    def _all_envs(self, indices: VecEnvIndices, what: str) -> None:
        asked = sorted(set(self._get_indices(indices)))
        if asked != list(range(self.num_envs)):
            raise ValueError(
                f"{what} for envs {asked}: the {self.num_envs} envs are one batch behind one gymnasium face, so this "
                "applies to all of them at once: leave indices out (None)"
            )

    def _face_options(self) -> dict[str, Any]:
        """SB3's per-env options as the face's reset options (``state_ids`` / ``task_ids``)."""
        options: dict[str, Any] = {}
        for key in RESET_OPTIONS:
            values = [opts.get(key) for opts in self._options]
            given = [v is not None for v in values]
            if any(given) and not all(given):
                missing = [i for i, g in enumerate(given) if not g]
                raise InvalidInputError(f"set_options(): {key!r} is set for some envs but not for envs {missing}: set it for every env")
            if all(given):
                options[f"{key}s"] = np.asarray(values, dtype=np.int64)
        unknown = sorted({key for opts in self._options for key in opts} - set(RESET_OPTIONS))
        if unknown:
            raise InvalidInputError(f"set_options(): unknown option(s) {unknown}: expected {list(RESET_OPTIONS)} per env")
        return options

    def __repr__(self) -> str:
        return f"EnvfleetVecEnv({self.vector_env!r})"


def make_vec_env(config: Any, **options: Any) -> EnvfleetVecEnv:
    """An SB3 ``VecEnv`` over envfleet: ``config`` as :func:`envfleet.load_config` takes it.

    Options: ``step`` (``"chunk"`` or ``"action"``), ``mode`` (``"train"`` / ``"val"``),
    ``render_mode``, ``stage_id``, ``backend`` and ``spaces``; see :class:`EnvfleetVecEnv`. The simulator starts here.
    """
    return EnvfleetVecEnv(config, **options)
