"""The reference for the autoreset tests: gymnasium's own ``SyncVectorEnv`` over single toy envs.

Each reference env is one in-process :class:`~envfleet_toy.env.ToyEnv` of one env, behind
a plain ``gymnasium.Env``; gymnasium's ``SyncVectorEnv`` then applies its own autoreset
rules. The face must give the same observations, rewards and flags step by step. The
state ids come from one walk shared by all reference envs, consumed in env order as the
face consumes its own (a permutation of every state id, shuffled by the seed).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from envfleet.env import EnvContext
from envfleet.gym.vector_env import observation_space
from envfleet_toy.env import ToyEnv


class StateWalk:
    """The walk the face documents: a seeded permutation of every state id, reshuffled when used up."""

    def __init__(self, state_ids: np.ndarray, seed: int) -> None:
        self.state_ids = state_ids
        self.seed(seed)

    def seed(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.order: list[int] = []

    def next(self) -> int:
        if not self.order:
            self.order = self.rng.permutation(self.state_ids).tolist()
        return int(self.order.pop(0))


class ToyChunkEnv(gym.Env):  # type: ignore[misc]
    """One toy env; a step is one chunk (reward: the chunk's sum; flags: at its last sub-step)."""

    def __init__(self, env_cfg: Any, chunk: int, walk: StateWalk) -> None:
        self.toy = ToyEnv(env_cfg, EnvContext(num_envs=1, action_dim=7, num_action_chunks=chunk))
        self.walk = walk
        self.observation_space = observation_space(self.toy.observation_spec())
        self.action_space = gym.spaces.Box(-1.0, 1.0, (chunk, 7), np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        sid = (options or {}).get("state_id", None)
        sid = self.walk.next() if sid is None else int(sid)
        result = self.toy.reset_envs_to_state_ids(np.array([sid]))
        return {k: v[0].copy() for k, v in result.obs.items()}, {"state_id": sid}

    def step(self, action: np.ndarray) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        result = self.toy.chunk_step(np.asarray(action, np.float32)[None])
        obs = {k: v[0].copy() for k, v in result.obs.items()}
        info = {"episode_length": int(result.infos["episode_length"][0])}
        return obs, float(result.rewards[0].sum()), bool(result.terminations[0, -1]), bool(result.truncations[0, -1]), info
