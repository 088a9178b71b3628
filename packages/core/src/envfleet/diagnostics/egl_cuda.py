"""Which GPU a MuJoCo EGL renderer lands on, given ``CUDA_VISIBLE_DEVICES``.

CUDA and EGL number the same GPUs independently: CUDA device 2 may be EGL device 3.
MuJoCo and robosuite pick an EGL device by index (``MUJOCO_EGL_DEVICE_ID``, else the first
``CUDA_VISIBLE_DEVICES`` entry read as an EGL index), so where the two numberings differ,
a process pinned to one GPU for its policy renders on another, or every process renders
on GPU 0. NVIDIA's EGL reports the CUDA ordinal of each EGL device
(``EGL_CUDA_DEVICE_NV`` through ``eglQueryDeviceAttribEXT``); with it, this module works
out, from plain data, which EGL device a process uses and which one it should use.

Everything here takes lists in and returns values: the device lists come from
:mod:`envfleet.shards.gpus` on a real machine and are given by tests.

>>> gpus = [Gpu(0, "GPU-aaaa"), Gpu(1, "GPU-bbbb")]
>>> egl = [EglDevice(0, cuda=1), EglDevice(1, cuda=0)]
>>> plan = plan_rendering("1", None, gpus, egl)[0]
>>> plan.cuda_device, plan.egl_device, plan.egl_cuda, plan.right_egl_device, plan.ok
(1, 1, 0, 0, False)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..render_device import VisibleDevices, visible_cuda_devices
from ..shards.gpus import EglDevice, Gpu

__all__ = ["Gpu", "EglDevice", "VisibleDevices", "RenderPlan", "visible_cuda_devices", "chosen_egl_device", "plan_rendering"]


def chosen_egl_device(cuda_visible_devices: str | None, mujoco_egl_device_id: str | None) -> int:
    """The EGL device index a MuJoCo renderer opens: ``MUJOCO_EGL_DEVICE_ID`` when set, else
    the first ``CUDA_VISIBLE_DEVICES`` entry when it is a number (what robosuite and
    envfleet-libero do), else 0.

    >>> chosen_egl_device("3,1", None), chosen_egl_device("GPU-aa", None), chosen_egl_device("3", "1")
    (3, 0, 1)
    """
    if mujoco_egl_device_id is not None and mujoco_egl_device_id.strip().isdigit():
        return int(mujoco_egl_device_id.strip())
    first = (cuda_visible_devices or "").split(",")[0].strip()
    return int(first) if first.isdigit() else 0


@dataclass(frozen=True)
class RenderPlan:
    """Where one rendering process renders, and whether that is the GPU its CUDA work uses."""

    cuda_visible_devices: str | None  # the process's CUDA_VISIBLE_DEVICES
    cuda_device: int | None  # all-GPU ordinal of its CUDA device 0 (None: it sees no GPU)
    egl_device: int  # the EGL device it opens
    egl_cuda: int | None  # the CUDA ordinal of that EGL device (None: not an NVIDIA device, or no such device)
    right_egl_device: int | None  # the EGL device of cuda_device (None: no EGL device reports it)
    egl_exists: bool  # whether egl_device is in the EGL device list

    @property
    def ok(self) -> bool:
        """It renders on the GPU it computes on (or it has no GPU and its EGL device exists)."""
        if not self.egl_exists:
            return False
        return self.cuda_device is None or self.egl_cuda == self.cuda_device

    def describe(self) -> str:
        """One line: the process, its EGL device, and that device's GPU."""
        where = "unset" if self.cuda_visible_devices is None else repr(self.cuda_visible_devices)
        if not self.egl_exists:
            lands = "which does not exist"
        elif self.egl_cuda is None:
            lands = "(not a CUDA device)"
        else:
            lands = f"= CUDA device {self.egl_cuda}"
        compute = "no CUDA device" if self.cuda_device is None else f"CUDA device {self.cuda_device}"
        return f"CUDA_VISIBLE_DEVICES={where}: computes on {compute}, renders on EGL device {self.egl_device} {lands}"


def plan_rendering(
    cuda_visible_devices: str | None,
    mujoco_egl_device_id: str | None,
    gpus: Sequence[Gpu],
    egl_devices: Sequence[EglDevice],
) -> list[RenderPlan]:
    """Where rendering lands for a process started under ``cuda_visible_devices`` and, when that
    shows several GPUs, for a process pinned to each of them alone (as Ray pins one GPU per
    worker). ``mujoco_egl_device_id`` applies to every process, as an exported variable does.

    >>> gpus = [Gpu(0, "GPU-aa"), Gpu(1, "GPU-bb")]
    >>> egl = [EglDevice(0, cuda=0), EglDevice(1, cuda=1)]
    >>> tuple(p.ok for p in plan_rendering(None, None, gpus, egl))  # unset; then pinned to 0; pinned to 1
    (True, True, True)
    """
    by_cuda = {d.cuda: d.index for d in egl_devices if d.cuda is not None}
    by_index = {d.index: d for d in egl_devices}
    visible = visible_cuda_devices(cuda_visible_devices, gpus)
    settings: list[str | None] = [cuda_visible_devices]
    if len(visible.devices) > 1:
        settings += [str(index) for index in visible.devices]
    plans = []
    for setting in settings:
        seen = visible_cuda_devices(setting, gpus).devices
        cuda = seen[0] if seen else None
        egl = chosen_egl_device(setting, mujoco_egl_device_id)
        device = by_index.get(egl)
        plans.append(
            RenderPlan(
                cuda_visible_devices=setting,
                cuda_device=cuda,
                egl_device=egl,
                egl_cuda=device.cuda if device is not None else None,
                right_egl_device=by_cuda.get(cuda) if cuda is not None else None,
                egl_exists=device is not None,
            )
        )
    return plans
