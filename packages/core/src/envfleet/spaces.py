"""An env's own spaces, described in plain JSON: what the faces present in place of their ``Dict`` layout.

A backend that knows its env's own gymnasium spaces declares them (``BackendSpec.spaces``) as plain
data, the way the gymnasium backend's spec probe records them, so that neither the manager nor a
face needs the env's packages to read them:

- a leaf space: ``{"type": "Box", "shape": [4], "dtype": "float32", "low": -1.0, "high": 1.0}``
  (a bound is one number where it is the same throughout, else a nested list),
  ``{"type": "Discrete", "n": 2, "start": 0, "dtype": "int64"}``,
  ``{"type": "MultiDiscrete", "nvec": [3, 2], "start": [0, 0], "dtype": "int64"}``,
  ``{"type": "MultiBinary", "shape": [4], "n": 4, "dtype": "int8"}``;
- ``{"type": "Dict", "spaces": [[name, space], ...]}`` (in the env's order) and
  ``{"type": "Tuple", "spaces": [space, ...]}``, for the observation.

Each observation leaf is one array of the manager's observation, named in ``"key"``, or else by its
path (Dict keys and Tuple indices joined by ``.``; a lone space: ``state``). The manager carries
every array with the env's dtype and shape (a ``Discrete`` as one integer per env), so the faces
rebuild the env's structure from them (:meth:`Observation.batch`, :meth:`Observation.row`).

Actions arrive in the env's own form (an integer per env for ``Discrete``; an integer array for
``MultiDiscrete``, ...) and are checked and written as the manager's float32 rows ``[num_envs,
chunk, action_dim]`` (:meth:`ActionForm.rows`). With a chunk of actions per step, the chunk is the
first dimension around the env's own action space (:func:`chunked`):

============================  ===================================================
one action                    a chunk of ``c``
============================  ===================================================
``Box(low, high, shape)``     ``Box`` of shape ``(c, *shape)``, the bounds repeated
``Discrete(n, start)``        ``MultiDiscrete([n] * c, start=[start] * c)``
``MultiDiscrete(nvec)``       ``MultiDiscrete`` of ``nvec`` repeated: ``(c, *nvec.shape)``
``MultiBinary(shape)``        ``MultiBinary((c, *shape))``
============================  ===================================================

>>> own = Observation({"type": "Box", "shape": [2], "dtype": "float32", "low": -1.0, "high": 1.0})
>>> [(leaf.key, leaf.spec) for leaf in own.leaves]
[('state', ArraySpec(shape=(2,), dtype='float32'))]
>>> chunked({"type": "Discrete", "n": 2, "start": 0, "dtype": "int64"}, 3)["nvec"]
[2, 2, 2]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .env import ArraySpec, ObservationSpec
from .errors import InvalidInputError, PluginContractError
from .validation import to_numpy

__all__ = ["LEAVES", "Leaf", "Observation", "ActionForm", "OwnSpaces", "chunked", "own_spaces", "space_text"]

#: The leaf spaces: each is one array per env.
LEAVES = ("Box", "Discrete", "MultiDiscrete", "MultiBinary")


def space_text(desc: Mapping[str, Any]) -> str:
    """A description as gymnasium prints its space (its recorded ``repr``), else its type."""
    return str(desc.get("repr") or desc.get("type"))


def _shape(desc: Mapping[str, Any]) -> tuple[int, ...]:
    kind = desc.get("type")
    if kind == "Discrete":
        return ()
    if kind == "MultiDiscrete":
        return tuple(int(s) for s in np.shape(desc["nvec"]))
    return tuple(int(s) for s in desc["shape"])


def _dtype(desc: Mapping[str, Any]) -> str:
    return np.dtype(desc.get("dtype", "int64" if desc.get("type") == "Discrete" else "float32")).name


def chunked(desc: Mapping[str, Any], chunk: int) -> dict[str, Any]:
    """The action space of a chunk of ``chunk`` actions of ``desc`` (the table in the module doc)."""
    kind, c = desc.get("type"), int(chunk)
    if kind == "Box":
        shape = [c, *_shape(desc)]
        out = {"type": "Box", "shape": shape, "dtype": _dtype(desc)}
        if "low" in desc:
            low, high = (np.broadcast_to(np.asarray(desc[b]), _shape(desc)) for b in ("low", "high"))
            out.update(low=np.stack([low] * c).tolist(), high=np.stack([high] * c).tolist())
        return out
    if kind == "Discrete":
        n, first = int(desc["n"]), int(desc.get("start", 0))
        return {"type": "MultiDiscrete", "nvec": [n] * c, "start": [first] * c, "dtype": _dtype(desc)}
    if kind == "MultiDiscrete":
        nvec = np.asarray(desc["nvec"], dtype=np.int64)
        starts = np.broadcast_to(np.asarray(desc.get("start", 0), dtype=np.int64), nvec.shape)
        return {
            "type": "MultiDiscrete",
            "nvec": np.stack([nvec] * c).tolist(),
            "start": np.stack([starts] * c).tolist(),
            "dtype": _dtype(desc),
        }
    if kind == "MultiBinary":
        shape = [c, *_shape(desc)]
        return {"type": "MultiBinary", "shape": shape, "n": shape, "dtype": _dtype(desc)}
    raise PluginContractError(f"an action space {space_text(desc)}: the faces take a Box, Discrete, MultiDiscrete or MultiBinary")


# ---------------------------------------------------------------------------------------------- observations
@dataclass(frozen=True)
class Leaf:
    """One array of the observation: where it is in the env's structure (Dict keys, Tuple indices), the
    manager's key it is carried in, its space's description and the array one env's value is."""

    path: tuple[str | int, ...]
    key: str
    desc: Mapping[str, Any]
    spec: ArraySpec


