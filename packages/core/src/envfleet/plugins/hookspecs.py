"""The hooks an envfleet plugin can implement, and the markers for them.

One name drives everything: :data:`NAME` is the pluggy project name of the hook
markers, the PluginManager and the entry-point group.

>>> from envfleet.plugins import hookimpl
>>> @hookimpl
... def envfleet_register_backends(registry):
...     registry.register(...)  # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

# Annotation only: the hook's one argument is the registry, which calls the hook; the hook and what it is
# handed are one protocol's two sides, and the registry's machinery stays out of what a plugin author reads.
if TYPE_CHECKING:
    from .registry import BackendRegistry

__all__ = ["NAME", "HOOK", "hookspec", "hookimpl", "envfleet_register_backends"]

#: One name drives the hook markers, the PluginManager and the entry-point group.
NAME = "envfleet"
hookspec = pluggy.HookspecMarker(NAME)
hookimpl = pluggy.HookimplMarker(NAME)

HOOK = "envfleet_register_backends"  # the one hook a plugin implements


@hookspec
def envfleet_register_backends(registry: BackendRegistry) -> None:
    """Register one or more simulator backends.

    :param registry: call ``registry.register(BackendSpec(...))`` once per backend.

    Every implementation is called, each on its own: one that raises is reported
    by its plugin name (see :func:`envfleet.plugins.plugin_failures`) and the others
    still register. Keep this hook cheap: do not import the simulator here.
    """
