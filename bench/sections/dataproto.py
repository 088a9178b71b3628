"""The `dataproto` section of `nox -s bench` (bench/run.py dataproto)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import numpy as np
from common import ROOT, write

# The DataProto of the commit before verl's whole surface was added: the figures compare
# against it, loaded from git at run time, so "no slower than before" is measured in one run.
_DATAPROTO_BEFORE = "81eac0b"


def _dataproto_before_file() -> str | None:
    """envfleet/dataproto.py as it was at ``_DATAPROTO_BEFORE``, written to a temporary file (None without git)."""
    import tempfile

    try:
        source = subprocess.run(
            ["git", "-C", ROOT, "show", f"{_DATAPROTO_BEFORE}:packages/core/src/envfleet/dataproto.py"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    path = os.path.join(tempfile.mkdtemp(prefix="envfleet-bench-"), "dataproto_before.py")
    with open(path, "w") as fh:
        fh.write(source)
    return path


def run() -> None:
    """concat, chunk and a pickle round trip of step-sized DataProtos, before and after verl's whole surface."""
    before = _dataproto_before_file()
    versions: dict[str, list[str]] = {"after": []} if before is None else {"before": [before], "after": []}
    script = os.path.join(ROOT, "bench", "dataproto_ops.py")
    times: dict[str, dict[str, list[float]]] = {}
    # Each version in a fresh process per round (bench/dataproto_ops.py says why), the two
    # alternating in both orders, so that a slow spell of the machine hits both alike.
    for rnd in range(6):
        for name in versions if rnd % 2 == 0 else reversed(list(versions)):
            out = subprocess.run([sys.executable, script, *versions[name]], capture_output=True, text=True, check=True, timeout=600)
            for op, seconds in json.loads(out.stdout.strip().splitlines()[-1]).items():
                times.setdefault(op, {v: [] for v in versions})[name].append(seconds)
    rows = []
    for op, per in times.items():
        row: dict[str, Any] = {"operation": op}
        for name in versions:
            row[f"{name} (us)"] = float(np.median(per[name])) * 1e6
        if before is not None:
            row["after / before"] = row["after (us)"] / row["before (us)"]
        rows.append(row)
    notes = [
        "Target: concat, chunk and pickling no slower than before verl's whole surface was added "
        f"(before = envfleet/dataproto.py at commit {_DATAPROTO_BEFORE}, loaded from git in the same run).",
        "A step result: 8 envs, two 128x128x3 uint8 images, 8-d state, [8, 8] rews/terminations/truncations, "
        "12 small info columns, task descriptions; meta_info {'stage_id': 0}. Each figure is the median of 6 rounds, "
        "each version in a fresh process per round, before and after alternating in both orders.",
        "concat takes the parts as a worker's results arrive (unpickled, TensorDict not yet built), as the group concatenates them.",
    ]
    if before is None:
        notes.append("No git checkout here: only the current code was measured.")
    write("dataproto", rows, notes)
