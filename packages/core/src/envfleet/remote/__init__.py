"""Simulators behind a network boundary: ``envfleet serve`` on one side, a manager on the other.

- :class:`RemoteEnvManager`: one stage of a server, with the call surface of
  :class:`~envfleet.ProcessEnvManager`, so the worker and the faces run over it unchanged;
  it keeps the stage's lease on its own while it is open.
- :class:`EnvServer`: the stages of a loaded config behind a TCP (optionally TLS) socket,
  each served through a ``ProcessEnvManager``; ``envfleet serve`` runs it.
- :func:`build_manager`: a stage's manager, remote when ``train.remote.address`` is set.
- :mod:`envfleet.remote.wire`: the versioned frame format (docs/remote.md gives every message).

Only the standard library and numpy: the client needs no Ray, no torch and no simulator.
"""

from __future__ import annotations

from .client import RemoteBackend, RemoteConnectionError, RemoteEnvManager, RemoteRefusedError, RemoteStageLostError
from .config import RemoteConfig, build_manager, in_process_manager, read_token
from .server import EnvServer, ServeOptions, is_loopback
from .wire import VERSION, WireError, parse_address

__all__ = [
    "RemoteEnvManager",
    "RemoteBackend",
    "RemoteConnectionError",
    "RemoteRefusedError",
    "RemoteStageLostError",
    "RemoteConfig",
    "EnvServer",
    "ServeOptions",
    "VERSION",
    "WireError",
    "build_manager",
    "is_loopback",
    "in_process_manager",
    "parse_address",
    "read_token",
]
