"""The `isaac` section of `nox -s bench` (bench/run.py isaac)."""

from __future__ import annotations

import json
import os
import subprocess

from common import ROOT, write


def run() -> None:
    """Runs the Isaac benchmark script in the Python 3.12 venv of `nox -s tests-isaac`, if it exists."""
    candidates = sorted(
        p
        for p in (
            os.path.join(ROOT, ".nox", "tests-isaac", "bin", "python"),
            os.environ.get("ENVFLEET_ISAAC_PYTHON", ""),
        )
        if p and os.path.exists(p)
    )
    script = os.path.join(ROOT, "bench", "isaac_vs_direct.py")
    if not candidates:
        print("isaac: no Python 3.12 venv with Isaac Lab (run `nox -s tests-isaac` first), skipped")
        return
    rows = []
    for num_envs in (4, 16):
        out = subprocess.run(
            [candidates[0], script, "--num-envs", str(num_envs)],
            capture_output=True,
            text=True,
            timeout=3600,
            env={**os.environ, "OMNI_KIT_ACCEPT_EULA": "YES", "WARP_CACHE_PATH": os.path.join(ROOT, ".nox", ".cache", "warp")},
        )
        if out.returncode != 0:
            print(f"isaac: benchmark failed:\n{out.stderr[-2000:]}")
            return
        result = json.loads(out.stdout[out.stdout.index("{") :])
        rows.append({k: v for k, v in result.items() if isinstance(v, (int, float, str, bool))})
        print(rows[-1], flush=True)
    write(
        "isaac",
        rows,
        [
            "Target: envfleet / direct >= 0.95 (`ratio`). Both sides simulate the same states and actions; `identical_observations` checks it.",
            "The Isaac side runs on Python 3.12 (Isaac Lab 3.0, kit-less, Newton on CPU) in the venv of `nox -s tests-isaac`.",
        ],
    )
