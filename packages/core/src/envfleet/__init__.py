"""envfleet: environment-side infrastructure for RL of robot policies.

The core package: the :class:`Env` protocol, the :class:`DataProto` batch, the
process-sharded :class:`ProcessEnvManager`, the plugin registry and the config
schema. It never imports Ray or a simulator, and needs torch and tensordict only for
:class:`DataProto` (the ``dataproto`` extra, ``pip install 'envfleet[dataproto]'``): without
them, ``envfleet.DataProto`` raises :class:`~envfleet.errors.MissingExtraError` with that
command, and everything else works.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Names are imported on first use, so that a shard process (``python -m envfleet.shards.server``)
# and a plugin listing do not pay for torch and tensordict, nor need them installed.
_EXPORTS = {
    "EnvConfig": "config",
    "EnvFleetConfig": "config",
    "load_config": "config",
    "DataProto": "dataproto",
    "DataProtoConfig": "dataproto",
    "DataProtoItem": "dataproto",
    "pad_dataproto_to_divisor": "dataproto",
    "unpad_dataproto": "dataproto",
    "ArraySpec": "env",
    "ChunkStepResult": "env",
    "Env": "env",
    "EnvContext": "env",
    "ObservationSpec": "env",
    "ResetResult": "env",
    "EpisodeTracker": "episodes",
    "StateCycle": "episodes",
    "ConfigError": "errors",
    "DataProtoError": "errors",
    "DataProtoKeyError": "errors",
    "EnvFleetError": "errors",
    "EnvFleetSimulatorError": "errors",
    "InvalidInputError": "errors",
    "RestartLimitError": "errors",
    "UnknownBackendError": "errors",
    "WorkerDiedError": "errors",
    "ProcessEnvManager": "shards.manager",
    "BackendRegistry": "plugins",
    "BackendSpec": "plugins",
    "get_backend": "plugins",
    "hookimpl": "plugins",
    "list_backends": "plugins",
    "plugin_failures": "plugins",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'envfleet' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:  # pragma: no cover
    from .config import EnvConfig, EnvFleetConfig, load_config
    from .dataproto import DataProto, DataProtoConfig, DataProtoItem, pad_dataproto_to_divisor, unpad_dataproto
    from .env import ArraySpec, ChunkStepResult, Env, EnvContext, ObservationSpec, ResetResult
    from .episodes import EpisodeTracker, StateCycle
    from .errors import (
        ConfigError,
        DataProtoError,
        DataProtoKeyError,
        EnvFleetError,
        EnvFleetSimulatorError,
        InvalidInputError,
        RestartLimitError,
        UnknownBackendError,
        WorkerDiedError,
    )
    from .plugins import BackendRegistry, BackendSpec, get_backend, hookimpl, list_backends, plugin_failures
    from .shards.manager import ProcessEnvManager

__version__ = "0.1.0"

__all__ = [
    "ArraySpec",
    "BackendRegistry",
    "BackendSpec",
    "ChunkStepResult",
    "ConfigError",
    "DataProto",
    "DataProtoConfig",
    "DataProtoError",
    "DataProtoItem",
    "DataProtoKeyError",
    "Env",
    "EnvConfig",
    "EnvContext",
    "EnvFleetConfig",
    "EnvFleetError",
    "EnvFleetSimulatorError",
    "EpisodeTracker",
    "InvalidInputError",
    "ObservationSpec",
    "ProcessEnvManager",
    "ResetResult",
    "RestartLimitError",
    "StateCycle",
    "UnknownBackendError",
    "WorkerDiedError",
    "get_backend",
    "hookimpl",
    "list_backends",
    "load_config",
    "pad_dataproto_to_divisor",
    "plugin_failures",
    "unpad_dataproto",
]
