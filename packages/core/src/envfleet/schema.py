"""A structured schema checked against user input, with errors a user can act on.

:func:`merge_into` merges mappings over a dataclass schema (OmegaConf's structured configs) and
turns OmegaConf's exceptions into :class:`~envfleet.errors.ConfigError` naming the dotted key, what
was expected and, for a misspelling, the closest valid key. :mod:`envfleet.config` checks every
section of a config with it, a backend's own section included.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Mapping
from enum import Enum
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from .errors import ConfigError

__all__ = ["check_missing", "merge_into", "reject_unknown_keys"]


def _fields(schema: type) -> dict[str, dataclasses.Field[Any]]:
    return {f.name: f for f in dataclasses.fields(schema)}


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return " or ".join(_type_name(a) for a in args) + " or null"
    if origin is list:
        (arg,) = typing.get_args(tp) or (Any,)
        return f"list of {_type_name(arg)}"
    if origin is dict:
        return "mapping"
    if dataclasses.is_dataclass(tp):
        return "mapping"
    return getattr(tp, "__name__", str(tp))


def reject_unknown_keys(data: Any, schema: type, prefix: str) -> None:
    """Unknown keys anywhere under ``data`` -> ConfigError with the dotted key and a suggestion."""
    if not isinstance(data, (Mapping, DictConfig)):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: expected a mapping, got {type(data).__name__} {data!r}")
    hints = typing.get_type_hints(schema)
    valid = list(_fields(schema))
    for key in data:
        if key not in valid:
            close = difflib.get_close_matches(str(key), valid, n=1, cutoff=0.6)
            hint = f" Did you mean '{prefix}{close[0]}'?" if close else f" Valid keys: {', '.join(valid)}."
            raise ConfigError(f"unknown config key '{prefix}{key}'.{hint}")
        sub = hints[key]
        for candidate in (sub, *typing.get_args(sub)):
            if dataclasses.is_dataclass(candidate):
                value = data[key]
                if value is not None:
                    reject_unknown_keys(value, candidate, f"{prefix}{key}.")  # type: ignore[arg-type]
                break


def merge_into(schema: type, prefix: str, *layers: Any) -> DictConfig:
    """``layers`` merged over the structured ``schema``: an unknown key, a wrong type or a value outside an
    enum is a :class:`~envfleet.errors.ConfigError` naming the dotted key (``prefix`` + key) and what was expected."""
    for layer in layers:
        reject_unknown_keys(layer, schema, prefix)
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), *layers)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or ""
        hints = typing.get_type_hints(schema)
        top = str(key).split(".")[0].split("[")[0]
        if top in hints and "." not in str(key) and isinstance(hints[top], type) and issubclass(hints[top], Enum):
            allowed = [member.value for member in hints[top]]
            raise ConfigError(f"config key '{prefix}{key}' must be one of {allowed}, got {_bad_value(layers, top)!r}") from None
        expected = _type_name(hints[top]) if top in hints and "." not in str(key) else "the schema's type"
        message = str(exc).splitlines()[0]
        raise ConfigError(f"config key '{prefix}{key}' has a wrong value: {message} (expected {expected})") from None
    assert isinstance(merged, DictConfig)
    return merged


def _bad_value(layers: tuple[Any, ...], key: str) -> Any:
    """The value of ``key`` in the last layer that sets it (the one a merge failed on)."""
    for layer in reversed(layers):
        if isinstance(layer, (Mapping, DictConfig)) and key in layer:
            return layer[key]
    return None


def check_missing(cfg: DictConfig, prefix: str) -> None:
    """A required key (``MISSING``) left without a value is a ConfigError naming it."""
    for key in cfg:
        if OmegaConf.is_missing(cfg, key):
            raise ConfigError(f"config key '{prefix}{key!s}' is required and has no value")
