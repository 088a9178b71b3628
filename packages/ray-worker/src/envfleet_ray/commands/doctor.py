"""``envfleet doctor [--measure] [backend ...]``: checks a machine before a run.

One job: the checks of a machine, a backend's install and a config, each as a line with its fix.

It prints one line per check, ``ok``, ``warn`` or ``FAIL``, and under each problem one
line starting ``fix:``. Exit code 0 when nothing failed (warnings allowed), 1 otherwise.

Checks, for the backends named (default: every installed one):

- each backend's env class imports (in a child process, so a crashing simulator import
  cannot take the doctor down); plugins that failed to load are listed with their cause
  (a failure with no backend named, a warning when the backends asked for are fine);
- for a backend whose ``BackendSpec.renderer`` is ``"mujoco"``: ``MUJOCO_GL`` and
  ``PYOPENGL_PLATFORM`` agree, EGL and OSMesa each start a context (in child processes),
  and which GL vendor and renderer each gives, a GPU or a CPU rasterizer (llvmpipe);
- for a backend whose ``BackendSpec.renderer`` is ``"vulkan"`` (SAPIEN, ManiSkill): the Vulkan device
  it would render on, whether that is a software renderer, and the fix when none starts
  (:mod:`envfleet.diagnostics.vulkan_probe`);
- with NVIDIA GPUs: how EGL devices map to CUDA devices, and for the current
  ``CUDA_VISIBLE_DEVICES`` and each GPU it shows, which EGL device a rendering process
  opens and whether that is the GPU it computes on (:mod:`envfleet.diagnostics.egl_cuda`);
- what each backend says of its install (``BackendSpec.install_findings``; LIBERO: which of
  LIBERO-plus's dimensions this install runs);
- ``--config FILE`` whose ``train.remote.address`` is set: the server instead (reachable, token,
  wire version; its backend, versions and renderer: :mod:`envfleet_ray.commands.doctor_remote`);
  without it, the config's backend;
- ``--measure``: one env per backend, its build, reset and step times and memory, and how
  many envs this machine holds at the backend's layout (:mod:`envfleet.diagnostics.measure`).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from .doctor_remote import remote_address, remote_findings
from .findings import Finding

# Imports inside functions: each check loads what it probes (the plugins, GL, Vulkan, CUDA, the shard
# machinery), so one check's missing library cannot stop the others and `envfleet --help` starts fast.

__all__ = ["Finding", "add_parser", "run", "doctor", "device_findings", "gpu_findings", "physx_finding"]

_IMPORT_TIMEOUT_S = 300.0
_GB = 1e9


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``doctor`` subcommand to the ``envfleet`` parser's subparsers."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "doctor",
        help="check this machine before a run: backends import, rendering starts, GPUs map (exit code 1 if not)",
        description="Check this machine before a run. One line per check; a problem gets a line with its fix. "
        "Exit code 0 when all is well, 1 when something is wrong.",
    )
    parser.add_argument("--measure", action="store_true", help="also build one env per backend: times, memory, and how many envs fit")
    parser.add_argument("--config", help="a config whose train.remote.address is set: check that server instead (doctor_remote)")
    parser.add_argument("names", nargs="*", help="backends to check (default all); with --measure also key=value config overrides")
    return parser


def run(args: argparse.Namespace) -> int:
    """Run ``envfleet doctor`` with parsed ``args``; returns the exit code.

    Unknown backend names and bad overrides raise (a ``KeyError`` or
    :class:`~envfleet.errors.ConfigError`), which the command turns into one line and exit code 2.
    """
    if getattr(args, "config", None):
        from envfleet.config import load_config

        cfg = load_config(args.config, overrides=[n for n in args.names if "=" in n])
        if remote_address(cfg) is not None:
            findings = remote_findings(cfg)
            for finding in findings:
                print("\n".join(finding.lines()), flush=True)
            return 1 if any(f.status == "FAIL" for f in findings) else 0
        args.names = [str(cfg.train.simulator_type), *(n for n in args.names if "=" not in n)]
        return doctor(list(args.names), measure=bool(args.measure), sections=[cfg.train])
    return doctor(list(args.names), measure=bool(args.measure))


def doctor(names: Sequence[str] = (), measure: bool = False, out: Any = None, sections: Sequence[Any] = ()) -> int:
    """Run the checks for backends ``names`` (default all), print them to ``out``, return 0 or 1.

    :param sections: env sections of a loaded config (``--config``): each one's backend adds what it
        says of it (``BackendSpec.config_findings``).
    """
    from envfleet.errors import ConfigError, UnknownBackendError
    from envfleet.plugins import list_backends

    stream = out if out is not None else sys.stdout
    overrides = [n for n in names if "=" in n]
    chosen = [n for n in names if "=" not in n]
    if overrides and not measure:
        raise ConfigError(f"envfleet doctor: config overrides ({' '.join(overrides)}) go with --measure")
    specs = list_backends()
    unknown = [n for n in chosen if n not in specs]
    if unknown:
        raise UnknownBackendError(f"envfleet doctor: not installed: {', '.join(unknown)} (installed: {', '.join(specs) or 'none'})")
    if measure:
        from envfleet.diagnostics.check import smallest_config

        for name in chosen or list(specs):
            smallest_config(name, overrides)  # a bad override is a usage error, before anything starts
    failed = False

    def emit(finding: Finding) -> None:
        nonlocal failed
        failed = failed or finding.status == "FAIL"
        for line in finding.lines():
            print(line, file=stream, flush=True)

    from envfleet.diagnostics.measure import machine

    box = machine()
    print(
        f"envfleet doctor: Python {platform.python_version()}, envfleet {_version('envfleet')}, "
        f"{box.cores} cores, {box.mem_available / _GB:.1f} of {box.mem_total / _GB:.1f} GB memory available",
        file=stream,
    )
    for finding in _plugin_findings(specs, chosen):
        emit(finding)
    backends = [specs[n] for n in (chosen or list(specs))]
    for spec in backends:
        emit(_import_finding(spec))
    for spec in backends:
        for status, what, fix in spec.install_findings() if spec.install_findings is not None else ():
            emit(Finding(status, what, fix))
    for section in sections:
        own = specs[str(section.simulator_type)].config_findings
        for status, what, fix in own(section) if own is not None else ():
            emit(Finding(status, what, fix))
    rendering = [spec for spec in backends if spec.renderer == "mujoco"]
    vulkan = [spec.name for spec in backends if spec.renderer == "vulkan"]
    if vulkan:
        emit(_vulkan_finding(vulkan))
        emit(physx_finding(vulkan))
    for spec in backends:
        if spec.renderer not in (None, "mujoco", "vulkan"):
            emit(Finding("warn", f"backend {spec.name} renders through {spec.renderer!r}, which the doctor cannot probe"))
    if rendering:
        for finding in _rendering_findings([s.name for s in rendering]):
            emit(finding)
    elif backends:
        emit(Finding("ok", f"rendering: no backend checked needs OpenGL ({', '.join(s.name for s in backends)})"))
    if measure:
        for spec in backends:
            for finding in _measure_findings(spec.name, overrides, box):
                emit(finding)
    return 1 if failed else 0


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"


def _plugin_dists() -> dict[str, str]:
    from envfleet.plugins import NAME

    out = {}
    for ep in importlib.metadata.entry_points(group=NAME):
        dist = getattr(ep, "dist", None)
        out[ep.name] = dist.name if dist is not None else ""
    return out


def _plugin_findings(specs: dict[str, Any], chosen: list[str]) -> list[Finding]:
    from envfleet.plugins import deprecations, plugin_failures

    findings = []
    if specs:
        listed = ", ".join(f"{n} ({s.package or '-'} {s.version or '-'})" for n, s in specs.items())
        findings.append(Finding("ok", f"backends installed: {listed}"))
    else:
        findings.append(Finding("FAIL", "no backend is installed", "pip install envfleet-libero (or envfleet-isaac, or your own plugin)"))
    dists = _plugin_dists()
    # A broken plugin is a failure of the machine; with backends named that are fine, only a warning.
    status = "warn" if chosen else "FAIL"
    for name in chosen or list(specs):  # still runs, the old way: a warning that names what to change
        for deprecation in deprecations(specs[name]):
            findings.append(Finding("warn", f"deprecated: {deprecation.what()}", deprecation.fix))
    for failure in plugin_failures():
        dist = dists.get(failure.name) or f"the package that provides plugin {failure.name!r}"
        if failure.stage == "import":
            fix = f"install what it imports, or `pip uninstall {dist}`"
        else:
            fix = f"`pip uninstall {dist}`, or have its authors fix its hook (docs: Writing a simulator plugin)"
        findings.append(Finding(status, f"plugin {failure.name} {failure.what}: {type(failure.error).__name__}: {failure.error}", fix))
    return findings


_IMPORT = "import sys\nfrom envfleet.plugins.spec import import_factory\nimport_factory(sys.argv[1])\n"


def _import_finding(spec: Any) -> Finding:
    """Import the backend's env class in a child process: the simulator's imports run there."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _IMPORT, spec.env_factory],
            capture_output=True,
            text=True,
            timeout=_IMPORT_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return Finding(
            "FAIL",
            f"backend {spec.name} does not import within {_IMPORT_TIMEOUT_S:.0f} s",
            "check that its imports do not wait on a device",
        )
    if proc.returncode == 0:
        return Finding("ok", f"backend {spec.name} imports ({spec.env_factory})")
    tail = [x.strip() for x in proc.stderr.splitlines() if x.strip()][-1:] or [f"exit code {proc.returncode}"]
    package = spec.package or f"the package of backend {spec.name}"
    return Finding("FAIL", f"backend {spec.name} does not import: {tail[0]}", f"pip install --force-reinstall {package}")


