"""verl's env-worker batch helpers: ``put_tensor_cpu`` and ``create_env_batch_dataproto``.

Both keep the contract of verl's env worker (``verl/experimental/vla/workers/env/env_worker.py``),
so code written against verl's helpers works unchanged:

- ``put_tensor_cpu(d)`` moves every tensor of a dict to CPU, contiguous, in place and
  recursively, and returns the same dict;
- ``create_env_batch_dataproto(obs, rews, terminations, truncations, infos, meta)`` takes
  verl's env worker's observation layout ``{"images_and_states": {"full_image", "wrist_image",
  "state"}, "task_descriptions": [...]}`` (or the flat one envfleet's managers return,
  ``{"full_image", "wrist_image", "state", "task_descriptions"}``) and returns the step's
  DataProto. A layout it does not know is an error naming the keys, never a silent drop.

>>> import numpy as np
>>> obs = {"images_and_states": {"full_image": np.zeros((2, 4, 4, 3), np.uint8), "state": np.zeros((2, 8), np.float32)},
...        "task_descriptions": ["pick", "place"]}
>>> z = np.zeros((2, 3), np.float32)
>>> sorted(create_env_batch_dataproto(obs, z, z > 0, z > 0, {}).batch.keys())
['full_image', 'rews', 'state', 'terminations', 'truncations']
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

import numpy as np
import torch

from envfleet.dataproto import DataProto
from envfleet.errors import InvalidInputError

__all__ = ["OBS_KEYS", "NESTED_OBS_KEY", "put_tensor_cpu", "create_env_batch_dataproto"]

OBS_KEYS = ("full_image", "wrist_image", "state")
NESTED_OBS_KEY = "images_and_states"
_DESCRIPTIONS = "task_descriptions"
_RESERVED = {*OBS_KEYS, "rews", "terminations", "truncations", _DESCRIPTIONS}


def put_tensor_cpu(data_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Move every tensor in ``data_dict`` to CPU, contiguous, in place and recursively; return ``data_dict``.

    Nested dicts are updated in place too; values that are not tensors are left as they are.
    """
    for key, value in data_dict.items():
        if isinstance(value, torch.Tensor):
            data_dict[key] = value.detach().cpu().contiguous()
        elif isinstance(value, MutableMapping):
            put_tensor_cpu(value)
    return data_dict


def _as_column(value: Any) -> Any:
    # A numpy array stays one (the DataProto makes it a tensor over the same memory when
    # .batch is read); a tensor is moved to CPU.
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().contiguous()
    return np.ascontiguousarray(value)


def _observations(obs: Mapping[str, Any]) -> Mapping[str, Any]:
    """The image and state arrays of ``obs``, from either layout; anything unknown is an error."""
    if not isinstance(obs, Mapping):
        raise InvalidInputError(f"obs must be a mapping, got {type(obs).__name__}")
    keys = sorted(str(k) for k in obs)
    if NESTED_OBS_KEY in obs:
        extra = [k for k in keys if k not in (NESTED_OBS_KEY, _DESCRIPTIONS)]
        inner = obs[NESTED_OBS_KEY]
        if extra or not isinstance(inner, Mapping):
            raise InvalidInputError(
                f"obs has keys {keys}: expected {{'{NESTED_OBS_KEY}': {{{', '.join(OBS_KEYS)}}}, '{_DESCRIPTIONS}'}} "
                f"(verl's env-worker layout) or {{{', '.join(OBS_KEYS)}, '{_DESCRIPTIONS}'}} (flat)"
            )
        unknown = sorted(str(k) for k in inner if k not in OBS_KEYS)
        if unknown:
            raise InvalidInputError(
                f"obs['{NESTED_OBS_KEY}'] has keys {sorted(str(k) for k in inner)}: {unknown} unknown, expected some of {list(OBS_KEYS)}"
            )
        return inner
    unknown = [k for k in keys if k not in (*OBS_KEYS, _DESCRIPTIONS)]
    if unknown or not any(k in obs for k in OBS_KEYS):
        raise InvalidInputError(
            f"obs has keys {keys}: expected {{'{NESTED_OBS_KEY}': {{{', '.join(OBS_KEYS)}}}, '{_DESCRIPTIONS}'}} "
            f"(verl's env-worker layout) or {{{', '.join(OBS_KEYS)}, '{_DESCRIPTIONS}'}} (flat)"
        )
    return obs


def create_env_batch_dataproto(
    obs: Mapping[str, Any],
    rews: Any,
    terminations: Any,
    truncations: Any,
    infos: Mapping[str, Any] | None = None,
    meta: Mapping[str, Any] | None = None,
) -> DataProto:
    """Build the DataProto a chunk step returns.

    Tensors: ``full_image``, ``wrist_image`` (when present), ``state``, ``rews``,
    ``terminations``, ``truncations`` and every numeric info; non-tensors:
    ``task_descriptions`` and every non-numeric info. An info whose name clashes with
    those is stored as ``info_<name>``. ``meta`` becomes ``meta_info``.
    Numpy inputs are not copied: the tensors share their memory.

    :raises InvalidInputError: ``obs`` is in neither layout (the message names the keys
        it got and the keys it expects).
    """
    arrays = _observations(obs)
    tensors: dict[str, Any] = {}
    non_tensors: dict[str, Any] = {}
    for key in OBS_KEYS:
        if arrays.get(key) is not None:
            tensors[key] = _as_column(arrays[key])
    if _DESCRIPTIONS in obs:
        descriptions = np.empty(len(obs[_DESCRIPTIONS]), dtype=object)
        descriptions[:] = list(obs[_DESCRIPTIONS])
        non_tensors[_DESCRIPTIONS] = descriptions
    tensors["rews"] = _as_column(rews)
    tensors["terminations"] = _as_column(terminations)
    tensors["truncations"] = _as_column(truncations)
    for key, value in (infos or {}).items():
        name = f"info_{key}" if key in _RESERVED else key
        arr = value if isinstance(value, torch.Tensor) else np.asarray(value)
        if isinstance(arr, torch.Tensor) or arr.dtype.kind in "biuf":
            tensors[name] = _as_column(arr)
        else:
            non_tensors[name] = arr
    return DataProto.from_arrays(tensors, non_tensors, dict(meta or {}))
