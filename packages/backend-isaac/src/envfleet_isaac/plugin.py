"""Registration of the ``isaac`` backend: its config section, observation spec and defaults.

This is the module the ``envfleet`` entry point names, so it stays light: it imports
neither Isaac Lab nor torch nor gymnasium. The env class is named by a
``"module:attr"`` string and imported only inside the shard process that builds it,
which is also where the simulation runtime (kit-less, or Isaac Sim's Kit) starts.

Everything here runs in the parent process, before any simulator exists, so the
observation spec is computed from config values alone: camera size from
``train.init_params``, the state size from ``train.isaac.state_dim`` or, for the
project's own tasks, from :data:`KNOWN_TASKS`. The shard checks the built env
against that spec and fails with a clear message when they differ.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from envfleet.env import ArraySpec, ObservationSpec
from envfleet.errors import ConfigError
from envfleet.plugins import BackendRegistry, BackendSpec, backend_section, hookimpl

__all__ = [
    "PUSHER_TASK",
    "KNOWN_TASKS",
    "KnownTask",
    "IsaacConfig",
    "task_name",
    "camera_map",
    "state_dim",
    "observation_spec",
    "envfleet_register_backends",
]

#: The project's own task: a pusher moving a cube to a goal, primitive shapes only.
PUSHER_TASK = "Envfleet-Pusher-v0"


@dataclass(frozen=True)
class KnownTask:
    """What the parent process knows about a task without importing Isaac Lab."""

    state_dim: int  # size of the default state (the "policy" observation group)
    action_dim: int  # size of one action
    cameras: tuple[str, ...]  # camera sensor names in the scene


#: Tasks registered by this package. A user's task needs ``train.isaac.state_dim`` instead.
KNOWN_TASKS: dict[str, KnownTask] = {
    PUSHER_TASK: KnownTask(state_dim=8, action_dim=2, cameras=("table_cam", "pusher_cam")),
}


@dataclass
class IsaacConfig:
    """Options of the Isaac Lab backend only, under ``train.isaac``.

    What verl's env config already has (``task_name``/``env_id``, ``num_envs``,
    ``device``, ``seed``, ``init_params`` for the image size, ``max_episode_steps``,
    ``render``) lives in the core ``train`` keys.
    """

    task_modules: list[str] = field(default_factory=list)  # modules imported in the shard first, so that their gymnasium task ids register
    full_image_camera: str | None = None  # scene camera giving full_image; null: the first of train.init_params.camera_names
    wrist_image_camera: str | None = None  # scene camera giving wrist_image; null: the second of train.init_params.camera_names, if any
    resize_cameras: bool = True  # set the cameras to init_params.camera_heights/widths before building; false: keep the task's sizes
    # observation groups ("policy") or terms ("policy.joint_pos"), concatenated in order into state
    state_terms: list[str] = field(default_factory=lambda: ["policy"])
    state_dim: int | None = None  # size of state; null: known for this package's tasks, required for others
    success_term: str | None = None  # null: the task's terminated flag; else an env method/attribute or termination term
    task_description: str | None = None  # the language instruction; null: the task config's task_description, else the task id
    # env attributes (tensors [num_envs, ...]) that belong to an initial state: kept in the bank, restored on reset
    task_buffers: list[str] = field(default_factory=list)
    state_bank_size: int = 64  # initial states made at start-up: state ids 0..state_bank_size-1
    state_bank_seed: int = 0  # state id k comes from the task's own reset under a seed derived from (state_bank_seed, k)
    physics_dt: float | None = None  # physics time step in seconds; null: the task's
    decimation: int | None = None  # physics steps per env step; null: the task's


def task_name(cfg: Any) -> str:
    """The gymnasium task id of the env section ``cfg``: ``task_name``, else verl's ``env_id``."""
    name = cfg.get("task_name") or cfg.get("env_id")
    if not name:
        raise ConfigError(
            "config key 'train.task_name' is required for simulator_type isaac: a registered gymnasium task id "
            f"(for example {PUSHER_TASK!r}; verl's 'train.env_id' is accepted too)"
        )
    return str(name)


def _section(cfg: Any) -> Any:
    return backend_section(cfg, "isaac", IsaacConfig())