class Observation:
    """An observation space's description, read: its leaves and how to rebuild its values.

    :raises PluginContractError: a description that is not one of the module doc's.
    """

    def __init__(self, desc: Mapping[str, Any]) -> None:
        self.desc = desc
        leaves: list[Leaf] = []
        self._walk(desc, (), leaves)
        self.leaves: tuple[Leaf, ...] = tuple(leaves)
        self._by_path = {leaf.path: leaf for leaf in leaves}

    def _walk(self, desc: Mapping[str, Any], path: tuple[str | int, ...], out: list[Leaf]) -> None:
        kind = desc.get("type")
        if kind == "Dict":
            for name, sub in desc["spaces"]:
                self._walk(sub, (*path, str(name)), out)
            return
        if kind == "Tuple":
            for i, sub in enumerate(desc["spaces"]):
                self._walk(sub, (*path, i), out)
            return
        if kind not in LEAVES:
            raise PluginContractError(
                f"an observation space holds {space_text(desc)}: the faces present {', '.join(LEAVES)}, Dict and Tuple"
            )
        key = str(desc.get("key") or (".".join(str(p) for p in path) if path else "state"))
        out.append(Leaf(path, key, desc, ArraySpec(_shape(desc), _dtype(desc))))

    def assemble(self, value: Callable[[Leaf], Any]) -> Any:
        """The env's structure (dicts and tuples) with ``value(leaf)`` at each leaf."""

        def build(desc: Mapping[str, Any], path: tuple[str | int, ...]) -> Any:
            kind = desc.get("type")
            if kind == "Dict":
                return {str(name): build(sub, (*path, str(name))) for name, sub in desc["spaces"]}
            if kind == "Tuple":
                return tuple(build(sub, (*path, i)) for i, sub in enumerate(desc["spaces"]))
            return value(self._by_path[path])

        return build(self.desc, ())

    def batch(self, flat: Mapping[str, np.ndarray]) -> Any:
        """Every env's observation in the env's structure, from the manager's arrays (copies)."""
        return self.assemble(lambda leaf: np.array(flat[leaf.key], copy=True))

    def row(self, flat: Mapping[str, np.ndarray], i: int) -> Any:
        """Env ``i``'s observation in the env's structure, as its ``step`` returned it (copies)."""
        return self.assemble(lambda leaf: np.array(flat[leaf.key][i], copy=True)[()])

    def check(self, obs_spec: ObservationSpec, backend: str) -> None:
        """:raises PluginContractError: the leaves are not the manager's observation keys, shapes and dtypes."""
        own = {leaf.key: leaf.spec for leaf in self.leaves}
        if own != dict(obs_spec):
            raise PluginContractError(
                f"backend {backend!r} declares its env's own observation space as {own}, but its observation spec is "
                f"{dict(obs_spec)}: BackendSpec.spaces must describe the arrays the manager carries"
            )


