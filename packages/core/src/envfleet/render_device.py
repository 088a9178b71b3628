"""Which EGL device each shard renders on: ``train.render_device``, and the mapping, as pure functions.

On an 8-GPU node every process renders on EGL device 0 unless told otherwise, beside GPU 0's
training. ``train.render_device`` says where a stage's shards render:

- ``auto`` (the default): each shard renders on the GPU its worker was given (Ray sets the
  worker's ``CUDA_VISIBLE_DEVICES`` from its accelerator ids), mapped to that GPU's EGL
  device through the CUDA ordinal NVIDIA's EGL reports for each device. A worker with no
  GPU on a node that has some spreads its shards over the node's GPUs. A node without an
  NVIDIA GPU: nothing is set (Mesa renders on the CPU).
- ``cpu``: a CPU rasterizer (Mesa's software EGL device, else OSMesa).
- a CUDA ordinal (``3``, ``cuda:3``), an EGL device index (``egl:3``), or a list of them:
  shard ``i`` renders on entry ``i`` modulo the list's length.

Nothing here looks at the machine: the device lists are given (by
:func:`envfleet.shards.gpus.list_devices` in a shard's parent, or by tests).

>>> pick_render_device("auto", shard=1, worker_gpus=[], node_gpus=[0, 1], egl_of_cuda={0: 1, 1: 0})
RenderPick(egl=0, cuda=1, why='worker has no GPU: shards spread over the node's GPUs')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .errors import ConfigError

__all__ = [
    "KEY",
    "RenderPick",
    "VisibleDevices",
    "check_render_device",
    "pick_render_device",
    "visible_cuda_devices",
]

#: The config key, for messages.
KEY = "train.render_device"


class _Gpu(Protocol):
    @property
    def index(self) -> int: ...

    @property
    def uuid(self) -> str: ...


@dataclass(frozen=True)
class VisibleDevices:
    """``CUDA_VISIBLE_DEVICES`` resolved: the CUDA ordinals a process sees, in its own order."""

    devices: list[int]  # devices[k] is the all-GPU ordinal of the process's CUDA device k
    ignored: list[str]  # entries CUDA ignores: the first invalid one and all after it


def _match(entry: str, gpus: Sequence[_Gpu]) -> int | None:
    if entry.isdigit():
        index = int(entry)
        return index if any(g.index == index for g in gpus) else None
    if not entry.startswith(("GPU-", "MIG-")):
        return None
    found = [g.index for g in gpus if g.uuid.lower().startswith(entry.lower())]
    return found[0] if len(found) == 1 else None  # a prefix must name one GPU


def visible_cuda_devices(cuda_visible_devices: str | None, gpus: Sequence[_Gpu]) -> VisibleDevices:
    """The GPUs a process sees under ``cuda_visible_devices``, as CUDA reads the variable.

    Unset: every GPU. Entries are ordinals or (prefixes of) GPU UUIDs; CUDA stops at the
    first entry that names no GPU (or names one twice) and ignores the rest.
    """
    if cuda_visible_devices is None:
        return VisibleDevices(sorted(g.index for g in gpus), [])
    entries = [e.strip() for e in cuda_visible_devices.split(",")] if cuda_visible_devices.strip() else []
    devices: list[int] = []
    for k, entry in enumerate(entries):
        index = _match(entry, gpus)
        if index is None or index in devices:
            return VisibleDevices(devices, entries[k:])
        devices.append(index)
    return VisibleDevices(devices, [])


def _entry(value: Any) -> tuple[str, int]:
    """One explicit device: ``("cuda", n)`` or ``("egl", n)``; raises ``ValueError``."""
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, int):
        kind, number = "cuda", str(value)
    else:
        text = str(value).strip().lower()
        kind, _, number = text.rpartition(":") if ":" in text else ("cuda", "", text)
    if kind not in ("cuda", "egl") or not number.isdigit():
        raise ValueError(value)
    return kind, int(number)


def check_render_device(value: Any, key: str = KEY) -> str | list[tuple[str, int]]:
    """``train.render_device`` checked: ``"auto"``, ``"cpu"``, or the explicit devices in order.

    >>> check_render_device("auto"), check_render_device([0, "egl:2"])
    ('auto', [('cuda', 0), ('egl', 2)])

    :raises ConfigError: naming the value and what is expected.
    """
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("auto", "cpu"):
            return text
        items: list[Any] = [v for v in text.split(",") if v.strip()]
    elif isinstance(value, int) or not hasattr(value, "__iter__"):
        items = [value]
    else:
        items = list(value)  # a list, or OmegaConf's ListConfig
    try:
        if not items:
            raise ValueError(value)
        return [_entry(item) for item in items]
    except ValueError:
        raise ConfigError(
            f"config key '{key}' must be auto, cpu, a CUDA ordinal (3 or cuda:3), an EGL device index (egl:3), "
            f"or a list of them; got {value!r}"
        ) from None


@dataclass(frozen=True)
class RenderPick:
    """Where one shard renders: an EGL device (``None``: set nothing), the GPU behind it, and why."""

    egl: int | None
    cuda: int | None
    why: str
    cpu: bool = False  # render on a CPU rasterizer (train.render_device: cpu)


def pick_render_device(
    setting: Any,
    shard: int,
    worker_gpus: Sequence[int],
    node_gpus: Sequence[int],
    egl_of_cuda: Mapping[int, int],
) -> RenderPick:
    """The EGL device shard ``shard`` of a worker renders on.

    :param setting: ``train.render_device`` (checked here again).
    :param shard: the shard's place among the worker's shards (its index, plus the worker's rank to spread workers).
    :param worker_gpus: the machine's CUDA ordinals of the GPUs the worker was given, in its own order.
    :param node_gpus: the CUDA ordinals of every GPU of the node.
    :param egl_of_cuda: the EGL device index of each CUDA ordinal (``EGL_CUDA_DEVICE_NV``).
    """
    checked = check_render_device(setting)
    if checked == "cpu":
        return RenderPick(None, None, "train.render_device is cpu", cpu=True)
    if checked == "auto":
        if not node_gpus:
            return RenderPick(None, None, "no NVIDIA GPU on this node: the default EGL device")
        if worker_gpus:
            cuda, why = worker_gpus[shard % len(worker_gpus)], "the worker's GPU"
        else:
            cuda, why = sorted(node_gpus)[shard % len(node_gpus)], "worker has no GPU: shards spread over the node's GPUs"
        return _on_cuda(cuda, why, egl_of_cuda)
    assert isinstance(checked, list)
    kind, number = checked[shard % len(checked)]
    if kind == "egl":
        cuda_of = {egl: cuda for cuda, egl in egl_of_cuda.items()}
        return RenderPick(number, cuda_of.get(number), f"{KEY} names EGL device {number}")
    if number not in node_gpus:
        raise ConfigError(f"config key '{KEY}' names CUDA device {number}, but this node's GPUs are {sorted(node_gpus) or 'none'}")
    return _on_cuda(number, f"{KEY} names CUDA device {number}", egl_of_cuda)


def _on_cuda(cuda: int, why: str, egl_of_cuda: Mapping[int, int]) -> RenderPick:
    if cuda in egl_of_cuda:
        return RenderPick(egl_of_cuda[cuda], cuda, why)
    if egl_of_cuda:  # the container case: fewer NVIDIA EGL devices than GPUs
        first = min(egl_of_cuda)
        return RenderPick(egl_of_cuda[first], first, f"{why}; CUDA {cuda} has no EGL device (the container case): renders on CUDA {first}")
    return RenderPick(None, None, f"{why}; no EGL device reports a CUDA ordinal: the default EGL device")
