"""What envfleet carries of a gymnasium env's spaces: observation keys, their arrays, and the actions.

Light: numpy and envfleet only. It works on a *description* of the spaces (plain JSON, made by
:func:`envfleet_gymnasium.make.describe` where gymnasium is), so that a worker without the env's
packages (they live in the venv of ``train.simulator_python``) lays out the shared memory from
what the spec probe (:mod:`envfleet_gymnasium.probe`) found.

Observation entries. A ``Dict`` observation's entries are named by their path, joined by ``.``
(``pixels.top`` for ALOHA's ``{"pixels": {"top": ...}}``); a ``Tuple``'s items by their index
(``0``, ``1``; ``pos.0`` inside a Dict). An observation that is one space is named ``state``, or
``full_image`` when it is an image. An *image* is a ``uint8`` ``Box`` of shape ``[H, W, 3]``.
``Box``, ``Discrete``, ``MultiDiscrete`` and ``MultiBinary`` are carried as arrays of their own
dtype and shape (``Discrete``: one int64 per env); ``Text``, ``Graph``, ``Sequence``, ``OneOf``
and a ``Tuple`` holding a ``Tuple`` or a ``Dict`` have no fixed shape and are refused, naming
the entry, unless ``image_keys`` / ``state_keys`` leave them out.

>>> box = {"type": "Box", "shape": [3], "dtype": "float32"}
>>> layout = observation_layout(box, None, None, None)
>>> [(e.key, e.source, e.spec.shape) for e in layout.entries]
[('state', 'obs', (3,))]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from envfleet.env import ArraySpec, ObservationSpec
from envfleet.errors import ConfigError, InvalidInputError
from envfleet.spaces import space_text

__all__ = [
    "RENDER_KEY",
    "CARRIED",
    "Leaf",
    "Entry",
    "Layout",
    "ActionLayout",
    "leaves",
    "observation_layout",
    "action_layout",
    "space_text",
    "get_path",
]

#: The observation key of the frame ``render()`` returns (``train.gymnasium.render: rgb_array``): verl's name
#: for the main camera, which envfleet's video, recording and LeRobot face pick first.
RENDER_KEY = "full_image"
#: The spaces carried as arrays.
CARRIED = ("Box", "Discrete", "MultiDiscrete", "MultiBinary")


@dataclass(frozen=True)
class Leaf:
    """One entry of an observation: its path, the name envfleet gives it, its space's description,
    and why envfleet cannot carry it (``""``: it can)."""

    path: tuple[str, ...]
    name: str
    desc: Mapping[str, Any]
    refused: str = ""

    @property
    def image(self) -> bool:
        """A ``uint8`` ``Box`` of shape ``[H, W, 3]``."""
        d = self.desc
        return d.get("type") == "Box" and d.get("dtype") == "uint8" and len(d["shape"]) == 3 and int(d["shape"][-1]) == 3

    def spec(self) -> ArraySpec:
        """The array one env's value of this entry is.

        :raises ConfigError: a description without what its space needs (a space class envfleet does not know
            under a known name), naming the entry.
        """
        d = self.desc
        kind = d.get("type")
        try:
            if kind == "Discrete":
                return ArraySpec((), str(d.get("dtype", "int64")))
            if kind == "MultiDiscrete":  # its shape is its nvec's
                return ArraySpec(tuple(np.shape(d["nvec"])), str(d["dtype"]))
            return ArraySpec(tuple(int(s) for s in d["shape"]), str(d["dtype"]))
        except KeyError as exc:
            raise ConfigError(
                f"observation entry {self.name!r} is {space_text(d)}, whose description has no {exc}: envfleet carries "
                f"{', '.join(CARRIED)} (in Dict and flat Tuple); leave it out with train.gymnasium.state_keys"
            ) from None


def _name(path: tuple[str, ...], desc: Mapping[str, Any]) -> str:
    if path:
        return ".".join(path)
    return RENDER_KEY if Leaf((), "", desc).image else "state"


def leaves(desc: Mapping[str, Any], path: tuple[str, ...] = ()) -> list[Leaf]:
    """Every entry of an observation space's description, in the space's order."""
    kind = desc.get("type")
    if kind == "Dict":
        out: list[Leaf] = []
        for name, sub in desc["spaces"]:
            out += leaves(sub, (*path, str(name)))
        return out
    if kind == "Tuple":
        out = []
        for i, sub in enumerate(desc["spaces"]):
            sub_path = (*path, str(i))
            if sub.get("type") in ("Tuple", "Dict"):
                why = f"a Tuple holding a {sub.get('type')} (a nested Tuple): envfleet carries a Tuple of Box, Discrete, MultiDiscrete or MultiBinary"
                out.append(Leaf(sub_path, ".".join(sub_path), sub, why))
            else:
                out += leaves(sub, sub_path)
        return out
    if kind in CARRIED:
        return [Leaf(path, _name(path, desc), desc)]
    why = (
        f"a {kind} space, which has no fixed shape: envfleet carries Box, Discrete, MultiDiscrete and MultiBinary (in Dict and flat Tuple)"
    )
    return [Leaf(path, _name(path, desc), desc, why)]


@dataclass(frozen=True)
class Entry:
    """One observation key of envfleet's spec: where its value comes from (``"obs"``: the entry at
    ``path`` of the env's observation; ``"render"``: ``env.render()``), its array, whether it is an image."""

    key: str
    source: str
    path: tuple[str, ...]
    spec: ArraySpec
    image: bool


