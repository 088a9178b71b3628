"""The machine's CUDA GPUs and EGL devices, listed without a GL context.

A renderer is chosen by EGL device index, a policy's GPU by CUDA ordinal, and the two
numberings differ. NVIDIA's EGL reports each device's CUDA ordinal (``EGL_CUDA_DEVICE_NV``,
queried through ``eglQueryDeviceAttribEXT`` as an ``intptr_t``, the function taken from
``eglGetProcAddress`` as MuJoCo's own EGL code takes its EGL extensions). None of this needs
a GL context or a display, so when a context does not start the GPUs are still listed and
the mapping can still be checked.

The listing runs ``python -c`` in a child process (a broken driver can crash the process
that loads it), with ``CUDA_VISIBLE_DEVICES`` removed so that the numbers are the
machine's. The child prints the CUDA list before it touches EGL, so a crash in EGL still
leaves the GPUs.

>>> devices = list_devices()  # doctest: +SKIP
>>> [d.software for d in devices.egl_devices], devices.gpus  # doctest: +SKIP
([True], [])
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..render_device import RenderPick, check_render_device, pick_render_device, visible_cuda_devices

__all__ = [
    "Gpu",
    "EglDevice",
    "Devices",
    "list_devices",
    "EGL_CUDA_DEVICE_NV",
    "nvidia_driver_present",
    "stage_devices",
    "shard_render_environ",
]

#: The attribute NVIDIA's ``EGL_NV_device_cuda`` extension answers with a device's CUDA ordinal.
EGL_CUDA_DEVICE_NV = 0x323A


@dataclass(frozen=True)
class Gpu:
    """A CUDA device as CUDA numbers it when ``CUDA_VISIBLE_DEVICES`` is unset."""

    index: int  # CUDA ordinal, in the order CUDA_DEVICE_ORDER gives
    uuid: str  # "GPU-8d2c1b6e-...", as nvidia-smi and CUDA_VISIBLE_DEVICES spell it
    name: str = ""


@dataclass(frozen=True)
class EglDevice:
    """An EGL device (``eglQueryDevicesEXT`` order) and the CUDA ordinal it reports, if any."""

    index: int
    cuda: int | None = None  # EGL_CUDA_DEVICE_NV; None for a device without EGL_NV_device_cuda (Mesa, llvmpipe)
    name: str = ""  # its EGL extensions or driver, for messages

    @property
    def software(self) -> bool:
        """Whether this is Mesa's CPU rasterizer (``EGL_MESA_device_software``)."""
        return "EGL_MESA_device_software" in self.name


@dataclass(frozen=True)
class Devices:
    """What :func:`list_devices` found; an error string says why a list may be empty."""

    gpus: list[Gpu] = field(default_factory=list)
    egl_devices: list[EglDevice] = field(default_factory=list)
    cuda_error: str = ""  # "" when CUDA answered (an empty list then means no GPU)
    egl_error: str = ""  # "" when EGL listed its devices
    nv_queried: list[int] = field(default_factory=list)  # EGL devices asked for EGL_CUDA_DEVICE_NV

    @property
    def nvidia_egl(self) -> list[EglDevice]:
        """The EGL devices that report a CUDA ordinal (NVIDIA's)."""
        return [d for d in self.egl_devices if d.cuda is not None]


