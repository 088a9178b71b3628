"""The `libero` section of `nox -s bench` (bench/run.py libero).

Two parts: the fast step loop against LIBERO's own (``libero_fast``; alone:
``python bench/sections/libero.py fast``), then throughput through ``ProcessEnvManager``
against plain LIBERO loops over sizes, render modes and env counts (``libero``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import numpy as np

if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)  # run alone: this folder would shadow LIBERO's `libero` package with this file
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/, when run alone
from common import IMG, ROOT, write
from configs import libero_cfg, libero_installed

CHUNK = 8
REPS = 6


def run() -> None:
    """Both parts: the fast loop, then the grid."""
    if not libero_installed():
        print("libero: backend not installed, skipped")
        return
    fast_loop()
    grid()


class PlainLoops:
    """``n`` plain LIBERO processes (bench/plain_libero.py), each stepping one chunk per :meth:`chunk`, side by side."""

    def __init__(self, n: int, hw: int, render: str, chunk: int = CHUNK) -> None:
        script = os.path.join(ROOT, "bench", "plain_libero.py")
        env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
        self.procs = [
            subprocess.Popen(
                [sys.executable, script, str(hw), render, str(chunk), str(i)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env=env,
            )
            for i in range(n)
        ]
        for p in self.procs:
            assert p.stdout is not None
            line = p.stdout.readline().strip()
            if line != "ready":
                raise RuntimeError(f"a plain LIBERO loop did not start (said {line!r})")

    def chunk(self) -> float:
        """Seconds from the first loop's start to the last loop's end of one chunk each."""
        for p in self.procs:
            assert p.stdin is not None
            p.stdin.write("chunk\n")
            p.stdin.flush()
        outs = [json.loads(p.stdout.readline()) for p in self.procs if p.stdout is not None]
        return float(max(o["t_end"] for o in outs) - min(o["t_start"] for o in outs))

    def pids(self) -> list[int | None]:
        return [p.pid for p in self.procs]

    def close(self) -> None:
        for p in self.procs:
            try:
                assert p.stdin is not None
                p.stdin.write("quit\n")
                p.stdin.close()
            except (BrokenPipeError, OSError):
                pass
        for p in self.procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


class WorkerStage:
    """One EnvWorker with one stage of ``n`` envs, reset and warmed up: through ``EnvWorkerGroup`` (a Ray
    actor given ``cpus`` CPUs), or, with ``in_process``, the worker class itself in this process (its
    default layout then sees this process's cores)."""

    def __init__(self, n: int, hw: int, overrides: dict[str, Any], cpus: float, in_process: bool = False) -> None:
        from omegaconf import OmegaConf, read_write

        from envfleet.dataproto import DataProto

        cfg = libero_cfg(n, hw, "last", stages=1, chunk=CHUNK)
        with read_write(cfg):  # a loaded config is read-only; the backend checks these keys when the stage is built
            for key, value in overrides.items():
                OmegaConf.update(cfg, f"train.libero.{key}", value)
        self.n = n
        self.group: Any
        if in_process:
            from envfleet_ray.runtime.worker import EnvWorker

            self.group = _Local(EnvWorker(cfg))
        else:
            from envfleet_ray.runtime.group import EnvWorkerGroup

            self.group = EnvWorkerGroup(cfg, num_workers=1, cpus_per_worker=cpus)
        self.group.init_worker()
        self.group.init_simulator()
        self.group.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": np.arange(n)})).get()
        self.rng = np.random.default_rng(1)
        self.chunk()

    def chunk(self) -> float:
        """Seconds of one ``env_interact_step`` with random actions (the trainer's tensors built)."""
        from envfleet.dataproto import DataProto

        actions = (self.rng.uniform(-1, 1, (self.n, CHUNK, 7)) * 0.3).astype(np.float32)
        data = DataProto.from_dict(non_tensors={"actions": actions}, meta_info={"stage_id": 0})
        t0 = time.perf_counter()
        _ = self.group.env_interact_step(data).get().batch  # the trainer reads the tensors: building them counts
        return time.perf_counter() - t0

    def close(self) -> None:
        self.group.shutdown()


class _Local:
    """An in-process EnvWorker behind the group's calls (results as ``.get()``-able values)."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker

    def init_worker(self) -> None:
        self.worker.init_worker()

    def init_simulator(self) -> None:
        self.worker.init_simulator()

    def reset_envs_to_state_ids(self, data: Any) -> Any:
        return _Done(self.worker.reset_envs_to_state_ids(data))

    def env_interact_step(self, data: Any) -> Any:
        return _Done(self.worker.env_interact_step(data))

    def shutdown(self) -> None:
        self.worker.close()


class _Done:
    def __init__(self, value: Any) -> None:
        self.value = value

    def get(self) -> Any:
        return self.value


def physics_alone(reps: int = REPS, steps: int = CHUNK) -> dict[str, Any]:
    """bench/libero_physics.py in a child: seconds per env step, fast loop and LIBERO's own, alternated."""
    script = os.path.join(ROOT, "bench", "libero_physics.py")
    out = subprocess.run([sys.executable, script, str(reps), str(steps)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _start_ray(cpus: int, attempts: int = 3) -> None:
    """A local Ray of ``cpus`` logical CPUs (each worker of the fast part reserves its envs' count, as a user
    gives a worker its cores); Ray gives its node 30 s to register, which a loaded machine can miss: retried."""
    import ray

    from envfleet_ray import init_ray

    for attempt in range(attempts):
        try:
            init_ray(num_cpus=cpus)
            return
        except Exception as exc:  # Ray raises a bare Exception for a node start that timed out
            print(f"libero_fast: Ray did not start ({exc}); attempt {attempt + 1} of {attempts}", flush=True)
            ray.shutdown()
    raise RuntimeError(f"libero_fast: a local Ray did not start in {attempts} attempts (machine overloaded?)")


def _mem_available_gb() -> float:
    with open("/proc/meminfo") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("MemAvailable:")) / 2**20


def fast_loop(hw: int = 128, n: int = 2, only: tuple[str, ...] = ()) -> None:
    """The fast loop: physics alone, then 2 envs rendering the last sub-step through the worker against plain loops.

    ``only``: the variants to run beside ``plain`` (``python bench/sections/libero.py fast one_per_process``
    keeps a shared machine at four LIBERO processes); all of them by default.
    """
    try:
        _start_ray(3 * n)  # first: on a loaded machine Ray's node start can time out, and then nothing is lost yet
        in_process = False
    except RuntimeError as exc:
        print(f"{exc}: the EnvWorkers run in this process instead (no Ray hop)", flush=True)
        in_process = True
    phys = physics_alone()
    print("physics alone:", json.dumps(phys), flush=True)
    fast_ms = 1e3 * float(np.median(phys["seconds_per_step"]["fast"]))
    own_ms = 1e3 * float(np.median(phys["seconds_per_step"]["libero"]))
    split_ms = 1e3 * float(np.median(phys["seconds_per_step"]["split"]))
    rows: list[dict[str, Any]] = [
        {"case": "physics alone, 1 env, fast loop", "ms per env step": fast_ms, "sub-steps/s": 1e3 / fast_ms, "x LIBERO": own_ms / fast_ms},
        {
            "case": "physics alone, 1 env, fast loop with robosuite's controller (before the lean sub-steps)",
            "ms per env step": split_ms,
            "sub-steps/s": 1e3 / split_ms,
            "x LIBERO": own_ms / split_ms,
        },
        {"case": "physics alone, 1 env, LIBERO's env.step", "ms per env step": own_ms, "sub-steps/s": 1e3 / own_ms, "x LIBERO": 1.0},
    ]
    variants: dict[str, Any] = {}
    times: dict[str, list[float]] = {}
    labels = {
        "plain": f"{n} plain LIBERO processes, render last (the limit before)",
        "one_per_process": f"EnvWorker, {n} envs, envs_per_process 1, fast loop",
        "default": f"EnvWorker, {n} envs, default layout, fast loop",
        "libero_loop": f"EnvWorker, {n} envs, envs_per_process 1, physics libero",
    }
    wanted = set(only or labels)
    try:
        variants["plain"] = PlainLoops(n, hw, "last")
        if "one_per_process" in wanted:
            variants["one_per_process"] = WorkerStage(n, hw, {"envs_per_process": 1}, cpus=n, in_process=in_process)
        if "default" in wanted:
            variants["default"] = WorkerStage(n, hw, {}, cpus=n, in_process=in_process)
        if "libero_loop" in wanted and _mem_available_gb() > 6:  # the machine may be shared: the fourth variant only where it fits
            variants["libero_loop"] = WorkerStage(n, hw, {"envs_per_process": 1, "physics": "libero"}, cpus=n, in_process=in_process)
        for _ in range(REPS):
            for name, variant in variants.items():
                times.setdefault(name, []).append(variant.chunk())
    finally:
        for variant in variants.values():
            variant.close()
    limit = n * CHUNK / float(np.median(times["plain"]))
    for name, label in labels.items():
        if name not in times:
            continue
        rate = n * CHUNK / float(np.median(times[name]))
        rows.append({"case": label, "ms per env step": 1e3 / rate, "sub-steps/s": rate, "x LIBERO": rate / limit})
    by = {r["case"]: r for r in rows}
    notes = [
        f"Physics alone (no camera rendered), one libero_spatial task 0 env, medians of {REPS} alternated blocks of {CHUNK} "
        f"env steps: the fast loop {own_ms / fast_ms:.2f}x LIBERO's own env.step (target >= 3x), with robosuite's controller "
        f"{own_ms / split_ms:.2f}x; final MuJoCo states "
        f"{'equal' if phys['same_state'] else 'DIFFERENT'}.",
        f"{n} envs, {hw}x{hw}, two cameras, chunk {CHUNK}, render last, medians of {REPS} chunks with the variants alternated "
        f"chunk by chunk (all up at once; "
        f"{'each EnvWorker in the bench process, as Ray did not start' if in_process else f'each worker a Ray actor of {n} CPUs'}): through the EnvWorker at envs_per_process 1, "
        f"{by[labels['one_per_process']]['x LIBERO']:.2f}x the {n} plain LIBERO processes (target >= 2x)"
        + (
            f"; with the default layout {by[labels['default']]['x LIBERO']:.2f}x (target: within 5% of the former)."
            if labels["default"] in by
            else "."
        ),
    ]
    write("libero_fast", rows, notes)


def grid() -> None:
    """LIBERO sub-steps/s through ProcessEnvManager vs plain OffScreenRenderEnv loops side by side."""
    from envfleet import ProcessEnvManager

    chunk, chunks = CHUNK, 4
    rows = []
    for hw in (128, 256):
        for render in ("last", "all"):
            for n in (2, 4):
                cfg = libero_cfg(n, hw, render, chunk=chunk)
                rng = np.random.default_rng(0)
                with ProcessEnvManager(cfg) as mgr:
                    mgr.reset_envs_to_state_ids(mgr.get_all_state_ids()[:n])
                    mgr.chunk_step((rng.uniform(-1, 1, (n, chunk, 7)) * 0.3).astype(np.float32))
                    t0 = time.perf_counter()
                    for _ in range(chunks):
                        mgr.chunk_step((rng.uniform(-1, 1, (n, chunk, 7)) * 0.3).astype(np.float32))
                    rate = n * chunk * chunks / (time.perf_counter() - t0)
                    rss = _rss_mb(mgr.shard_pids())
                limit = _plain_libero_rate(n, hw, render, chunk, chunks)
                rows.append(
                    {
                        "size": hw,
                        "render": render,
                        "envs": n,
                        "envfleet sub-steps/s": rate,
                        "plain loops sub-steps/s (limit)": limit,
                        "envfleet / limit": rate / limit,
                        "RSS per env process (MB)": rss,
                    }
                )
                print(rows[-1], flush=True)
    notes = []
    for hw in (128, 256):
        for n in (2, 4):
            last = next(r for r in rows if r["size"] == hw and r["envs"] == n and r["render"] == "last")
            allr = next(r for r in rows if r["size"] == hw and r["envs"] == n and r["render"] == "all")
            notes.append(
                f"{hw}x{hw}, {n} envs: render last / render all = {last['envfleet sub-steps/s'] / allr['envfleet sub-steps/s']:.1f}x (target >= 4x at chunk 8)"
            )
    notes.append(
        "Targets: envfleet >= 0.9 of the limit (the same number of plain OffScreenRenderEnv processes run side by side, rendering the same sub-steps)."
    )
    write("libero", rows, notes)
    _plot_libero(rows)


def _rss_mb(pids: list[int | None]) -> float:
    values = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        values.append(int(line.split()[1]) / 1024)
        except (OSError, TypeError):
            pass
    return float(np.mean(values)) if values else float("nan")


def _plain_libero_rate(n: int, hw: int, render: str, chunk: int, chunks: int) -> float:
    """n plain LIBERO loops, one per process, stepping at the same time; combined sub-steps/s."""
    loops = PlainLoops(n, hw, render, chunk)
    try:
        seconds = sum(loops.chunk() for _ in range(chunks))
    finally:
        loops.close()
    return n * chunk * chunks / seconds


def _plot_libero(rows: list[dict[str, Any]]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    os.makedirs(IMG, exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), sharey=True)
    for ax, hw in zip(axes, (128, 256)):
        for render, color in (("last", "#3b7dd8"), ("all", "#d8703b")):
            sel = [r for r in rows if r["size"] == hw and r["render"] == render]
            xs = [r["envs"] for r in sel]
            ax.plot(xs, [r["envfleet sub-steps/s"] for r in sel], "o-", color=color, label=f"envfleet, render {render}")
            ax.plot(
                xs,
                [r["plain loops sub-steps/s (limit)"] for r in sel],
                "x--",
                color=color,
                alpha=0.6,
                label=f"plain loops, render {render}",
            )
        ax.set_title(f"LIBERO {hw}x{hw}, chunk 8")
        ax.set_xlabel("envs")
        ax.set_xticks([2, 4])
    axes[0].set_ylabel("sub-steps / s")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(IMG, "bench_libero.png"), dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    fast_loop(only=tuple(sys.argv[2:])) if sys.argv[1:2] == ["fast"] else run()
