"""The registry of backends, and loading the plugins that fill it through pluggy entry points.

The hook is declared in :mod:`envfleet.plugins.hookspecs` and what a backend declares
(``BackendSpec``) in :mod:`envfleet.plugins.spec`; :mod:`envfleet.plugins` re-exports all
three, so ``from envfleet.plugins import BackendSpec, hookimpl`` works.

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

import dataclasses
import difflib
import importlib.metadata
import os
import threading
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pluggy

from ..errors import UnknownBackendError
from . import hookspecs
from .hookspecs import HOOK, NAME
from .spec import BackendSpec

__all__ = [
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

_STAGES = {
    "import": "failed to import",
    "validate": "has an invalid hook",
    "register": "failed to register",
}


@dataclass(frozen=True)
class PluginFailure:
    """A plugin that could not be loaded, whose hook is invalid, or that registered no backend."""

    name: str
    stage: str  # "import", "validate" or "register"
    error: BaseException
    traceback: str

    @property
    def what(self) -> str:
        """What went wrong, in words: "failed to import", "has an invalid hook", "failed to register"."""
        return _STAGES.get(self.stage, f"failed to {self.stage}")

    def __str__(self) -> str:
        return f"plugin {self.name!r} {self.what}: {type(self.error).__name__}: {self.error}"


class BackendRegistry:
    """The backends registered by plugins, by name."""

    def __init__(self, failures: Sequence[PluginFailure] = (), packages: Mapping[str, str] | None = None) -> None:
        self.failures = failures  # the plugins that failed to load: an unknown name may be one of them
        self.packages = dict(packages or {})  # plugin name -> the distribution its entry point comes from
        self._specs: dict[str, BackendSpec] = {}
        self._owner: dict[str, str] = {}
        self._current_plugin = "<direct>"

    def register(self, spec: BackendSpec) -> None:
        """Add a backend. Registering the same name from two plugins is an error.

        A spec that leaves ``package`` unset gets the distribution of the entry point that
        registered it, so that every message about the backend can name the package to fix.
        """
        if not isinstance(spec, BackendSpec):
            raise TypeError(f"registry.register() takes a BackendSpec, got {type(spec).__name__}")
        if not spec.package and self.packages.get(self._current_plugin):
            spec = dataclasses.replace(spec, package=self.packages[self._current_plugin])
        if spec.name in self._specs:
            raise ValueError(
                f"backend {spec.name!r} is registered twice: by plugin {self._owner[spec.name]!r} and by {self._current_plugin!r}"
            )
        self._specs[spec.name] = spec
        self._owner[spec.name] = self._current_plugin

    def names(self) -> list[str]:
        """Registered backend names, sorted."""
        return sorted(self._specs)

    def get(self, name: str) -> BackendSpec:
        """The spec for ``name``; raises :class:`~envfleet.errors.UnknownBackendError`."""
        try:
            return self._specs[name]
        except KeyError:
            raise UnknownBackendError(_unknown_backend_message(name, self.names(), self.failures)) from None

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def register_from(self, plugin_name: str, hook: Callable[..., Any]) -> bool:
        """Run one plugin's hook against this registry; return whether it registered any backend.

        A hook that raises registers nothing (what it registered before raising is taken
        back), and its exception propagates.
        """
        self._current_plugin = plugin_name
        before = dict(self._specs)
        try:
            hook(registry=self)
        except Exception:
            self._specs = before
            raise
        finally:
            self._current_plugin = "<direct>"
        return self._specs != before


def _unknown_backend_message(name: str, installed: list[str], failures: Sequence[PluginFailure]) -> str:
    lines = [f"unknown backend {name!r} (train.simulator_type)."]
    lines.append(f"Installed backends: {', '.join(installed) if installed else 'none'}.")
    close = difflib.get_close_matches(str(name), installed, n=1, cutoff=0.5)
    if close:
        lines.append(f"Did you mean {close[0]!r}?")
    own = [f for f in failures if f.name == name]
    for failure in own:
        lines.append(f"A plugin named {name!r} is installed but {failure.what}: {type(failure.error).__name__}: {failure.error}.")
    if not own:
        lines.append(
            f"To add it, install its package, e.g. `pip install envfleet-{name}` (first-party: envfleet-libero, envfleet-isaac, envfleet-metaworld)."
        )
    return " ".join(lines)


class _State:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.pm: pluggy.PluginManager | None = None
        self.registry: BackendRegistry | None = None
        self.failures: list[PluginFailure] = []
        self.packages: dict[str, str] = {}  # entry-point plugin name -> its distribution


_state = _State()


def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide PluginManager, with entry points loaded (unless disabled)."""
    with _state.lock:
        if _state.pm is None:
            pm = pluggy.PluginManager(NAME)
            pm.add_hookspecs(hookspecs)
            _state.failures = []
            _state.packages = {}
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
        dist = getattr(ep, "dist", None)
        if dist is not None and getattr(dist, "name", None):
            _state.packages[ep.name] = str(dist.name)
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
            registry = BackendRegistry(_state.failures, _state.packages)
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
