"""An env's own spaces (:mod:`envfleet.spaces`) as TorchRL specs, as TorchRL's ``GymEnv`` makes them,
and the values both ways: the env's observations into the specs' form, the specs' actions into the env's.

As ``GymEnv`` (torchrl/envs/libs/gym.py):

- a ``Box`` is a ``Bounded`` (an ``Unbounded`` where every bound is infinite) of its dtype; a ``Box`` of
  shape ``()`` has shape ``(1,)``;
- a ``Discrete(n)`` is a ``OneHot(n)`` (``categorical_action_encoding=False``, the default) or a
  ``Categorical(n)`` (``True``), for the action and the observation alike; a ``MultiDiscrete`` whose
  sizes are all one ``n`` is such a spec with one more dimension (TorchRL stacks them), one of several
  sizes a ``MultiOneHot`` / ``MultiCategorical``; a ``MultiBinary`` is a ``Binary``. A one-hot or
  categorical value ``k`` stands for the env's ``start + k``;
- an observation that is one space is the entry ``"observation"``; a ``Dict``'s entries keep their keys,
  nested as the env nests them, its ``"state"`` named ``"observation"`` where it has none of that name; a
  ``Tuple``'s items are entries ``"0"``, ``"1"``, ... of a ``Composite``.

:func:`own_specs` answers ``None`` for the one space TorchRL has no spec for: a ``MultiDiscrete`` of
several dimensions and several sizes (the face then keeps envfleet's layout).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torchrl.data import Binary, Bounded, Categorical, Composite, MultiCategorical, MultiOneHot, OneHot, TensorSpec, Unbounded

from ..errors import InvalidInputError
from ..spaces import Leaf, OwnSpaces

__all__ = ["LeafSpec", "OwnSpecs", "own_specs"]


class _NoSpec(Exception):
    """A space TorchRL has no spec for."""


class LeafSpec:
    """One space's TorchRL spec for ``num_envs`` envs, with its values both ways.

    :param desc: the space's description (:mod:`envfleet.spaces`).
    :param num_envs: the batch size.
    :param categorical: ``Categorical`` rather than ``OneHot`` specs for discrete spaces.
    """

    def __init__(self, desc: Mapping[str, Any], num_envs: int, categorical: bool) -> None:
        kind = desc["type"]
        dtype = np.dtype(desc.get("dtype", "int64" if kind == "Discrete" else "float32"))
        self.n = num_envs
        self.env_shape: tuple[int, ...]
        if kind == "Box":
            self.env_shape = tuple(int(s) for s in desc["shape"])
            shape = self.env_shape or (1,)
            low = np.broadcast_to(np.asarray(desc["low"]), self.env_shape).astype(dtype).reshape(shape)
            high = np.broadcast_to(np.asarray(desc["high"]), self.env_shape).astype(dtype).reshape(shape)
            tdtype = getattr(torch, dtype.name)
            self.form = "box"
            self.spec: TensorSpec
            if dtype.kind == "f" and np.isneginf(low).all() and np.isposinf(high).all():
                self.spec = Unbounded(shape=(num_envs, *shape), dtype=tdtype)
            else:
                expand = (num_envs, *shape)
                self.spec = Bounded(torch.from_numpy(low).expand(expand), torch.from_numpy(high).expand(expand), shape=expand, dtype=tdtype)
            self.shape = shape
            return
        if kind == "MultiBinary":
            self.env_shape = tuple(int(s) for s in desc["shape"])
            self.form = "binary"
            self.spec = Binary(shape=(num_envs, *self.env_shape), dtype=getattr(torch, dtype.name))
            return
        if kind == "Discrete":
            sizes = np.asarray(int(desc["n"]), dtype=np.int64)
        elif kind == "MultiDiscrete":
            sizes = np.asarray(desc["nvec"], dtype=np.int64)
        else:
            raise _NoSpec(kind)
        self.env_shape = tuple(sizes.shape)
        self.start = np.broadcast_to(np.asarray(desc.get("start", 0), dtype=np.int64), sizes.shape)
        self.sizes = sizes
        uniform = sizes.size == 0 or bool((sizes == sizes.reshape(-1)[0]).all())
        if not uniform and sizes.ndim != 1:
            raise _NoSpec("MultiDiscrete of several dimensions and sizes")
        batch = (num_envs, *self.env_shape)
        if uniform:
            n = int(sizes.reshape(-1)[0])
            self.form = "categorical" if categorical else "onehot"
            self.spec = (
                Categorical(n, shape=batch, dtype=getattr(torch, dtype.name))
                if categorical
                else OneHot(n, shape=(*batch, n), dtype=torch.long)
            )
        else:
            self.form = "multicategorical" if categorical else "multionehot"
            nvec = sizes.tolist()
            if categorical:
                self.spec = MultiCategorical(nvec, shape=batch, dtype=getattr(torch, dtype.name))
            else:
                self.spec = MultiOneHot(nvec, shape=(num_envs, int(sizes.sum())), dtype=torch.long)

    def encode(self, values: np.ndarray) -> torch.Tensor:
        """The env's values ``[num_envs, *shape]`` in this spec's form."""
        if self.form == "box":
            return torch.from_numpy(np.ascontiguousarray(values).reshape(len(values), *self.shape))
        if self.form == "binary":
            return torch.from_numpy(np.ascontiguousarray(values))
        index = torch.from_numpy(np.asarray(values, dtype=np.int64) - self.start)
        if self.form in ("categorical", "multicategorical"):
            return index.to(self.spec.dtype)
        if self.form == "onehot":
            return torch.nn.functional.one_hot(index, int(self.sizes.reshape(-1)[0])).to(torch.long)
        parts = [torch.nn.functional.one_hot(index[:, j], int(n)) for j, n in enumerate(self.sizes.tolist())]
        return torch.cat(parts, dim=-1).to(torch.long)

    def decode(self, value: torch.Tensor, rows: int) -> np.ndarray:
        """A value of this spec's form (``rows`` envs) as the env's values ``[rows, *shape]``.

        :raises InvalidInputError: a one-hot value that is not one-hot.
        """
        arr = value.detach().cpu()
        if self.form == "box":
            return arr.numpy().reshape(rows, *self.env_shape)
        if self.form == "binary":
            return arr.numpy()
        if self.form in ("categorical", "multicategorical"):
            return arr.numpy().astype(np.int64) + self.start
        parts = [arr] if self.form == "onehot" else list(torch.split(arr, [int(n) for n in self.sizes.tolist()], dim=-1))
        indices = []
        for part in parts:
            ok = ((part == 0) | (part == 1)).all(dim=-1) & (part.sum(dim=-1) == 1)
            if not bool(ok.all()):
                bad = tuple(int(x) for x in torch.nonzero(~ok)[0].tolist())
                raise InvalidInputError(
                    f"action{list(bad)} is {part[bad].tolist()}: a one-hot action ({type(self.spec).__name__}) has exactly one 1; "
                    "for integer actions make the env with categorical_action_encoding=True"
                )
            indices.append(part.argmax(dim=-1))
        index = indices[0] if self.form == "onehot" else torch.stack(indices, dim=-1)
        return index.numpy().astype(np.int64) + self.start


class OwnSpecs:
    """The env's own observation and action as TorchRL specs for ``num_envs`` envs; see the module doc."""

    def __init__(self, own: OwnSpaces, num_envs: int, categorical: bool) -> None:
        self.own = own
        self.num_envs = num_envs
        self._leaves = {leaf.key: LeafSpec(leaf.desc, num_envs, categorical) for leaf in own.observation.leaves}
        self.action = LeafSpec(own.action.desc, num_envs, categorical)

    def _entries(self, value: Any) -> dict[str, Any]:
        """A tree of the env's structure as the observation's top-level entries (the naming of the module doc)."""
        if not isinstance(value, dict):
            return {"observation": value}
        if "state" in value and "observation" not in value:
            value = {("observation" if key == "state" else key): item for key, item in value.items()}
        return value

    def _nest(self, value: Any, composite: bool) -> Any:
        if isinstance(value, dict):
            items = {key: self._nest(item, composite) for key, item in value.items()}
        elif isinstance(value, tuple):
            items = {str(i): self._nest(item, composite) for i, item in enumerate(value)}
        else:
            return value
        return Composite(items, shape=(self.num_envs,)) if composite else items

    def observation_spec(self) -> dict[str, TensorSpec]:
        """The observation's top-level entries as specs (a ``Composite`` where the env nests)."""
        tree = self.own.observation.assemble(lambda leaf: self._leaves[leaf.key].spec)
        return {key: self._nest(value, True) for key, value in self._entries(tree).items()}

    def observation(self, flat: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """The manager's observation arrays as the observation's entries (tensors, nested in dicts)."""

        def value(leaf: Leaf) -> torch.Tensor:
            return self._leaves[leaf.key].encode(np.asarray(flat[leaf.key]))

        tree = self.own.observation.assemble(value)
        return {key: self._nest(item, False) for key, item in self._entries(tree).items()}

    def actions(self, action: torch.Tensor, rows: int) -> np.ndarray:
        """A step's ``"action"`` (``rows`` envs) as the manager's float32 rows ``[rows, chunk, action_dim]``."""
        return self.own.action.rows(self.action.decode(action, rows), rows)


def own_specs(own: OwnSpaces | None, num_envs: int, categorical: bool) -> OwnSpecs | None:
    """:class:`OwnSpecs` of ``own``; ``None`` for no own spaces, or one TorchRL has no spec for (see the module doc)."""
    if own is None:
        return None
    try:
        return OwnSpecs(own, num_envs, categorical)
    except _NoSpec:
        return None
