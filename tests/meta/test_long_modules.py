"""A module over 400 lines names its one job in its first lines.

A long module is fine when it does one thing; naming that thing where a reader starts keeps it
so, and a module that cannot name one job is one to split along the line between its two.
"""

from __future__ import annotations

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
LONG = 400


def _long_modules() -> list[pathlib.Path]:
    return sorted(p for p in ROOT.glob("packages/*/src/**/*.py") if len(p.read_text().splitlines()) > LONG)


def test_every_long_module_names_its_one_job_at_the_top() -> None:
    unnamed = []
    for path in _long_modules():
        head = path.read_text().splitlines()[:6]
        if not any(line.startswith("One job: ") and len(line) > len("One job: ") + 10 for line in head):
            unnamed.append(str(path.relative_to(ROOT)))
    assert not unnamed, f"modules over {LONG} lines without a 'One job: ...' line in their first 6 lines: {unnamed}"
