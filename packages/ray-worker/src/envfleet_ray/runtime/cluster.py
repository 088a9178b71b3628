"""Starting or joining Ray: a local Ray binds to 127.0.0.1 only."""

from __future__ import annotations

import os
from typing import Any

# Imports inside functions: Ray loads when a cluster is started or joined, not with the worker class (an in-
# process EnvWorker needs no Ray).

__all__ = ["init_ray", "LOOPBACK", "DIRECT_CALL_BYTES"]

LOOPBACK = "127.0.0.1"
DIRECT_CALL_BYTES = 1 << 20  # results up to this size skip the object store on a local Ray


def init_ray(address: str | None = None, num_cpus: int | None = None, **kwargs: Any) -> dict[str, Any]:
    """Join ``address`` (or ``$RAY_ADDRESS``); with neither, start a local Ray on 127.0.0.1 only.

    A local Ray also returns results up to :data:`DIRECT_CALL_BYTES` directly instead
    of through the object store (on a cluster you start yourself, set
    ``RAY_max_direct_call_object_size`` the same way).

    Returns ``{"address": ..., "local": bool}``. Does nothing if Ray is already up.
    """
    import ray

    if ray.is_initialized():
        return {"address": ray.get_runtime_context().gcs_address, "local": False}
    address = address or os.environ.get("RAY_ADDRESS") or None
    # Ray's logs go to its session directory, not to the user's terminal.
    kwargs.setdefault("log_to_driver", False)
    kwargs.setdefault("logging_level", "WARNING")
    if address:
        ray.init(address=address, **kwargs)
        return {"address": address, "local": False}
    # In Ray 2.60 this makes a local start bind every service to 127.0.0.1. Ray reads it
    # at import time, so the already-imported constant is set too; Ray's own processes
    # inherit the environment variable.
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    from ray._private import ray_constants  # noqa: PLC2701 (Ray has no public switch for it)

    ray_constants.ENABLE_RAY_CLUSTER = False
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # local only: no token file in ~/.ray
    # A step's DataProto (a few hundred KB with images) then travels straight from the
    # worker to the driver instead of through the object store, which costs the raylet
    # and both ends CPU that the simulators need (docs/benchmarks.md has the figures).
    # Ray's default is 100 KiB.
    system_config = dict(kwargs.pop("_system_config", None) or {})
    system_config.setdefault("max_direct_call_object_size", DIRECT_CALL_BYTES)
    # address="local": start a Ray of our own. Without it, ray.init joins whatever local Ray
    # another process (another user's run, a test) already started on this machine.
    ray.init(
        address="local",
        _system_config=system_config,
        num_cpus=num_cpus,
        include_dashboard=False,
        _node_ip_address=LOOPBACK,
        **kwargs,
    )
    return {"address": ray.get_runtime_context().gcs_address, "local": True}
