"""docs/concepts.md's module map and import-linter's layers name every module of the packages.

A module the map does not name is one a reader cannot find; one outside the layers is one
import-linter does not check. Both used to drift: the map named about half of the modules.
"""

from __future__ import annotations

import pathlib
import re

import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]
#: The packages whose insides are layered by import-linter (the backends are checked as wholes).
LAYERED = ("envfleet", "envfleet_ray")


def _modules(package: pathlib.Path) -> list[str]:
    """Every module of ``package``, as its path inside the package (``shards/manager.py``), ``__init__`` left out."""
    return sorted(str(p.relative_to(package)) for p in package.rglob("*.py") if p.name != "__init__.py")


def _map() -> str:
    text = (ROOT / "docs" / "concepts.md").read_text()
    start = text.index("## The module map")
    return text[start : text.index("\n## ", start + 1)]


def _section(text: str, package: str) -> str:
    """The part of the map about ``package``: its own heading's block, or the backends' block."""
    own = re.search(rf"^### {package}\b.*?(?=^### |\Z)", text, re.M | re.S)
    if own:
        return own.group(0)
    shared = re.search(r"^### The backends.*?(?=^### |\Z)", text, re.M | re.S)
    assert shared, "the module map has no section for the backends"
    block = shared.group(0)
    start = block.index(package)
    nxt = re.search(r"^\S", block[start + len(package) :], re.M)
    return block[start : start + len(package) + (nxt.start() if nxt else len(block))]


def _named(section: str, module: str) -> bool:
    """Whether ``section`` names ``module``: by its path, or by its file name under its folder's line."""
    if module in section:
        return True
    folder, _, name = module.rpartition("/")
    if not folder:
        return re.search(rf"(?<![\w/]){re.escape(name)}\b", section) is not None
    lines = section.splitlines()
    at = next((i for i, line in enumerate(lines) if re.match(rf"\s*{re.escape(folder)}/", line)), None)
    if at is None:
        return False
    # the folder's own line and the indented lines under it
    block = [lines[at]]
    for line in lines[at + 1 :]:
        if line.startswith(" " * (len(lines[at]) - len(lines[at].lstrip()) + 1)) and line.strip():
            block.append(line)
        else:
            break
    return re.search(rf"(?<![\w/]){re.escape(name)}\b", "\n".join(block)) is not None


def test_the_module_map_names_every_module() -> None:
    text = _map()
    missing = []
    for init in sorted(ROOT.glob("packages/*/src/*/__init__.py")):
        package = init.parent
        section = _section(text, package.name)
        missing += [f"{package.name}: {m}" for m in _modules(package) if not _named(section, m)]
    assert not missing, f"docs/concepts.md's module map does not name: {missing}"


def test_every_module_is_in_a_layer() -> None:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    for package in LAYERED:
        contract = next(c for c in contracts if c["type"] == "layers" and c["containers"] == [package])
        layered = {name.strip() for layer in contract["layers"] for name in layer.split("|")}
        root = next(ROOT.glob(f"packages/*/src/{package}"))
        children = {p.stem for p in root.glob("*.py") if p.name != "__init__.py"} | {p.parent.name for p in root.glob("*/__init__.py")}
        assert children - layered == set(), f"{package}: in no import-linter layer: {sorted(children - layered)}"
        assert layered - children == set(), f"{package}: layers name what does not exist: {sorted(layered - children)}"


def test_the_map_check_finds_a_missing_module() -> None:
    section = "shards/               internals\n  manager.py          lifecycle\nother.py  x"
    assert _named(section, "shards/manager.py")
    assert not _named(section, "shards/other.py")  # named, but not under shards/
    assert not _named(section, "shards/server.py")
