"""import-linter's contracts (pyproject.toml) name every package of the repository.

A package missing from them is checked by no contract: this is how the ManiSkill backend
and the LeRobot face went unchecked until 2026-12-01.
"""

from __future__ import annotations

import pathlib

import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def project_packages() -> set[str]:
    """The top-level import packages under packages/*/src."""
    return {p.parent.name for p in ROOT.glob("packages/*/src/*/__init__.py")}


def test_every_package_is_under_the_import_contracts() -> None:
    linter = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    packages = project_packages()
    assert {"envfleet", "envfleet_ray", "envfleet_libero"} <= packages  # the glob finds them
    assert set(linter["root_packages"]) == packages
    contracts = {c["name"]: c for c in linter["contracts"]}
    forbidden = next(c for c in contracts.values() if c["type"] == "forbidden" and c["source_modules"] == ["envfleet"])
    assert set(forbidden["forbidden_modules"]) == packages - {"envfleet"}
    independent = next(c for c in contracts.values() if c["type"] == "independence")
    assert set(independent["modules"]) == packages - {"envfleet"}
