"""Core's layout: no import circle, sub-packages by concern, the old flat paths still working."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import envfleet

CORE = Path(envfleet.__file__).parent

#: The old flat path of each moved module, and where it lives now.
MOVED = {
    "envfleet.manager": "envfleet.shards.manager",
    "envfleet.shard_handle": "envfleet.shards.handle",
    "envfleet.replies": "envfleet.shards.replies",
    "envfleet.recycling": "envfleet.shards.recycling",
    "envfleet.shard": "envfleet.shards.server",
    "envfleet.protocol": "envfleet.shards.messages",
    "envfleet.wire": "envfleet.shards.wire",
    "envfleet.shm": "envfleet.shards.shm",
    "envfleet.janitor": "envfleet.shards.janitor",
    "envfleet.interpreter": "envfleet.shards.interpreter",
    "envfleet.check": "envfleet.diagnostics.check",
    "envfleet.measure": "envfleet.diagnostics.measure",
    "envfleet.gl_probe": "envfleet.diagnostics.gl_probe",
    "envfleet.egl_cuda": "envfleet.diagnostics.egl_cuda",
    "envfleet.hookspecs": "envfleet.plugins.hookspecs",
    "envfleet.registry": "envfleet.plugins",
}


def _module_name(path: Path) -> str:
    parts = ["envfleet", *path.relative_to(CORE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(path: Path) -> set[str]:
    """The envfleet modules ``path`` imports when it runs, at module level or inside a function
    (imports under ``if TYPE_CHECKING:`` never run and are left out)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for stmt in child.orelse:
                    visit(stmt)
                continue
            if isinstance(child, ast.Import):
                found.update(a.name for a in child.names if a.name.startswith("envfleet"))
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")
                    base = base[: len(base) - child.level + 1]
                    target = ".".join([*base, *([child.module] if child.module else [])])
                else:
                    target = child.module or ""
                if target.startswith("envfleet"):
                    found.add(target)
                    found.update(f"{target}.{a.name}" for a in child.names)  # `from . import janitor`
            visit(child)

    visit(ast.parse(path.read_text()))
    return found


def _graph() -> dict[str, set[str]]:
    """Module -> the core modules it imports. A module's own parent packages are left out: Python
    imports them before the module anyway (``from . import janitor`` needs no name of ``__init__``)."""
    modules = {_module_name(p): p for p in CORE.rglob("*.py")}
    return {
        name: {m for m in _imports(path) if m in modules and m != name and not name.startswith(f"{m}.")} for name, path in modules.items()
    }


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph``, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                found = walk(nxt)
                if found:
                    return found
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state:
            found = walk(node)
            if found:
                return found
    return None


def test_core_has_no_import_circle() -> None:
    graph = _graph()
    assert graph["envfleet.config"] >= {"envfleet.options", "envfleet.plugins"}  # the scan sees imports
    assert _cycle(graph) is None, f"import circle in core: {' -> '.join(_cycle(graph) or [])}"


def test_the_cycle_check_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycle(graph) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_options_module_is_a_leaf() -> None:
    assert _imports(CORE / "options.py") == set()


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()), ids=sorted(MOVED))
def test_an_old_path_warns_and_is_the_new_module(old: str, new: str) -> None:
    code = f"""
        import importlib, sys, warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            old = importlib.import_module({old!r})
        assert old is importlib.import_module({new!r}), (old, {new!r})
        messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
        assert messages == [{f"{old} moved to {new}: import it from there (the old path will be removed)"!r}], messages
        print("ok")
    """
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_nothing_in_the_repository_imports_an_old_path() -> None:
    repo = CORE.parents[3]
    if not (repo / "noxfile.py").is_file():
        pytest.skip("not run from a source checkout")  # pragma: no cover
    stale = [f"{path.relative_to(repo)}: {module}" for path in CORE.rglob("*.py") for module in _imports(path) if module in MOVED]
    for folder in ("packages", "tests", "bench", "examples", "docs"):
        for path in (repo / folder).rglob("*.py"):
            if path.parent == CORE or ".nox" in path.parts:
                continue
            for module in _imports_anywhere(path):
                if module in MOVED:
                    stale.append(f"{path.relative_to(repo)}: {module}")
    assert not stale, stale


def _imports_anywhere(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def test_a_shard_still_starts_from_its_old_module_path() -> None:
    # `python -m envfleet.shard FD PID` with a bad FD must reach the server's main (and fail
    # there on the descriptor), not stop at the shim.
    out = subprocess.run([sys.executable, "-m", "envfleet.shard", "999", str(os.getpid())], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "Bad file descriptor" in out.stderr, out.stderr
