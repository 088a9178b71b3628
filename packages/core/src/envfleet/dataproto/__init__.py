"""``DataProto``: the batch that travels between trainer, worker group and workers.

It has the whole surface of verl's ``verl.protocol.DataProto`` (verl at commit
b178a3c): every method, and the module-level helpers :func:`pad_dataproto_to_divisor`,
:func:`unpad_dataproto`, :func:`fold_batch_dim`, :func:`unfold_batch_dim`,
:func:`collate_fn` and :func:`list_of_dict_to_dict_of_list`, plus
:class:`DataProtoConfig` for automatic padding. Code written against one works with
the other, and :meth:`DataProto.from_verl` / :meth:`DataProto.to_verl` convert in
one call.

- ``batch``: a :class:`tensordict.TensorDict` with one batch dimension;
- ``non_tensor_batch``: ``dict[str, numpy.ndarray]``, dim 0 = batch (strings as object arrays);
- ``meta_info``: a plain dict. :meth:`DataProto.concat` merges ``meta_info["metrics"]``
  of the parts into a dict of lists, as verl does; every other key must agree.

A check that fails raises :class:`envfleet.errors.DataProtoError`, which is both a
``ValueError`` and an ``AssertionError`` (what verl raises), and names the key and
the sizes. Numeric data is always held as tensors or numeric numpy arrays, never as
Python objects per element, so pickling through Ray costs a memcpy per array (the
format is :mod:`envfleet.dataproto.pickling`'s).

The package, by concern: :mod:`~envfleet.dataproto.core` (what envfleet itself calls:
the fields, building, indexing, selection, ``concat``, ``chunk``),
:mod:`~envfleet.dataproto.verl_surface` (most of the rest of verl's methods),
:mod:`~envfleet.dataproto.proto` (the class: its pickling, ``make_iterator``, ``collate_fn``),
:mod:`~envfleet.dataproto.helpers` (verl's module-level helpers),
:mod:`~envfleet.dataproto.values` (column coercion and checks) and
:mod:`~envfleet.dataproto.pickling` (the pickle format).

It needs torch and tensordict, the ``dataproto`` extra (``pip install 'envfleet[dataproto]'``);
the rest of core does not, so a shard or a simulator's venv goes without them.

>>> import numpy as np, torch
>>> d = DataProto.from_dict({"x": torch.zeros(4, 2)}, {"name": np.array(list("abcd"), dtype=object)})
>>> len(d), d[1:3].non_tensor_batch["name"].tolist()
(4, ['b', 'c'])
>>> DataProto.concat([d.select(meta_info_keys=[]) for _ in range(2)]).batch["x"].shape
torch.Size([8, 2])
"""

from __future__ import annotations

import importlib.util

from ..errors import MissingExtraError

try:
    import torch  # noqa: F401

    # tensordict is imported where a TensorDict is first built (values.new_tensordict):
    # here only its presence is checked.
    if importlib.util.find_spec("tensordict") is None:
        raise ImportError("No module named 'tensordict'")
except ImportError as exc:
    raise MissingExtraError(
        f"envfleet.dataproto (DataProto) needs torch and tensordict, and importing them failed ({exc}): "
        "pip install 'envfleet[dataproto]' (envfleet-ray and the trainer faces require it; "
        "a shard or a simulator's venv does not need it)"
    ) from exc

from .core import AUTO_PADDING_KEY, DataProtoConfig, DataProtoItem
from .helpers import fold_batch_dim, pad_dataproto_to_divisor, unfold_batch_dim, unpad_dataproto
from .proto import DataProto, _rebuild_dataproto, collate_fn
from .values import list_of_dict_to_dict_of_list

# Pickles (save_to_disk, Ray) name the public path, the one the single module this package
# replaced had, so a DataProto pickled before the split loads after it and the other way round.
for _public in (DataProto, DataProtoConfig, DataProtoItem, _rebuild_dataproto, collate_fn):
    _public.__module__ = __name__
del _public

__all__ = [
    "AUTO_PADDING_KEY",
    "DataProto",
    "DataProtoConfig",
    "DataProtoItem",
    "collate_fn",
    "fold_batch_dim",
    "list_of_dict_to_dict_of_list",
    "pad_dataproto_to_divisor",
    "unfold_batch_dim",
    "unpad_dataproto",
]
