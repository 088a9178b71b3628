"""envfleet-ray: the EnvWorker (verl's env-worker API), its Ray worker group, the pipelined loop and the CLI.

``import envfleet_ray`` does not start Ray; :func:`init_ray` does (bound to 127.0.0.1
unless an address is given).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .batch import create_env_batch_dataproto, env_batch_dataproto, put_tensor_cpu
from .cluster import init_ray
from .worker import EnvWorker

if TYPE_CHECKING:  # loaded on first use by __getattr__ below
    from .futures import GroupFuture
    from .group import EnvWorkerGroup
    from .loop import EnvLoop
    from .policies import load_policy

__version__ = "0.1.0"

__all__ = [
    "EnvLoop",
    "EnvWorker",
    "EnvWorkerGroup",
    "GroupFuture",
    "create_env_batch_dataproto",
    "env_batch_dataproto",
    "init_ray",
    "load_policy",
    "put_tensor_cpu",
]


def __getattr__(name: str) -> object:
    # The Ray-dependent names load on first use.
    if name == "EnvWorkerGroup":
        from .group import EnvWorkerGroup

        return EnvWorkerGroup
    if name == "GroupFuture":
        from .futures import GroupFuture

        return GroupFuture
    if name == "EnvLoop":
        from .loop import EnvLoop

        return EnvLoop
    if name == "load_policy":
        from .policies import load_policy

        return load_policy
    raise AttributeError(f"module 'envfleet_ray' has no attribute {name!r}")
