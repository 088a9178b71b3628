"""Registration of the ``libero`` backend (filled in by the LIBERO issue)."""

from __future__ import annotations

from envfleet.plugins import BackendRegistry, hookimpl


@hookimpl
def envfleet_register_backends(registry: BackendRegistry) -> None:
    """Nothing yet."""
