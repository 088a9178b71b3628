"""``nox -s gpu-check``: what a GPU host gives envfleet, measured in a few minutes.

Needs only envfleet core, mujoco and the MuJoCo test backend (tests/plugins/envfleet-reacher),
so it fits an offline payload of a few MiB. Writes ``gpu-check.json`` and ``gpu-check.md`` (a
table) to ``--out`` and prints the table:

- the doctor's GPU findings: EGL and OSMesa contexts (vendor, renderer, GPU or CPU
  rasterizer), the EGL devices and CUDA GPUs (listed without a context), the container
  case, and where a process pinned to each GPU renders;
- the EGL device ``train.render_device: auto`` picks for each shard;
- render-last and render-all throughput of the reacher at 1, 4, 8 and 16 shards, EGL
  against OSMesa, with the CPU cores the shards burned and, where ``nvidia-smi`` exists,
  the GPU memory each shard holds;
- the effect of ``__GL_YIELD`` (``USLEEP`` against the driver's default) on EGL at the
  largest shard count;
- ManiSkill on ``physx_cpu`` rendering on the GPU, and on ``physx_cuda`` where SAPIEN's
  PhysX GPU library is in place (each skipped, with the reason, where it cannot run).

On a machine without an NVIDIA GPU the same code runs on Mesa (EGL on llvmpipe), with the
shard counts capped at twice the cores (the table says so).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from typing import Any

import numpy as np

SHARDS = (1, 4, 8, 16)
_TICK = os.sysconf("SC_CLK_TCK")


def doctor_section() -> dict[str, Any]:
    """The doctor's GPU checks, from envfleet core alone (the Ray worker is not in the payload)."""
    from envfleet.diagnostics.egl_cuda import plan_rendering
    from envfleet.diagnostics.gl_probe import probe_gl

    probes = {name: probe_gl(name) for name in ("egl", "osmesa")}
    devices = probes["egl"].devices
    assert devices is not None
    findings = []
    for name, probe in probes.items():
        if probe.ok:
            findings.append(("ok", f"{name}: {probe.vendor}, {probe.renderer}, OpenGL {probe.version} ({probe.rasterizer})"))
        else:
            findings.append(("FAIL", f"{name} does not start: {probe.error}"))
    egl = ", ".join(f"{d.index} ({'software' if d.software else f'CUDA {d.cuda}'})" for d in devices.egl_devices)
    findings.append(("ok" if not devices.egl_error else "FAIL", f"EGL devices: {egl or 'none'} {devices.egl_error}".strip()))
    gpus = ", ".join(f"{g.index} {g.name}" for g in devices.gpus)
    findings.append(("ok", f"CUDA GPUs: {gpus or 'none'}" + (f" ({devices.cuda_error})" if devices.cuda_error else "")))
    nvidia = devices.nvidia_egl
    container = 0 < len(nvidia) < len(devices.gpus)
    if container:
        findings.append(("warn", f"container case: {len(devices.gpus)} GPUs, {len(nvidia)} NVIDIA EGL device(s)"))
    if devices.gpus:
        for plan in plan_rendering(
            os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get("MUJOCO_EGL_DEVICE_ID"), devices.gpus, devices.egl_devices
        ):
            findings.append(("ok" if plan.ok else "FAIL", plan.describe()))
    return {
        "findings": [{"status": s, "what": w} for s, w in findings],
        "gpus": [dataclasses.asdict(g) for g in devices.gpus],
        "egl_devices": [dataclasses.asdict(d) for d in devices.egl_devices],
        "container_case": container,
        "egl_rasterizer": probes["egl"].rasterizer if probes["egl"].ok else None,
    }


def render_devices(shards: int) -> list[dict[str, Any]]:
    """What ``train.render_device: auto`` sets for each of ``shards`` shards of one worker."""
    from envfleet.shards.gpus import list_devices, shard_render_environ

    devices = list_devices()
    rows = []
    for slot in range(shards):
        env, pick = shard_render_environ("auto", "mujoco", slot, os.environ, devices)
        rows.append({"shard": slot, "env": env, "egl": pick.egl if pick else None, "why": pick.why if pick else ""})
    return rows


def cpu_seconds(pids: list[int]) -> float:
    """User plus system CPU seconds of ``pids`` so far."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return total / _TICK


def gpu_memory_mib(pids: list[int]) -> dict[int, int] | None:
    """GPU memory each of ``pids`` holds, from nvidia-smi's process table; ``None`` without nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        text = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found: dict[int, int] = {}
    for line in text.splitlines():
        match = re.search(r"\|\s+\d+\s+\S+\s+\S+\s+(\d+)\s+[CG+]+\s+.*?(\d+)MiB", line)
        if match and int(match.group(1)) in pids:
            found[int(match.group(1))] = found.get(int(match.group(1)), 0) + int(match.group(2))
    return found


