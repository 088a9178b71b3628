"""ManiSkill's own ``gym.make`` arguments for a ``train.maniskill`` section, and for ManiSkill run alone.

The backend's shards build their envs with :func:`make_kwargs`; the tests that compare
envfleet with ManiSkill run alone, and the benchmark that races gymnasium's vector env
over ManiSkill, build theirs with :func:`reference_kwargs`: the same function over the
section's defaults on the CPU sim, so the reference cannot drift from what the backend
makes. Light: imports neither ManiSkill nor SAPIEN.
"""

from __future__ import annotations

from typing import Any

from .plugin import ManiskillConfig

__all__ = ["make_kwargs", "reference_kwargs"]


def make_kwargs(section: Any, sim_backend: str, render_backend: str, height: int, width: int) -> dict[str, Any]:
    """``gym.make(task, **make_kwargs(...))`` for ``section`` (a ``train.maniskill`` config or a :class:`ManiskillConfig`).

    :param sim_backend: ``physx_cpu`` or ``physx_cuda`` (see :func:`envfleet_maniskill.device.resolve`).
    :param render_backend: ``cpu`` or ``gpu``.
    :param height: camera height, from ``train.init_params.camera_heights``.
    :param width: camera width, from ``train.init_params.camera_widths``.
    """
    kwargs: dict[str, Any] = {
        "obs_mode": str(section.obs_mode),
        "reward_mode": str(section.reward_mode),
        "sim_backend": sim_backend,
        "render_backend": render_backend,
        "sensor_configs": {**dict(section.sensor_configs), "width": int(width), "height": int(height)},
    }
    if section.control_mode is not None:
        kwargs["control_mode"] = str(section.control_mode)
    if section.robot_uids is not None:
        kwargs["robot_uids"] = str(section.robot_uids)
    if section.sim_config:
        kwargs["sim_config"] = dict(section.sim_config)
    return kwargs


def reference_kwargs(height: int, width: int | None = None) -> dict[str, Any]:
    """The arguments of ManiSkill run alone the way the backend runs it by default on the CPU sim.

    Example: ``gym.make("PushCube-v1", **reference_kwargs(64))``. ManiSkill's own horizon
    (its ``TimeLimit`` wrapper) stays, as a user running ManiSkill alone gets it.
    """
    return make_kwargs(ManiskillConfig(), "physx_cpu", "cpu", height, height if width is None else width)
