"""Registration of the ``maniskill`` backend: its config section, observation spec and defaults.

This is the module the ``envfleet`` entry point names, so it stays light: it imports
neither ManiSkill nor SAPIEN nor torch. Everything here runs in the parent process
before any simulator exists: the observation spec comes from config values alone, and
a task whose assets would be downloaded is refused here (:mod:`envfleet_maniskill.assets`).

``train.maniskill`` carries ManiSkill's own ``gym.make`` arguments under their ManiSkill
names, the keys RLinf's ManiSkill configs hold in ``init_params`` (see
docs/backends/maniskill.md for the key-for-key mapping).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from envfleet.env import ArraySpec, ObservationSpec
from envfleet.errors import ConfigError
from envfleet.plugins import BackendRegistry, BackendSpec, backend_section, hookimpl

from . import device
from .tasks import INSTRUCTIONS

# Imports inside functions: the entry point's module stays light: listing backends imports nothing of
# ManiSkill.

__all__ = [
    "OBS_MODES",
    "REWARD_MODES",
    "GRIPPER_SIGNS",
    "KNOWN_ROBOTS",
    "ManiskillConfig",
    "task_name",
    "state_dim",
    "instruction",
    "observation_spec",
    "envs_per_process",
    "envfleet_register_backends",
]

#: ManiSkill observation modes that give the RGB images envfleet hands out.
OBS_MODES = ("rgb", "rgbd", "rgb+depth")
#: ManiSkill's reward modes (``gym.make(..., reward_mode=...)``).
REWARD_MODES = ("sparse", "dense", "normalized_dense", "none")
#: ``maniskill``: the action's last entry as ManiSkill takes it (+1 opens the gripper);
#: ``libero``: LIBERO's sign (-1 opens), negated before ManiSkill sees it.
GRIPPER_SIGNS = ("maniskill", "libero")
#: Robot -> length of its joint positions (``state`` is those, then the TCP pose, 7).
KNOWN_ROBOTS: dict[str, int] = {"panda": 9, "panda_wristcam": 9, "panda_stick": 7, "so100": 6}
_TCP_POSE = 7


@dataclass
class ManiskillConfig:
    """Options of the ManiSkill backend, under ``train.maniskill``; ManiSkill's ``gym.make`` names.

    The core keys carry the rest: ``task_name`` (the ManiSkill env id), ``num_envs``,
    ``max_episode_steps`` (null: the task's registered horizon, or 50), ``init_params``
    (image size; cameras: the task's ``base_camera``, the robot's ``hand_camera``), ``seed``.
    """

    obs_mode: str = "rgb"  # ManiSkill's obs_mode: rgb (rgbd accepted; depth is not handed out)
    control_mode: str | None = "pd_ee_delta_pose"  # ManiSkill's control_mode; null: the robot's default
    robot_uids: str | None = "panda_wristcam"  # the robot; panda_wristcam has the hand camera; null: the task's default
    reward_mode: str = "normalized_dense"  # sparse, dense, normalized_dense or none (scaled by train.reward_coef)
    sim_backend: str = "auto"  # auto (physx_cuda on an NVIDIA GPU, else physx_cpu), physx_cpu/cpu, physx_cuda/gpu
    render_backend: str = "auto"  # auto (gpu with the sim on CUDA... see docs), cpu (Vulkan, e.g. lavapipe), gpu
    sim_config: dict[str, Any] = field(default_factory=dict)  # ManiSkill's sim_config, e.g. {sim_freq: 100, control_freq: 20}
    # ManiSkill's sensor_configs (e.g. {shader_pack: default}); width/height come from train.init_params
    sensor_configs: dict[str, Any] = field(default_factory=dict)
    gripper_sign: str = "maniskill"  # maniskill (+1 opens) or libero (-1 opens: negated before ManiSkill)
    instruction: str | None = None  # the task description; null: this package's table (tasks.INSTRUCTIONS)
    num_state_ids: int = 1000  # state id k resets with episode seed episode_seed_offset + k
    episode_seed_offset: int = 0  # added to the state id to give ManiSkill's reset seed
    envs_per_process: int = 4  # on the CPU sim: single envs one shard holds (on CUDA: all of a stage's, batched)
    state_dim: int | None = None  # size of state for a robot outside KNOWN_ROBOTS (its qpos length + 7)
    vulkan_icd: str | None = None  # Vulkan ICD file for CPU rendering; null: VK_ICD_FILENAMES, else scripts/bootstrap's lavapipe


def task_name(cfg: Any) -> str:
    """The ManiSkill env id: ``train.task_name``, else verl's ``train.env_id``."""
    name = cfg.get("task_name") or cfg.get("env_id")
    if not name:
        raise ConfigError(
            "config key 'train.task_name' is required for simulator_type maniskill: a ManiSkill env id, e.g. 'PushCube-v1' "
            f"(tasks tested here: {', '.join(INSTRUCTIONS)})"
        )
    return str(name)


def _section(cfg: Any) -> Any:
    return backend_section(cfg, "maniskill", ManiskillConfig())


def state_dim(cfg: Any) -> int:
    """The size of ``state``: the robot's joint positions, then its TCP pose (position, quaternion wxyz)."""
    section = _section(cfg)
    if section.state_dim is not None:
        if int(section.state_dim) < 1:
            raise ConfigError(f"config key 'train.maniskill.state_dim' must be >= 1, got {section.state_dim}")
        return int(section.state_dim)
    robot = section.robot_uids
    if robot is None or str(robot) not in KNOWN_ROBOTS:
        raise ConfigError(
            f"config key 'train.maniskill.state_dim' is required for robot {robot!r}: its number of joints + 7 "
            f"(known robots: {', '.join(KNOWN_ROBOTS)})"
        )
    return KNOWN_ROBOTS[str(robot)] + _TCP_POSE


def instruction(cfg: Any) -> str:
    """The task description every env of the task gets."""
    section = _section(cfg)
    if section.instruction:
        return str(section.instruction)
    name = task_name(cfg)
    if name not in INSTRUCTIONS:
        raise ConfigError(
            f"task {name!r} has no instruction in envfleet_maniskill's table: set 'train.maniskill.instruction' "
            f"(the table covers {', '.join(INSTRUCTIONS)})"
        )
    return INSTRUCTIONS[name]


def _choice(key: str, value: Any, allowed: tuple[str, ...]) -> None:
    if str(value) not in allowed:
        raise ConfigError(f"config key 'train.maniskill.{key}' must be one of {list(allowed)}, got {value!r}")


def _check_section(cfg: Any) -> None:
    section = _section(cfg)
    _choice("obs_mode", section.obs_mode, OBS_MODES)
    _choice("reward_mode", section.reward_mode, REWARD_MODES)
    _choice("gripper_sign", section.gripper_sign, GRIPPER_SIGNS)
    device.resolve(section)  # a bad sim_backend or render_backend
    for key in ("num_state_ids", "envs_per_process"):
        if int(section[key]) < 1:
            raise ConfigError(f"config key 'train.maniskill.{key}' must be >= 1, got {section[key]}")
    h, w = int(cfg.init_params.camera_heights), int(cfg.init_params.camera_widths)
    for key, own in (("height", h), ("width", w)):
        value = section.sensor_configs.get(key)
        if value is not None and int(value) != own:
            raise ConfigError(
                f"config key 'train.maniskill.sensor_configs.{key}' is {value}, but 'train.init_params.camera_{key}s' is {own}: "
                f"the image size is set by train.init_params (RLinf's sensor_configs.{key} maps there)"
            )


def observation_spec(cfg: Any, num_envs: int) -> ObservationSpec:
    """``full_image`` (and ``wrist_image``) uint8 ``[H,W,3]`` and ``state`` float32 ``[D]``.

    Called in the parent at config load, so it also refuses a task whose assets would be
    downloaded, naming the task and the asset ids.
    """
    from .assets import refuse_downloads

    name = task_name(cfg)
    _check_section(cfg)
    names = [str(n) for n in cfg.init_params.camera_names]
    if not 1 <= len(names) <= 2:
        raise ConfigError(
            f"config key 'train.init_params.camera_names' must name 1 or 2 ManiSkill cameras (full_image, then wrist_image), got {names}"
        )
    refuse_downloads(name, _section(cfg).robot_uids)
    instruction(cfg)
    h, w = int(cfg.init_params.camera_heights), int(cfg.init_params.camera_widths)
    spec = {"full_image": ArraySpec((h, w, 3), "uint8")}
    if len(names) == 2:
        spec["wrist_image"] = ArraySpec((h, w, 3), "uint8")
    spec["state"] = ArraySpec((state_dim(cfg),), "float32")
    return spec


def envs_per_process(cfg: Any) -> int | None:
    """On the CPU sim, ``train.maniskill.envs_per_process`` single envs per shard; on CUDA, all (one batched env)."""
    section = _section(cfg)
    return None if device.resolve(section).batched else int(section.envs_per_process)


@hookimpl
def envfleet_register_backends(registry: BackendRegistry) -> None:
    """Register the ``maniskill`` backend."""
    registry.register(
        BackendSpec(
            name="maniskill",
            env_factory="envfleet_maniskill.env:ManiskillEnv",
            observation_spec=observation_spec,
            config_schema=ManiskillConfig,
            defaults={"init_params": {"camera_heights": 128, "camera_widths": 128, "camera_names": ["base_camera", "hand_camera"]}},
            envs_per_process=envs_per_process,
            action_dim=None,  # depends on control_mode and robot; the shard checks actor.model.action_dim against the env's
            implements={"auto_reset", "ignore_terminations", "render"},
            api_version="2.0",  # the envfleet plugin API it is written for
            check_config={"train": {"task_name": "PushCube-v1"}},
            result_packages=("mani-skill", "sapien"),
            renderer="vulkan",
            package="envfleet-maniskill",
            description="ManiSkill3 tasks (SAPIEN; CPU sim with Vulkan lavapipe here, CUDA batched where a GPU is)",
        )
    )