def measure(data: dict[str, Any], overrides: list[str], spec: Any, seconds: float, env: dict[str, str]) -> dict[str, Any]:
    """Start a stage of ``data`` under backend ``spec`` with ``env`` in its shards' environment, step it for ``seconds``."""
    from envfleet.config import load_config
    from envfleet.shards.manager import ProcessEnvManager

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        cfg = load_config(data=data, overrides=overrides)
        n, chunk = int(cfg.train.num_envs), int(cfg.actor.model.num_action_chunks)
        actions = np.random.default_rng(0).uniform(-1, 1, size=(n, chunk, int(cfg.actor.model.action_dim))).astype(np.float32)
        t0 = time.monotonic()
        with ProcessEnvManager(cfg, backend=spec) as mgr:
            mgr.start_simulator()
            ids = mgr.get_all_state_ids()
            mgr.reset_envs_to_state_ids(ids[np.arange(n) % len(ids)])
            start_s = time.monotonic() - t0
            mgr.chunk_step(actions)  # warm-up: first frames, caches
            pids = [int(p) for p in mgr.shard_pids() if p is not None]
            cpu0, t0, steps = cpu_seconds(pids), time.monotonic(), 0
            while steps == 0 or time.monotonic() - t0 < seconds:
                mgr.chunk_step(actions)
                steps += n * chunk
            wall = time.monotonic() - t0
            cores = (cpu_seconds(pids) - cpu0) / wall
            memory = gpu_memory_mib(pids)
            renderer = mgr.renderer_info()
        return {
            "shards": len(pids),
            "steps_per_s": steps / wall,
            "cores_used": cores,
            "start_s": start_s,
            "gpu_mib_per_shard": None if memory is None else (sum(memory.values()) / len(pids) if memory else 0.0),
            "rasterizer": renderer.get("rasterizer", ""),
            "gl_renderer": renderer.get("gl_renderer", ""),
        }
    except Exception as exc:  # recorded: one failed measurement must not hide the others
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def reacher(shards: int, render: str, size: int) -> tuple[dict[str, Any], list[str], Any]:
    """The reacher with one env per shard (its own layout puts a stage in one process)."""
    from envfleet.plugins import get_backend

    spec = dataclasses.replace(get_backend("reacher"), envs_per_process=1, renderer="mujoco")
    data = {
        "train": {
            "simulator_type": "reacher",
            "num_envs": shards,
            "render": render,
            "max_episode_steps": 100000,
            "init_params": {"camera_heights": size, "camera_widths": size, "camera_names": ["top"]},
        }
    }
    return data, ["actor.model.num_action_chunks=8", "actor.model.action_dim=2"], spec


def throughput(counts: list[int], size: int, seconds: float) -> list[dict[str, Any]]:
    """Render-last and render-all steps/s at each shard count, EGL against OSMesa."""
    rows = []
    for shards in counts:
        for gl in ("egl", "osmesa"):
            for render in ("last", "all"):
                data, overrides, spec = reacher(shards, render, size)
                row = measure(data, overrides, spec, seconds, {"MUJOCO_GL": gl, "PYOPENGL_PLATFORM": gl})
                rows.append({"platform": gl, "render": render, "requested_shards": shards, **row})
                print(f"  {gl:<6} render {render:<4} {shards:>2} shards: {_brief(row)}", flush=True)
    return rows


def gl_yield(shards: int, size: int, seconds: float) -> list[dict[str, Any]]:
    """EGL render-all at ``shards`` shards with ``__GL_YIELD=USLEEP`` and with the driver's default (set empty)."""
    rows = []
    for value in ("USLEEP", ""):
        data, overrides, spec = reacher(shards, "all", size)
        row = measure(data, overrides, spec, seconds, {"MUJOCO_GL": "egl", "PYOPENGL_PLATFORM": "egl", "__GL_YIELD": value})
        rows.append({"__GL_YIELD": value or "(driver default)", **row})
        print(f"  __GL_YIELD={value or '(default)'}: {_brief(row)}", flush=True)
    return rows


def maniskill(gpu: bool, seconds: float) -> list[dict[str, Any]]:
    """ManiSkill on physx_cpu rendering on the GPU, and on physx_cuda where the PhysX library is in place."""
    if importlib.util.find_spec("mani_skill") is None:
        reason = "ManiSkill is not installed here (the check's payload is core, mujoco and envfleet-reacher)"
        return [{"sim": s, "skipped": reason} for s in ("physx_cpu", "physx_cuda")]
    from envfleet.diagnostics.physx_library import find_physx_library
    from envfleet.plugins import get_backend

    spec = get_backend("maniskill")
    rows: list[dict[str, Any]] = []
    library = find_physx_library()
    for sim in ("physx_cpu", "physx_cuda"):
        if sim == "physx_cuda" and not gpu:
            rows.append({"sim": sim, "skipped": "no NVIDIA GPU"})
            continue
        if sim == "physx_cuda" and not library.present:
            rows.append(
                {
                    "sim": sim,
                    "skipped": f"SAPIEN's PhysX GPU library {library.path or '(version unknown)'} is absent {library.error}".strip(),
                }
            )
            continue
        section = {"sim_backend": sim, "render_backend": "gpu" if gpu else "cpu"}
        data = {"train": {"simulator_type": "maniskill", "task_name": "PushCube-v1", "num_envs": 4, "maniskill": section}}
        data["train"]["init_params"] = {"camera_heights": 128, "camera_widths": 128}
        row = measure(data, ["actor.model.num_action_chunks=8", "actor.model.action_dim=7"], spec, seconds, {})
        rows.append({"sim": sim, "render_backend": section["render_backend"], **row})
    return rows


