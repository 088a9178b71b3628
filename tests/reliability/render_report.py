"""Render $DIR/results.json (written by the reliability runs) as $DIR/chaos.md for docs/reliability.md."""

from __future__ import annotations

import json
import os
import platform
import sys
import time

COLUMNS = [
    ("name", "run"),
    ("faults_injected", "faults injected"),
    ("faults_recovered", "recovered"),
    ("chunks_requested", "chunks requested"),
    ("chunks_returned", "returned"),
    ("chunks_lost", "chunks lost"),
    ("envs_truncated", "envs reported truncated"),
    ("env_steps_requested", "env steps requested"),
    ("env_steps_returned", "returned"),
    ("longest_stall_s", "longest stall (s)"),
    ("leaked_processes", "leaked processes"),
    ("leaked_segments", "leaked segments"),
]


def main(directory: str) -> None:
    with open(os.path.join(directory, "results.json")) as fh:
        runs = json.load(fh)
    how = (
        "by `nox -s chaos` (`ENVFLEET_CHAOS=1 pytest tests/reliability`)"
        if os.environ.get("ENVFLEET_CHAOS") == "1"
        else "by the CI-sized run (`ENVFLEET_RELIABILITY_OUT=docs/reliability pytest tests/reliability`; `nox -s chaos` runs the same with bigger numbers)"
    )
    lines = [
        f"Measured on {os.cpu_count()} cores, Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}, {how}.",
        "",
        "| " + " | ".join(title for _, title in COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    for run in runs:
        cells = []
        for key, _ in COLUMNS:
            value = run.get(key, "")
            if key == "longest_stall_s" and (not run.get("chunks_requested") or value == 0.0):
                cells.append("-")  # runs that time no steps (driver kill, soaks)
            else:
                cells.append(f"{value:.2f}" if isinstance(value, float) else str(value))
        lines.append("| " + " | ".join(cells) + " |")
    notes = [f"- **{run['name']}**: {'; '.join(run['notes'])}" for run in runs if run.get("notes")]
    text = "\n".join(lines) + ("\n\n" + "\n".join(notes) if notes else "") + "\n"
    with open(os.path.join(directory, "chaos.md"), "w") as fh:
        fh.write(text)
    print(text)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "docs/reliability")
