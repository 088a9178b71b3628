"""`envfleet doctor` on this machine (real EGL and OSMesa on llvmpipe, real toy and LIBERO envs),
and its GPU findings on fake device lists (this machine has no NVIDIA GPU)."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

from envfleet import plugins
from envfleet.diagnostics.egl_cuda import EglDevice, Gpu

ENVFLEET = [sys.executable, "-m", "envfleet_ray.cli"]


GL_VARS = ("MUJOCO_GL", "PYOPENGL_PLATFORM", "MUJOCO_EGL_DEVICE_ID")


def run(*args: str, timeout: float = 600, **env: str) -> subprocess.CompletedProcess[str]:
    """The command in a subprocess, with the GL variables of this environment (nox sets them) replaced by ``env``'s."""
    base = {k: v for k, v in os.environ.items() if k not in GL_VARS}
    return subprocess.run([*ENVFLEET, *args], capture_output=True, text=True, timeout=timeout, env={**base, **env})


def line_of(text: str, start: str) -> str:
    found = [x for x in text.splitlines() if x.startswith(start)]
    assert found, f"no line starting {start!r} in:\n{text}"
    return found[0]


@pytest.fixture
def only_good_plugins(monkeypatch):
    """The toy and LIBERO plugins registered explicitly; the test venv's broken ones are not loaded."""
    import envfleet_libero.plugin
    import envfleet_toy.plugin

    monkeypatch.setenv(plugins.DISABLE_AUTOLOAD_ENV, "1")
    for var in ("MUJOCO_GL", "PYOPENGL_PLATFORM", "MUJOCO_EGL_DEVICE_ID", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(var, raising=False)
    plugins.reset_plugins()
    plugins.register_plugin(envfleet_toy.plugin, "toy")
    plugins.register_plugin(envfleet_libero.plugin, "libero")
    yield
    plugins.reset_plugins()


def doctor_out(*names: str, measure: bool = False) -> tuple[int, str]:
    from envfleet_ray.commands.doctor import doctor

    out = io.StringIO()
    code = doctor(list(names), measure=measure, out=out)
    return code, out.getvalue()


def test_doctor_on_this_machine_lists_the_broken_plugins_and_exits_1() -> None:
    out = run("doctor", MUJOCO_GL="egl")
    assert out.returncode == 1, out.stdout + out.stderr
    text = out.stdout
    assert "FAIL  plugin broken failed to import: ImportError" in text and "unobtainium" in text
    assert "FAIL  plugin typo has an invalid hook" in text
    assert "fix: install what it imports, or `pip uninstall envfleet-broken`" in text
    assert "ok    backend libero imports" in text and "ok    backend toy imports" in text
    assert "ok    GL settings: MUJOCO_GL=egl, PYOPENGL_PLATFORM=unset: agree" in text
    assert "llvmpipe" in line_of(text, "ok    egl starts for libero") and "(CPU rasterizer)" in text
    assert "llvmpipe" in line_of(text, "ok    osmesa starts for libero")
    assert out.stderr == ""


def test_doctor_exits_0_when_all_is_well(only_good_plugins) -> None:
    code, text = doctor_out()
    assert code == 0, text
    assert "FAIL" not in text and "warn" not in text
    assert (
        line_of(text, "ok    backends installed:") == "ok    backends installed: libero (envfleet-libero 0.1.0), toy (envfleet-toy 0.1.0)"
    )
    assert "ok    GL settings: MUJOCO_GL=unset, PYOPENGL_PLATFORM=unset: a backend picks (EGL, else OSMesa)" in text
    assert "Mesa" in line_of(text, "ok    egl starts for libero:")
    assert "ok    NVIDIA GPUs: none found" in text


def test_named_backend_without_rendering_skips_the_gl_probes(only_good_plugins) -> None:
    code, text = doctor_out("toy")
    assert code == 0, text
    assert "ok    rendering: no backend checked needs OpenGL (toy)" in text
    assert "egl starts" not in text and "libero" not in text.split("\n", 2)[2]


def test_disagreeing_gl_settings_fail_with_a_fix(only_good_plugins, monkeypatch) -> None:
    monkeypatch.setenv("MUJOCO_GL", "egl")
    monkeypatch.setenv("PYOPENGL_PLATFORM", "osmesa")
    code, text = doctor_out("libero")
    assert code == 1
    assert "FAIL  GL settings: MUJOCO_GL='egl' but PYOPENGL_PLATFORM='osmesa': they must agree" in text
    assert "fix: export MUJOCO_GL=egl (or osmesa)" in text


def test_egl_that_cannot_start_fails_when_asked_for_and_warns_otherwise(only_good_plugins, monkeypatch) -> None:
    monkeypatch.setenv("MUJOCO_EGL_DEVICE_ID", "99")  # no such EGL device here: EGL cannot start
    code, text = doctor_out("libero")
    assert code == 0, text  # OSMesa starts, and nothing asked for EGL: LIBERO falls back
    assert "MUJOCO_EGL_DEVICE_ID" in line_of(text, "warn  egl does not start for libero:")
    assert "fix: apt-get install libegl1" in text
    monkeypatch.setenv("MUJOCO_GL", "egl")
    code, text = doctor_out("libero")
    assert code == 1
    assert line_of(text, "FAIL  egl does not start for libero:")


def test_measure_toy_reports_times_memory_and_capacity(only_good_plugins) -> None:
    code, text = doctor_out("toy", "train.toy.envs_per_process=3", "train.num_envs=3", measure=True)
    assert code == 0, text
    measured = line_of(text, "ok    toy: 3 env(s) in one process build in")
    assert "step a chunk of 8 in" in measured and "render last" in measured and "render all" in measured
    assert "GB per env (PSS, 3 env(s) measured)" in measured
    cores = len(os.sched_getaffinity(0))
    held = line_of(text, "ok    toy: this machine holds")
    assert f"{3 * cores} env(s) at 3 env(s) per process" in held and f"{3 * cores} by {cores} cores" in held


def test_measure_libero_as_a_user_runs_it() -> None:
    # LIBERO's default layout gives a lone env its own process; the dense layout, the one that holds the
    # most envs, is asked for as a user asks for it: 4 envs of one task sharing its scene in one full shard.
    # A chunk of 2 instead of the smallest config's 8: what is checked (both render modes timed, the
    # shared scene's memory, the capacity at 4 per process) does not depend on the chunk's length, and
    # render: all at 4 envs costs a render per env and sub-step.
    out = run("doctor", "--measure", "libero", "train.libero.envs_per_process=4", "actor.model.num_action_chunks=2", MUJOCO_GL="egl")
    # The broken test plugins are warnings here: the backend asked for is fine.
    assert out.returncode == 0, out.stdout + out.stderr
    assert "warn  plugin broken failed to import" in out.stdout
    measured = line_of(out.stdout, "ok    libero: 4 env(s) in one process build in")
    assert "render last" in measured and "render all" in measured and "4 env(s) measured" in measured
    assert "step a chunk of 2 in" in measured, measured  # the user's override reached the measured shard
    gb = float(measured.split("memory ")[1].split(" GB per env")[0])
    assert 0.1 < gb < 1.0, measured  # a process of 4 envs of one task: about 1.4 GB here at 64x64
    cores = len(os.sched_getaffinity(0))
    held = line_of(out.stdout, "ok    libero: this machine holds")
    assert "at 4 env(s) per process" in held and f"{4 * cores} by {cores} cores" in held


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["doctor", "nope"], "envfleet doctor: not installed: nope (installed: libero, toy)"),
        (["doctor", "toy", "train.num_envs=2"], "go with --measure"),
        (["doctor", "--measure", "toy", "train.num_env=2"], "Did you mean 'train.num_envs'"),
        (["doctor", "--bogus"], "unrecognized arguments: --bogus"),
    ],
    ids=["unknown-backend", "override-without-measure", "misspelt-override", "bad-flag"],
)
def test_usage_errors_exit_2_with_one_line(only_good_plugins, args, message, capsys) -> None:
    from envfleet_ray.cli import main

    assert main(args) == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert "Traceback" not in captured.err and len(captured.err.strip().splitlines()) == 1