def _brief(row: dict[str, Any]) -> str:
    if "error" in row:
        return f"error: {row['error']}"
    return f"{row['steps_per_s']:.0f} steps/s, {row['cores_used']:.2f} cores, start {row['start_s']:.1f} s"


def table(result: dict[str, Any]) -> str:
    """The result as markdown."""
    lines = [f"# gpu-check: {result['machine']['host']}, {result['machine']['cores']} cores, {result['machine']['when']}", ""]
    lines += [f"- {f['status']}: {f['what']}" for f in result["doctor"]["findings"]]
    if result["note"]:
        lines += ["", result["note"]]
    lines += ["", "| shard | render device (train.render_device: auto) |", "|---|---|"]
    for r in result["render_devices"]:
        where = "nothing set" if r["egl"] is None else f"EGL device {r['egl']}, " + " ".join(f"{k}={v}" for k, v in r["env"].items())
        lines.append(f"| {r['shard']} | {where} ({r['why']}) |")
    lines += [
        "",
        "| platform | render | shards | steps/s | cores used | start s | GPU MiB/shard | rasterizer |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result["throughput"]:
        if "error" in r:
            lines.append(f"| {r['platform']} | {r['render']} | {r['requested_shards']} | error: {r['error']} | | | | |")
            continue
        mem = "-" if r["gpu_mib_per_shard"] is None else f"{r['gpu_mib_per_shard']:.0f}"
        lines.append(
            f"| {r['platform']} | {r['render']} | {r['shards']} | {r['steps_per_s']:.0f} | {r['cores_used']:.2f} | "
            f"{r['start_s']:.1f} | {mem} | {r['rasterizer']} |"
        )
    lines += ["", "| __GL_YIELD (EGL, render all) | steps/s | cores used |", "|---|---|---|"]
    for r in result["gl_yield"]:
        lines.append(
            f"| {r['__GL_YIELD']} | "
            + (f"error: {r['error']} | |" if "error" in r else f"{r['steps_per_s']:.0f} | {r['cores_used']:.2f} |")
        )
    lines += ["", "| ManiSkill sim | result |", "|---|---|"]
    for r in result["maniskill"]:
        lines.append(f"| {r['sim']} | {'skipped: ' + r['skipped'] if r.get('skipped') else _brief(r)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the check; 0 when EGL started and every measurement that ran succeeded."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="gpu-check-out", help="folder for gpu-check.json and gpu-check.md")
    parser.add_argument("--shards", default="", help="shard counts, comma-separated (default 1,4,8,16; on a CPU, those up to 2 x cores)")
    parser.add_argument("--size", type=int, default=128, help="image height and width")
    parser.add_argument("--seconds", type=float, default=2.0, help="timed stepping per measurement")
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    cores = len(os.sched_getaffinity(0))
    print("doctor ...", flush=True)
    doctor = doctor_section()
    gpu = bool(doctor["gpus"])
    counts = [int(x) for x in args.shards.split(",") if x.strip()] or list(SHARDS)
    note = ""
    if not gpu and not args.shards:
        counts = [n for n in counts if n <= 2 * cores] or [1]
        note = f"No NVIDIA GPU: Mesa (EGL on llvmpipe) on {cores} cores, shard counts capped at {counts[-1]} (2 x cores)."
    print("throughput ...", flush=True)
    result: dict[str, Any] = {
        "machine": {
            "host": platform.node(),
            "cores": cores,
            "python": platform.python_version(),
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        },
        "note": note,
        "doctor": doctor,
        "render_devices": render_devices(max(counts)),
        "throughput": throughput(counts, args.size, args.seconds),
    }
    print("__GL_YIELD ...", flush=True)
    result["gl_yield"] = gl_yield(max(counts), args.size, args.seconds)
    print("ManiSkill ...", flush=True)
    result["maniskill"] = maniskill(gpu, args.seconds)
    result["wall_s"] = time.monotonic() - t0
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "gpu-check.json"), "w") as fh:
        json.dump(result, fh, indent=1, default=str)
    text = table(result) + f"\nwall time {result['wall_s']:.0f} s\n"
    with open(os.path.join(args.out, "gpu-check.md"), "w") as fh:
        fh.write(text)
    print(text)
    rows = result["throughput"] + result["gl_yield"] + [r for r in result["maniskill"] if "skipped" not in r]
    failed = [r for r in rows if "error" in r] or (["egl"] if doctor["egl_rasterizer"] is None else [])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
