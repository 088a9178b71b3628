"""Registers the ``reacher`` backend."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from envfleet.env import ArraySpec
from envfleet.plugins import BackendSpec, hookimpl


@dataclass
class ReacherConfig:
    """Options of the reacher backend, under ``train.reacher``."""

    targets: int = 4  # how many target positions (tasks)
    trials: int = 5  # start poses of the arm per target
    frame_skip: int = 5  # MuJoCo steps per action


def observation_spec(cfg: Any, num_envs: int) -> dict[str, ArraySpec]:
    """The top camera's image and a 6-dim state (joint angles, joint speeds, tip-to-target)."""
    h, w = int(cfg.init_params.camera_heights), int(cfg.init_params.camera_widths)
    return {"full_image": ArraySpec((h, w, 3), "uint8"), "state": ArraySpec((6,), "float32")}


@hookimpl
def envfleet_register_backends(registry: Any) -> None:
    """Register ``reacher``."""
    registry.register(
        BackendSpec(
            name="reacher",
            env_factory="envfleet_reacher.env:ReacherEnv",
            observation_spec=observation_spec,
            config_schema=ReacherConfig,
            defaults={"init_params": {"camera_heights": 32, "camera_widths": 32, "camera_names": ["top"]}},
            envs_per_process=None,  # all of a stage's envs in one process, one MjModel
            action_dim=2,
            package="envfleet-reacher",
            description="two-link MuJoCo arm reaching a target",
        )
    )