_GL_FIX = {
    "egl": "apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri (CPU rendering) or the NVIDIA driver's EGL library (GPU); "
    "check MUJOCO_EGL_DEVICE_ID",
    "osmesa": "apt-get install libosmesa6",
}


def _rendering_findings(names: list[str]) -> list[Finding]:
    from envfleet.diagnostics.gl_probe import PLATFORMS, gl_env_problem, probe_gl

    who = ", ".join(names)
    findings = []
    env_problem = gl_env_problem(os.environ)
    mujoco_gl = os.environ.get("MUJOCO_GL", "").strip().lower()
    settings = f"MUJOCO_GL={mujoco_gl or 'unset'}, PYOPENGL_PLATFORM={os.environ.get('PYOPENGL_PLATFORM', '').strip() or 'unset'}"
    if env_problem:
        findings.append(
            Finding(
                "FAIL",
                f"GL settings: {env_problem}",
                "export MUJOCO_GL=egl (or osmesa) and unset PYOPENGL_PLATFORM or give it the same value",
            )
        )
    else:
        how = "agree" if mujoco_gl else "a backend picks (EGL, else OSMesa)"
        findings.append(Finding("ok", f"GL settings: {settings}: {how}"))
    probes = {p: probe_gl(p) for p in PLATFORMS}
    working = [p for p in PLATFORMS if probes[p].ok]
    for name, probe in probes.items():
        if probe.ok:
            kind = "CPU rasterizer" if probe.software else "GPU"
            findings.append(Finding("ok", f"{name} starts for {who}: {probe.vendor}, {probe.renderer}, OpenGL {probe.version} ({kind})"))
            continue
        # The platform asked for by MUJOCO_GL must start; otherwise one working platform is enough.
        fatal = name == mujoco_gl or not working
        findings.append(Finding("FAIL" if fatal else "warn", f"{name} does not start for {who}: {probe.error}", _GL_FIX[name]))
    egl = probes["egl"]
    findings.extend(device_findings(egl.devices, egl))
    return findings


