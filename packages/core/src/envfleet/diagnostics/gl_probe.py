"""Probing OpenGL the way a MuJoCo renderer will use it: in a child process, per platform.

A process picks its GL platform once (``MUJOCO_GL``, ``PYOPENGL_PLATFORM``) when OpenGL is
first imported, and a broken driver can crash the process that loads it. So each probe runs
``python -c`` in a child with ``MUJOCO_GL`` and ``PYOPENGL_PLATFORM`` set to the platform,
creates MuJoCo's offscreen context, and reports ``GL_VENDOR``, ``GL_RENDERER`` and
``GL_VERSION``. The EGL probe also lists the EGL devices with the CUDA ordinal NVIDIA's
driver reports for each (``EGL_CUDA_DEVICE_NV``), and the CUDA devices the driver sees,
both with ``CUDA_VISIBLE_DEVICES`` removed so that the numbers are the machine's, in a
separate child that needs no context (:func:`envfleet.shards.gpus.list_devices`): a context
that does not start still leaves the device lists.

>>> probe = probe_gl("osmesa")  # doctest: +SKIP
>>> probe.ok, probe.renderer  # doctest: +SKIP
(True, 'llvmpipe (LLVM 15.0.6, 256 bits)')
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..shards.gpus import Devices, EglDevice, Gpu, list_devices
from ..shards.rendering import is_software_renderer, rasterizer_kind

__all__ = ["PLATFORMS", "GLProbe", "probe_gl", "is_software_renderer", "rasterizer_kind", "gl_env_problem"]

#: The headless platforms MuJoCo renders with on Linux.
PLATFORMS = ("egl", "osmesa")

_PROBE = r"""
import json, os, sys
platform = sys.argv[1]
out = {}
if platform == "egl":
    from mujoco.egl import GLContext
else:
    from mujoco.osmesa import GLContext
ctx = GLContext(8, 8)
ctx.make_current()
from OpenGL import GL
for key in ("vendor", "renderer", "version"):
    value = GL.glGetString(getattr(GL, "GL_" + key.upper()))
    out[key] = value.decode(errors="replace") if value else ""
ctx.free()
print("ENVFLEET_GL_PROBE " + json.dumps(out))
"""


@dataclass
class GLProbe:
    """What one platform's probe found: whether a context started, and what it runs on."""

    platform: str
    ok: bool
    vendor: str = ""
    renderer: str = ""
    version: str = ""
    error: str = ""  # the last line the child wrote, when it failed
    egl_devices: list[EglDevice] = field(default_factory=list)
    gpus: list[Gpu] = field(default_factory=list)
    devices: Devices | None = None  # the EGL probe's device listing, with why a list may be empty

    @property
    def software(self) -> bool:
        """Whether the renderer runs on the CPU (llvmpipe, softpipe, swrast)."""
        return is_software_renderer(self.renderer)

    @property
    def rasterizer(self) -> str:
        """``"GPU"`` or ``"CPU rasterizer"``, as the doctor and a fingerprint name it."""
        return rasterizer_kind(self.renderer)


def probe_gl(
    platform: str,
    timeout_s: float = 60.0,
    python: str | None = None,
    environ: Mapping[str, str] | None = None,
    force_nv_query: bool = False,
) -> GLProbe:
    """Start MuJoCo's ``platform`` (``"egl"`` or ``"osmesa"``) context in a child process and report it.

    For ``"egl"``, the EGL and CUDA device lists come from a second child that needs no context
    (:func:`~envfleet.shards.gpus.list_devices`), so they are there whether the context started or not.

    :param python: the interpreter to probe with (default this one; a simulator's venv may differ).
    :param environ: the environment the child starts from (default ``os.environ``).
    :param force_nv_query: ask every EGL device for its CUDA ordinal, as on NVIDIA (see ``list_devices``).
    """
    if platform not in PLATFORMS:
        raise ValueError(f"platform must be one of {', '.join(PLATFORMS)}, got {platform!r}")
    env = dict(os.environ if environ is None else environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)  # device numbers as the machine has them
    env.update(MUJOCO_GL=platform, PYOPENGL_PLATFORM=platform)
    devices = list_devices(python, env, timeout_s, force_nv_query) if platform == "egl" else None

    def done(ok: bool, error: str = "", vendor: str = "", renderer: str = "", version: str = "") -> GLProbe:
        if devices is None:
            return GLProbe(platform, ok, vendor, renderer, version, error)
        return GLProbe(platform, ok, vendor, renderer, version, error, devices.egl_devices, devices.gpus, devices)

    try:
        proc = subprocess.run(
            [python or sys.executable, "-c", _PROBE, platform],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return done(False, f"no context after {timeout_s:.0f} s")
    except OSError as exc:
        return done(False, str(exc))
    line = next((x for x in proc.stdout.splitlines() if x.startswith("ENVFLEET_GL_PROBE ")), None)
    if proc.returncode != 0 or line is None:
        tail = [x for x in (proc.stderr or "").strip().splitlines() if x.strip()][-1:] or [f"exit code {proc.returncode}"]
        return done(False, tail[0].strip())
    data = json.loads(line.split(" ", 1)[1])
    return done(True, vendor=data["vendor"], renderer=data["renderer"], version=data["version"])


def gl_env_problem(environ: Mapping[str, str]) -> str | None:
    """What is wrong with ``MUJOCO_GL`` / ``PYOPENGL_PLATFORM`` for headless rendering, or ``None``.

    Unset is fine (a backend picks; envfleet-libero tries EGL, then OSMesa). ``MUJOCO_GL`` must
    be a headless platform unless a display is set; ``PYOPENGL_PLATFORM``, when set, must agree
    with it, since robosuite refuses a context whose two settings differ.

    >>> gl_env_problem({"MUJOCO_GL": "egl", "PYOPENGL_PLATFORM": "osmesa"})
    "MUJOCO_GL='egl' but PYOPENGL_PLATFORM='osmesa': they must agree"
    """
    mujoco_gl = environ.get("MUJOCO_GL", "").strip().lower()
    pyopengl = environ.get("PYOPENGL_PLATFORM", "").strip().lower()
    if mujoco_gl and mujoco_gl not in PLATFORMS:
        if mujoco_gl in ("glfw", "glx") and environ.get("DISPLAY"):
            return None
        why = "needs a display and DISPLAY is unset" if mujoco_gl in ("glfw", "glx") else "is not a platform MuJoCo renders with headless"
        return f"MUJOCO_GL={mujoco_gl!r} {why}"
    if mujoco_gl and pyopengl and pyopengl != mujoco_gl:
        return f"MUJOCO_GL={mujoco_gl!r} but PYOPENGL_PLATFORM={pyopengl!r}: they must agree"
    if not mujoco_gl and pyopengl and pyopengl not in PLATFORMS:
        return f"PYOPENGL_PLATFORM={pyopengl!r} is not a headless platform (egl, osmesa)"
    return None