@dataclass(frozen=True)
class Layout:
    """Every observation key envfleet carries for one gymnasium env, in order."""

    entries: tuple[Entry, ...]

    def spec(self) -> ObservationSpec:
        """The observation spec (shared memory is allocated from it)."""
        return {e.key: e.spec for e in self.entries}

    @property
    def renders(self) -> bool:
        """Whether a key comes from ``render()``."""
        return any(e.source == "render" for e in self.entries)

    def images_in_obs(self) -> list[Entry]:
        """The image keys that come in the observation (rendered by the env at every step)."""
        return [e for e in self.entries if e.image and e.source == "obs"]


def _pairs(value: Any, what: str) -> list[tuple[str, str]] | None:
    """``image_keys`` / ``state_keys`` as ``(envfleet key, entry name)`` pairs; ``None``: not given."""
    if value is None:
        return None
    if isinstance(value, str):
        return [(value, value)]
    if isinstance(value, Mapping):
        pairs = [(str(k), str(v)) for k, v in value.items()]
    elif isinstance(value, Sequence):
        pairs = [(str(v), str(v)) for v in value]
    else:
        raise ConfigError(
            f"config key 'train.gymnasium.{what}' must be a list of observation entries or a mapping key -> entry, got {value!r}"
        )
    return pairs


