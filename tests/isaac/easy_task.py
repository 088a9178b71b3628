"""A test-only variant of the pusher task, registered as a user's task package would be.

``Envfleet-Test-Reach-v0``: success is the pusher coming within ``reach`` of the cube,
where ``reach`` is drawn per env at reset (a task-side part of the initial state, kept in
the state bank through ``train.isaac.task_buffers``) and shown as an extra observation
group. Episodes end after a handful of steps of a pusher heading for the cube, so the
tests can finish one env mid-chunk while the other keeps moving. A constant drift is added
to the actions, so a finished env that was not held would keep moving.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import torch
from isaaclab.utils import configclass

from envfleet_isaac.tasks.pusher import PusherEnv, PusherEnvCfg

TASK = "Envfleet-Test-Reach-v0"


@configclass
class ReachEnvCfg(PusherEnvCfg):
    """The pusher, with a different instruction and a drift."""

    task_description: str = "touch the red cube with the pusher"
    # Added to every action: with a zero action the pusher still moves, so an env that is not
    # held still after its episode ends would show it.
    drift: tuple[float, float] = (0.5, 0.0)


class ReachEnv(PusherEnv):
    """Success: the pusher within ``reach`` of the cube (see the module doc)."""

    cfg: ReachEnvCfg

    def __init__(self, cfg: ReachEnvCfg, render_mode: str | None = None, **kwargs: Any) -> None:
        self.reach = torch.zeros(cfg.scene.num_envs, device=cfg.sim.device)
        super().__init__(cfg, render_mode, **kwargs)

    def _pre_physics_step(self, actions: torch.Tensor) -> None:
        super()._pre_physics_step(actions + torch.tensor(self.cfg.drift, device=self.device))

    def near_cube(self) -> torch.Tensor:
        """Bool [N]: the pusher is within reach of the cube."""
        return torch.linalg.norm(self._local_xy(self.pusher) - self._local_xy(self.cube), dim=-1) < self.reach

    def _get_observations(self) -> dict[str, torch.Tensor]:
        obs = super()._get_observations()
        obs["reach"] = self.reach.unsqueeze(-1)
        return obs

    def _get_dones(self) -> tuple[torch.Tensor, torch.Tensor]:
        # Terminating on success makes Isaac Lab reset the env inside step(), which the backend must prevent.
        _, time_out = super()._get_dones()
        return self.near_cube(), time_out

    def _reset_idx(self, env_ids: Sequence[int] | torch.Tensor | None) -> None:
        super()._reset_idx(env_ids)
        ids = torch.arange(self.num_envs, device=self.device) if env_ids is None else torch.as_tensor(env_ids, device=self.device).long()
        self.reach[ids] = 0.17 + 0.03 * torch.rand(len(ids), device=self.device)


if TASK not in gym.registry:
    gym.register(
        id=TASK, entry_point=f"{__name__}:ReachEnv", disable_env_checker=True, kwargs={"env_cfg_entry_point": f"{__name__}:ReachEnvCfg"}
    )
