"""What every benchmark section shares: where figures go, how a call is timed, how a table is written."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from collections.abc import Callable
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "docs", "benchmarks")
IMG = os.path.join(ROOT, "docs", "img")


def verl_env() -> tuple[str, dict[str, str]] | None:
    """The Python and environment of verl's lock: ``$ENVFLEET_VERL_PYTHON`` as it is, or the tests
    session's venv with the overlay that ``nox -s tests-verl`` lays over it first on PYTHONPATH
    (``.nox/verl-overlay``); None when neither exists."""
    if os.environ.get("ENVFLEET_VERL_PYTHON"):
        return os.environ["ENVFLEET_VERL_PYTHON"], dict(os.environ)
    python = os.path.join(ROOT, ".nox", "tests", "bin", "python")
    overlay = os.path.join(ROOT, ".nox", "verl-overlay")
    if not (os.path.exists(python) and os.path.isdir(os.path.join(overlay, "verl"))):
        return None
    return python, {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (overlay, os.environ.get("PYTHONPATH", "")) if p)}


def machine() -> str:
    """One line describing where the figures were taken."""
    try:
        with open("/proc/cpuinfo") as fh:
            model = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), platform.processor())
    except OSError:
        model = platform.processor()
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores ({model}), {mem:.0f} GiB, Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}"


def timed(fn: Callable[[], Any], repeat: int, warmup: int = 3) -> float:
    """Seconds per call of ``fn`` (median of 3 batches of ``repeat`` after warm-up)."""
    for _ in range(warmup):
        fn()
    batches = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(repeat):
            fn()
        batches.append((time.perf_counter() - t0) / repeat)
    return float(np.median(batches))


def comparison_row(case: str, ours_label: str, ours_s: float, theirs_label: str, theirs_s: float) -> dict[str, Any]:
    """One table row comparing two ways of making the same call: each one's milliseconds, then what the
    second adds to the first, in ms and in % (``ours_s`` and ``theirs_s`` in seconds per call).
    """
    return {
        "case": case,
        f"{ours_label} (ms)": ours_s * 1e3,
        f"{theirs_label} (ms)": theirs_s * 1e3,
        "added (ms)": (theirs_s - ours_s) * 1e3,
        "added (%)": (theirs_s / ours_s - 1) * 100,
    }


def write(section: str, rows: list[dict[str, Any]], notes: list[str], extra: dict[str, Any] | None = None) -> None:
    """Print a table and write docs/benchmarks/<section>.json and .md."""
    os.makedirs(OUT, exist_ok=True)
    cols = list(rows[0]) if rows else []
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in rows:
        lines.append("| " + " | ".join(_fmt(row[c]) for c in cols) + " |")
    table = "\n".join(lines)
    text = f"Measured on {machine()} by `nox -s bench` ({section}).\n\n{table}\n\n" + "\n".join(f"- {n}" for n in notes) + "\n"
    print(f"\n== {section} ==\n{table}\n" + "\n".join(f"  * {n}" for n in notes))
    with open(os.path.join(OUT, f"{section}.md"), "w") as fh:
        fh.write(text)
    with open(os.path.join(OUT, f"{section}.json"), "w") as fh:
        json.dump({"machine": machine(), "rows": rows, "notes": notes, **(extra or {})}, fh, indent=2)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)


def vector_env_rate(vec: Any, actions: Callable[[int], np.ndarray], warmup: int, chunks: int) -> float:
    """Sub-steps per second of a gymnasium vector env stepped one action at a time through chunks
    ``actions(k)`` (``[num_envs, chunk, action_dim]``); chunks ``100 + k`` are timed after ``warmup``
    untimed ones. The caller resets ``vec`` and closes it."""
    for k in range(warmup):
        for a in actions(k).transpose(1, 0, 2):
            vec.step(a)
    steps = 0
    t0 = time.perf_counter()
    for k in range(chunks):
        chunk = actions(100 + k)
        for a in chunk.transpose(1, 0, 2):
            vec.step(a)
        steps += chunk.shape[0] * chunk.shape[1]
    return steps / (time.perf_counter() - t0)


def rate_in_venv(section: str, python: str, script: str, case: str, timeout: float) -> float:
    """Run ``script case`` under another interpreter (a simulator's venv) and read the ``rate`` of the
    last JSON line it prints."""
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "bench")}
    out = subprocess.run([python, os.path.abspath(script), case], capture_output=True, text=True, timeout=timeout, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{section} bench case {case!r} failed:\n{out.stderr[-3000:]}")
    return float(json.loads(out.stdout.strip().splitlines()[-1])["rate"])
