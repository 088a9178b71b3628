"""Loading the plugins: backends register themselves through pluggy entry points.

The hook is declared in :mod:`envfleet.hookspecs` and the data model (``BackendSpec``,
``BackendRegistry``, ``PluginFailure``) lives in :mod:`envfleet.registry`; both are
re-exported here, so ``from envfleet.plugins import BackendSpec, hookimpl`` works.

A backend package declares, in its ``pyproject.toml``::

    [project.entry-points.envfleet]
    toy = "envfleet_toy.plugin"

and implements the hook in that module::

    from envfleet.plugins import BackendSpec, hookimpl

    @hookimpl
    def envfleet_register_backends(registry):
        registry.register(BackendSpec(name="toy", env_factory="envfleet_toy.env:ToyEnv", ...))

The plugin module must stay light: ``env_factory`` is a ``"module:attr"`` string
imported only when an env is built, so listing backends never imports a simulator.

Set ``ENVFLEET_DISABLE_PLUGIN_AUTOLOAD=1`` to skip entry points; tests then call
:func:`register_plugin` with plugin objects.
"""

from __future__ import annotations

import importlib.metadata
import os
import threading
import traceback
from typing import Any

import pluggy

from . import hookspecs
from .env import ArraySpec, EnvContext
from .hookspecs import HOOK, NAME, hookimpl, hookspec
from .registry import BackendRegistry, BackendSpec, PluginFailure

__all__ = [
    "NAME",
    "ArraySpec",
    "EnvContext",
    "hookimpl",
    "hookspec",
    "BackendSpec",
    "BackendRegistry",
    "PluginFailure",
    "get_plugin_manager",
    "list_backends",
    "get_backend",
    "plugin_failures",
    "register_plugin",
    "unregister_plugin",
    "reset_plugins",
]

DISABLE_AUTOLOAD_ENV = "ENVFLEET_DISABLE_PLUGIN_AUTOLOAD"


class _State:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.pm: pluggy.PluginManager | None = None
        self.registry: BackendRegistry | None = None
        self.failures: list[PluginFailure] = []


_state = _State()


def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide PluginManager, with entry points loaded (unless disabled)."""
    with _state.lock:
        if _state.pm is None:
            pm = pluggy.PluginManager(NAME)
            pm.add_hookspecs(hookspecs)
            _state.failures = []
            if os.environ.get(DISABLE_AUTOLOAD_ENV, "").strip() not in ("1", "true", "yes"):
                _load_entry_points(pm)
            pm.check_pending()
            _state.pm = pm
            _state.registry = None
        return _state.pm


def _load_entry_points(pm: pluggy.PluginManager) -> None:
    eps = importlib.metadata.entry_points(group=NAME)
    for ep in sorted(eps, key=lambda e: e.name):
        if pm.get_plugin(ep.name) is not None or pm.is_blocked(ep.name):
            continue
        try:
            plugin = ep.load()
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            _state.failures.append(PluginFailure(ep.name, "import", exc, traceback.format_exc()))
            continue
        # Each plugin is validated on its own, so that one misspelt hook name reports that
        # plugin and leaves the others usable.
        try:
            pm.register(plugin, name=ep.name)
            pm.check_pending()
        except pluggy.PluginValidationError as exc:
            if pm.get_plugin(ep.name) is not None:
                pm.unregister(name=ep.name)
            hint = LookupError(f"{str(exc).split(' in plugin ')[0]}; envfleet's only hook is named '{HOOK}'")
            _state.failures.append(PluginFailure(ep.name, "validate", hint, traceback.format_exc()))
            continue
        if not pm.get_hookcallers(plugin):
            pm.unregister(name=ep.name)
            _state.failures.append(PluginFailure(ep.name, "validate", _no_hook_error(ep.name, plugin), ""))


def _no_hook_error(name: str, plugin: Any) -> LookupError:
    if callable(getattr(plugin, HOOK, None)):
        cause = f"its {HOOK} has no @hookimpl marker (from envfleet.plugins import hookimpl, then put @hookimpl above it)"
    else:
        cause = f"it defines no {HOOK} function (the module the entry point names must implement the hook)"
    return LookupError(f"plugin {name!r} implements no envfleet hook: {cause}")


def _registry() -> BackendRegistry:
    with _state.lock:
        pm = get_plugin_manager()
        if _state.registry is None:
            _state.failures = [f for f in _state.failures if f.stage != "register"]
            registry = BackendRegistry(_state.failures)
            for impl in pm.hook.envfleet_register_backends.get_hookimpls():
                try:
                    registered = registry.register_from(impl.plugin_name, impl.function)
                except Exception as exc:
                    _state.failures.append(PluginFailure(impl.plugin_name, "register", exc, traceback.format_exc()))
                    continue
                if not registered:
                    empty = LookupError("its envfleet_register_backends hook ran but never called registry.register(BackendSpec(...))")
                    _state.failures.append(PluginFailure(impl.plugin_name, "register", empty, ""))
            _state.registry = registry
        return _state.registry


def list_backends() -> dict[str, BackendSpec]:
    """Registered backends by name. Failed plugins are in :func:`plugin_failures`."""
    registry = _registry()
    return {name: registry.get(name) for name in registry.names()}


def get_backend(name: str) -> BackendSpec:
    """The backend registered as ``name``.

    :raises UnknownBackendError: (a ``KeyError``) listing what is installed and the closest name.
    """
    return _registry().get(name)


def plugin_failures() -> list[PluginFailure]:
    """Plugins that failed to import, have an invalid hook, or registered no backend, with their causes."""
    _registry()
    return list(_state.failures)


def register_plugin(plugin: Any, name: str | None = None) -> str:
    """Register a plugin object (a module or an object with the hook) explicitly."""
    with _state.lock:
        pm = get_plugin_manager()
        registered = pm.register(plugin, name=name)
        pm.check_pending()
        _state.registry = None
        return str(registered)


def unregister_plugin(name: str) -> None:
    """Undo :func:`register_plugin`."""
    with _state.lock:
        pm = get_plugin_manager()
        pm.unregister(name=name)
        _state.registry = None


def reset_plugins() -> None:
    """Forget every loaded plugin; the next call reloads entry points."""
    with _state.lock:
        _state.pm = None
        _state.registry = None
        _state.failures = []
