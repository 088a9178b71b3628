"""tests-verl runs in the tests session's venv with what verl's lock pins otherwise or adds installed
apart and put first on PYTHONPATH (noxfile.py's `_verl_overlay`): every pin of verl's lock must be
what the session imports."""

from __future__ import annotations

import importlib.metadata
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


def installed(name: str) -> str | None:
    """The version the session imports, without a local label (the CPU wheel's ``+cpu``)."""
    try:
        return importlib.metadata.version(name).split("+")[0]
    except importlib.metadata.PackageNotFoundError:
        return None


def test_the_session_runs_on_every_pin_of_verls_lock() -> None:
    wrong = {}
    for name, version in pins("verl-py311.txt").items():
        if installed(name) != version:
            wrong[name] = (installed(name), version)
    assert not wrong, f"installed against verl's lock: {wrong}"


def test_tensordict_is_verls() -> None:
    import tensordict

    assert tensordict.__version__ == pins("verl-py311.txt")["tensordict"] != pins("py311.txt")["tensordict"]
