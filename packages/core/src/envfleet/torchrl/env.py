"""``EnvfleetEnv``: a batched TorchRL ``EnvBase`` over one stage's :class:`~envfleet.ProcessEnvManager`.

The batch size is ``[train.num_envs]``. As in envfleet's gymnasium face, one ``step`` is
one chunk by default (``action``: ``[num_envs, num_action_chunks, action_dim]``; the
observation after the chunk's last sub-step, the only one rendered with ``render: last``;
``reward``: the chunk's sum), or one action with ``step="action"``. ``done`` /
``terminated`` / ``truncated`` say whether the episode ended within the chunk; a shard
restarted after a crash reports its envs ``truncated``. A partial reset (``"_reset"``,
as TorchRL's collectors and ``rollout(break_when_any_done=False)`` send it) resets those
envs only; the others run on. ``"state_ids"`` in the reset tensordict picks the backend's
fixed initial states; otherwise they come from a walk over every state id, seeded by
:meth:`set_seed` (``train.seed`` until then).

Specs (``spaces=``): ``"env"`` (the default) presents the env's own spaces where the backend declares
them (the gymnasium backend's env without images, :mod:`envfleet.spaces`), as TorchRL's ``GymEnv`` does
(:mod:`envfleet.torchrl.specs`: ``"observation"`` for a lone space, a ``OneHot`` action for
``Discrete``, or a ``Categorical`` one with ``categorical_action_encoding=True``); with
``step="chunk"`` the action has the chunk as its first dimension (:func:`envfleet.spaces.chunked`).
Other backends, an env with images, and ``"flat"``: every key of the observation spec, and
``Bounded(-1, 1)`` actions ``[num_envs, chunk, action_dim]``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Bounded, Categorical, Composite, TensorSpec, Unbounded
from torchrl.envs import EnvBase

from ..env import ArraySpec
from ..errors import ConfigError, InvalidInputError
from ..execution import result_shapes
from ..faces import StateWalk, as_config, check_face_execution
from ..plugins import BackendSpec
from ..remote.config import build_manager
from ..spaces import own_spaces
from .specs import OwnSpecs, own_specs

__all__ = ["SPACES", "EnvfleetEnv", "make_env"]

#: Which specs the env presents: the env's own where the backend declares them, or envfleet's layout.
SPACES = ("env", "flat")


def _layout_spec(spec: ArraySpec, n: int) -> TensorSpec:
    """One key of envfleet's layout: an image ``Bounded(0, 255)``, another array ``Unbounded`` of its dtype."""
    dtype = getattr(torch, np.dtype(spec.dtype).name)
    if dtype == torch.uint8:
        return Bounded(0, 255, shape=(n, *spec.shape), dtype=torch.uint8)
    return Unbounded(shape=(n, *spec.shape), dtype=dtype)