_LIST = r"""
import ctypes, json, sys
force_nv = "force-nv-query" in sys.argv[1:]
cuda = {"gpus": [], "error": ""}
try:
    cu = ctypes.CDLL("libcuda.so.1")
except OSError as exc:
    cu = None
    cuda["error"] = "no CUDA driver (libcuda.so.1 does not load)"
count = ctypes.c_int(0)
if cu is not None:
    rc = cu.cuInit(0)
    if rc != 0:
        cuda["error"] = "cuInit failed with CUDA error %d" % rc
    elif cu.cuDeviceGetCount(ctypes.byref(count)) == 0:
        for index in range(count.value):
            dev, raw, name = ctypes.c_int(0), (ctypes.c_ubyte * 16)(), ctypes.create_string_buffer(256)
            if cu.cuDeviceGet(ctypes.byref(dev), index) or cu.cuDeviceGetUuid(raw, dev):
                continue
            cu.cuDeviceGetName(name, 256, dev)
            h = bytes(raw).hex()
            uuid = "GPU-" + "-".join((h[:8], h[8:12], h[12:16], h[16:20], h[20:]))
            cuda["gpus"].append({"index": index, "uuid": uuid, "name": name.value.decode(errors="replace")})
print("ENVFLEET_DEVICES cuda " + json.dumps(cuda), flush=True)
egl = {"devices": [], "error": "", "nv_queried": []}
try:
    lib = ctypes.CDLL("libEGL.so.1")
    lib.eglGetProcAddress.restype = ctypes.c_void_p
    lib.eglGetProcAddress.argtypes = [ctypes.c_char_p]
    def proc(name, restype, *argtypes):
        address = lib.eglGetProcAddress(name.encode())
        if not address:
            raise RuntimeError(name + " is not available (no EGL_EXT_device_query)")
        return ctypes.CFUNCTYPE(restype, *argtypes)(address)
    query_devices = proc("eglQueryDevicesEXT", ctypes.c_uint, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int))
    query_string = proc("eglQueryDeviceStringEXT", ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int)
    # EGLAttrib is intptr_t: ctypes.c_ssize_t has its size on every platform CPython runs on.
    query_attrib = proc("eglQueryDeviceAttribEXT", ctypes.c_uint, ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_ssize_t))
    devices, found = (ctypes.c_void_p * 64)(), ctypes.c_int(0)
    if not query_devices(64, devices, ctypes.byref(found)):
        raise RuntimeError("eglQueryDevicesEXT failed, EGL error 0x%x" % lib.eglGetError())
    for index in range(found.value):
        ext = query_string(devices[index], 0x3055) or b""  # EGL_EXTENSIONS
        ext = ext.decode(errors="replace")
        value = None
        if "EGL_NV_device_cuda" in ext or force_nv:
            egl["nv_queried"].append(index)
            attrib = ctypes.c_ssize_t(-1)
            if query_attrib(devices[index], 0x323A, ctypes.byref(attrib)):  # EGL_CUDA_DEVICE_NV
                value = int(attrib.value)
            else:
                lib.eglGetError()  # clear EGL_BAD_ATTRIBUTE
        egl["devices"].append({"index": index, "cuda": value, "name": ext.strip()})
except Exception as exc:
    egl["error"] = "%s: %s" % (type(exc).__name__, exc)
print("ENVFLEET_DEVICES egl " + json.dumps(egl), flush=True)
"""


def list_devices(
    python: str | None = None,
    environ: Mapping[str, str] | None = None,
    timeout_s: float = 60.0,
    force_nv_query: bool = False,
) -> Devices:
    """List CUDA GPUs and EGL devices in a child process; never raises for a broken driver.

    :param python: the interpreter to list with (default this one).
    :param environ: the environment the child starts from (default ``os.environ``).
    :param force_nv_query: ask every EGL device for ``EGL_CUDA_DEVICE_NV``, not only NVIDIA's
        (on Mesa the query then runs and fails cleanly: how tests reach the NVIDIA code path).
    """
    env = dict(os.environ if environ is None else environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)  # device numbers as the machine has them
    argv = [python or sys.executable, "-c", _LIST, *(["force-nv-query"] if force_nv_query else [])]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env, stdin=subprocess.DEVNULL)
        stdout, stderr, code = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        stdout, stderr, code = out, f"no answer within {timeout_s:.0f} s", None
    except OSError as exc:
        return Devices(cuda_error=str(exc), egl_error=str(exc))
    parts: dict[str, dict] = {}
    for line in stdout.splitlines():
        if line.startswith("ENVFLEET_DEVICES "):
            _, kind, payload = line.split(" ", 2)
            parts[kind] = json.loads(payload)
    tail = [x.strip() for x in (stderr or "").splitlines() if x.strip()][-1:] or [f"exit code {code}"]
    died = f"the listing process died: {tail[0]}"
    cuda = parts.get("cuda", {"gpus": [], "error": died})
    egl = parts.get("egl", {"devices": [], "error": died, "nv_queried": []})
    return Devices(
        gpus=[Gpu(g["index"], g["uuid"], g["name"]) for g in cuda["gpus"]],
        egl_devices=[EglDevice(d["index"], d["cuda"], d["name"]) for d in egl["devices"]],
        cuda_error=str(cuda["error"]),
        egl_error=str(egl["error"]),
        nv_queried=[int(i) for i in egl["nv_queried"]],
    )


