"""The plugin registry: backends register themselves through pluggy entry points.

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

import difflib
import importlib
import importlib.metadata
import os
import threading
import traceback
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

import pluggy

from .env import ArraySpec, Env, EnvContext, ObservationSpec
from .errors import UnknownBackendError

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

#: One name drives the hook markers, the PluginManager and the entry-point group.
NAME = "envfleet"
hookspec = pluggy.HookspecMarker(NAME)
hookimpl = pluggy.HookimplMarker(NAME)

DISABLE_AUTOLOAD_ENV = "ENVFLEET_DISABLE_PLUGIN_AUTOLOAD"
HOOK = "envfleet_register_backends"  # the one hook a plugin implements


class _HookSpecs:
    @hookspec
    def envfleet_register_backends(self, registry: BackendRegistry) -> None:  # type: ignore[empty-body]
        """Register one or more simulator backends.

        :param registry: call ``registry.register(BackendSpec(...))`` once per backend.

        Every implementation is called, each on its own: one that raises is reported
        by its plugin name (see :func:`plugin_failures`) and the others still register.
        Keep this hook cheap: do not import the simulator here.
        """


@dataclass(frozen=True)
class BackendSpec:
    """How envfleet builds and runs a backend.

    :param name: the value of ``train.simulator_type`` that selects it.
    :param env_factory: ``"module:attr"`` (imported lazily, in the shard process) or a
        callable ``(cfg, ctx: EnvContext) -> Env``. ``cfg`` is the env section
        (``train`` or ``val``) with the backend's own section at ``cfg[name]``.
    :param observation_spec: ``(cfg, num_envs) -> ObservationSpec``; called in the
        parent to allocate shared memory, so it must not need the simulator.
    :param config_schema: a dataclass for the ``train.<name>`` section, or ``None``.
    :param defaults: values for the core env keys that this backend prefers
        (applied under the user's config), e.g. ``{"init_params": {"camera_heights": 64}}``.
    :param envs_per_process: envs per shard process: an int, ``None`` for all of a
        stage's envs in one process, or ``(cfg) -> int | None``.
    :param action_dim: the action size the backend expects, when fixed (also the default of
        ``actor.model.action_dim``).
    :param implements: the optional core keys this backend honours, from
        :data:`envfleet.config.OPTIONAL_KEYS` (``auto_reset``, ``ignore_terminations``,
        ``render``, ``flip_images``, ``settle_steps``, ``action_transform``). A config that sets
        any other of them to a value that asks something of the backend is rejected at load.
    :param check_config: config sections (``{"train": {...}, "actor": {...}}``) that make the
        smallest config this backend runs with, for ``envfleet backends --check`` (e.g. a suite
        name the backend requires).
    :param result_packages: the distributions whose versions decide this backend's results
        (its simulator, renderer bindings, benchmark assets), recorded in every result's
        protocol fingerprint next to envfleet's and :attr:`package`'s.
    :param renderer: the GL stack its cameras render through, for ``envfleet doctor``: ``"mujoco"``
        (MuJoCo's offscreen renderer on EGL or OSMesa, chosen by ``MUJOCO_GL``), or ``None`` when it
        needs no OpenGL (it renders without GL, or not at all).
    :param package: the distribution that provides it (shown by ``envfleet backends``).
    :param description: one line for listings.
    """

    name: str
    env_factory: str | Callable[..., Env]
    observation_spec: Callable[[Any, int], ObservationSpec]
    config_schema: type | None = None
    defaults: dict[str, Any] = field(default_factory=dict)
    envs_per_process: int | Callable[[Any], int | None] | None = 1
    action_dim: int | None = None
    implements: AbstractSet[str] = frozenset()
    check_config: dict[str, Any] = field(default_factory=dict)
    result_packages: tuple[str, ...] = ()
    renderer: str | None = None
    package: str = ""
    description: str = ""

    def __post_init__(self) -> None:
        from .config import OPTIONAL_KEYS

        object.__setattr__(self, "implements", frozenset(self.implements))
        unknown = sorted(self.implements - set(OPTIONAL_KEYS))
        if unknown:
            raise ValueError(f"backend {self.name!r}: implements {unknown}, which are not optional keys; choose from {list(OPTIONAL_KEYS)}")

    def shard_size(self, cfg: Any, num_envs: int) -> int:
        """How many of ``num_envs`` envs share one process."""
        value = self.envs_per_process(cfg) if callable(self.envs_per_process) else self.envs_per_process
        if value is None:
            return max(num_envs, 1)
        if int(value) < 1:
            raise ValueError(f"backend {self.name!r}: envs_per_process must be >= 1, got {value}")
        return min(int(value), max(num_envs, 1))

    def obs_spec(self, cfg: Any, num_envs: int) -> ObservationSpec:
        """The observation spec for ``num_envs`` envs, checked to be ArraySpecs."""
        spec = self.observation_spec(cfg, num_envs)
        for key, value in spec.items():
            if not isinstance(value, ArraySpec):
                raise TypeError(f"backend {self.name!r}: observation_spec()[{key!r}] must be an ArraySpec, got {value!r}")
        return dict(spec)

    @property
    def version(self) -> str:
        """The installed version of :attr:`package`, or ``""``."""
        if not self.package:
            return ""
        try:
            return importlib.metadata.version(self.package)
        except importlib.metadata.PackageNotFoundError:
            return ""


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

    def __init__(self) -> None:
        self._specs: dict[str, BackendSpec] = {}
        self._owner: dict[str, str] = {}
        self._current_plugin = "<direct>"

    def register(self, spec: BackendSpec) -> None:
        """Add a backend. Registering the same name from two plugins is an error."""
        if not isinstance(spec, BackendSpec):
            raise TypeError(f"registry.register() takes a BackendSpec, got {type(spec).__name__}")
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
            raise UnknownBackendError(_unknown_backend_message(name, self.names())) from None

    def __contains__(self, name: object) -> bool:
        return name in self._specs


def _unknown_backend_message(name: str, installed: list[str]) -> str:
    lines = [f"unknown backend {name!r} (train.simulator_type)."]
    lines.append(f"Installed backends: {', '.join(installed) if installed else 'none'}.")
    close = difflib.get_close_matches(str(name), installed, n=1, cutoff=0.5)
    if close:
        lines.append(f"Did you mean {close[0]!r}?")
    own = [f for f in _state.failures if f.name == name]
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


_state = _State()


def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide PluginManager, with entry points loaded (unless disabled)."""
    with _state.lock:
        if _state.pm is None:
            pm = pluggy.PluginManager(NAME)
            pm.add_hookspecs(_HookSpecs)
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
            registry = BackendRegistry()
            _state.failures = [f for f in _state.failures if f.stage != "register"]
            for impl in pm.hook.envfleet_register_backends.get_hookimpls():
                registry._current_plugin = impl.plugin_name
                before = dict(registry._specs)
                try:
                    impl.function(registry=registry)
                except Exception as exc:
                    registry._specs = before  # a half-registered plugin is not registered
                    _state.failures.append(PluginFailure(impl.plugin_name, "register", exc, traceback.format_exc()))
                    continue
                if registry._specs == before:
                    empty = LookupError("its envfleet_register_backends hook ran but never called registry.register(BackendSpec(...))")
                    _state.failures.append(PluginFailure(impl.plugin_name, "register", empty, ""))
            registry._current_plugin = "<direct>"
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
