"""An env's own spaces as gymnasium spaces: a backend's plain-JSON description (:mod:`envfleet.spaces`) made
into the ``Box``, ``Discrete``, ``MultiDiscrete``, ``MultiBinary``, ``Dict`` and ``Tuple`` that
``gymnasium.make(id)`` has, equal to them (``==``). The flat keys of the manager and the env's structure
are mapped in :mod:`envfleet.spaces`, which the TorchRL face shares without gymnasium.

>>> space({"type": "Discrete", "n": 2, "start": 0, "dtype": "int64"})
Discrete(2)
>>> space({"type": "Box", "shape": [2], "dtype": "float32", "low": -1.0, "high": [1.0, 2.0]}).high
array([1., 2.], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from ..errors import PluginContractError
from ..spaces import LEAVES, space_text

__all__ = ["space"]


def space(desc: Mapping[str, Any]) -> gym.Space[Any]:
    """The gymnasium space a description describes.

    :raises PluginContractError: a description that is not one of :mod:`envfleet.spaces`' (a Box without bounds included).
    """
    kind = desc.get("type")
    dtype = np.dtype(desc.get("dtype", "int64" if kind == "Discrete" else "float32"))
    if kind == "Box":
        if "low" not in desc or "high" not in desc:
            raise PluginContractError(f"{space_text(desc)}: a Box's description needs its bounds, low and high")
        shape = tuple(int(s) for s in desc["shape"])
        low = np.broadcast_to(np.asarray(desc["low"]), shape)
        high = np.broadcast_to(np.asarray(desc["high"]), shape)
        return gym.spaces.Box(low.astype(dtype), high.astype(dtype), shape, dtype)
    if kind == "Discrete":
        return gym.spaces.Discrete(int(desc["n"]), start=int(desc.get("start", 0)), dtype=dtype)
    if kind == "MultiDiscrete":
        nvec = np.asarray(desc["nvec"], dtype=np.int64)
        start = np.broadcast_to(np.asarray(desc.get("start", 0), dtype=np.int64), nvec.shape)
        return gym.spaces.MultiDiscrete(nvec, dtype=dtype, start=start)
    if kind == "MultiBinary":
        n = desc.get("n", desc["shape"])
        return gym.spaces.MultiBinary(int(n) if isinstance(n, (int, np.integer)) else [int(s) for s in n])
    if kind == "Dict":
        return gym.spaces.Dict({str(name): space(sub) for name, sub in desc["spaces"]})
    if kind == "Tuple":
        return gym.spaces.Tuple(tuple(space(sub) for sub in desc["spaces"]))
    raise PluginContractError(f"{space_text(desc)}: envfleet's faces present {', '.join(LEAVES)}, Dict and Tuple spaces")
