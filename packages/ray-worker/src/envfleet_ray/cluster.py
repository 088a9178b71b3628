"""Starting or joining Ray: a local Ray binds to 127.0.0.1 only."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["init_ray", "LOOPBACK"]

LOOPBACK = "127.0.0.1"


def init_ray(address: str | None = None, num_cpus: int | None = None, **kwargs: Any) -> dict[str, Any]:
    """Join ``address`` (or ``$RAY_ADDRESS``); with neither, start a local Ray on 127.0.0.1 only.

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
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # local only: no token file in ~/.ray
    ray.init(
        num_cpus=num_cpus,
        include_dashboard=False,
        _node_ip_address=LOOPBACK,
        **kwargs,
    )
    return {"address": ray.get_runtime_context().gcs_address, "local": True}