# ---- GPU findings on fake device lists: this machine has no NVIDIA GPU.
FAKE_GPUS = [Gpu(i, f"GPU-{i}{i}{i}{i}-fake", f"fake GPU {i}") for i in range(2)]


def gpu_text(monkeypatch, egl: list[EglDevice], cvd: str | None) -> str:
    from envfleet_ray.commands.doctor import gpu_findings

    if cvd is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", cvd)
    monkeypatch.delenv("MUJOCO_EGL_DEVICE_ID", raising=False)
    return "\n".join(line for f in gpu_findings(egl, FAKE_GPUS) for line in f.lines())


def test_gpu_findings_when_egl_and_cuda_agree_fake_gpus(monkeypatch) -> None:
    text = gpu_text(monkeypatch, [EglDevice(0, 0), EglDevice(1, 1)], None)
    assert "ok    NVIDIA GPUs: 2 (fake GPU 0, fake GPU 1); EGL devices: 0=CUDA 0, 1=CUDA 1" in text
    assert "FAIL" not in text
    assert "ok    CUDA_VISIBLE_DEVICES='1': computes on CUDA device 1, renders on EGL device 1 = CUDA device 1" in text


def test_gpu_findings_when_numbering_differs_fake_gpus(monkeypatch) -> None:
    text = gpu_text(monkeypatch, [EglDevice(0, 1), EglDevice(1, 0), EglDevice(2, None, "EGL_MESA_device_software")], "0,1")
    assert "EGL devices: 0=CUDA 1, 1=CUDA 0, 2=not CUDA" in text
    assert "FAIL  CUDA_VISIBLE_DEVICES='0': computes on CUDA device 0, renders on EGL device 0 = CUDA device 1" in text
    assert "fix: render on EGL device 1: set MUJOCO_EGL_DEVICE_ID=1 for that process" in text