def camera_map(cfg: Any) -> tuple[str, str | None]:
    """The camera sensors that give ``full_image`` and ``wrist_image`` (``None``: no wrist image)."""
    section = _section(cfg)
    names = [str(n) for n in cfg.init_params.camera_names]
    full = section.full_image_camera or (names[0] if names else None)
    if not full:
        raise ConfigError(
            "no camera for full_image: set 'train.isaac.full_image_camera' or 'train.init_params.camera_names' to a camera of the task's scene"
        )
    wrist = section.wrist_image_camera or (names[1] if len(names) >= 2 else None)
    if wrist == full:
        raise ConfigError(f"full_image and wrist_image name the same camera {full!r}; pick two different cameras or drop the wrist camera")
    return str(full), None if wrist is None else str(wrist)


def state_dim(cfg: Any) -> int:
    """The size of ``state``: ``train.isaac.state_dim``, else the known size for this package's tasks."""
    section = _section(cfg)
    if section.state_dim is not None:
        if int(section.state_dim) < 1:
            raise ConfigError(f"config key 'train.isaac.state_dim' must be >= 1, got {section.state_dim}")
        return int(section.state_dim)
    name = task_name(cfg)
    known = KNOWN_TASKS.get(name)
    if known is None or list(section.state_terms) != ["policy"]:
        raise ConfigError(
            f"config key 'train.isaac.state_dim' is required for task {name!r} with state_terms {list(section.state_terms)}: "
            "the size of the concatenated state terms (the shard checks it against the built env)"
        )
    return known.state_dim


def _check_values(cfg: Any) -> None:
    section = _section(cfg)
    if int(section.state_bank_size) < 1:
        raise ConfigError(f"config key 'train.isaac.state_bank_size' must be >= 1, got {section.state_bank_size}")
    if section.physics_dt is not None and float(section.physics_dt) <= 0:
        raise ConfigError(f"config key 'train.isaac.physics_dt' must be > 0 or null, got {section.physics_dt}")
    if section.decimation is not None and int(section.decimation) < 1:
        raise ConfigError(f"config key 'train.isaac.decimation' must be >= 1 or null, got {section.decimation}")
    if not list(section.state_terms):
        raise ConfigError("config key 'train.isaac.state_terms' must name at least one observation group or term")


def observation_spec(cfg: Any, num_envs: int) -> ObservationSpec:
    """``full_image`` (and ``wrist_image``) uint8 ``[H,W,3]`` and ``state`` float32 ``[D]``.

    Called in the parent before any shard starts, without Isaac Lab, so it also
    validates the Isaac-specific parts of the config early.
    """
    task_name(cfg)
    _check_values(cfg)
    _, wrist = camera_map(cfg)
    h, w = int(cfg.init_params.camera_heights), int(cfg.init_params.camera_widths)
    spec = {"full_image": ArraySpec((h, w, 3), "uint8")}
    if wrist is not None:
        spec["wrist_image"] = ArraySpec((h, w, 3), "uint8")
    spec["state"] = ArraySpec((state_dim(cfg),), "float32")
    return spec


@hookimpl
def envfleet_register_backends(registry: BackendRegistry) -> None:
    """Register the ``isaac`` backend."""
    registry.register(
        BackendSpec(
            name="isaac",
            env_factory="envfleet_isaac.env:IsaacEnv",
            observation_spec=observation_spec,
            config_schema=IsaacConfig,
            # The project's task's cameras and size; a user's task names its own cameras.
            defaults={"init_params": {"camera_heights": 64, "camera_widths": 64, "camera_names": list(KNOWN_TASKS[PUSHER_TASK].cameras)}},
            # Isaac Lab batches every env of a stage in one simulation: one process per stage.
            envs_per_process=None,
            action_dim=None,  # depends on the task; the shard checks actor.model.action_dim against it
            implements={"auto_reset", "ignore_terminations", "render"},
            api_version="2.0",  # the envfleet plugin API it is written for
            check_config={"actor": {"model": {"action_dim": KNOWN_TASKS[PUSHER_TASK].action_dim}}},
            result_packages=("isaaclab", "newton", "warp-lang"),
            package="envfleet-isaac",
            description="Isaac Lab tasks (3.x kit-less / 2.x Isaac Sim), batched per stage, seeded bank of initial states",
        )
    )