class EnvfleetEnv(EnvBase):  # type: ignore[misc]
    """A batched TorchRL env of ``train.num_envs`` envs of one backend; see the module doc.

    :param config: anything :func:`envfleet.load_config` accepts.
    :param step: ``"chunk"`` (one step per chunk) or ``"action"`` (per action).
    :param mode: ``"train"`` or ``"val"``.
    :param stage_id: the stage this env is.
    :param backend: a :class:`~envfleet.plugins.BackendSpec`; looked up from ``simulator_type`` when omitted.
    :param spaces: ``"env"`` (the env's own spaces where the backend declares them) or ``"flat"`` (:data:`SPACES`).
    :param categorical_action_encoding: with the env's own spaces, ``Categorical`` specs for its
        ``Discrete`` / ``MultiDiscrete`` spaces instead of ``OneHot`` ones (``GymEnv``'s argument).
    """

    #: Whether the simulator resets finished envs itself (``train.auto_reset``), as first-ready stepping needs.
    simulator_resets = False

    def __init__(
        self,
        config: Any,
        *,
        step: str = "chunk",
        mode: str = "train",
        stage_id: int = 0,
        backend: BackendSpec | None = None,
        spaces: str = "env",
        categorical_action_encoding: bool = False,
    ) -> None:
        if step not in ("chunk", "action"):
            raise ValueError(f"step must be 'chunk' or 'action' (one step per chunk or per action), got {step!r}")
        if spaces not in SPACES:
            raise ValueError(f"spaces must be one of {SPACES} (the env's own where declared, or envfleet's layout), got {spaces!r}")
        cfg = as_config(config, ["actor.model.num_action_chunks=1"] if step == "action" else [])
        check_face_execution(cfg[mode], mode, "the TorchRL face")
        if cfg[mode].auto_reset and not self.simulator_resets:
            raise ConfigError(f'{mode}.auto_reset is true, but TorchRL resets envs itself ("_reset"): set {mode}.auto_reset: false')
        if self.simulator_resets and not cfg[mode].auto_reset:
            raise ConfigError(f"{type(self).__name__} needs {mode}.auto_reset: true (finished envs reset in their own process)")
        manager = build_manager(cfg, stage_id=stage_id, mode=mode, backend=backend)
        n = manager.num_envs
        super().__init__(batch_size=torch.Size([n]), device="cpu")
        self.manager = manager
        self.config = cfg
        self.step_mode = step
        self.ignore_terminations = bool(cfg[mode].ignore_terminations)
        #: The env's own spaces as TorchRL specs (:mod:`envfleet.torchrl.specs`), or ``None``: envfleet's layout.
        self.own: OwnSpecs | None = None
        try:
            if spaces == "env":
                chunk = manager.chunk if step == "chunk" else None
                own = own_spaces(manager.spec, cfg[mode], manager.obs_spec, manager.action_dim, chunk)
                self.own = own_specs(own, n, categorical_action_encoding)
        except BaseException:
            manager.close()
            raise
        if self.own is not None:
            observation = self.own.observation_spec()
        else:
            observation = {key: _layout_spec(spec, n) for key, spec in manager.obs_spec.items()}
        # mode realtime: what ran (envfleet.execution), zeros after a reset.
        self._ran = result_shapes(cfg[mode], manager.chunk, manager.action_dim)
        for key, (shape, np_dtype) in self._ran.items():
            observation[key] = Unbounded(shape=(n, *shape), dtype=getattr(torch, np_dtype.name))
        self.observation_spec = Composite(observation, shape=(n,))
        if self.own is not None:
            self.action_spec = self.own.action.spec
        else:
            shape = (n, manager.chunk, manager.action_dim) if step == "chunk" else (n, manager.action_dim)
            self.action_spec = Bounded(-1.0, 1.0, shape=shape, dtype=torch.float32)
        self.reward_spec = Unbounded(shape=(n, 1), dtype=torch.float32)
        flag = Categorical(2, shape=(n, 1), dtype=torch.bool)
        self.done_spec = Composite(done=flag, terminated=flag.clone(), truncated=flag.clone(), shape=(n,))
        self._started = False
        try:
            manager.start_simulator()
            self._walk = StateWalk(manager.get_all_state_ids(), int(cfg[mode].seed))
        except BaseException:
            manager.close()
            raise

    # ------------------------------------------------------------------ EnvBase
    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        n = self.manager.num_envs
        mask = np.ones(n, dtype=bool)
        state_ids = None
        if tensordict is not None:
            if "_reset" in tensordict.keys():
                mask = tensordict.get("_reset").reshape(n).cpu().numpy().astype(bool)
            if "state_ids" in tensordict.keys():
                state_ids = tensordict.get("state_ids").reshape(n).cpu().numpy()[mask]
        if not self._started and not mask.all():
            raise InvalidInputError('the first reset resets every env: leave "_reset" out or set it for all envs')
        if state_ids is None:
            state_ids = self._walk.take(int(mask.sum()))
        if mask.all():
            result = self.manager.reset_envs_to_state_ids(state_ids)
            self._started = True
        else:
            result = self.manager.reset_some_envs(np.nonzero(mask)[0], state_ids)
        false = torch.zeros(n, 1, dtype=torch.bool)
        ran = {key: torch.zeros((n, *shape), dtype=getattr(torch, dtype.name)) for key, (shape, dtype) in self._ran.items()}
        return TensorDict(
            {**self._obs(result.obs), **ran, "done": false, "terminated": false.clone(), "truncated": false.clone()},
            batch_size=self.batch_size,
        )

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self.own is not None:  # the env's own action: its spec's form checked and made rows
            actions = self.own.actions(tensordict.get("action"), self.manager.num_envs)
        else:
            actions = tensordict.get("action").detach().cpu().numpy()
            if self.step_mode == "action":
                actions = actions[:, None, :]
        result = self.manager.chunk_step(actions)
        terminated = torch.from_numpy(result.terminations[:, -1:].copy())
        if self.ignore_terminations:
            terminated = torch.zeros_like(terminated)
        truncated = torch.from_numpy(result.truncations[:, -1:].copy())
        return TensorDict(
            {
                **self._obs(result.obs),
                **{key: torch.from_numpy(np.asarray(result.infos[key])) for key in self._ran},
                "reward": torch.from_numpy(result.rewards.sum(axis=1, keepdims=True).astype(np.float32)),
                "done": terminated | truncated,
                "terminated": terminated,
                "truncated": truncated,
            },
            batch_size=self.batch_size,
        )

    def _set_seed(self, seed: int | None) -> None:
        """Reseed the walk over initial states (``None``: ``train.seed``)."""
        self._walk.seed(int(self.config[self.manager.mode].seed) if seed is None else int(seed))

    def close(self, *, raise_if_closed: bool = True) -> None:
        """Stop the shard processes and free their shared memory. Safe to call twice."""
        manager = self.__dict__.get("manager")
        if manager is not None:
            manager.close()
        try:
            super().close(raise_if_closed=False)
        except TypeError:  # TorchRL releases before raise_if_closed
            super().close()

    def _obs(self, obs: dict[str, np.ndarray]) -> dict[str, Any]:
        if self.own is not None:
            return self.own.observation(obs)
        return {key: torch.from_numpy(value) for key, value in obs.items()}


def make_env(config: Any, **options: Any) -> EnvfleetEnv:
    """A batched TorchRL env over envfleet: ``config`` as :func:`envfleet.load_config` takes it.

    Options: ``step`` (``"chunk"`` or ``"action"``), ``mode``, ``stage_id``, ``backend``, ``spaces`` and
    ``categorical_action_encoding``; the simulator starts here.
    """
    return EnvfleetEnv(config, **options)