def device_findings(devices: Any, egl: Any = None) -> list[Finding]:
    """The machine's EGL devices and GPUs (listed without a GL context, so also when EGL did not start),
    the container case, and the EGL/CUDA mapping (:func:`gpu_findings`)."""
    if devices is None:
        return []
    findings = []
    if devices.egl_error:
        findings.append(Finding("warn", f"EGL devices: not listed: {devices.egl_error}", _GL_FIX["egl"]))
    else:
        listed = ", ".join(
            f"{d.index} ({'Mesa CPU rasterizer' if d.software else 'NVIDIA, CUDA ' + str(d.cuda) if d.cuda is not None else 'not a CUDA device'})"
            for d in devices.egl_devices
        )
        findings.append(Finding("ok", f"EGL devices: {listed or 'none'}"))
    gpus = devices.gpus
    if not gpus:
        why = devices.cuda_error or "the CUDA driver lists none"
        note = "EGL/CUDA mapping not needed" if not devices.nvidia_egl else "yet EGL lists NVIDIA devices"
        findings.append(Finding("ok" if not devices.nvidia_egl else "warn", f"NVIDIA GPUs: none found ({why}): {note}"))
        return findings
    if egl is not None and egl.ok and egl.software:
        findings.append(
            Finding(
                "warn",
                f"EGL renders on the CPU ({egl.renderer}) though {len(gpus)} NVIDIA GPU(s) exist",
                "install the NVIDIA driver's EGL library (libnvidia-gl, and libglvnd's libEGL_nvidia.so.0)",
            )
        )
    nvidia = devices.nvidia_egl
    if 0 < len(nvidia) < len(gpus):
        on = ", ".join(str(d.cuda) for d in nvidia)
        findings.append(
            Finding(
                "warn",
                f"container case: {len(gpus)} GPUs but only {len(nvidia)} EGL device(s) report a CUDA device (CUDA {on}): "
                f"processes on the other GPUs render on CUDA {on}",
                "give the container every GPU for graphics (NVIDIA_DRIVER_CAPABILITIES=all, or graphics,compute,utility) "
                "so that each GPU has its EGL device",
            )
        )
    findings.extend(gpu_findings(devices.egl_devices, gpus))
    return findings


