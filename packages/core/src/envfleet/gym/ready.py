"""``EnvfleetFirstReadyVectorEnv``: the gymnasium face with first-ready stepping, ``step_async`` / ``step_wait``.

As gymnasium's ``AsyncVectorEnv``, :meth:`~EnvfleetFirstReadyVectorEnv.step_async` starts a step and
:meth:`~EnvfleetFirstReadyVectorEnv.step_wait` collects it; here both take a part of the envs:
``step_async(actions, env_ids)`` steps the envs ``env_ids`` (all when omitted), and
``step_wait(min_ready)`` returns as soon as ``min_ready`` envs are done, the rows of every env done
by then, ``infos["env_ids"]`` naming each row. The other envs keep simulating (see
:meth:`ProcessEnvManager.recv_chunk <envfleet.shards.manager.ProcessEnvManager.recv_chunk>`).
``step(actions)`` is both for every env.

Finished envs reset in their own process (``train.auto_reset: true``, which this env needs): the
step that ends an episode returns the next episode's first observation, as gymnasium's
``SameStep`` autoreset does, but without ``final_obs`` (envfleet's auto-reset, docs/concepts.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from ..errors import ConfigError, InvalidInputError
from ..remote.config import in_process_manager
from ..validation import as_env_ids, to_numpy
from .infos import chunk_infos
from .vector_env import EnvfleetVectorEnv

__all__ = ["EnvfleetFirstReadyVectorEnv"]


class EnvfleetFirstReadyVectorEnv(EnvfleetVectorEnv):
    """:class:`~envfleet.gym.EnvfleetVectorEnv` with first-ready ``step_async`` / ``step_wait``; see the module doc.

    :param config: anything :func:`envfleet.load_config` accepts, with ``train.auto_reset: true``.
    :param options: ``step``, ``mode``, ``render_mode``, ``stage_id``, ``backend`` as :class:`~envfleet.gym.EnvfleetVectorEnv`.
    """

    simulator_resets = True

    def __init__(self, config: Any, **options: Any) -> None:
        if "autoreset_mode" in options:
            raise ValueError("EnvfleetFirstReadyVectorEnv has no autoreset_mode: the simulator resets finished envs (train.auto_reset)")
        super().__init__(config, autoreset_mode=AutoresetMode.SAME_STEP, **options)
        try:
            self._local = in_process_manager(self.manager, type(self).__name__)
        except ConfigError:
            self.close()
            raise
        if not self.config[self.manager.mode].auto_reset:
            self.close()
            raise ConfigError(
                f"EnvfleetFirstReadyVectorEnv needs {self.manager.mode}.auto_reset: true (finished envs reset in their own process)"
            )

    def step_async(self, actions: Any, env_ids: Any = None) -> None:
        """Start a step for ``env_ids`` (every env when None): ``actions`` has one row per env of ``env_ids``."""
        self._check_open()
        if self._obs is None:
            raise InvalidInputError("call reset() before step_async(): no env has an episode yet")
        ids = np.arange(self.num_envs) if env_ids is None else as_env_ids(env_ids, self.num_envs)
        if self.own is not None:  # the env's own action space: its own form checked and made rows
            self._local.send_chunk(ids, self._chunk_actions(actions, len(ids)))
            return
        arr = np.asarray(to_numpy(actions), dtype=np.float32)
        expected = (len(ids), *self._action_shape)
        if arr.shape != expected:
            raise InvalidInputError(f"actions must have shape {list(expected)} (one row per env of env_ids), got {list(arr.shape)}")
        self._local.send_chunk(ids, arr if self.step_mode == "chunk" else arr[:, None, :])

    def step_wait(
        self, min_ready: int | None = None, timeout: float | None = None
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """``(obs, rewards, terminations, truncations, infos)`` of the envs done, at least ``min_ready``
        (every env in flight when None), or those done by ``timeout`` seconds; ``infos["env_ids"]`` names the rows."""
        self._check_open()
        if min_ready is None:
            min_ready = sum(s.shard.num_envs for s in self._local.first_ready.slots if s.phase.value != "idle")
        result = self._local.recv_chunk(min_ready, timeout)
        rewards = result.rewards.astype(np.float64).sum(axis=1)
        terminated = result.terminations[:, -1].copy()
        if self.ignore_terminations:
            terminated[:] = False
        truncated = result.truncations[:, -1].copy()
        infos = {**chunk_infos(result), "env_ids": result.env_ids}
        assert self._obs is not None
        for key, value in result.obs.items():
            self._obs[key][result.env_ids] = value
        return self._obs_out(result.obs), rewards, terminated, truncated, infos

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """One step of every env: :meth:`step_async` then :meth:`step_wait` for all of them."""
        self.step_async(actions)
        return self.step_wait(self.num_envs)
