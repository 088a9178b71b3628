"""Choosing MuJoCo's GL platform before mujoco/robosuite are imported.

robosuite picks its GL context class (EGL or OSMesa) when it is first imported,
from ``MUJOCO_GL``, and PyOpenGL fixes its platform from ``PYOPENGL_PLATFORM`` on
its first import; neither can change afterwards in the same process. So the choice,
and the EGL fallback, happen here, in the shard process, before the first import of
the simulator. Nothing in this module imports a GL library itself.
"""

from __future__ import annotations

import os
import subprocess
import sys

from envfleet.diagnostics.egl_cuda import chosen_egl_device

__all__ = ["configure_gl", "egl_device_from_cuda"]

# Creates and frees one EGL context the way robosuite does (device platform,
# MUJOCO_EGL_DEVICE_ID), in a child process so that a broken driver cannot take the shard down.
_EGL_PROBE = "from mujoco.egl import GLContext\nctx = GLContext(8, 8)\nctx.make_current()\nctx.free()\n"

_chosen: str | None = None


def egl_device_from_cuda(cuda_visible_devices: str | None) -> str | None:
    """The EGL device to use for a ``CUDA_VISIBLE_DEVICES`` value: its first entry.

    ``None`` when the variable is unset. An empty value (no GPU visible) or a
    non-numeric first entry (a GPU UUID, which EGL cannot be asked for) gives ``"0"``
    so that robosuite, which parses the variable itself, does not fail on it.

    >>> egl_device_from_cuda("3,1"), egl_device_from_cuda(""), egl_device_from_cuda(None)
    ('3', '0', None)
    """
    if cuda_visible_devices is None:
        return None
    return str(chosen_egl_device(cuda_visible_devices, None))


def _egl_works(timeout_s: float = 120.0) -> tuple[bool, str]:
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _EGL_PROBE],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, "MUJOCO_GL": "egl", "PYOPENGL_PLATFORM": "egl"},
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    tail = (proc.stderr or "").strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
    return proc.returncode == 0, tail[0]


def configure_gl(preferred: str = "egl", probe: bool = True) -> str:
    """Set ``MUJOCO_GL`` / ``PYOPENGL_PLATFORM`` (and the EGL device) for this process; return the platform.

    ``MUJOCO_GL`` from the environment wins over ``preferred``. With ``egl``, where
    ``CUDA_VISIBLE_DEVICES`` is set and ``MUJOCO_EGL_DEVICE_ID`` is not, the first
    visible device is used. If EGL cannot create a context (checked once, in a child
    process), the process falls back to ``osmesa`` and says so on stderr. Must run
    before mujoco, robosuite or OpenGL are imported; later calls return the first answer.
    """
    global _chosen
    if _chosen is not None:
        return _chosen
    os.environ.setdefault("MUJOCO_GL", preferred)
    gl = os.environ["MUJOCO_GL"].strip().lower()
    if gl == "egl":
        device = egl_device_from_cuda(os.environ.get("CUDA_VISIBLE_DEVICES"))
        if device is not None:
            os.environ.setdefault("MUJOCO_EGL_DEVICE_ID", device)
        gl_imported = "OpenGL" in sys.modules or "robosuite" in sys.modules
        if probe and not gl_imported:
            ok, why = _egl_works()
            if not ok:
                sys.stderr.write(f"envfleet-libero: EGL rendering is unavailable ({why}); falling back to MUJOCO_GL=osmesa\n")
                sys.stderr.flush()
                gl = "osmesa"
                os.environ["MUJOCO_GL"] = gl
    if gl in ("egl", "osmesa") and "OpenGL" not in sys.modules:
        # robosuite's context modules refuse a PYOPENGL_PLATFORM that differs from MUJOCO_GL.
        os.environ["PYOPENGL_PLATFORM"] = gl
    _chosen = gl
    return gl