def nvidia_driver_present() -> bool:
    """Whether this node has NVIDIA's kernel driver loaded (judged from ``/proc`` and ``/dev``, no child process)."""
    return bool(glob.glob("/proc/driver/nvidia/gpus/*")) or os.path.exists("/dev/nvidiactl")


def stage_devices(setting: Any, environ: Mapping[str, str], python: str | None = None) -> Devices | None:
    """The device lists a stage's render devices are picked from, or ``None`` when nothing is to be picked:
    ``auto`` on a node without NVIDIA's driver (Mesa's default device renders), or ``auto`` with
    ``MUJOCO_EGL_DEVICE_ID`` set by the user (their choice stands)."""
    if check_render_device(setting) == "auto" and (not nvidia_driver_present() or environ.get("MUJOCO_EGL_DEVICE_ID")):
        return None
    return list_devices(python, environ)


def shard_render_environ(
    setting: Any, renderer: str | None, slot: int, environ: Mapping[str, str], devices: Devices | None
) -> tuple[dict[str, str], RenderPick | None]:
    """The variables a shard's process gets for ``train.render_device`` (and the pick behind them).

    MuJoCo (any backend not rendering through Vulkan): ``MUJOCO_EGL_DEVICE_ID``, and
    ``__GL_YIELD=USLEEP`` on an NVIDIA device unless the user set it (the driver spins while it
    waits otherwise: 16 shards burned 14.5 cores, 3.5 with it, at the same frame rate). ``cpu``:
    Mesa's software EGL device, else OSMesa. SAPIEN (``renderer="vulkan"``): ``ENVFLEET_RENDER_DEVICE``,
    ``cuda:K`` in the process's own CUDA numbering, which envfleet-maniskill hands to ManiSkill.

    :param slot: the shard's place among the worker's shards (spreads them over GPUs).
    :raises ConfigError: for an explicit CUDA device the node does not have.
    """
    if devices is None:
        return {}, None
    egl_of_cuda = {d.cuda: d.index for d in devices.egl_devices if d.cuda is not None}
    node = sorted(g.index for g in devices.gpus)
    worker = visible_cuda_devices(environ.get("CUDA_VISIBLE_DEVICES"), devices.gpus).devices
    pick = pick_render_device(setting, slot, worker, node, egl_of_cuda)
    out: dict[str, str] = {}
    if renderer == "vulkan":
        if pick.cuda is not None and pick.cuda in worker:
            out["ENVFLEET_RENDER_DEVICE"] = f"cuda:{worker.index(pick.cuda)}"
        return out, pick
    if pick.cpu:
        software = [d.index for d in devices.egl_devices if d.software]
        if software:
            out["MUJOCO_EGL_DEVICE_ID"] = str(software[0])
        else:
            out.update(MUJOCO_GL="osmesa", PYOPENGL_PLATFORM="osmesa")
        return out, pick
    if pick.egl is not None:
        out["MUJOCO_EGL_DEVICE_ID"] = str(pick.egl)
        if pick.cuda is not None and "__GL_YIELD" not in environ:
            out["__GL_YIELD"] = "USLEEP"
    return out, pick
