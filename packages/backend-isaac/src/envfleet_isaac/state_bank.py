"""The bank of initial states: what a state id means, the same in every process, stage and env.

State id ``k`` is made by the task's own ``_reset_idx`` on env 0, under a seed derived
from ``(state_bank_seed, k)``, and captured with ``scene.get_state(is_relative=True)``
(plus the task buffers named in ``train.isaac.task_buffers``). Positions are rounded to
a grid so that adding and removing an env origin is exact.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from .tensors import State, map_arrays

__all__ = ["POSITION_QUANTUM", "build_state_bank", "derive_seed", "restore_from_bank"]

#: Bank positions are multiples of this (metres): exact under + / - of env origins that are
#: multiples of it too (e.g. an env spacing of 1.5 m), for worlds smaller than 256 m.
POSITION_QUANTUM = 2.0**-16


def derive_seed(*parts: int) -> int:
    """A 31-bit seed from integers (order matters), for torch, numpy and Warp alike."""
    words = [int(p) & 0xFFFFFFFF for p in parts]
    return int(np.random.SeedSequence(words).generate_state(1, dtype=np.uint32)[0]) & 0x7FFFFFFF


def build_state_bank(
    env: Any, size: int, seed: int, buffers: Sequence[str] = (), reset_idx: Callable[[torch.Tensor], Any] | None = None
) -> tuple[State, dict[str, torch.Tensor]]:
    """The bank of initial states: state id ``k`` is ``reset_idx`` (the task's ``_reset_idx``) of env 0 under a seed
    derived from ``(seed, k)``, captured with ``scene.get_state(is_relative=True)``, positions on the
    :data:`POSITION_QUANTUM` grid. Returns the scene states (a tensor ``[size, ...]`` per leaf) and the
    ``buffers`` (env attributes) captured alongside."""
    reset = reset_idx or env._reset_idx
    env0 = torch.zeros(1, dtype=torch.int32, device=env.device)
    rows: list[State] = []
    captured: dict[str, list[torch.Tensor]] = {name: [] for name in buffers}
    for k in range(size):
        env.seed(derive_seed(seed, k))
        reset(env0)
        env.scene.write_data_to_sim()
        env.sim.forward()
        rows.append(map_arrays(env.scene.get_state(is_relative=True), lambda t: t[0:1].clone()))
        for name in captured:
            captured[name].append(getattr(env, name)[0:1].clone())
    bank: State = _stack(rows)
    _quantize_positions(bank)
    return bank, {name: torch.cat(parts) for name, parts in captured.items()}


def restore_from_bank(env: Any, bank: State, bank_buffers: dict[str, torch.Tensor], env_idx: np.ndarray, state_ids: np.ndarray) -> None:
    """Put bank states ``state_ids`` into envs ``env_idx`` of ``env`` and refresh the scene for reading."""
    device = env.device
    ids = torch.as_tensor(env_idx, dtype=torch.int32, device=device)
    sids = torch.as_tensor(state_ids, dtype=torch.long, device=device)
    env.scene.reset(ids)
    env.scene.reset_to(map_arrays(bank, lambda t: t[sids]), ids, is_relative=True)
    rows = ids.long()
    for name, captured in bank_buffers.items():
        getattr(env, name)[rows] = captured[sids]
    length = getattr(env, "episode_length_buf", None)
    if isinstance(length, torch.Tensor):
        length[rows] = 0
    for name in ("reset_buf", "reset_terminated", "reset_time_outs"):
        flag = getattr(env, name, None)
        if isinstance(flag, torch.Tensor):
            flag[rows] = False
    env.sim.forward()
    env.scene.update(dt=0.0)  # marks the cameras outdated so that the next read renders the new scene


def _stack(rows: list[State]) -> State:
    """Concatenate per-state captures into one bank (a tensor [bank_size, ...] per leaf)."""
    first = rows[0]
    if isinstance(first, dict):
        return {k: _stack([r[k] for r in rows]) for k in first}
    if isinstance(first, torch.Tensor):
        return torch.cat(rows)
    return first


def _quantize_positions(bank: State) -> None:
    """Round the env-relative positions of a bank to :data:`POSITION_QUANTUM` (in place)."""
    q = POSITION_QUANTUM
    for kind, key, whole in (
        ("articulation", "root_pose", False),
        ("rigid_object", "root_pose", False),
        ("cable_object", "segment_pose", False),
        ("deformable_object", "nodal_position", True),
    ):
        for entity in bank.get(kind, {}).values():
            if isinstance(entity, dict) and key in entity:
                t = entity[key]
                if whole:
                    t.copy_(torch.round(t / q) * q)
                else:
                    t[..., :3] = torch.round(t[..., :3] / q) * q
