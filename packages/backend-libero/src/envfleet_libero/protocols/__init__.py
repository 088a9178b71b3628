"""The LIBERO backend's named evaluation protocols: one yaml file each, in this folder.

Each is read from the evaluation code it names (repository, commit, files) and sets the
keys that code fixes; the format is :mod:`envfleet.named_protocols`'. ``by_suite`` lists
LIBERO's five suites; every LIBERO-PRO suite gets the entry of the suite it perturbs.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

from envfleet.named_protocols import SUCCESS_METRICS

from ..suites import SUITES, base_suite

# Imports inside functions: omegaconf loads only when a named protocol is applied to a config.

__all__ = ["load_protocols"]

_REQUIRED = ("name", "version", "title", "sources", "success_metric", "sets")


def _check(data: Any, file: str) -> dict[str, Any]:
    """A protocol file's content, checked for the fields every protocol has (a plugin author's error otherwise)."""
    if not isinstance(data, dict):
        raise ValueError(f"{file}: a protocol is a mapping, got {type(data).__name__}")
    missing = [key for key in _REQUIRED if key not in data]
    if missing:
        raise ValueError(f"{file}: missing {', '.join(missing)} (a protocol has {', '.join(_REQUIRED)})")
    if not isinstance(data["version"], int) or data["version"] < 1:
        raise ValueError(f"{file}: version must be an integer >= 1, got {data['version']!r}")
    if data["success_metric"] not in SUCCESS_METRICS:
        raise ValueError(f"{file}: success_metric must be one of {SUCCESS_METRICS}, got {data['success_metric']!r}")
    for source in data["sources"]:
        if not (isinstance(source, dict) and source.get("repo") and len(str(source.get("commit", ""))) == 40 and source.get("files")):
            raise ValueError(f"{file}: each source needs repo, a 40-digit commit and files, got {source!r}")
    return data


@functools.lru_cache(maxsize=1)
def load_protocols() -> dict[str, dict[str, Any]]:
    """Every protocol shipped here, by name, with ``by_suite`` covering all served suites."""
    from omegaconf import OmegaConf

    out: dict[str, dict[str, Any]] = {}
    for entry in sorted(resources.files(__name__).iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".yaml"):
            continue
        file = f"envfleet_libero/protocols/{entry.name}"
        data = _check(OmegaConf.to_container(OmegaConf.create(entry.read_text())), file)
        if data["name"] != entry.name[: -len(".yaml")]:
            raise ValueError(f"{file}: name {data['name']!r} must be the file's name")
        by_suite = data.get("by_suite") or {}
        if by_suite:
            data["by_suite"] = {s: dict(by_suite[base_suite(s)]) for s in SUITES if base_suite(s) in by_suite} | by_suite
        data["file"] = file
        out[data["name"]] = data
    return out
