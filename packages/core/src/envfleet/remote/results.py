"""The client side of a ``result`` message: a reset's or a step's result, and the result of a step whose server was lost."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..env import ChunkStepResult, ResetResult
from ..episodes import restarted_rows
from .wire import Frame, arrays_with_prefix

__all__ = ["infos_of", "reset_result", "step_result", "restarted_step"]


def infos_of(reply: Frame) -> dict[str, np.ndarray]:
    """The infos of a ``result``: its ``info.*`` arrays and its ``object_infos`` (as object arrays)."""
    infos = arrays_with_prefix(reply, "info.")
    for name, values in (reply.get("object_infos") or {}).items():
        infos[name] = np.array(values, dtype=object)
    return infos


def reset_result(reply: Frame, num_envs: int, restarted: bool = False) -> ResetResult:
    """A reset's ``result``; ``restarted``: the envs were rebuilt on a restarted server (``sim_restarted`` True)."""
    infos = infos_of(reply)
    if restarted:
        infos["sim_restarted"] = np.ones(num_envs, dtype=bool)
    return ResetResult(obs=arrays_with_prefix(reply, "obs."), task_descriptions=list(reply.get("task_descriptions")), infos=infos)


def step_result(reply: Frame) -> ChunkStepResult:
    """A step's ``result``."""
    flags = arrays_with_prefix(reply, "flag.")
    return ChunkStepResult(
        obs=arrays_with_prefix(reply, "obs."),
        task_descriptions=list(reply.get("task_descriptions")),
        rewards=flags["rewards"],
        terminations=flags["terminations"],
        truncations=flags["truncations"],
        infos=infos_of(reply),
    )


def restarted_step(reply: Frame, num_envs: int, chunk: int, templates: dict[str, tuple[np.dtype[Any], tuple[int, ...]]]) -> ChunkStepResult:
    """A step whose server was lost, from the ``result`` of the reset that followed the reconnect.

    As a restarted shard's rows: the fresh reset's observations, zero rewards, a truncation at
    the last sub-step, ``sim_restarted`` True, and every info of the last step (``templates``:
    dtype and trailing shape) that the reset lacks filled with its "none" value (-1, False or 0).
    """
    rows = restarted_rows(num_envs, chunk)
    infos: dict[str, np.ndarray] = {}
    for name, (dtype, shape) in templates.items():
        fill = -1 if dtype.kind == "i" else (False if dtype.kind == "b" else 0)
        infos[name] = np.full((num_envs, *shape), fill, dtype=dtype)
    infos.update(infos_of(reply))
    infos["sim_restarted"] = np.ones(num_envs, dtype=bool)
    return ChunkStepResult(
        obs=arrays_with_prefix(reply, "obs."),
        task_descriptions=list(reply.get("task_descriptions")),
        rewards=rows.rewards,
        terminations=rows.terminations,
        truncations=rows.truncations,
        infos=infos,
    )
