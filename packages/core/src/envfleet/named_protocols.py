"""Named, versioned evaluation protocols: ``train.protocol: <name>`` sets the keys a published evaluation fixes.

A backend ships its protocols (``BackendSpec.protocols``: name -> protocol). A protocol is
a mapping with:

- ``name``, ``version`` (an int, raised whenever what it sets changes), ``title``;
- ``sources``: the evaluation code it was read from, each ``{repo, commit, files}``;
- ``success_metric``: ``success_once`` (success at any step) or ``success_at_end``;
- ``sets``: env-section keys and values (``settle_steps: 10``, ``init_params: {...}``; the
  backend's own keys under its name, e.g. ``libero: {instruction_source: ...}``);
- ``by_suite`` (optional): more keys per ``task_suite_name`` (e.g. each suite's horizon);
  a suite it does not list is an error;
- ``notes`` (optional): where the protocol cannot be reproduced exactly, in words.

Selecting one puts its keys between the backend's defaults and the user's config. A key
the user also sets to another value is a :class:`~envfleet.errors.ConfigError` unless it is
listed in ``train.protocol_overrides`` (an override on purpose, recorded in the fingerprint with
the protocol's name and version); the same value as the protocol's is no conflict.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from .errors import ConfigError

__all__ = ["SUCCESS_METRICS", "available", "get_protocol", "leaves", "protocol_layers", "protocol_record"]

SUCCESS_METRICS = ("success_once", "success_at_end")


def available(spec: Any) -> dict[str, Mapping[str, Any]]:
    """The protocols backend ``spec`` ships, by name (empty when it ships none)."""
    source = getattr(spec, "protocols", None)
    return dict(source()) if source is not None else {}


def get_protocol(spec: Any, name: str) -> Mapping[str, Any]:
    """Protocol ``name`` of backend ``spec``; a ConfigError listing the backend's protocols otherwise."""
    found = available(spec)
    if name not in found:
        offers = f"its protocols: {', '.join(sorted(found))}" if found else "it ships none"
        raise ConfigError(
            f"config key 'train.protocol' is {name!r}, which is not a protocol of backend {spec.name!r} ({offers}; see `envfleet protocols`)"
        )
    return found[name]


def leaves(value: Any, prefix: str = "") -> dict[str, Any]:
    """A nested mapping as dotted leaf keys (lists are leaves)."""
    if not isinstance(value, Mapping):
        return {prefix.rstrip("."): value}
    out: dict[str, Any] = {}
    for key, sub in value.items():
        out.update(leaves(sub, f"{prefix}{key}.") if isinstance(sub, Mapping) and sub else {f"{prefix}{key}": sub})
    return out


def _same(a: Any, b: Any) -> bool:
    """Whether two config values are equal (OmegaConf lists against plain ones, 256 against 256.0; True is not 1)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b) and all(map(_same, a, b))
    return bool(a == b)


def _overlaps(a: str, b: str) -> bool:
    return a == b or a.startswith(f"{b}.") or b.startswith(f"{a}.")


def protocol_layers(prefix: str, user: Mapping[str, Any], backend_section: Any, spec: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The keys ``user``'s protocol sets: ``(core keys, backend section keys)``; both empty without one.

    :raises ConfigError: an unknown protocol, a suite it does not cover, a key the user sets
        too without listing it in ``protocol_overrides``, or an override of a key it does not set.
    """
    name = user.get("protocol")
    overrides = [str(k) for k in (user.get("protocol_overrides") or [])]
    if name is None:
        if overrides:
            raise ConfigError(
                f"config key '{prefix}protocol_overrides' is set, but '{prefix}protocol' is not: name a protocol or remove it"
            )
        return {}, {}
    proto = get_protocol(spec, str(name))
    sets = copy.deepcopy(dict(proto.get("sets") or {}))
    by_suite = proto.get("by_suite") or {}
    if by_suite:
        suite = user.get("task_suite_name")
        if suite not in by_suite:
            raise ConfigError(
                f"config key '{prefix}task_suite_name' is {suite!r}, which protocol {name!r} does not cover (it covers {', '.join(by_suite)})"
            )
        for key, value in by_suite[suite].items():
            sets[key] = copy.deepcopy(value)
    backend = dict(sets.pop(spec.name, None) or {})
    fixed = {**leaves(sets), **{f"{spec.name}.{k}": v for k, v in leaves(backend).items()}}
    own = {k: v for k, v in user.items() if k not in ("protocol", "protocol_overrides")}
    given = {**leaves(own), **{f"{spec.name}.{k}": v for k, v in leaves(backend_section or {}).items()}}
    for key in fixed:
        # A user key equal to the protocol's value sets nothing new (a loaded config sets every key).
        clash = [g for g in given if _overlaps(g, key) and not (g == key and _same(given[g], fixed[key]))]
        if clash and not any(_overlaps(o, key) for o in overrides):
            raise ConfigError(
                f"config key '{prefix}{clash[0]}' is {given[clash[0]]!r}, but protocol {name!r} (version {proto.get('version')}) "
                f"sets '{prefix}{key}' to {fixed[key]!r}: remove it, or list '{key}' in '{prefix}protocol_overrides' to override on purpose"
            )
    for key in overrides:
        if not any(_overlaps(key, k) for k in fixed):
            raise ConfigError(
                f"config key '{prefix}protocol_overrides' lists {key!r}, which protocol {name!r} does not set (it sets {', '.join(fixed)})"
            )
    return sets, backend


def protocol_record(section: Any, spec: Any) -> dict[str, Any] | None:
    """What the fingerprint keeps of the section's protocol: name, version, success metric, overrides."""
    name = section.get("protocol") if hasattr(section, "get") else None
    if name is None:
        return None
    proto = get_protocol(spec, str(name))
    return {
        "name": str(name),
        "version": int(proto.get("version", 0)),
        "success_metric": str(proto.get("success_metric", "success_once")),
        "overrides": sorted(str(k) for k in (section.get("protocol_overrides") or [])),
    }
