"""Probing Vulkan the way SAPIEN (ManiSkill's renderer) will use it: in a child process.

The child loads the Vulkan loader (``libvulkan.so.1``) with ctypes, creates an instance
and lists the physical devices with their names and types, under the environment a
Vulkan-rendering backend sets up: ``VK_ICD_FILENAMES`` as given, else, on a machine
without an NVIDIA GPU, the lavapipe ICD file that ``scripts/bootstrap`` writes. A
broken driver can crash the process that loads it, hence the child.

>>> probe = probe_vulkan()  # doctest: +SKIP
>>> probe.ok, probe.devices[0].name, probe.devices[0].software  # doctest: +SKIP
(True, 'llvmpipe (LLVM 15.0.6, 256 bits)', True)
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["VulkanDevice", "VulkanProbe", "lavapipe_icd", "vulkan_env", "probe_vulkan", "VULKAN_FIX"]

#: What to do when no Vulkan device can render.
VULKAN_FIX = (
    "run scripts/bootstrap (it installs the Vulkan loader, libvulkan1, and unpacks Mesa 25's lavapipe from Debian "
    "bookworm-backports), or point VK_ICD_FILENAMES at a Vulkan ICD file (the NVIDIA driver's nvidia_icd.json on a GPU)"
)

# VkPhysicalDeviceType: 0 other, 1 integrated GPU, 2 discrete GPU, 3 virtual GPU, 4 CPU.
_TYPES = {0: "other", 1: "integrated GPU", 2: "discrete GPU", 3: "virtual GPU", 4: "CPU"}

_PROBE = r"""
import ctypes, json
out = {"devices": []}
try:
    vk = ctypes.CDLL("libvulkan.so.1")
except OSError as exc:
    out["error"] = f"no Vulkan loader: {exc}"
    print(json.dumps(out)); raise SystemExit
class AppInfo(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int), ("pNext", ctypes.c_void_p), ("pApplicationName", ctypes.c_char_p),
                ("applicationVersion", ctypes.c_uint32), ("pEngineName", ctypes.c_char_p), ("engineVersion", ctypes.c_uint32),
                ("apiVersion", ctypes.c_uint32)]
class CreateInfo(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int), ("pNext", ctypes.c_void_p), ("flags", ctypes.c_uint32), ("pApplicationInfo", ctypes.POINTER(AppInfo)),
                ("enabledLayerCount", ctypes.c_uint32), ("ppEnabledLayerNames", ctypes.c_void_p),
                ("enabledExtensionCount", ctypes.c_uint32), ("ppEnabledExtensionNames", ctypes.c_void_p)]
app = AppInfo(0, None, b"envfleet-doctor", 1, b"envfleet", 1, (1 << 22) | (1 << 12))
info = CreateInfo(1, None, 0, ctypes.pointer(app), 0, None, 0, None)
instance = ctypes.c_void_p()
code = vk.vkCreateInstance(ctypes.byref(info), None, ctypes.byref(instance))
if code != 0:
    out["error"] = f"vkCreateInstance failed with VkResult {code} (no usable driver: VK_ERROR_INCOMPATIBLE_DRIVER is -9)"
    print(json.dumps(out)); raise SystemExit
count = ctypes.c_uint32(0)
vk.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), None)
handles = (ctypes.c_void_p * count.value)()
vk.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), handles)
for handle in handles:
    props = ctypes.create_string_buffer(4096)  # VkPhysicalDeviceProperties; the fields read are at fixed offsets
    vk.vkGetPhysicalDeviceProperties(ctypes.c_void_p(handle), props)
    api, driver, vendor, device, kind = (int.from_bytes(props.raw[i:i + 4], "little") for i in range(0, 20, 4))
    name = props.raw[20:276].split(b"\0", 1)[0].decode(errors="replace")
    out["devices"].append({"name": name, "type": kind, "api": f"{api >> 22}.{(api >> 12) & 0x3FF}.{api & 0xFFF}", "vendor": vendor})
vk.vkDestroyInstance(instance, None)
print(json.dumps(out))
"""


@dataclass(frozen=True)
class VulkanDevice:
    """One Vulkan physical device."""

    name: str
    kind: str  # "discrete GPU", "CPU", ...
    api: str  # the Vulkan version the driver offers

    @property
    def software(self) -> bool:
        """A CPU rasterizer (lavapipe, SwiftShader), not a GPU."""
        return self.kind == "CPU"


@dataclass
class VulkanProbe:
    """What the child found: ``ok`` with ``devices``, else ``error``; ``icd`` is the ICD file it was given ('' if none)."""

    ok: bool
    icd: str = ""
    devices: list[VulkanDevice] = field(default_factory=list)
    error: str = ""


def lavapipe_icd() -> str:
    """Where ``scripts/vulkan-lavapipe`` (run by ``scripts/bootstrap``) writes lavapipe's ICD file."""
    base = os.environ.get("ENVFLEET_VULKAN_DIR") or os.path.join(
        os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share"), "envfleet", "vulkan"
    )
    return os.path.join(base, "lvp_icd.json")


def vulkan_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment a CPU-rendering backend runs SAPIEN under: ``VK_ICD_FILENAMES`` kept if set, else bootstrap's
    lavapipe when there is no NVIDIA GPU and the file exists."""
    env = dict(environ)
    gpu = bool(glob.glob("/proc/driver/nvidia/gpus/*"))
    if not env.get("VK_ICD_FILENAMES") and not gpu and os.path.isfile(lavapipe_icd()):
        env["VK_ICD_FILENAMES"] = lavapipe_icd()
    return env


def probe_vulkan(timeout_s: float = 120.0) -> VulkanProbe:
    """List the Vulkan devices a renderer would see, in a child process."""
    env = vulkan_env(os.environ)
    icd = env.get("VK_ICD_FILENAMES", "")
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        return VulkanProbe(False, icd, error=f"the Vulkan probe did not finish within {timeout_s:.0f} s")
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = [x.strip() for x in proc.stderr.splitlines() if x.strip()][-1:] or [f"exit code {proc.returncode}"]
        return VulkanProbe(False, icd, error=f"the Vulkan probe crashed: {tail[0]}")
    data = json.loads(lines[-1])
    devices = [VulkanDevice(d["name"], _TYPES.get(int(d["type"]), "other"), d["api"]) for d in data["devices"]]
    if data.get("error"):
        return VulkanProbe(False, icd, error=str(data["error"]))
    if not devices:
        return VulkanProbe(False, icd, error="the Vulkan loader found no device")
    return VulkanProbe(True, icd, devices)
