"""GL probes on this machine's real EGL and OSMesa (Mesa llvmpipe), and the platform settings check."""

from __future__ import annotations

import os
import sys

import pytest

from envfleet.diagnostics.gl_probe import gl_env_problem, is_software_renderer, probe_gl


@pytest.mark.parametrize("platform", ["egl", "osmesa"])
def test_probe_starts_a_real_context(platform) -> None:
    probe = probe_gl(platform)
    assert probe.ok, probe.error
    assert probe.renderer and probe.vendor and probe.version
    assert probe.software  # this machine has no GPU: llvmpipe
    assert probe.egl_devices if platform == "egl" else not probe.egl_devices
    assert all(d.cuda is None for d in probe.egl_devices)  # Mesa devices report no CUDA ordinal


def test_probe_reports_a_failure_as_one_line() -> None:
    probe = probe_gl("egl", environ={**os.environ, "MUJOCO_EGL_DEVICE_ID": "99"})
    assert not probe.ok
    assert "MUJOCO_EGL_DEVICE_ID" in probe.error and "\n" not in probe.error


def test_probe_with_a_missing_interpreter_fails_cleanly() -> None:
    probe = probe_gl("osmesa", python=sys.executable + "-no-such")
    assert not probe.ok and "No such file" in probe.error


def test_unknown_platform_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="egl, osmesa"):
        probe_gl("glfw")


@pytest.mark.parametrize(
    ("environ", "problem"),
    [
        ({}, None),
        ({"MUJOCO_GL": "egl"}, None),
        ({"MUJOCO_GL": "osmesa", "PYOPENGL_PLATFORM": "osmesa"}, None),
        ({"MUJOCO_GL": "EGL", "PYOPENGL_PLATFORM": "egl"}, None),
        ({"MUJOCO_GL": "egl", "PYOPENGL_PLATFORM": "osmesa"}, "they must agree"),
        ({"MUJOCO_GL": "glfw"}, "needs a display"),
        ({"MUJOCO_GL": "glfw", "DISPLAY": ":0"}, None),
        ({"MUJOCO_GL": "vulkan"}, "is not a platform"),
        ({"PYOPENGL_PLATFORM": "x11"}, "not a headless platform"),
    ],
    ids=["unset", "egl", "both-osmesa", "case", "disagree", "glfw-headless", "glfw-display", "unknown", "pyopengl-x11"],
)
def test_gl_env_problem(environ, problem) -> None:
    found = gl_env_problem(environ)
    assert found is None if problem is None else problem in (found or "")


def test_software_renderer_names() -> None:
    assert is_software_renderer("llvmpipe (LLVM 15.0.6, 256 bits)")
    assert is_software_renderer("softpipe")
    assert not is_software_renderer("NVIDIA GeForce RTX 4090/PCIe/SSE2")


def test_egl_probe_forced_nvidia_branch_on_mesa() -> None:
    # The EGL_CUDA_DEVICE_NV query runs only for devices with EGL_NV_device_cuda, never on Mesa; forced
    # here, it must run on every device and fail cleanly (EGL_BAD_ATTRIBUTE), not raise in ctypes.
    probe = probe_gl("egl", force_nv_query=True)
    assert probe.ok, probe.error
    assert probe.devices is not None and probe.devices.egl_error == ""
    assert probe.devices.nv_queried == [d.index for d in probe.egl_devices] and probe.egl_devices
    assert all(d.cuda is None for d in probe.egl_devices)


def test_devices_are_listed_when_the_egl_context_fails() -> None:
    probe = probe_gl("egl", environ={**os.environ, "MUJOCO_EGL_DEVICE_ID": "99"})
    assert not probe.ok
    assert probe.egl_devices and probe.devices is not None  # listed by the step that needs no context
    assert "libcuda.so.1" in probe.devices.cuda_error  # no CUDA driver here, and the reason is said


def test_listing_from_a_missing_interpreter_says_why() -> None:
    from envfleet.shards.gpus import list_devices

    devices = list_devices(python=sys.executable + "-no-such")
    assert not devices.egl_devices and "No such file" in devices.egl_error and "No such file" in devices.cuda_error


def test_rasterizer_kind_names_gpu_and_cpu() -> None:
    from envfleet.diagnostics.gl_probe import rasterizer_kind

    assert rasterizer_kind("llvmpipe (LLVM 15.0.6, 256 bits)") == "CPU rasterizer"
    assert rasterizer_kind("NVIDIA H200/PCIe/SSE2") == "GPU"
