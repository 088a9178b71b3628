"""The options of the backend contract: the switches a config sets and a backend declares.

A leaf module: it imports nothing of envfleet, so the config schema (:mod:`envfleet.config`)
and the plugin data model (:mod:`envfleet.plugins.spec`) can both depend on it without
depending on each other.

>>> RenderMode("all") is RenderMode.all
True
>>> Mode.check("val")
<Mode.val: 'val'>
"""

from __future__ import annotations

from enum import Enum
from typing import Any

__all__ = ["Mode", "RenderMode", "ActionTransform", "OPTIONAL_KEYS"]


class _Switch(str, Enum):
    """A behaviour switch: a str, so that ``cfg.render == "all"`` and ``str(cfg.render)`` give the plain value.

    Members are named by their value, in lower case: OmegaConf converts a yaml string to
    an enum member by its name, so ``render: last`` validates as it is written.
    """

    def __str__(self) -> str:
        return str(self.value)


class Mode(_Switch):
    """Which env section a call runs against: ``train`` or ``val`` (verl's ``mode`` argument)."""

    train = "train"  #: the ``train`` section
    val = "val"  #: the ``val`` section (a copy of ``train`` unless the config gives one)

    @classmethod
    def check(cls, value: object) -> Mode:
        """``value`` as a Mode; anything else is a ValueError naming what is accepted."""
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"mode must be 'train' or 'val', got {value!r}") from None


class RenderMode(_Switch):
    """When a backend renders its cameras within a chunk (``train.render``)."""

    last = "last"  #: only the last sub-step, where the observation is handed out
    all = "all"  #: every sub-step


class ActionTransform(_Switch):
    """What a backend does to the actions before its simulator sees them (``train.action_transform``)."""

    none = "none"  #: nothing
    openvla = "openvla"  #: OpenVLA's gripper convention: [0, 1] -> [-1, 1], sign, flipped


#: Core keys that only the backends declaring them (``BackendSpec.implements``) honour, each
#: with the value that asks nothing of a backend. Any other value, for a backend that does not
#: declare the key, is a ConfigError at load time: never a key silently ignored. (A plugin of
#: plugin API 1, which declares no ``implements``, gets them unchecked and a warning: envfleet.plugins.api.)
OPTIONAL_KEYS: dict[str, Any] = {
    "auto_reset": False,
    "ignore_terminations": False,
    "render": RenderMode.last,
    "flip_images": False,
    "settle_steps": 0,
    "action_transform": ActionTransform.none,
}