def test_gpu_findings_flag_ignored_cuda_entries_fake_gpus(monkeypatch) -> None:
    text = gpu_text(monkeypatch, [EglDevice(0, 0), EglDevice(1, 1)], "1,5")
    assert "FAIL  CUDA_VISIBLE_DEVICES='1,5': CUDA ignores 5" in text
    assert "fix: list existing GPU indices or UUIDs only (nvidia-smi -L)" in text


def test_doctor_lists_devices_when_egl_cannot_start(only_good_plugins, monkeypatch) -> None:
    monkeypatch.setenv("MUJOCO_EGL_DEVICE_ID", "99")
    monkeypatch.setenv("MUJOCO_GL", "egl")
    code, text = doctor_out("libero")
    assert code == 1 and line_of(text, "FAIL  egl does not start for libero:")
    assert line_of(text, "ok    EGL devices: 0 (Mesa CPU rasterizer)")  # listed without a context
    assert "libcuda.so.1" in line_of(text, "ok    NVIDIA GPUs: none found (no CUDA driver")


def device_text(gpus: int, egl: list[EglDevice], monkeypatch) -> str:
    from envfleet.shards.gpus import Devices
    from envfleet_ray.commands.doctor import device_findings

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("MUJOCO_EGL_DEVICE_ID", raising=False)
    given = Devices(gpus=[Gpu(i, f"GPU-{i}{i}{i}{i}-fake", f"fake GPU {i}") for i in range(gpus)], egl_devices=egl)
    return "\n".join(line for f in device_findings(given) for line in f.lines())


def test_container_case_is_named_given_fake_gpus(monkeypatch) -> None:
    text = device_text(8, [EglDevice(0, 0, "EGL_NV_device_cuda")], monkeypatch)
    assert "warn  container case: 8 GPUs but only 1 EGL device(s) report a CUDA device (CUDA 0)" in text
    assert "NVIDIA_DRIVER_CAPABILITIES" in text
    assert "ok    EGL devices: 0 (NVIDIA, CUDA 0)" in text


def test_no_container_case_when_every_gpu_has_its_egl_device_given_fake_gpus(monkeypatch) -> None:
    text = device_text(2, [EglDevice(0, 1, "EGL_NV_device_cuda"), EglDevice(1, 0, "EGL_NV_device_cuda")], monkeypatch)
    assert "container case" not in text and "FAIL" in text  # unset CUDA_VISIBLE_DEVICES: CUDA 0 renders on EGL 0 = CUDA 1
