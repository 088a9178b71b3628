"""What the group does about dead workers that is not calling them: their error, their rows.

:func:`dead_error` words one :class:`~envfleet.errors.WorkerDiedError` for every worker a
call found gone (a lost node takes several at once): rank, node, pid and Ray's cause.
:func:`concat_harmonized` joins a step's results when a recreated worker's part lacks
keys the others carry. :func:`chunk_of` reads a step's chunk length from its actions when
the config leaves it null, for the truncated rows a recreated worker answers with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from envfleet.dataproto import DataProto
from envfleet.errors import InvalidInputError, WorkerDiedError

# Imports inside functions: torch loads only when a dead worker's rows are rebuilt as tensors.

__all__ = ["chunk_of", "concat_harmonized", "dead_error"]


def dead_error(
    dead: Mapping[int, BaseException], nodes: Sequence[Mapping[str, Any]], why: str = "", alive: set[str] | None = None
) -> WorkerDiedError:
    """One error for the workers ``dead`` (rank -> Ray's error), from ``nodes`` (rank -> node_info); ``why`` is appended.

    With ``alive`` (the node ids Ray counts alive whose raylet answers), a worker whose node is not among them is
    said to have lost its node: Ray's own message for it is often only "died unexpectedly".
    """
    parts = []
    for rank in sorted(dead):
        exc = dead[rank]
        node = nodes[rank] if rank < len(nodes) else {}
        lines = str(exc).strip().splitlines()
        short = next((ln for ln in lines if "cause" in ln.lower() or "died" in ln.lower()), lines[0] if lines else "")
        node_id = str(node.get("node_id") or "?")[:8]
        parts.append(
            f"EnvWorker rank {rank} on node {node.get('ip', '?')} ({node.get('hostname', '?')}, node id {node_id}, "
            f"pid {node.get('pid', '?')}) died: {type(exc).__name__}: {short.strip()}"
            + (
                " (its node is lost: Ray declared it dead, or its raylet does not answer)"
                if alive is not None and node.get("node_id") not in alive
                else ""
            )
        )
    return WorkerDiedError("; ".join(parts) + (f"; {why}" if why else ""))


def chunk_of(data: DataProto) -> int:
    """The chunk length of a step's ``actions`` (``[n, chunk, action_dim]``, or an object array of ``[chunk, action_dim]`` rows)."""
    actions: Any = data.non_tensor_batch.get("actions")
    if actions is None and data.batch is not None and "actions" in data.batch.keys():
        actions = data.batch["actions"]
    shape = tuple(getattr(actions, "shape", ()))
    if len(shape) == 1 and shape[0] and isinstance(actions, np.ndarray) and actions.dtype == object:
        shape = (shape[0], *np.shape(actions[0]))
    if len(shape) != 3:
        raise InvalidInputError(f"step data needs 'actions' [n, chunk, action_dim], got shape {shape}")
    return int(shape[1])


def concat_harmonized(parts: Sequence[DataProto]) -> DataProto:
    """Concatenate step results; keys missing from a part (a rebuilt worker) are filled with zeros / -1."""
    if len(parts) == 1:
        return parts[0]
    # Each part's keys are read once: asking a TensorDict for its keys per key and per part
    # made this quadratic-looking loop cost five times the concat itself at 64 workers. They
    # are read from the columns, not from ``batch``: a result that came through Ray holds
    # arrays, and reading ``batch`` would build a TensorDict per worker only to learn its keys.
    keys = [(p.tensor_keys(), frozenset(p.non_tensor_batch)) for p in parts]
    if all(k == keys[0] for k in keys):
        return DataProto.concat(parts)  # every worker answered alike: the usual case
    tensor_keys: dict[str, Any] = {}
    nt_keys: dict[str, Any] = {}
    for p, (tk, _) in zip(parts, keys):
        for k in tk:
            if k not in tensor_keys:
                assert p.batch is not None
                tensor_keys[k] = p.batch[k]
        for k, v in p.non_tensor_batch.items():
            nt_keys.setdefault(k, v)
    import torch

    for p, (tk, nk) in zip(parts, keys):
        n = len(p)
        for k, ref in tensor_keys.items():
            if k not in tk:
                fill = -1 if not ref.dtype.is_floating_point and ref.dtype != torch.bool else 0
                p.batch[k] = torch.full((n, *ref.shape[1:]), fill, dtype=ref.dtype)  # type: ignore[index]
        for k, ref in nt_keys.items():
            if k not in nk:
                p.non_tensor_batch[k] = np.zeros((n, *ref.shape[1:]), dtype=ref.dtype)
    return DataProto.concat(parts)
