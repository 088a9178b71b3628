"""The configs the benchmark sections run: toy and LIBERO, and a local Ray to run them on."""

from __future__ import annotations

from typing import Any


def toy_overrides(n: int, hw: int, chunk: int = 1, *extra: str) -> list[str]:
    """Overrides of a toy config of ``n`` envs, ``hw`` x ``hw`` images, chunks of ``chunk``, episodes that never end."""
    return [
        "train.simulator_type=toy",
        f"train.num_envs={n}",
        f"actor.model.num_action_chunks={chunk}",
        f"train.init_params.camera_heights={hw}",
        f"train.init_params.camera_widths={hw}",
        "train.max_episode_steps=100000",
        *extra,
    ]


def toy_cfg(n: int, hw: int, chunk: int = 1, **train: Any) -> Any:
    from envfleet.config import load_config

    return load_config(overrides=toy_overrides(n, hw, chunk, *[f"train.{k}={v}" for k, v in train.items()]))


def start_ray() -> None:
    from envfleet_ray import init_ray

    init_ray(num_cpus=4)


def container(cfg: Any) -> dict[str, Any]:
    from omegaconf import OmegaConf

    data = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(data, dict)
    data.pop("val", None)
    return {str(k): v for k, v in data.items()}


def libero_installed() -> bool:
    from envfleet.plugins import list_backends

    return "libero" in list_backends()


def libero_overrides(n: int, hw: int, render: str, stages: int = 1, chunk: int = 8) -> list[str]:
    """Overrides of a libero_spatial config of ``n`` envs, ``hw`` x ``hw`` cameras, ``render``, ``stages`` stages, chunks of ``chunk``."""
    return [
        "train.simulator_type=libero",
        "train.task_suite_name=libero_spatial",
        f"train.num_envs={n}",
        f"train.render={render}",
        f"train.init_params.camera_heights={hw}",
        f"train.init_params.camera_widths={hw}",
        f"actor.model.num_action_chunks={chunk}",
        f"rollout.pipeline_stage_num={stages}",
    ]


def libero_cfg(n: int, hw: int, render: str, stages: int = 1, chunk: int = 8) -> Any:
    from envfleet.config import load_config

    return load_config(overrides=[*libero_overrides(n, hw, render, stages, chunk), "train.max_episode_steps=100000"])