def observation_layout(obs_desc: Mapping[str, Any], render_desc: Mapping[str, Any] | None, image_keys: Any, state_keys: Any) -> Layout:
    """What envfleet carries of an observation space (and of ``render()``'s frame, when the env renders).

    :param obs_desc: the observation space's description.
    :param render_desc: the description of the frame ``render()`` returned (a ``Box``), or ``None``.
    :param image_keys: ``train.gymnasium.image_keys``: ``None`` (every image entry), a list of entry
        names, or a mapping ``{key: entry}`` that renames them.
    :param state_keys: ``train.gymnasium.state_keys``, alike: ``None`` is every entry that is not an image key.
    :raises ConfigError: an entry named that the observation lacks, an image key that is not an
        image, an entry envfleet cannot carry, two keys of one name, or nothing to carry.
    """
    found = leaves(obs_desc)
    by_name = {leaf.name: leaf for leaf in found}
    names = ", ".join(by_name) or "none"
    images = _pairs(image_keys, "image_keys")
    states = _pairs(state_keys, "state_keys")

    def lookup(name: str, what: str) -> Leaf:
        if name not in by_name:
            raise ConfigError(
                f"config key 'train.gymnasium.{what}' names {name!r}, which is not an entry of the observation "
                f"(its entries: {names}; a Dict's entries are named by their path, joined by '.')"
            )
        return by_name[name]

    chosen_states = {name for _, name in states or []}
    if images is None:
        images = [(leaf.name, leaf.name) for leaf in found if leaf.image and not leaf.refused and leaf.name not in chosen_states]
    entries: list[tuple[str, Leaf, bool]] = []
    for key, name in images:
        leaf = lookup(name, "image_keys")
        d = leaf.desc
        if leaf.refused or d.get("type") != "Box" or d.get("dtype") != "uint8" or len(d["shape"]) != 3:
            raise ConfigError(
                f"config key 'train.gymnasium.image_keys' names {name!r}, which is {space_text(d)}: an image is a uint8 Box of shape [H, W, C]"
            )
        entries.append((key, leaf, True))
    used = {leaf.name for _, leaf, _ in entries}
    if states is None:
        states = [(leaf.name, leaf.name) for leaf in found if leaf.name not in used]
    for key, name in states:
        entries.append((key, lookup(name, "state_keys"), False))
    out: list[Entry] = []
    for key, leaf, image in entries:
        if leaf.refused:
            raise ConfigError(
                f"observation entry {leaf.name!r} is {space_text(leaf.desc)}, {leaf.refused}; leave it out by listing the entries to "
                "carry in train.gymnasium.state_keys (and image_keys)"
            )
        out.append(Entry(key, "obs", leaf.path, leaf.spec(), image))
    if render_desc is not None:
        out.append(Entry(RENDER_KEY, "render", (), ArraySpec(tuple(int(s) for s in render_desc["shape"]), "uint8"), True))
    keys = [e.key for e in out]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        why = f" ({RENDER_KEY!r} is the key of render()'s frame)" if RENDER_KEY in twice and render_desc is not None else ""
        raise ConfigError(
            f"two observation keys are named {twice[0]!r}{why}: rename one with a mapping in train.gymnasium.image_keys / state_keys"
        )
    if not out:
        raise ConfigError("train.gymnasium.image_keys and state_keys leave no observation entry to carry, and the env does not render")
    return Layout(tuple(out))


def get_path(obs: Any, path: tuple[str, ...]) -> Any:
    """The entry at ``path`` of an observation (a Dict's key, a Tuple's index)."""
    for part in path:
        obs = obs[int(part)] if isinstance(obs, tuple) else obs[part]
    return obs


@dataclass(frozen=True)
class ActionLayout:
    """How envfleet's float32 action rows map onto the env's action space.

    ``Box``: the row, reshaped to the space's shape and cast to its dtype (with ``rescale``, first
    mapped from [-1, 1] onto the space's bounds, as gymnasium's ``RescaleAction`` does); its values
    are not clipped, as gymnasium does not clip. ``Discrete``, ``MultiDiscrete``, ``MultiBinary``:
    whole numbers within the space, checked before any env steps.
    """

    kind: str
    dim: int
    shape: tuple[int, ...]
    dtype: str
    low: np.ndarray | None = None
    high: np.ndarray | None = None
    rescale: bool = False

    def convert(self, actions: np.ndarray, offset: int = 0) -> np.ndarray:
        """``actions`` ``[n, chunk, dim]`` float32 as the env's actions ``[n, chunk, *shape]``.

        :param offset: the stage index of row 0 (a shard's first env), for the message.
        :raises InvalidInputError: a value a discrete space cannot take, naming the env and sub-step.
        """
        n, chunk = actions.shape[:2]
        if self.kind == "Box":
            values = actions
            if self.rescale:
                assert self.low is not None and self.high is not None
                low, high = self.low.reshape(-1), self.high.reshape(-1)
                values = low + (actions.astype(np.float64) + 1.0) * 0.5 * (high - low)
            return np.asarray(values, dtype=self.dtype).reshape(n, chunk, *self.shape)
        assert self.low is not None and self.high is not None
        whole = actions == np.round(actions)
        inside = (actions >= self.low.reshape(-1)) & (actions <= self.high.reshape(-1))
        bad = ~(whole & inside)
        if bad.any():
            env, k, d = (int(x) for x in np.argwhere(bad)[0])
            value = float(actions[env, k, d])
            lo, hi = int(self.low.reshape(-1)[d]), int(self.high.reshape(-1)[d])
            raise InvalidInputError(
                f"actions[{env + offset}, {k}, {d}] is {value}, but the env's action space is {self.kind}: "
                f"action component {d} takes a whole number in {lo}..{hi}"
            )
        values = actions.astype(np.int64)
        if self.kind == "Discrete":
            return values.reshape(n, chunk).astype(self.dtype)
        return values.reshape(n, chunk, *self.shape).astype(self.dtype)


