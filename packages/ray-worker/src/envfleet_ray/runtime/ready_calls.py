"""First-ready calls of one :class:`~envfleet_ray.runtime.worker.EnvWorker`: ``send_chunk`` / ``recv_chunk`` per stage.

The worker's :meth:`~envfleet_ray.runtime.worker.EnvWorker.send_chunk` and
:meth:`~envfleet_ray.runtime.worker.EnvWorker.recv_chunk` delegate here, and this module to the
stage's :class:`~envfleet.shards.manager.ProcessEnvManager` (:mod:`envfleet.shards.ready` holds the
rules: the unit is the shard, auto-reset is the backend's, restarts happen in the background).

:func:`recv_chunk` waits in short slices, releasing the stage's manager between them, so that a
``send_chunk`` for envs already returned starts at once, even while a ``recv_chunk`` of the same
stage waits for the worker's other envs (the group keeps one such call open per worker,
:mod:`envfleet_ray.runtime.first_ready`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from envfleet.dataproto import DataProto
from envfleet.errors import InvalidInputError
from envfleet.remote import in_process_manager

from .batch import env_batch_dataproto

if TYPE_CHECKING:
    from envfleet.shards.ready import ReadyChunk

    # Annotation only: these are EnvWorker's own first-ready calls, kept apart from its verl-facing ones;
    # one object's two sides.
    from .worker import EnvWorker

__all__ = ["SLICE_S", "recv_chunk", "send_chunk"]

#: How long one wait of :func:`recv_chunk` holds the stage's manager before letting a send in.
SLICE_S = 0.02


def _column(data: DataProto, key: str, what: str) -> Any:
    if key in data.non_tensor_batch:
        value: Any = data.non_tensor_batch[key]
    elif data.batch is not None and key in data.batch.keys():
        value = data.batch[key].cpu().numpy()
    else:
        raise InvalidInputError(f"send_chunk's DataProto has no {key!r} (expected {what})")
    if isinstance(value, np.ndarray) and value.dtype == object:
        try:
            value = np.stack(list(value))
        except (ValueError, TypeError) as exc:
            raise InvalidInputError(f"{key} is an object array that does not stack into {what}: {exc}") from None
    return value


def send_chunk(worker: EnvWorker, data: DataProto) -> None:
    """Start a chunk for ``data``'s ``env_ids`` (the stage's local ids) with its ``actions``
    ``[len(env_ids), chunk, action_dim]`` on stage ``meta_info["stage_id"]``; returns at once.

    :raises InvalidInputError: what :meth:`~envfleet.shards.manager.ProcessEnvManager.send_chunk`
        raises, or a DataProto without ``env_ids`` or ``actions``.
    """
    if not isinstance(data, DataProto):
        raise InvalidInputError(f"send_chunk takes a DataProto, got {type(data).__name__}")
    stage = worker._stage(data)
    manager = in_process_manager(worker._running_stages(worker._mode(data))[stage].manager, "EnvWorker.send_chunk")
    env_ids = _column(data, "env_ids", "the stage's env ids [n]")
    actions = _column(data, "actions", "[n, chunk, action_dim]")
    if isinstance(actions, np.ndarray) and actions.dtype.kind == "f" and actions.dtype != np.float32:
        actions = actions.astype(np.float32)
    manager.send_chunk(env_ids, actions)


def _as_dataproto(result: ReadyChunk, stage: int) -> DataProto:
    out = env_batch_dataproto(
        result.obs, result.task_descriptions, result.rewards, result.terminations, result.truncations, result.infos, {"stage_id": stage}
    )
    out.non_tensor_batch["env_ids"] = np.asarray(result.env_ids, dtype=np.int64)
    return out


def recv_chunk(
    worker: EnvWorker, stage_id: int, min_ready: int, timeout_s: float | None = None, max_ready: int | None = None, mode: str = "train"
) -> DataProto:
    """The results of at least ``min_ready`` envs of stage ``stage_id`` (at most ``max_ready``), or,
    with ``timeout_s``, of every env done by then (possibly none): a DataProto built as
    :meth:`~envfleet_ray.runtime.worker.EnvWorker.env_interact_step` builds its result, plus a
    non-tensor ``env_ids`` column (int64, the stage's local ids) naming each row's env.

    :raises InvalidInputError: what :meth:`~envfleet.shards.manager.ProcessEnvManager.recv_chunk` raises.
    """
    stage = worker._stage(DataProto.from_dict(meta_info={"stage_id": stage_id}))
    manager = in_process_manager(worker._running_stages(worker._mode(mode=mode))[stage].manager, "EnvWorker.recv_chunk")
    end = None if timeout_s is None else time.monotonic() + max(float(timeout_s), 0.0)
    # The first wait checks min_ready and max_ready against the stage, with the manager's own message.
    first = manager.recv_chunk(min_ready, 0.0, max_ready)
    parts, got = [first], len(first.env_ids)
    while got < min_ready and (end is None or time.monotonic() < end):
        time.sleep(0.001)  # a send_chunk waiting for the manager gets it now
        left = SLICE_S if end is None else min(SLICE_S, max(end - time.monotonic(), 0.0))
        part = manager.recv_chunk(min_ready - got, left, None if max_ready is None else max_ready - got)
        if len(part.env_ids):
            parts.append(part)
            got += len(part.env_ids)
    outs = [_as_dataproto(p, stage) for p in parts if len(p.env_ids)] or [_as_dataproto(first, stage)]
    return outs[0] if len(outs) == 1 else DataProto.concat(outs)