def _vulkan_finding(names: list[str]) -> Finding:
    """The Vulkan device SAPIEN would render on (:mod:`envfleet.diagnostics.vulkan_probe`), a software one flagged."""
    from envfleet.diagnostics.vulkan_probe import VULKAN_FIX, probe_vulkan

    who = ", ".join(names)
    probe = probe_vulkan()
    icd = f"VK_ICD_FILENAMES={probe.icd}" if probe.icd else "the system's Vulkan drivers"
    if not probe.ok:
        return Finding("FAIL", f"Vulkan does not start for {who} ({icd}): {probe.error}", VULKAN_FIX)
    first = probe.devices[0]
    kind = "software renderer on the CPU" if first.software else first.kind
    return Finding("ok", f"Vulkan for {who}: renders on {first.name} ({kind}, Vulkan {first.api}; {icd})")


def physx_finding(names: list[str], gpu: bool | None = None) -> Finding:
    """Whether SAPIEN's PhysX GPU library is in place (:mod:`envfleet.diagnostics.physx_library`): without it
    ``physx_cuda`` would download it at first use, which envfleet refuses."""
    from envfleet.diagnostics.physx_library import find_physx_library
    from envfleet.shards.gpus import nvidia_driver_present

    who = ", ".join(names)
    library = find_physx_library()
    if not library.version:
        return Finding("warn", f"SAPIEN's PhysX GPU library for {who}: not looked for: {library.error}", library.placement())
    if library.present:
        return Finding("ok", f"SAPIEN's PhysX GPU library for {who}: {library.path} (physx_cuda starts without a download)")
    gpu = nvidia_driver_present() if gpu is None else gpu
    what = f"SAPIEN's PhysX GPU library for {who}: {library.path} is absent: sim_backend auto simulates on physx_cpu, physx_cuda is refused"
    return Finding("warn" if gpu else "ok", what + ("" if gpu else " (no NVIDIA GPU here)"), library.placement())


