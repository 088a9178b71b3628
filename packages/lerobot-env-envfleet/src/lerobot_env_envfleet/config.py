"""``EnvfleetEnvConfig``: LeRobot's env config of type ``envfleet`` (``--env.type=envfleet``).

LeRobot builds its envs from an :class:`lerobot.envs.configs.EnvConfig` subclass registered
under a type name; ``lerobot-eval`` imports this package first (every installed
``lerobot_env_*`` distribution), which registers this class. Its fields say which envfleet
backend, suite and tasks to run and how envfleet's config is built; ``create_envs`` returns
LeRobot's ``{suite: {task_id: VectorEnv}}`` of envfleet-backed envs
(:class:`~lerobot_env_envfleet.vector_env.LeRobotTaskEnv`), or ``{suite_group: {task_id: VectorEnv}}``
for a suite whose backend groups its tasks (LIBERO-plus: one group per perturbation dimension), so
that ``lerobot-eval`` reports a row per group.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lerobot.configs import FeatureType, PolicyFeature
from lerobot.envs.configs import EnvConfig
from lerobot.utils.constants import ACTION, OBS_IMAGES, OBS_STATE, OBS_STR
from omegaconf import DictConfig

from envfleet import load_config
from envfleet.plugins import get_backend

from .vector_env import LeRobotTaskEnv, grouped_suite_envs, suite_envs

__all__ = ["DEFAULT_CAMERA_NAMES", "EnvfleetEnvConfig"]

#: envfleet's image keys as LeRobot's LIBERO env names them (``observation.images.image`` /
#: ``.image2``), so that policies trained on LeRobot's LIBERO datasets read them unchanged.
DEFAULT_CAMERA_NAMES: dict[str, str] = {"full_image": "image", "wrist_image": "image2"}

#: The autoreset modes LeRobot's rollout reads correctly (both report success at the ended step).
_AUTORESET_MODES = ("NextStep", "SameStep")


@EnvConfig.register_subclass("envfleet")
@dataclass
class EnvfleetEnvConfig(EnvConfig):
    """envfleet's envs for LeRobot; every field is a ``--env.<field>`` flag of ``lerobot-eval``.

    :param backend: the envfleet backend (``train.simulator_type``); default the config file's, else ``libero``.
    :param task: the suite, or several separated by commas (``train.task_suite_name``).
    :param task_ids: the tasks to evaluate; default every task of the suite.
    :param config: an envfleet YAML file (verl's layout); the fields here override it.
    :param overrides: envfleet ``key=value`` overrides, applied last (``train.init_params.camera_heights=128``).
    :param episode_length: ``train.max_episode_steps``; default the backend's horizon.
    :param n_action_steps: actions per simulator chunk: set it to the policy's ``n_action_steps`` and
        the observations the policy does not read are never rendered (see docs/faces/lerobot.md).
    :param autoreset_mode: ``NextStep`` (as LeRobot's LIBERO env) or ``SameStep``.
    :param camera_names: envfleet image key -> LeRobot camera name (``observation.images.<name>``).
    """

    backend: str | None = None
    task: str | None = None
    task_ids: list[int] | None = None
    config: str | None = None
    overrides: list[str] = field(default_factory=list)
    episode_length: int | None = None
    n_action_steps: int = 1
    autoreset_mode: str = "NextStep"
    camera_names: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_CAMERA_NAMES))
    fps: int = 20

    def __post_init__(self) -> None:
        if self.n_action_steps < 1:
            raise ValueError(f"env.n_action_steps must be >= 1 (actions per chunk, the policy's n_action_steps), got {self.n_action_steps}")
        if self.autoreset_mode not in _AUTORESET_MODES:
            raise ValueError(f"env.autoreset_mode must be one of {list(_AUTORESET_MODES)}, got {self.autoreset_mode!r}")
        if self.max_parallel_tasks != 1:
            raise ValueError(
                f"env.max_parallel_tasks is {self.max_parallel_tasks}: envfleet runs a suite's tasks one after another, each over "
                "env.batch_size simulator processes of its own; set --env.max_parallel_tasks=1 and raise --eval.batch_size instead"
            )
        # Checked now, before LeRobot builds a policy: a typo'd key or an unknown backend fails here.
        cfg = self.envfleet_config(num_envs=1, suite=self.suites()[0] if self.task else None)
        spec = get_backend(str(cfg.train.simulator_type)).checked_observation_spec(cfg.train, 1)
        self.features = {ACTION: PolicyFeature(type=FeatureType.ACTION, shape=(int(cfg.actor.model.action_dim),))}
        self.features_map = {ACTION: ACTION}
        for key, arr in spec.items():
            if len(arr.shape) == 3:
                name = self.camera_names.get(key, key)
                self.features[f"pixels/{name}"] = PolicyFeature(type=FeatureType.VISUAL, shape=tuple(arr.shape))
                self.features_map[f"pixels/{name}"] = f"{OBS_IMAGES}.{name}"
            elif key == "state":
                self.features["agent_pos"] = PolicyFeature(type=FeatureType.STATE, shape=tuple(arr.shape))
                self.features_map["agent_pos"] = OBS_STATE
            else:
                self.features[key] = PolicyFeature(type=FeatureType.STATE, shape=tuple(arr.shape))
                self.features_map[key] = f"{OBS_STR}.{key}"

    @property
    def gym_kwargs(self) -> dict[str, Any]:
        """Not used: envfleet's envs are not built through ``gym.make``."""
        return {}

    def suites(self) -> list[str | None]:
        """The suites of ``task`` (comma-separated), or ``[None]``: the config file's suite."""
        if not self.task:
            return [None]
        return [s.strip() for s in str(self.task).split(",") if s.strip()]

    def envfleet_config(self, num_envs: int, suite: str | None) -> DictConfig:
        """envfleet's config for one suite: the config file, then these fields, then ``overrides``."""
        sets = [f"train.num_envs={int(num_envs)}", "train.auto_reset=false", f"train.video_cfg.fps={int(self.fps)}"]
        sets.append(f"actor.model.num_action_chunks={int(self.n_action_steps)}")
        if self.backend is not None:
            sets.append(f"train.simulator_type={self.backend}")
        elif self.config is None:
            sets.append("train.simulator_type=libero")
        if suite is not None:
            sets.append(f"train.task_suite_name={suite}")
        if self.episode_length is not None:
            sets.append(f"train.max_episode_steps={int(self.episode_length)}")
        return load_config(self.config, [*sets, *self.overrides])

    def create_envs(self, n_envs: int, use_async_envs: bool = False) -> dict[str, dict[int, LeRobotTaskEnv]]:
        """``{suite: {task_id: VectorEnv}}``, ``n_envs`` envs per task, each task's simulators started at its first reset.

        Where the backend groups a suite's tasks (``BackendSpec.task_groups``: LIBERO-plus's perturbation
        dimensions), one entry per group instead, ``{suite}_{group}``, holding that group's tasks: the outer
        key is what ``lerobot-eval`` aggregates by (``per_group``). ``use_async_envs`` changes nothing:
        envfleet's envs always run in simulator processes of their own.
        """
        if n_envs < 1:
            raise ValueError(f"n_envs must be >= 1, got {n_envs}")
        out: dict[str, dict[int, LeRobotTaskEnv]] = {}
        for suite in self.suites():
            cfg = self.envfleet_config(n_envs, suite)
            name = suite or str(cfg.train.get("task_suite_name") or cfg.train.simulator_type)
            grouped = grouped_suite_envs(cfg, self, task_ids=self.task_ids)
            if grouped:
                out.update({f"{name}_{group}": envs for group, envs in grouped.items()})
            else:
                out[name] = suite_envs(cfg, self, task_ids=self.task_ids)
        return out
