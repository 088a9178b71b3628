"""MkDocs hook: replace ``<!-- config-reference:NAME -->`` with a table generated from a config dataclass.

The tables are built from the dataclasses themselves (field, type, default) and the
comment on each field's line, so the reference cannot drift from the code.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import inspect
import re
import typing
from typing import Any

SCHEMAS = {
    "core": ("envfleet.config", ["EnvConfig", "InitParamsConfig", "VideoConfig", "RemoteConfig", "RecordConfig", "RolloutConfig", "ModelConfig"]),
    "libero": ("envfleet_libero.plugin", ["LiberoConfig"]),
    "isaac": ("envfleet_isaac.plugin", ["IsaacConfig"]),
    "metaworld": ("envfleet_metaworld.plugin", ["MetaworldConfig"]),
    "maniskill": ("envfleet_maniskill.plugin", ["ManiskillConfig"]),
    "gymnasium": ("envfleet_gymnasium.case", ["GymnasiumConfig"]),
    "toy": ("envfleet_toy.plugin", ["ToyConfig"]),
}
PREFIX = {
    "EnvConfig": "train.",
    "InitParamsConfig": "train.init_params.",
    "VideoConfig": "train.video_cfg.",
    "RemoteConfig": "train.remote.",
    "RecordConfig": "train.record.",
    "RolloutConfig": "rollout.",
    "ModelConfig": "actor.model.",
    "LiberoConfig": "train.libero.",
    "IsaacConfig": "train.isaac.",
    "MetaworldConfig": "train.metaworld.",
    "ManiskillConfig": "train.maniskill.",
    "GymnasiumConfig": "train.gymnasium.",
    "ToyConfig": "train.toy.",
}


def _comments(cls: type) -> dict[str, str]:
    source = inspect.getsource(cls)
    out: dict[str, str] = {}
    pending: list[str] = []
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            pending.append(stripped.lstrip("# "))
            continue
        m = re.match(r"(\w+)\s*:\s*[^=]+(=.*?)?(#\s*(.*))?$", stripped)
        if m and not stripped.startswith(("def ", "class ", '"""')):
            text = m.group(4) or " ".join(pending)
            out[m.group(1)] = text.strip()
        pending = [] if not stripped.startswith("#") else pending
    return out


def _type(tp: Any) -> str:
    if isinstance(tp, type) and issubclass(tp, enum.Enum):  # a behaviour switch: list what it takes
        return " | ".join(repr(member.value) for member in tp)
    args = typing.get_args(tp)
    if args and any(isinstance(a, type) and issubclass(a, enum.Enum) for a in args):  # a switch or null
        return " | ".join("None" if a is type(None) else _type(a) for a in args)
    text = str(tp).replace("typing.", "")
    return getattr(tp, "__name__", text) if not typing.get_args(tp) else text


def _default(field: dataclasses.Field[Any]) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default
        if isinstance(value, enum.Enum):
            return repr(value.value)
        return "required" if str(value) == "???" else repr(value)
    if field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        value = field.default_factory()  # type: ignore[misc]
        return "(section)" if dataclasses.is_dataclass(value) else repr(value)
    return "required"


def table(group: str) -> str:
    module_name, names = SCHEMAS[group]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        return f"!!! warning\n    `{module_name}` could not be imported while building the docs: {exc}\n"
    parts = []
    for name in names:
        cls = getattr(module, name)
        hints = typing.get_type_hints(cls)
        notes = _comments(cls)
        rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
        for f in dataclasses.fields(cls):
            meaning = notes.get(f.name, "").replace("|", "\\|")
            rows.append(f"| `{PREFIX.get(name, '')}{f.name}` | `{_type(hints[f.name])}` | `{_default(f)}` | {meaning} |")
        doc = (inspect.getdoc(cls) or "").splitlines()[0]
        parts.append(f"#### `{name}`\n\n{doc}\n\n" + "\n".join(rows) + "\n")
    return "\n".join(parts)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return re.sub(r"<!-- config-reference:(\w+) -->", lambda m: table(m.group(1)), markdown)


__all__ = ["on_page_markdown", "table"]
