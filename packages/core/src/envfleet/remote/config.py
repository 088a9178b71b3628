"""``train.remote``: where a stage's simulators run when they run behind ``envfleet serve``.

:func:`build_manager` is the one place that picks a stage's manager: a
:class:`~envfleet.remote.client.RemoteEnvManager` when ``remote.address`` is set, else a
:class:`~envfleet.shards.manager.ProcessEnvManager`. The worker and the faces call it, so
everything above the manager is the same either way.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..config import RemoteConfig  # the schema lives with the other env sections
from ..errors import ConfigError
from ..execution import describe
from ..shards.manager import ProcessEnvManager
from .client import RemoteEnvManager
from .wire import parse_address

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from ..plugins import BackendSpec

__all__ = ["RemoteConfig", "build_manager", "in_process_manager", "parse_address", "read_token"]


def read_token(path: str | os.PathLike[str] | None) -> str | None:
    """The token in ``path`` (its first line, stripped); ``None`` for no path.

    :raises ConfigError: the file cannot be read or is empty.
    """
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            token = fh.readline().strip()
    except OSError as exc:
        raise ConfigError(f"remote.token_file: cannot read {str(path)!r}: {exc}") from None
    if not token:
        raise ConfigError(f"remote.token_file: {str(path)!r} is empty; expected the server's token on its first line")
    return token


def build_manager(
    cfg: DictConfig, stage_id: int = 0, rank: int = 0, mode: str = "train", backend: BackendSpec | None = None
) -> ProcessEnvManager | RemoteEnvManager:
    """The manager of one stage: remote when ``cfg[mode].remote.address`` is set, in shard processes otherwise.

    A remote manager checks that the server's stage has the ``num_envs``, ``action_dim`` and
    chunk length this config expects (the layers above slice by them).

    :raises ConfigError: the server's stage does not match this config.
    """
    section = cfg[mode]
    remote: Any = section.get("remote") if hasattr(section, "get") else None
    address = None if remote is None else remote.get("address")
    if not address:
        return ProcessEnvManager(cfg, stage_id=stage_id, rank=rank, mode=mode, backend=backend)
    if section.get("record") is not None and section.record.get("format") is not None:
        raise ConfigError(
            f"{mode}.record records where the simulators run: set it in the config the server serves "
            f"(envfleet serve --config), not beside {mode}.remote.address"
        )
    manager = RemoteEnvManager(
        str(address),
        token=read_token(remote.get("token_file")),
        stage_id=stage_id,
        rank=rank,
        mode=mode,
        tls=bool(remote.get("tls")) or remote.get("ca_file") is not None,
        ca_file=remote.get("ca_file"),
        timeout_s=remote.get("timeout_s"),
        reconnect_s=float(remote.get("reconnect_s", 30.0)),
        take=bool(remote.get("take", False)),
    )
    chunk = cfg.actor.model.num_action_chunks
    expected: dict[str, tuple[Any, Any]] = {
        f"{mode}.num_envs": (int(section.num_envs), manager.num_envs),
        "actor.model.action_dim": (int(cfg.actor.model.action_dim), manager.action_dim),
        "actor.model.num_action_chunks": (None if chunk is None else int(chunk), manager.num_action_chunks),
    }
    mine, theirs = describe(section), manager.execution
    if mine != theirs:
        expected[f"{mode}.execution"] = (mine or "mode chunk", theirs or "mode chunk")
    wrong = {key: pair for key, pair in expected.items() if pair[0] != pair[1]}
    if wrong:
        manager.close()
        text = "; ".join(f"{key} is {mine} here but {theirs} on the server" for key, (mine, theirs) in wrong.items())
        raise ConfigError(f"{mode}.remote.address {address}: the server's stage {stage_id} does not match this config: {text}")
    return manager


def in_process_manager(manager: ProcessEnvManager | RemoteEnvManager, who: str) -> ProcessEnvManager:
    """``manager`` when its shards run here; for a remote one a ConfigError naming ``who``.

    First-ready stepping (``send_chunk`` / ``recv_chunk``) runs on shards of this process; the wire
    has no messages for it.
    """
    if isinstance(manager, ProcessEnvManager):
        return manager
    raise ConfigError(
        f"{who} steps first-ready, which runs on shards of this process: remove {manager.mode}.remote.address "
        "(a server of envfleet serve steps its envs in lockstep)"
    )
