"""The data model of the plugin system: what a backend declares (:class:`BackendSpec`), where
plugins register it (:class:`BackendRegistry`), and how a plugin that failed is reported
(:class:`PluginFailure`). Loading the plugins is :mod:`envfleet.plugins`' job.
"""

from __future__ import annotations

import difflib
import importlib.metadata
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from .env import ArraySpec, Env, ObservationSpec
from .errors import UnknownBackendError

__all__ = ["BackendSpec", "BackendRegistry", "PluginFailure"]


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

    def checked_observation_spec(self, cfg: Any, num_envs: int) -> ObservationSpec:
        """What :attr:`observation_spec` gives for ``num_envs`` envs, each entry checked to be an ArraySpec."""
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

    def __init__(self, failures: Sequence[PluginFailure] = ()) -> None:
        self.failures = failures  # the plugins that failed to load: an unknown name may be one of them
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
