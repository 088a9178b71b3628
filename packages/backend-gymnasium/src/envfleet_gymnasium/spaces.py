"""The env's own spaces, as the gymnasium backend declares them to the faces (``BackendSpec.spaces``).

The gymnasium, SB3 and TorchRL faces present an env's own spaces (a ``Discrete`` action, a plain
``Box`` observation, a ``Dict`` observation with the env's own keys) where what envfleet carries of the
observation *is* the env's observation: every entry, under the name :mod:`envfleet_gymnasium.carry`
gives it, and no image. :func:`native_spaces` answers ``None``, and the faces keep their ``Dict``
layout, for an env whose layout is envfleet's own:

- ``train.gymnasium.render: rgb_array``: ``render()``'s frame is an observation key the env has not;
- an image in the observation (a uint8 ``[H, W, 3]`` Box): the faces' image keys, ``flip_images``,
  videos and datasets are built on the layout;
- ``image_keys`` / ``state_keys`` that rename or leave out entries;
- a large Box whose bounds vary (the probe records bounds of up to ``BOUNDS_LIMIT`` values).

The answer holds the spaces as :func:`envfleet_gymnasium.make.describe` records them, from the spec
probe (no gymnasium import here); each entry of the observation's description names, under ``"key"``,
the manager's observation key it is carried in. With ``train.gymnasium.rescale_actions`` the action
space is gymnasium's ``RescaleAction(env, -1, 1)``'s: ``Box(-1, 1)`` of the env's shape and dtype.

>>> obs = {"type": "Box", "shape": [4], "dtype": "float32", "low": -1.0, "high": 1.0}
>>> keyed(obs, {(): "state"})["key"]
'state'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .carry import Layout, leaves, observation_layout
from .case import Case
from .probe import probe

__all__ = ["native_spaces", "keyed"]


def keyed(desc: Mapping[str, Any], keys: Mapping[tuple[str, ...], str], path: tuple[str, ...] = ()) -> dict[str, Any]:
    """``desc`` with ``"key"`` set on every entry: its manager key, looked up by its path in ``keys``."""
    out = dict(desc)
    kind = desc.get("type")
    if kind == "Dict":
        out["spaces"] = [[name, keyed(sub, keys, (*path, str(name)))] for name, sub in desc["spaces"]]
    elif kind == "Tuple":
        out["spaces"] = [keyed(sub, keys, (*path, str(i))) for i, sub in enumerate(desc["spaces"])]
    else:
        out["key"] = keys[path]
    return out


def _own_layout(layout: Layout, obs: Mapping[str, Any]) -> bool:
    """Whether ``layout`` carries every entry of ``obs`` under its own name, none an image, nothing rendered."""
    if layout.renders or any(e.image for e in layout.entries):
        return False
    found = leaves(obs)
    if any(leaf.desc.get("type") == "Box" and "low" not in leaf.desc for leaf in found):
        return False
    return [(e.key, e.path) for e in layout.entries] == [(leaf.name, leaf.path) for leaf in found]


def _rescaled(action: Mapping[str, Any]) -> dict[str, Any]:
    shape = list(action["shape"])
    text = f"Box(-1.0, 1.0, {tuple(shape)}, {action['dtype']})"
    return {"type": "Box", "shape": shape, "dtype": action["dtype"], "low": -1.0, "high": 1.0, "repr": text}


def native_spaces(cfg: Any) -> dict[str, Any] | None:
    """The env's own spaces under env section ``cfg``: ``{"observation": desc, "action": desc}``, or ``None``
    where the faces keep their layout (see the module doc). Reads the spec probe's answer (cached)."""
    case = Case.from_section(cfg)
    answer = probe(cfg)
    obs = answer["obs"]
    layout = observation_layout(obs, answer.get("render") if case.render else None, case.image_keys, case.state_keys)
    if not _own_layout(layout, obs):
        return None
    action = answer["action"]
    if case.rescale_actions:
        action = _rescaled(action)
    return {"observation": keyed(obs, {e.path: e.key for e in layout.entries}), "action": dict(action)}
