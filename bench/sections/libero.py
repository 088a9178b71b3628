"""The `libero` section of `nox -s bench` (bench/run.py libero)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import numpy as np
from common import IMG, ROOT, write
from configs import libero_cfg, libero_installed


def run() -> None:
    """LIBERO sub-steps/s through ProcessEnvManager vs plain OffScreenRenderEnv loops side by side."""
    if not libero_installed():
        print("libero: backend not installed, skipped")
        return
    from envfleet import ProcessEnvManager

    chunk, chunks = 8, 4
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
    import tempfile

    script = os.path.join(ROOT, "bench", "plain_libero.py")
    with tempfile.TemporaryDirectory(prefix="envfleet_barrier_") as barrier:
        procs = [
            subprocess.Popen(
                [sys.executable, script, str(hw), render, str(chunk), str(chunks), str(i), str(n), barrier],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env={**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")},
            )
            for i in range(n)
        ]
        outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    start = min(o["t_start"] for o in outs)
    end = max(o["t_end"] for o in outs)
    return n * chunk * chunks / (end - start)


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
