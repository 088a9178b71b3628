"""tests-verl-vla runs in tests-verl's venv with verl 0.7.1 laid over it (see noxfile.py): that
holds only while its lock is verl's lock with another verl."""

from __future__ import annotations

import importlib.metadata
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def pins(name: str) -> dict[str, str]:
    with open(os.path.join(ROOT, "requirements", name)) as fh:
        lines = [line.split("#")[0].strip() for line in fh]
    return dict(line.split("==", 1) for line in lines if "==" in line)


def test_verl_vla_lock_is_verls_lock_with_verl_071() -> None:
    vla, verl = pins("verl-vla-py311.txt"), pins("verl-py311.txt")
    assert vla.pop("verl") == "0.7.1"
    verl.pop("verl")
    verl.pop("torchrl")  # tests-torchrl's, in the same venv; verl-vla does not need it
    assert vla == verl, {k: (vla.get(k), verl.get(k)) for k in set(vla) | set(verl) if vla.get(k) != verl.get(k)}


def test_the_session_imports_verl_071() -> None:
    import verl

    assert importlib.metadata.version("verl") == "0.7.1"
    assert getattr(verl, "__version__", "0.7.1") == "0.7.1"
