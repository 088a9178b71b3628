"""envfleet-ray: the EnvWorker (verl's env-worker API), its Ray worker group, the pipelined loop and the CLI.

Three audiences, three sub-packages: :mod:`envfleet_ray.runtime` (the worker, the group, the routes a
step takes, placement and recovery), :mod:`envfleet_ray.commands` (one module per ``envfleet``
subcommand, with the rollout's loop and policies) and the trainer adapters
(:mod:`envfleet_ray.verl`, :mod:`envfleet_ray.verl_vla`). This module is the face: what a trainer imports.

``import envfleet_ray`` does not start Ray; :func:`init_ray` does (bound to 127.0.0.1
unless an address is given).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .runtime.batch import create_env_batch_dataproto, env_batch_dataproto, put_tensor_cpu
from .runtime.cluster import init_ray
from .runtime.worker import EnvWorker

if TYPE_CHECKING:  # loaded on first use by __getattr__ below
    from .commands.loop import EnvLoop
    from .commands.policies import load_policy
    from .runtime.futures import GroupFuture
    from .runtime.group import EnvWorkerGroup

__version__ = "0.1.0"

# Imports inside functions: the Ray-dependent names load on first use (module __getattr__), so importing
# envfleet_ray for EnvWorker or the verl helpers does not start Ray's import.

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
        from .runtime.group import EnvWorkerGroup

        return EnvWorkerGroup
    if name == "GroupFuture":
        from .runtime.futures import GroupFuture

        return GroupFuture
    if name == "EnvLoop":
        from .commands.loop import EnvLoop

        return EnvLoop
    if name == "load_policy":
        from .commands.policies import load_policy

        return load_policy
    raise AttributeError(f"module 'envfleet_ray' has no attribute {name!r}")
