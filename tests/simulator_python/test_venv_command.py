"""``envfleet venv``: where it finds a backend's lock, and its errors (the build itself runs in the nox session)."""

from __future__ import annotations

import os

import pytest

from envfleet.plugins import get_backend
from envfleet_ray.cli import main
from envfleet_ray.commands.venv import find_lock

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_finds_the_checkout_lock_of_metaworld() -> None:
    assert find_lock(get_backend("metaworld"), "311") == os.path.join(ROOT, "requirements", "metaworld-py311.txt")


@pytest.mark.parametrize(
    "argv,message",
    [
        (["venv", "nosuch"], "unknown backend 'nosuch'"),
        (["venv", "metaworld", "--lock", "/nowhere.txt"], "--lock /nowhere.txt: no such file"),
        (["venv", "metaworld", "--python", "/nowhere/python"], "--python /nowhere/python: cannot run it"),
        (["venv", "toy"], "backend 'toy' ships no pinned lock for Python 3.11"),
    ],
    ids=["unknown-backend", "missing-lock", "missing-python", "no-lock"],
)
def test_errors_name_the_problem_and_build_nothing(argv: list[str], message: str, tmp_path, capsys) -> None:
    target = tmp_path / "venv"
    assert main([*argv, "--dir", str(target)] if argv[1] != "nosuch" else argv) == 2
    assert message in capsys.readouterr().err
    assert not target.exists()
