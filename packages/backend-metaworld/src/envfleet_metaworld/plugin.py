"""Registration of the ``metaworld`` backend: its config section, observation spec and defaults.

This is the module the ``envfleet`` entry point names, so it stays light: it imports
neither MetaWorld nor MuJoCo, and a worker whose venv lacks them (MetaWorld pins
MuJoCo 3.3.0) still registers the backend and runs its shards under
``train.simulator_python``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from envfleet.env import ArraySpec, ObservationSpec
from envfleet.errors import ConfigError
from envfleet.plugins import BackendRegistry, BackendSpec, backend_section, hookimpl

from .tasks import TASKS

__all__ = [
    "MT50",
    "SUITES",
    "MAX_PATH_LENGTH",
    "STATE_DIM",
    "ACTION_DIM",
    "MetaworldConfig",
    "suite_tasks",
    "horizon",
    "observation_spec",
    "envfleet_register_backends",
]

MT50 = "mt50"
#: ``mt50`` (every task) and one suite per task, named as MetaWorld names the task.
SUITES: tuple[str, ...] = (MT50, *TASKS)
#: MetaWorld's own episode limit: a step past it raises inside MetaWorld.
MAX_PATH_LENGTH = 500
#: The end effector's position (3) and the gripper's opening (1): ``obs[:4]``, as LeRobot feeds a policy.
STATE_DIM = 4
#: End-effector displacement (3) and gripper effort (1), each in [-1, 1].
ACTION_DIM = 4
#: Where LeRobot moves the ``corner2`` camera (its MetaWorld env, ``cam_pos[2]``).
LEROBOT_CORNER2_POS = (0.75, 0.075, 0.7)


@dataclass
class MetaworldConfig:
    """Options of the MetaWorld backend only, under ``train.metaworld``.

    The core keys carry the rest: ``task_suite_name``, ``init_params`` (one camera),
    ``flip_images`` (true here, as LeRobot), ``settle_steps`` (0 here; RLinf uses 15),
    ``max_episode_steps`` (null: 500 less the settle steps).
    """

    # Position of the corner2 camera: LeRobot's [0.75, 0.075, 0.7]; null keeps MetaWorld's own.
    corner2_pos: list[float] | None = field(default_factory=lambda: list(LEROBOT_CORNER2_POS))
    reward_function_version: str = "v2"  # MetaWorld's reward version (v1 or v2); success does not depend on it
    mujoco_gl: str = "egl"  # MuJoCo's GL platform when MUJOCO_GL is unset: egl or osmesa


def suite_tasks(cfg: Any) -> tuple[str, ...]:
    """The tasks of the suite ``cfg.task_suite_name``; a ConfigError listing the valid suites otherwise."""
    suite = cfg.task_suite_name
    if suite == MT50:
        return TASKS
    if suite in TASKS:
        return (str(suite),)
    what = "is required" if suite is None else f"is {suite!r}, which is not a MetaWorld suite"
    raise ConfigError(f"config key 'train.task_suite_name' {what} for simulator_type metaworld: use 'mt50' or one task, e.g. 'reach-v3'")


def horizon(cfg: Any) -> int:
    """Sub-steps per episode: ``max_episode_steps``, or MetaWorld's 500 less the settle steps.

    Settle steps count towards MetaWorld's own limit, so the two together may not pass 500.
    """
    settle = int(cfg.settle_steps)
    steps = MAX_PATH_LENGTH - settle if cfg.max_episode_steps is None else int(cfg.max_episode_steps)
    if steps < 1 or steps + settle > MAX_PATH_LENGTH:
        raise ConfigError(
            f"config keys 'train.max_episode_steps' ({cfg.max_episode_steps}) and 'train.settle_steps' ({settle}) add up to "
            f"{steps + settle} sub-steps, but MetaWorld stops every episode at {MAX_PATH_LENGTH}: keep their sum at or below it"
        )
    return steps


def _check_section(cfg: Any) -> None:
    section = backend_section(cfg, "metaworld")
    if not section:
        return
    pos = section.get("corner2_pos")
    if pos is not None and len(pos) != 3:
        raise ConfigError(f"config key 'train.metaworld.corner2_pos' must be 3 numbers or null, got {list(pos)}")
    if section.get("reward_function_version") not in ("v1", "v2"):
        raise ConfigError(
            f"config key 'train.metaworld.reward_function_version' must be 'v1' or 'v2', got {section.get('reward_function_version')!r}"
        )
    if section.get("mujoco_gl") not in ("egl", "osmesa"):
        raise ConfigError(f"config key 'train.metaworld.mujoco_gl' must be 'egl' or 'osmesa', got {section.get('mujoco_gl')!r}")


def observation_spec(cfg: Any, num_envs: int) -> ObservationSpec:
    """``full_image`` uint8 ``[H,W,3]`` from the one camera, ``state`` float32 ``[4]``.

    Called in the worker before any shard starts, so it also validates the
    MetaWorld-specific parts of the config (suite, camera, horizon) early.
    """
    suite_tasks(cfg)
    horizon(cfg)
    _check_section(cfg)
    names = list(cfg.init_params.camera_names)
    if len(names) != 1:
        raise ConfigError(
            f"config key 'train.init_params.camera_names' must name exactly 1 camera for metaworld (e.g. corner2), got {names}"
        )
    h, w = int(cfg.init_params.camera_heights), int(cfg.init_params.camera_widths)
    return {"full_image": ArraySpec((h, w, 3), "uint8"), "state": ArraySpec((STATE_DIM,), "float32")}


@hookimpl
def envfleet_register_backends(registry: BackendRegistry) -> None:
    """Register the ``metaworld`` backend."""
    registry.register(
        BackendSpec(
            name="metaworld",
            env_factory="envfleet_metaworld.env:MetaworldEnv",
            observation_spec=observation_spec,
            config_schema=MetaworldConfig,
            # LeRobot's conventions: the corner2 camera, images rotated 180 degrees, no settle steps.
            defaults={"init_params": {"camera_names": ["corner2"]}, "flip_images": True, "settle_steps": 0},
            # One env per process: freeing a second env's renderer in a process blacks out the first's frames.
            envs_per_process=1,
            action_dim=ACTION_DIM,
            implements={"auto_reset", "ignore_terminations", "render", "flip_images", "settle_steps"},
            api_version="2.0",  # the envfleet plugin API it is written for
            check_config={"train": {"task_suite_name": "reach-v3", "init_params": {"camera_heights": 64, "camera_widths": 64}}},
            result_packages=("metaworld", "mujoco"),
            renderer="mujoco",
            package="envfleet-metaworld",
            description="MetaWorld MT50 and its single tasks (MuJoCo 3.3.0, in a venv of its own), LeRobot's camera conventions",
        )
    )
