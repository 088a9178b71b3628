"""What every benchmark section shares: where figures go, how a call is timed, how a table is written."""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "docs", "benchmarks")
IMG = os.path.join(ROOT, "docs", "img")


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