def action_layout(desc: Mapping[str, Any], rescale: bool = False) -> ActionLayout:
    """The :class:`ActionLayout` of an action space's description.

    :raises ConfigError: a space envfleet does not send (not a Box, Discrete, MultiDiscrete or
        MultiBinary), or ``rescale`` over a Box with infinite bounds.
    """
    kind = desc.get("type")
    if rescale and kind != "Box":
        raise ConfigError(
            f"config key 'train.gymnasium.rescale_actions' is true, but the action space {space_text(desc)} is not a Box: "
            "only a Box's bounds can be rescaled onto"
        )
    if kind == "Box":
        shape = tuple(int(s) for s in desc["shape"])
        if "low" not in desc:  # a large Box whose bounds vary (make.describe records them up to BOUNDS_LIMIT values)
            if rescale:
                raise ConfigError(
                    f"config key 'train.gymnasium.rescale_actions' is true, but the action space {space_text(desc)} has too many "
                    "different bounds to record: rescale the actions in the policy instead"
                )
            dim = int(np.prod(shape, dtype=np.int64)) if shape else 1
            return ActionLayout("Box", dim, shape, str(desc["dtype"]))
        # One number stands for a bound that is the same throughout (make.describe).
        low = np.broadcast_to(np.asarray(desc["low"], dtype=np.float64), shape)
        high = np.broadcast_to(np.asarray(desc["high"], dtype=np.float64), shape)
        if rescale and not (np.isfinite(low).all() and np.isfinite(high).all()):
            raise ConfigError(
                f"config key 'train.gymnasium.rescale_actions' is true, but the action space {space_text(desc)} has infinite bounds: "
                "nothing to rescale onto"
            )
        dim = int(np.prod(shape, dtype=np.int64)) if shape else 1
        return ActionLayout("Box", dim, shape, str(desc["dtype"]), low, high, bool(rescale))
    if kind == "Discrete":
        start, n = int(desc.get("start", 0)), int(desc["n"])
        return ActionLayout("Discrete", 1, (), str(desc.get("dtype", "int64")), np.array([start]), np.array([start + n - 1]))
    if kind == "MultiDiscrete":
        nvec = np.asarray(desc["nvec"], dtype=np.int64)
        first = np.asarray(desc.get("start", np.zeros_like(nvec)), dtype=np.int64).reshape(nvec.shape)
        return ActionLayout("MultiDiscrete", int(nvec.size), tuple(nvec.shape), str(desc["dtype"]), first, first + nvec - 1)
    if kind == "MultiBinary":
        shape = tuple(int(s) for s in desc["shape"])
        size = int(np.prod(shape, dtype=np.int64))
        return ActionLayout("MultiBinary", size, shape, str(desc["dtype"]), np.zeros(size), np.ones(size))
    raise ConfigError(
        f"the env's action space is {space_text(desc)}: envfleet sends actions as float arrays, for a Box, Discrete, "
        "MultiDiscrete or MultiBinary action space"
    )