# ---------------------------------------------------------------------------------------------- actions
class ActionForm:
    """What one ``step`` of a face takes: the env's own action space (``chunk=None``) or a chunk of it
    (:func:`chunked`); :meth:`rows` turns such actions into the manager's rows.

    :param desc: the env's own action space's description.
    :param chunk: actions per step with ``step="chunk"``; ``None`` with ``step="action"``.
    """

    def __init__(self, desc: Mapping[str, Any], chunk: int | None) -> None:
        if desc.get("type") not in LEAVES:
            raise PluginContractError(f"an action space {space_text(desc)}: the faces take a Box, Discrete, MultiDiscrete or MultiBinary")
        self.env_desc = desc
        self.chunk = chunk
        self.desc: Mapping[str, Any] = desc if chunk is None else chunked(desc, chunk)
        self.kind = str(self.desc["type"])
        self.shape = _shape(self.desc)
        self.dtype = _dtype(self.desc)
        one = _shape(desc)
        self.dim = int(np.prod(one, dtype=np.int64)) if one else 1
        self.low: np.ndarray | None = None
        self.high: np.ndarray | None = None
        if self.kind in ("Discrete", "MultiDiscrete"):
            count = np.asarray(self.desc["n"] if self.kind == "Discrete" else self.desc["nvec"], dtype=np.int64)
            self.low = np.broadcast_to(np.asarray(self.desc.get("start", 0), dtype=np.int64), self.shape)
            self.high = self.low + count - 1
        elif self.kind == "MultiBinary":
            self.low, self.high = np.zeros(self.shape, np.int64), np.ones(self.shape, np.int64)

    def _what(self) -> str:
        where = "" if self.chunk is None else f" (a chunk of {self.chunk} actions of the env's {space_text(self.env_desc)})"
        return f"the action space {space_text(self.desc) if self.chunk is None else self.kind}{where}"

    def rows(self, actions: Any, num_envs: int) -> np.ndarray:
        """``actions`` (``[num_envs, *shape]``, in the space's own form) as float32 ``[num_envs, chunk, action_dim]``.

        :raises InvalidInputError: another shape; floats for a discrete space; a value outside the space,
            naming the env (and the action of the chunk).
        """
        arr = np.asarray(to_numpy(actions))
        expected = (num_envs, *self.shape)
        if arr.shape != expected:
            raise InvalidInputError(
                f"actions must have shape {list(expected)} (num_envs, *action_space.shape of {self._what()}), got {list(arr.shape)}"
            )
        if self.kind == "Box":
            if arr.dtype.kind not in "fiu":
                raise InvalidInputError(f"actions for {self._what()} are numbers, got dtype {arr.dtype}")
        else:
            whole = "iub" if self.kind == "MultiBinary" else "iu"
            if arr.dtype.kind not in whole:
                sample = arr.reshape(-1)[:1].tolist()
                raise InvalidInputError(
                    f"actions for {self._what()} are integers (as the space's sample() gives them), got dtype {arr.dtype}"
                    + (f", e.g. {sample[0]!r}" if sample else "")
                )
            assert self.low is not None and self.high is not None
            values = arr.astype(np.int64)
            bad = (values < self.low) | (values > self.high)
            if bad.any():
                at = tuple(int(x) for x in np.argwhere(bad)[0])
                where = f"actions[{', '.join(str(x) for x in at)}]"
                lo, hi = int(self.low[at[1:]]), int(self.high[at[1:]])
                raise InvalidInputError(f"{where} is {int(values[at])}, outside {self._what()}: it takes {lo}..{hi} there")
        steps = 1 if self.chunk is None else self.chunk
        return arr.astype(np.float32).reshape(num_envs, steps, self.dim)


# ---------------------------------------------------------------------------------------------- both
@dataclass(frozen=True)
class OwnSpaces:
    """The env's own observation, and what a face's ``step`` takes: see the module doc."""

    observation: Observation
    action: ActionForm


def own_spaces(backend: Any, section: Any, obs_spec: ObservationSpec, action_dim: int, chunk: int | None) -> OwnSpaces | None:
    """The env's own spaces as a face presents them, or ``None`` where it keeps its ``Dict`` layout.

    :param backend: the manager's backend (``manager.spec``); one without ``spaces`` (a remote manager's, a
        backend that declares none) answers ``None``.
    :param section: the env section (``cfg[mode]``) the manager runs.
    :param obs_spec: the manager's observation spec, which the declared observation must match.
    :param action_dim: the manager's action row size, which the declared action space must match.
    :param chunk: actions per step (``step="chunk"``), or ``None`` (``step="action"``).
    :raises PluginContractError: the declared spaces do not match what the manager carries.
    """
    hook = getattr(backend, "spaces", None)
    declared = None if hook is None else hook(section)
    if declared is None:
        return None
    name = str(getattr(backend, "name", "?"))
    observation = Observation(declared["observation"])
    observation.check(obs_spec, name)
    action = ActionForm(declared["action"], chunk)
    if action.dim != int(action_dim):
        raise PluginContractError(
            f"backend {name!r} declares its env's action space {space_text(action.env_desc)} ({action.dim} values an action), "
            f"but the manager's actions have {action_dim}"
        )
    return OwnSpaces(observation, action)
