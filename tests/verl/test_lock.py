"""tests-verl runs in the tests session's venv with what verl's lock pins otherwise or adds installed
apart and put first on PYTHONPATH (noxfile.py's `_verl_overlay`): every pin of verl's lock must be
what the session imports."""

from __future__ import annotations

import importlib.metadata

from ..conftest import lock_pins


def installed(name: str) -> str | None:
    """The version the session imports, without a local label (the CPU wheel's ``+cpu``)."""
    try:
        return importlib.metadata.version(name).split("+")[0]
    except importlib.metadata.PackageNotFoundError:
        return None


def test_the_session_runs_on_every_pin_of_verls_lock() -> None:
    wrong = {}
    for name, version in lock_pins("verl-py311.txt").items():
        if installed(name) != version:
            wrong[name] = (installed(name), version)
    assert not wrong, f"installed against verl's lock: {wrong}"


def test_tensordict_is_verls() -> None:
    import tensordict

    assert tensordict.__version__ == lock_pins("verl-py311.txt")["tensordict"] != lock_pins("py311.txt")["tensordict"]
