"""What renders a shard's images, for a result's protocol fingerprint.

The same state rendered by NVIDIA's driver and by Mesa's llvmpipe differs on a quarter of
the pixels of a 224x224 frame, so a fingerprint records whether the images came from a GPU
or a CPU rasterizer, and which. A shard answers ``renderer_info`` with its GL platform
(``MUJOCO_GL``, ``PYOPENGL_PLATFORM``), what its env reports
(:meth:`envfleet.env.Env.renderer_info`), and, where the env has not said, the strings of the
GL context current in the shard (MuJoCo's renderer leaves its context current) and the
rendering stack it loaded (``render_stack``: ``mujoco`` or ``sapien``), so that a backend that
renders without declaring ``BackendSpec.renderer`` is still recorded, and flagged by the
conformance suite.

>>> record({"MUJOCO_GL": "egl"}, {"gl_vendor": "Mesa", "gl_renderer": "llvmpipe (LLVM 15.0.7, 256 bits)"}, {})["rasterizer"]
'CPU rasterizer'
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

__all__ = ["is_software_renderer", "rasterizer_kind", "current_gl_strings", "loaded_render_stack", "record"]


def is_software_renderer(renderer: str) -> bool:
    """Whether a ``GL_RENDERER`` string names a CPU rasterizer.

    >>> is_software_renderer("llvmpipe (LLVM 15.0.6, 256 bits)"), is_software_renderer("NVIDIA A100-SXM4-40GB/PCIe/SSE2")
    (True, False)
    """
    lowered = renderer.lower()
    return any(word in lowered for word in ("llvmpipe", "softpipe", "swrast", "software rasterizer", "lavapipe"))


def rasterizer_kind(renderer: str) -> str:
    """``"CPU rasterizer"`` for llvmpipe and its kin, else ``"GPU"``.

    >>> rasterizer_kind("llvmpipe (LLVM 15.0.6, 256 bits)"), rasterizer_kind("NVIDIA H200/PCIe/SSE2")
    ('CPU rasterizer', 'GPU')
    """
    return "CPU rasterizer" if is_software_renderer(renderer) else "GPU"


def current_gl_strings() -> dict[str, str]:
    """``gl_vendor``, ``gl_renderer``, ``gl_version`` of the GL context current in this thread.

    Empty when this process never loaded PyOpenGL (it does not render through it) or no
    context is current. MuJoCo on EGL loads PyOpenGL's EGL, not its GL: GL is imported here
    then, on the platform already chosen.
    """
    if "OpenGL" not in sys.modules:
        return {}
    try:
        from OpenGL import GL  # only once the backend has loaded PyOpenGL: its first import picks the platform

        out = {}
        for key, enum in (("gl_vendor", GL.GL_VENDOR), ("gl_renderer", GL.GL_RENDERER), ("gl_version", GL.GL_VERSION)):
            value = GL.glGetString(enum)
            if value:
                out[key] = value.decode(errors="replace")
        return out
    except Exception:  # no current context, or a platform that cannot answer: nothing to record
        return {}


def loaded_render_stack(modules: Mapping[str, object] | None = None) -> str | None:
    """The rendering stack this process loaded: ``"mujoco"`` (MuJoCo's GL renderer), ``"sapien"``, or ``None``."""
    loaded = sys.modules if modules is None else modules
    if "sapien" in loaded:
        return "sapien"
    # MuJoCo imports its GL platform's module only when it makes an offscreen context.
    if any(f"mujoco.{platform}" in loaded for platform in ("egl", "osmesa", "glfw")):
        return "mujoco"
    return None


def record(environ: Mapping[str, str], env_info: Mapping[str, str], gl: Mapping[str, str], stack: str | None = None) -> dict[str, str]:
    """A shard's renderer record: its GL platform, then ``env_info`` (the env's own answer), then
    ``gl`` where the env said nothing, and ``rasterizer`` (``GPU`` or ``CPU rasterizer``) from
    the GL renderer string when there is one."""
    info = {k.lower(): environ[k] for k in ("MUJOCO_GL", "PYOPENGL_PLATFORM") if environ.get(k)}
    info.update({str(k): str(v) for k, v in env_info.items()})
    for key, value in gl.items():
        info.setdefault(key, value)
    if info.get("gl_renderer") and "rasterizer" not in info:
        info["rasterizer"] = rasterizer_kind(info["gl_renderer"])
    if stack is not None:
        info.setdefault("render_stack", stack)
    return info