def gpu_findings(egl_devices: Sequence[Any], gpus: Sequence[Any]) -> list[Finding]:
    """The EGL/CUDA mapping and where each rendering process renders, from device lists."""
    from envfleet.diagnostics.egl_cuda import plan_rendering, visible_cuda_devices

    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    override = os.environ.get("MUJOCO_EGL_DEVICE_ID")
    findings = []
    listed = ", ".join(f"{d.index}=CUDA {d.cuda}" if d.cuda is not None else f"{d.index}=not CUDA" for d in egl_devices)
    findings.append(
        Finding("ok", f"NVIDIA GPUs: {len(gpus)} ({', '.join(g.name or g.uuid for g in gpus)}); EGL devices: {listed or 'none'}")
    )
    visible = visible_cuda_devices(cvd, gpus)
    if visible.ignored:
        findings.append(
            Finding(
                "FAIL",
                f"CUDA_VISIBLE_DEVICES={cvd!r}: CUDA ignores {', '.join(visible.ignored)} (no such GPU, or named twice) and all after",
                "list existing GPU indices or UUIDs only (nvidia-smi -L)",
            )
        )
    for plan in plan_rendering(cvd, override, gpus, egl_devices):
        if plan.ok:
            findings.append(Finding("ok", plan.describe()))
        elif plan.right_egl_device is None:
            fix = "no EGL device reports that CUDA device: install the NVIDIA driver's EGL library"
            findings.append(Finding("FAIL", plan.describe(), fix))
        else:
            fix = f"render on EGL device {plan.right_egl_device}: set MUJOCO_EGL_DEVICE_ID={plan.right_egl_device} for that process"
            findings.append(Finding("FAIL", plan.describe(), fix))
    return findings


def _measure_findings(name: str, overrides: list[str], box: Any) -> list[Finding]:
    from envfleet.diagnostics.measure import capacity, measure_backend

    m = measure_backend(name, overrides)
    if not m.ok:
        return [
            Finding(
                "FAIL", f"{name}: measuring one env failed: {m.cause}", f"run `envfleet backends --check {name} --traceback` to see where"
            )
        ]
    steps = " / ".join(f"{s:.3f} s" + (f" render {mode}" if mode != "default" else "") for mode, s in m.step_s.items())
    layout = "all envs in one process" if m.envs_per_process is None else f"{m.envs_per_process} env(s) per process"
    per_env = m.memory_per_env
    findings = [
        Finding(
            "ok",
            f"{name}: {m.envs_measured} env(s) in one process build in {m.build_s:.2f} s, reset in {m.reset_s:.2f} s, "
            f"step a chunk of {m.chunk} in {steps}; "
            f"memory {per_env / _GB:.2f} GB per env ({m.memory_kind}, {m.envs_measured} env(s) measured)",
        )
    ]
    cap = capacity(per_env, m.envs_per_process, box.mem_available, box.cores)
    by_cores = "not bounded by cores" if cap.by_cores is None else f"{cap.by_cores} by {box.cores} cores"
    line = f"{name}: this machine holds {cap.envs} env(s) at {layout}: {cap.by_memory} by memory ({box.mem_available / _GB:.1f} GB available), {by_cores}"
    if cap.envs < 1:
        findings.append(Finding("FAIL", line, f"free memory: one env needs {per_env / _GB:.2f} GB"))
    else:
        findings.append(Finding("ok", line))
    return findings
