"""The plugin API's version, and what core does for a plugin written for the version before.

A backend says which contract it was written for in ``BackendSpec.api_version``
(``"MAJOR.MINOR"``); one that says nothing was written before the field existed and is
run as plugin API ``1.0``. The policy (docs/versioning.md):

- a minor version adds: an optional ``BackendSpec`` field whose default keeps the old
  behaviour, an optional ``Env`` method, a conformance check of something the contract
  already asked for. A plugin written for ``2.0`` runs unchanged on every ``2.x``;
- a major version changes what a plugin must declare or do. Core keeps running plugins of
  the major version before it, with their old behaviour, a :class:`PluginDeprecationWarning`
  when a config of theirs is loaded, and a line in ``envfleet backends`` and ``envfleet
  doctor`` naming the backend, its package, what changed and the one-line fix. Two majors
  back is refused, naming the plugin and the version to port it to.

What changed from 1 to 2 (:data:`CHANGES`): a backend declares the optional core keys its
env honours (``BackendSpec.implements``), and a config asking another backend for one is an
error. A plugin of API 1 declares none; its configs' optional keys reach its env unchecked,
as they did under API 1.

>>> ApiVersion.parse("2.0") > ApiVersion.parse(1)
True
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, PluginContractError, PluginDeprecationWarning
from ..options import OPTIONAL_KEYS

# Annotation only, and the one import back: spec.py's BackendSpec is the declaration, this module the
# rules its api_version invokes; one contract's two sides, each in the module a plugin author reads for it.
if TYPE_CHECKING:
    from .spec import BackendSpec

__all__ = [
    "PLUGIN_API_VERSION",
    "UNDECLARED_API_VERSION",
    "CHANGES",
    "ApiVersion",
    "Deprecation",
    "api_version_of",
    "check_api_version",
    "deprecations",
    "runs_unchecked",
    "check_optional_keys",
]

#: The plugin API this envfleet implements. A plugin declares the one it targets in ``BackendSpec.api_version``.
PLUGIN_API_VERSION = "2.0"
#: What a plugin that declares no ``api_version`` is taken to target: the API before the field existed.
UNDECLARED_API_VERSION = "1.0"

#: Per major version, what changed for plugins written for the one before (the CHANGELOG says the same).
CHANGES: dict[int, str] = {
    2: "a backend declares the optional core keys its env honours in BackendSpec.implements, "
    "and a config asking a backend for an undeclared one is an error",
}


@dataclass(frozen=True, order=True)
class ApiVersion:
    """A plugin API version, ``MAJOR.MINOR``."""

    major: int
    minor: int = 0

    @classmethod
    def parse(cls, value: object) -> ApiVersion:
        """``"2.0"``, ``"2"`` or ``2`` -> ``ApiVersion(2, 0)``.

        :raises ValueError: ``value`` is not of that form.
        """
        if isinstance(value, bool):
            raise ValueError(f"a plugin API version is 'MAJOR.MINOR' (e.g. {PLUGIN_API_VERSION!r}), got {value!r}")
        if isinstance(value, int):
            return cls(value, 0)
        parts = str(value).strip().split(".")
        if not 1 <= len(parts) <= 2 or not all(p.isdigit() for p in parts):
            raise ValueError(f"a plugin API version is 'MAJOR.MINOR' (e.g. {PLUGIN_API_VERSION!r}), got {value!r}")
        return cls(int(parts[0]), int(parts[1]) if len(parts) == 2 else 0)

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


CURRENT = ApiVersion.parse(PLUGIN_API_VERSION)


def _who(spec: BackendSpec) -> str:
    return f"backend {spec.name!r} (package {spec.package or 'unknown: BackendSpec.package is unset'})"


def api_version_of(spec: BackendSpec) -> ApiVersion:
    """The plugin API ``spec`` was written for: its ``api_version``, or ``1.0`` when it declares none."""
    return ApiVersion.parse(spec.api_version if spec.api_version is not None else UNDECLARED_API_VERSION)


def check_api_version(spec: BackendSpec) -> None:
    """Refuse a spec whose API this core cannot run: malformed, newer major, or two majors back.

    :raises PluginContractError: naming the backend, its package and the version to declare.
    """
    try:
        version = api_version_of(spec)
    except ValueError as exc:
        raise PluginContractError(f"{_who(spec)}: BackendSpec.api_version: {exc}") from None
    if version.major > CURRENT.major:
        raise PluginContractError(
            f"{_who(spec)} is written for envfleet plugin API {version}, newer than this envfleet's {CURRENT}: "
            "upgrade envfleet (`pip install -U envfleet`) to run it"
        )
    if version.major < CURRENT.major - 1:
        raise PluginContractError(
            f"{_who(spec)} is written for envfleet plugin API {version}, which this envfleet ({CURRENT}) no longer runs: "
            f"its author ports it to {CURRENT} (see the CHANGELOG's 'For plugin authors') and declares api_version={PLUGIN_API_VERSION!r}"
        )


def runs_unchecked(spec: BackendSpec) -> bool:
    """Whether the optional keys of ``spec``'s configs reach its env unchecked, as under plugin API 1.

    True for a plugin of API 1 that declares no ``implements`` (the field did not exist then).
    """
    return api_version_of(spec).major < 2 and not spec.implements


@dataclass(frozen=True)
class Deprecation:
    """What a backend written for an older plugin API should change: the backend, what changed, the fix."""

    backend: str
    package: str
    api_version: str  # the version the backend is run as
    changed: str
    fix: str

    def what(self) -> str:
        """The backend, its package and what changed, without the fix."""
        return f"backend {self.backend} ({self.package or 'package unknown'}) uses plugin API {self.api_version}: {self.changed}"

    def line(self) -> str:
        """One line for ``envfleet backends``: :meth:`what`, then the fix."""
        return f"{self.what()}; fix: {self.fix}"


def deprecations(spec: BackendSpec) -> list[Deprecation]:
    """What ``spec`` relies on that the current plugin API changed (empty for a current plugin)."""
    version = api_version_of(spec)
    if version.major >= CURRENT.major:
        return []
    declared = "it declares none" if spec.api_version is None else f"it declares {spec.api_version!r}"
    if runs_unchecked(spec):
        changed = (
            f"since plugin API 2.0 {CHANGES[2]}; it declares no implements, so optional keys "
            f"({', '.join(OPTIONAL_KEYS)}) reach its env unchecked, as before"
        )
        fix = f'BackendSpec(..., api_version="{PLUGIN_API_VERSION}", implements={{...the keys its env honours}})'
    else:
        changed = f"plugin API {CURRENT} is current and {declared}; API {version.major} support ends with API {CURRENT.major + 1}.0"
        fix = f'BackendSpec(..., api_version="{PLUGIN_API_VERSION}")'
    return [Deprecation(spec.name, spec.package, str(version), changed, fix)]


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


def check_optional_keys(section: Mapping[str, Any], prefix: str, spec: BackendSpec) -> None:
    """The optional keys ``section`` sets (to a value that asks something of a backend) against ``spec``.

    A backend that declares the key honours it. A plugin of API 1 without ``implements`` gets
    every key unchecked and a :class:`PluginDeprecationWarning` naming the keys this config
    uses. Otherwise an undeclared key is a :class:`ConfigError` saying what the user can set
    and what the plugin's author can declare.
    """
    used = {key: _plain(section[key]) for key, neutral in OPTIONAL_KEYS.items() if section[key] != neutral}
    if runs_unchecked(spec):
        keys = ", ".join(f'"{k}"' for k in used) or "...the keys its env honours"
        # The keys without the section's name: train and val give one warning, not two.
        uses = f"this config sets {', '.join(used)}, passed to its env unchecked" if used else "this config sets none of them"
        warnings.warn(
            f"{_who(spec)} is written for envfleet plugin API {api_version_of(spec)} and declares no BackendSpec.implements: "
            f"since plugin API 2.0 {CHANGES[2]}. It runs as before ({uses}). "
            f'Its author declares BackendSpec(..., api_version="{PLUGIN_API_VERSION}", implements={{{keys}}}) '
            "with every optional key its env honours (docs: Plugin API versions)",
            PluginDeprecationWarning,
            stacklevel=5,  # the caller of load_config
        )
        return
    offers = ", ".join(sorted(spec.implements)) or "none of them"
    for key, value in used.items():
        if key in spec.implements:
            continue
        neutral = _plain(OPTIONAL_KEYS[key])
        raise ConfigError(
            f"config key '{prefix}{key}' is {value!r}, but {_who(spec)} does not implement it "
            f"(of the optional keys {', '.join(OPTIONAL_KEYS)} it implements {offers}). "
            f"In the config: remove it or set it to {neutral!r}. If the backend's env does honour it, "
            f"its author adds {key!r} to BackendSpec.implements"
        )
