"""Core's layout: no import circle, sub-packages by concern."""

from __future__ import annotations

import ast
from pathlib import Path

import envfleet

CORE = Path(envfleet.__file__).parent


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
