"""A chunk step's DataProto: ``env_batch_dataproto`` (any observation key) and verl's helpers.

:func:`env_batch_dataproto` is what :class:`~envfleet_ray.runtime.worker.EnvWorker` builds its results
with: every observation key the backend declares becomes a tensor of the same name, with its
shape and dtype, whatever the key is called.

``put_tensor_cpu`` and ``create_env_batch_dataproto`` keep the contract of verl's env worker
(``verl/experimental/vla/workers/env/env_worker.py``), so code written against verl's helpers
works unchanged:

- ``put_tensor_cpu(d)`` moves every tensor of a dict to CPU, contiguous, in place and
  recursively, and returns the same dict;
- ``create_env_batch_dataproto(obs, rews, terminations, truncations, infos, meta)`` takes
  verl's env worker's observation layout ``{"images_and_states": {"full_image", "wrist_image",
  "state"}, "task_descriptions": [...]}`` (or the flat one envfleet's managers return,
  ``{"full_image", "wrist_image", "state", "task_descriptions"}``) and returns the step's
  DataProto. A layout it does not know is an error naming the keys, never a silent drop; an
  observation key outside verl's three is such an error too (verl's layout has no place for it:
  build with :func:`env_batch_dataproto` instead).

>>> import numpy as np
>>> obs = {"images_and_states": {"full_image": np.zeros((2, 4, 4, 3), np.uint8), "state": np.zeros((2, 8), np.float32)},
...        "task_descriptions": ["pick", "place"]}
>>> z = np.zeros((2, 3), np.float32)
>>> sorted(create_env_batch_dataproto(obs, z, z > 0, z > 0, {}).batch.keys())
['full_image', 'rews', 'state', 'terminations', 'truncations']
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

import numpy as np
import torch
from numpy.typing import ArrayLike

from envfleet.dataproto import DataProto
from envfleet.errors import InvalidInputError

__all__ = ["OBS_KEYS", "NESTED_OBS_KEY", "RESERVED_KEYS", "put_tensor_cpu", "env_batch_dataproto", "create_env_batch_dataproto"]

#: A column of a step's DataProto, rows first: an array (or what numpy makes one of) or a tensor.
Column = ArrayLike | torch.Tensor

OBS_KEYS = ("full_image", "wrist_image", "state")
NESTED_OBS_KEY = "images_and_states"
_DESCRIPTIONS = "task_descriptions"
#: Names a step's DataProto gives its own columns; an observation key may not take one.
RESERVED_KEYS = ("rews", "terminations", "truncations", _DESCRIPTIONS)
_STRICT_HINT = (
    "create_env_batch_dataproto keeps verl's env-worker layout, which has no place for other observation keys; "
    "envfleet_ray.runtime.batch.env_batch_dataproto (what EnvWorker returns) takes any key a backend declares"
)


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
                f"obs['{NESTED_OBS_KEY}'] has keys {sorted(str(k) for k in inner)}: {unknown} unknown, expected some of {list(OBS_KEYS)}; "
                + _STRICT_HINT
            )
        return inner
    unknown = [k for k in keys if k not in (*OBS_KEYS, _DESCRIPTIONS)]
    if unknown or not any(k in obs for k in OBS_KEYS):
        raise InvalidInputError(
            f"obs has keys {keys}: expected {{'{NESTED_OBS_KEY}': {{{', '.join(OBS_KEYS)}}}, '{_DESCRIPTIONS}'}} "
            f"(verl's env-worker layout) or {{{', '.join(OBS_KEYS)}, '{_DESCRIPTIONS}'}} (flat)"
            + (f"; {unknown} unknown: {_STRICT_HINT}" if unknown else "")
        )
    return obs


def env_batch_dataproto(
    obs: Mapping[str, Any],
    task_descriptions: Sequence[str] | None,
    rews: Column,
    terminations: Column,
    truncations: Column,
    infos: Mapping[str, Any] | None = None,
    meta: Mapping[str, Any] | None = None,
) -> DataProto:
    """Build a chunk step's DataProto with every observation of ``obs``, whatever its name.

    Tensors: each key of ``obs`` (in its order, with its shape and dtype), ``rews``,
    ``terminations``, ``truncations`` and every numeric info; non-tensors:
    ``task_descriptions`` and every non-numeric info. An info whose name is taken (by an
    observation or a column above) is stored as ``info_<name>``. ``meta`` becomes
    ``meta_info``. Numpy inputs are not copied: the tensors share their memory.

    >>> import numpy as np
    >>> z = np.zeros((2, 3), np.float32)
    >>> obs = {"full_image": np.zeros((2, 4, 4, 3), np.uint8), "depth": np.zeros((2, 4, 4), np.float32)}
    >>> sorted(env_batch_dataproto(obs, ["pick", "place"], z, z > 0, z > 0).batch.keys())
    ['depth', 'full_image', 'rews', 'terminations', 'truncations']

    :raises InvalidInputError: an observation is called like one of :data:`RESERVED_KEYS`
        (the backend's observation spec must rename it).
    """
    if not isinstance(obs, Mapping):
        raise InvalidInputError(f"obs must be a mapping of observation name -> array, got {type(obs).__name__}")
    clash = [str(k) for k in obs if k in RESERVED_KEYS]
    if clash:
        raise InvalidInputError(
            f"observation key(s) {clash} clash with the columns a step's DataProto has of its own {list(RESERVED_KEYS)}: "
            "the backend's observation spec must name them otherwise"
        )
    tensors: dict[str, Any] = {str(key): _as_column(value) for key, value in obs.items() if value is not None}
    non_tensors: dict[str, Any] = {}
    if task_descriptions is not None:
        descriptions = np.empty(len(task_descriptions), dtype=object)
        descriptions[:] = list(task_descriptions)
        non_tensors[_DESCRIPTIONS] = descriptions
    tensors["rews"] = _as_column(rews)
    tensors["terminations"] = _as_column(terminations)
    tensors["truncations"] = _as_column(truncations)
    taken = {*tensors, *RESERVED_KEYS}
    for key, value in (infos or {}).items():
        name = f"info_{key}" if key in taken else key
        arr = value if isinstance(value, torch.Tensor) else np.asarray(value)
        if isinstance(arr, torch.Tensor) or arr.dtype.kind in "biuf":
            tensors[name] = _as_column(arr)
        else:
            non_tensors[name] = arr
    return DataProto.from_arrays(tensors, non_tensors, dict(meta or {}))


def create_env_batch_dataproto(
    obs: Mapping[str, Any],
    rews: Any,
    terminations: Any,
    truncations: Any,
    infos: Mapping[str, Any] | None = None,
    meta: Mapping[str, Any] | None = None,
) -> DataProto:
    """Build the DataProto a chunk step returns, in verl's env-worker layout.

    Tensors: ``full_image``, ``wrist_image`` (when present), ``state``, ``rews``,
    ``terminations``, ``truncations`` and every numeric info; non-tensors:
    ``task_descriptions`` and every non-numeric info. An info whose name clashes with
    those is stored as ``info_<name>``. ``meta`` becomes ``meta_info``.
    Numpy inputs are not copied: the tensors share their memory.

    :raises InvalidInputError: ``obs`` is in neither layout, or has an observation key other
        than verl's three (the message names the keys it got, the keys it expects, and
        :func:`env_batch_dataproto` for any key).
    """
    arrays = _observations(obs)
    columns = {key: arrays[key] for key in OBS_KEYS if arrays.get(key) is not None}
    descriptions = obs[_DESCRIPTIONS] if _DESCRIPTIONS in obs else None
    # verl's helper stores an info named like any of its three observations as info_<name>, present or not.
    renamed = {(f"info_{k}" if k in OBS_KEYS else k): v for k, v in (infos or {}).items()}
    return env_batch_dataproto(columns, descriptions, rews, terminations, truncations, renamed, meta)
