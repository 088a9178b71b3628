"""tests-maniskill runs in the tests session's venv with ManiSkill's lock installed on top (see
noxfile.py): that holds only while ManiSkill's lock adds packages to the main lock and repins none."""

from __future__ import annotations

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def pins(name: str) -> dict[str, str]:
    out = {}
    with open(os.path.join(ROOT, "requirements", name)) as fh:
        for line in fh:
            line = line.split("#")[0].strip()
            if "==" in line:
                package, version = line.split("==", 1)
                out[re.sub(r"[-_.]+", "-", package).lower()] = version
    return out


def test_maniskill_lock_repins_nothing_of_the_main_lock() -> None:
    main, maniskill = pins("py311.txt"), pins("maniskill-py311.txt")
    assert maniskill, "requirements/maniskill-py311.txt lists no pins"
    shared = {name: (main[name], maniskill[name]) for name in maniskill if name in main}
    assert not shared, f"ManiSkill's lock repins packages of the main lock: {shared}"
