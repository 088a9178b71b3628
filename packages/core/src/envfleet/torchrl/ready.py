"""``EnvfleetFirstReadyEnv``: the TorchRL face with first-ready stepping, in ``AsyncEnvPool``'s calls.

TorchRL's :class:`~torchrl.envs.AsyncEnvPool` steps some envs and returns the first ones done:
``async_step_send(tensordict, env_index=None)`` (the env indices in the argument or in the
tensordict's ``"env_index"``) and ``async_step_recv(min_get=1)`` (a tensordict of the envs done,
``"env_index"`` naming each row, the step's outputs under ``"next"``). This env answers the same
two calls over :meth:`ProcessEnvManager.send_chunk <envfleet.shards.manager.ProcessEnvManager.send_chunk>`
and :meth:`~envfleet.shards.manager.ProcessEnvManager.recv_chunk`, so that a loop written for the pool
drives one stage's shard processes. Envs that share a process (``envs_per_process``) step together.

Finished envs reset in their own process (``train.auto_reset: true``, which this env needs): the
chunk that ends an episode has ``done`` set and, under ``"next"``, the new episode's first
observation (envfleet's auto-reset, docs/concepts.md), so the loop sends the next actions at once.
``"next", "sim_restarted"`` marks the rows of a shard restarted after a crash or a hang.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from ..errors import ConfigError, InvalidInputError
from ..remote.config import in_process_manager
from .env import EnvfleetEnv

__all__ = ["EnvfleetFirstReadyEnv"]


class EnvfleetFirstReadyEnv(EnvfleetEnv):
    """:class:`~envfleet.torchrl.EnvfleetEnv` (one step per chunk) with ``AsyncEnvPool``'s
    ``async_step_send`` / ``async_step_recv``; see the module doc.

    :param config: anything :func:`envfleet.load_config` accepts, with ``train.auto_reset: true``.
    :param mode: ``"train"`` or ``"val"``.
    :param stage_id: the stage this env is.
    """

    simulator_resets = True
    #: The key of each row's env index, as ``AsyncEnvPool`` names it.
    env_index_key = "env_index"

    def __init__(self, config: Any, *, mode: str = "train", stage_id: int = 0, **options: Any) -> None:
        super().__init__(config, step="chunk", mode=mode, stage_id=stage_id, **options)
        try:
            self._local = in_process_manager(self.manager, type(self).__name__)
        except ConfigError:
            self.close()
            raise
        self._sent: dict[int, torch.Tensor] = {}

    def async_step_send(self, tensordict: TensorDictBase, env_index: int | list[int] | None = None) -> None:
        """Start a chunk for the envs of ``env_index`` (or of ``tensordict["env_index"]``), their actions in ``tensordict["action"]``."""
        if env_index is None:
            if self.env_index_key not in tensordict.keys():
                raise InvalidInputError(f'async_step_send needs env indices: pass env_index, or set tensordict["{self.env_index_key}"]')
            env_index = tensordict.get(self.env_index_key)
        ids = _as_ids(env_index)
        action = tensordict.get("action").detach().cpu()
        action = action.reshape(len(ids), *self.action_spec.shape[1:])
        rows = action.numpy() if self.own is None else self.own.actions(action, len(ids))
        self._local.send_chunk(np.asarray(ids, dtype=np.int64), rows)
        for row, env in enumerate(ids):
            self._sent[env] = action[row]

    def async_step_recv(self, min_get: int = 1) -> TensorDictBase:
        """The first envs done (at least ``min_get``, whole shards): ``"env_index"``, ``"action"`` and ``"next"``."""
        result = self._local.recv_chunk(int(min_get))
        ids = result.env_ids.tolist()
        terminated = torch.from_numpy(result.terminations[:, -1:].copy())
        if self.ignore_terminations:
            terminated = torch.zeros_like(terminated)
        truncated = torch.from_numpy(result.truncations[:, -1:].copy())
        rows = len(ids)
        following = TensorDict(
            {
                **self._obs(result.obs),
                "reward": torch.from_numpy(result.rewards.sum(axis=1, keepdims=True).astype(np.float32)),
                "done": terminated | truncated,
                "terminated": terminated,
                "truncated": truncated,
                "sim_restarted": torch.from_numpy(result.infos["sim_restarted"].copy()).reshape(rows, 1),
            },
            batch_size=[rows],
        )
        action = torch.stack([self._sent.pop(env) for env in ids]) if ids else self.action_spec.zero()[:0]
        return TensorDict(
            {self.env_index_key: torch.tensor(ids, dtype=torch.int64), "action": action, "next": following}, batch_size=[rows]
        )


def _as_ids(env_index: Any) -> list[int]:
    if isinstance(env_index, int):
        return [env_index]
    if isinstance(env_index, torch.Tensor):
        return [int(i) for i in env_index.reshape(-1).tolist()]
    tolist = getattr(env_index, "tolist", None)
    values = tolist() if callable(tolist) else list(env_index)
    return [int(i) for i in np.asarray(values).reshape(-1).tolist()]
