"""Plugins: how a backend package tells envfleet about its simulator.

What a plugin author needs is here, in one import::

    from envfleet.plugins import BackendSpec, hookimpl

    @hookimpl
    def envfleet_register_backends(registry):
        registry.register(BackendSpec(name="toy", env_factory="envfleet_toy.env:ToyEnv", api_version="2.0", ...))

Four modules, one job each: :mod:`~envfleet.plugins.hookspecs` (the hook and its markers),
:mod:`~envfleet.plugins.spec` (what a backend declares), :mod:`~envfleet.plugins.api` (the
plugin API's version, and what core does for plugins one version back) and
:mod:`~envfleet.plugins.registry` (the backends registered, and loading the entry points that
register them).
"""

from __future__ import annotations

from ..env import ArraySpec, EnvContext
from .api import PLUGIN_API_VERSION, ApiVersion, Deprecation, deprecations
from .hookspecs import NAME, hookimpl, hookspec
from .registry import (
    DISABLE_AUTOLOAD_ENV,
    BackendRegistry,
    PluginFailure,
    get_backend,
    get_plugin_manager,
    list_backends,
    plugin_failures,
    register_plugin,
    reset_plugins,
    unregister_plugin,
)
from .spec import BackendSpec, backend_section

__all__ = [  # what a plugin author imports first, then the registry's calls, alphabetically
    "BackendSpec",
    "backend_section",
    "hookimpl",
    "NAME",
    "PLUGIN_API_VERSION",
    "ArraySpec",
    "EnvContext",
    "ApiVersion",
    "Deprecation",
    "deprecations",
    "hookspec",
    "BackendRegistry",
    "DISABLE_AUTOLOAD_ENV",
    "get_backend",
    "get_plugin_manager",
    "list_backends",
    "plugin_failures",
    "PluginFailure",
    "register_plugin",
    "reset_plugins",
    "unregister_plugin",
]
