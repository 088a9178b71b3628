"""Merging the shards' replies into one stage's flags, infos and task descriptions.

Each shard's reset/step reply comes as a :class:`~envfleet.shards.handle.Packed`
(:meth:`~envfleet.shards.handle.ShardHandle.unpack`). When every shard sent
the same layout (the usual case) their bytes are joined and each field is read
once for the whole stage; otherwise each shard's arrays are unpacked and
concatenated, and a restarted shard's rows are filled: zero rewards, the last
sub-step truncated, and each info with the value that means "none" for its
dtype (-1, False or 0).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from ..episodes import restarted_rows
from .handle import Packed
from .messages import Command
from .wire import Layout, split_reply

__all__ = ["ReplyMerger", "ShardRows"]

_FLAG_KEYS = ("rewards", "terminations", "truncations")


class ShardRows(Protocol):
    """Where a shard's envs sit in a merged result: a :class:`~envfleet.shards.handle.ShardHandle`
    (its envs of the stage), or the rows a first-ready result gives them (:mod:`envfleet.shards.ready`)."""

    @property
    def index(self) -> int:
        """The shard's number within its stage."""
        ...

    @property
    def num_envs(self) -> int:
        """How many envs the shard runs."""
        ...

    @property
    def env_slice(self) -> slice:
        """The shard's rows in the merged result."""
        ...


class ReplyMerger:
    """Merges one stage's replies; remembers each info's dtype and shape to fill the rows of a restarted shard.

    :param num_envs: the stage's envs.
    """

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs
        # dtype and trailing shape of each info key, per command, to fill the rows of a restarted shard
        self._info_templates: dict[Command, dict[str, tuple[np.dtype[Any], tuple[int, ...]]]] = {Command.RESET: {}, Command.STEP: {}}
        self._fast_layouts: dict[Command, Layout] = {}

    def merge(
        self,
        shards: Sequence[ShardRows],
        replies: list[Packed],
        restarted: set[int],
        command: Command,
        chunk: int = 0,
        num_rows: int | None = None,
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], list[str]]:
        """The stage's flags (step only), infos and task descriptions from each shard's reply.

        :param replies: one per shard, in shard order (a restarted shard's: its fresh reset's).
        :param restarted: the indices of the shards restarted during this call.
        :param chunk: the chunk length (for a restarted shard's flags).
        :param num_rows: the rows of the result (default: the stage's envs); each shard's are its ``env_slice``.
        """
        total = self.num_envs if num_rows is None else num_rows
        descriptions = [d for r in replies for d in r.descriptions]
        layout = replies[0].layout
        if not restarted and layout is not None and all(r.layout is layout and not r.others for r in replies):
            flags, infos = layout.join_split([r.raw for r in replies])
            if self._fast_layouts.get(command) is not layout:
                self._fast_layouts[command] = layout
                self._info_templates[command].update({key: (value.dtype, value.shape[1:]) for key, value in infos.items()})
            infos["sim_restarted"] = np.zeros(total, dtype=bool)
            return flags, infos, descriptions
        flags = {
            "rewards": np.zeros((total, chunk), dtype=np.float32),
            "terminations": np.zeros((total, chunk), dtype=bool),
            "truncations": np.zeros((total, chunk), dtype=bool),
        }
        parts: list[dict[str, Any]] = []
        for shard, reply in zip(shards, replies):
            shard_flags, shard_infos = split_reply(reply.layout.unpack(reply.raw) if reply.layout is not None else {})
            parts.append(shard_infos)
            if shard.index in restarted:
                rows = restarted_rows(shard.num_envs, chunk)
                shard_flags = {"rewards": rows.rewards, "terminations": rows.terminations, "truncations": rows.truncations}
            elif command is not Command.STEP:
                continue
            for key in _FLAG_KEYS:
                flags[key][shard.env_slice] = shard_flags[key]
        return flags, self._merge_infos(shards, parts, restarted, command, total), descriptions

    def _merge_infos(
        self, shards: Sequence[ShardRows], infos: list[dict[str, Any]], restarted: set[int], command: Command, total: int
    ) -> dict[str, np.ndarray]:
        templates = self._info_templates[command]
        keys: list[str] = []
        for part in infos:
            for key, value in part.items():
                value = np.asarray(value)
                if key not in keys:
                    keys.append(key)
                if key not in templates and value.ndim >= 1:
                    templates[key] = (value.dtype, value.shape[1:])
        keys = keys + [k for k in templates if k not in keys]
        merged: dict[str, np.ndarray] = {}
        for key in keys:
            pieces = []
            for shard, part in zip(shards, infos):
                if key in part and np.asarray(part[key]).ndim >= 1 and len(part[key]) == shard.num_envs:
                    pieces.append(np.asarray(part[key]))
                else:
                    dtype, tail = templates.get(key, (np.dtype(np.float32), ()))
                    fill = -1 if dtype.kind in "iu" else (False if dtype.kind == "b" else 0)
                    pieces.append(np.full((shard.num_envs, *tail), fill, dtype=dtype))
            try:
                merged[key] = np.concatenate(pieces, axis=0)
            except ValueError:
                merged[key] = np.array([p for piece in pieces for p in piece], dtype=object)
        merged["sim_restarted"] = np.zeros(total, dtype=bool)
        for shard in shards:
            if shard.index in restarted:
                merged["sim_restarted"][shard.env_slice] = True
        return merged
