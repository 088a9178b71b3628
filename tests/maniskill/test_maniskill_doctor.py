"""``envfleet doctor`` names the Vulkan device SAPIEN renders on, and gives the fix when none starts."""

from __future__ import annotations

import io

import pytest

from envfleet_ray.commands.doctor import doctor


def test_doctor_names_the_vulkan_device_and_says_it_is_software() -> None:
    out = io.StringIO()
    assert doctor(["maniskill"], out=out) == 0, out.getvalue()
    line = next(x for x in out.getvalue().splitlines() if "Vulkan for maniskill" in x)
    assert line.startswith("ok") and "llvmpipe" in line and "software renderer on the CPU" in line


def test_doctor_fails_with_the_fix_when_no_vulkan_driver_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VK_ICD_FILENAMES", "/nonexistent/icd.json")
    out = io.StringIO()
    assert doctor(["maniskill"], out=out) == 1
    lines = out.getvalue().splitlines()
    i = next(i for i, x in enumerate(lines) if "Vulkan does not start for maniskill" in x)
    assert lines[i].startswith("FAIL") and "VK_ICD_FILENAMES=/nonexistent/icd.json" in lines[i]
    assert "fix:" in lines[i + 1] and "scripts/bootstrap" in lines[i + 1]


def test_doctor_looks_for_the_physx_gpu_library_in_an_empty_sapien_cache(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from envfleet_ray.commands.doctor import physx_finding

    monkeypatch.setenv("HOME", str(tmp_path))  # SAPIEN's cache (~/.sapien/physx/<version>/) is an empty folder
    finding = physx_finding(["maniskill"], gpu=True)  # as on a GPU host, which this machine is not
    assert finding.status == "warn" and f"{tmp_path}/.sapien/physx/" in finding.what and "is absent" in finding.what
    assert "unzip" in finding.fix and "physx-precompiled" in finding.fix
    assert physx_finding(["maniskill"], gpu=False).status == "ok"
