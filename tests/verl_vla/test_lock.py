"""tests-verl-vla runs where tests-verl runs (the tests venv and verl's overlay) with verl 0.7.1
laid over it (see noxfile.py): that holds only while its lock is verl's lock with another verl."""

from __future__ import annotations

import importlib.metadata

from ..conftest import lock_pins


def test_verl_vla_lock_is_verls_lock_with_verl_071() -> None:
    vla, verl = lock_pins("verl-vla-py311.txt"), lock_pins("verl-py311.txt")
    assert vla.pop("verl") == "0.7.1"
    verl.pop("verl")
    verl.pop("torchrl")  # tests-torchrl's, in the same venv; verl-vla does not need it
    assert vla == verl, {k: (vla.get(k), verl.get(k)) for k in set(vla) | set(verl) if vla.get(k) != verl.get(k)}


def test_the_session_imports_verl_071() -> None:
    import verl

    assert importlib.metadata.version("verl") == "0.7.1"
    assert getattr(verl, "__version__", "0.7.1") == "0.7.1"
