"""gymnasium's infos layout: a dict of arrays over the envs, each key ``k`` with a bool mask ``_k``.

gymnasium's vector envs build it one env at a time (``VectorEnv._add_info``); envfleet's
manager already returns whole arrays, so here they are masked as a whole. Rows an env
did not report hold what gymnasium puts there: zeros for numbers and ``None`` in object
arrays (strings, per-env observation dicts).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["chunk_infos", "masked_infos", "merge_infos", "object_column"]


def _blank(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    out = np.array(values, copy=True)
    if out.dtype.kind in "OUS":
        out = out.astype(object)
        out[~mask] = None
    else:
        out[~mask] = 0
    return out


def object_column(values: list[Any]) -> np.ndarray:
    """A 1-D object array of ``values`` (never a 2-D array of characters or nested sequences)."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def masked_infos(values: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, Any]:
    """``values`` (arrays of leading dim ``num_envs``) as gymnasium infos reported by the envs of ``mask``."""
    mask = np.asarray(mask, dtype=bool)
    out: dict[str, Any] = {}
    for key, value in values.items():
        out[key] = _blank(value, mask)
        out[f"_{key}"] = mask.copy()
    return out


def merge_infos(base: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """gymnasium infos of ``base`` with ``other``'s rows laid over them where ``other``'s masks are set.

    Both are dicts built by :func:`masked_infos`; a key only one of them has is kept with its mask.
    """
    out = dict(base)
    for key, value in other.items():
        if key.startswith("_"):
            continue
        mask = other[f"_{key}"]
        if key not in out:
            out[key], out[f"_{key}"] = value, mask.copy()
            continue
        mine = out[key]
        if mine.dtype != value.dtype or mine.shape != value.shape:
            mine = mine.astype(object) if value.dtype == object or mine.dtype == object else mine.astype(np.result_type(mine, value))
        merged = np.array(mine, copy=True)
        merged[mask] = value[mask]
        out[key] = merged
        out[f"_{key}"] = out[f"_{key}"] | mask
    return out


def chunk_infos(result: Any) -> dict[str, Any]:
    """A chunk result's infos for a step: its own, the per-sub-step arrays (``chunk_rewards``,
    ``chunk_terminations``, ``chunk_truncations``), ``task_description`` and ``is_success``."""
    values = dict(result.infos)
    values.update(
        chunk_rewards=result.rewards,
        chunk_terminations=result.terminations,
        chunk_truncations=result.truncations,
        task_description=object_column(list(result.task_descriptions)),
    )
    if "success_once" in values:
        values["is_success"] = values["success_once"]
    return values
