"""An import inside a function says why it is there.

Such an import is either for start-up time (a simulator, torch, Ray, a writer's library: loaded
only where it is used, so that listing plugins, ``envfleet --help`` and a shard stay light) or an
optional dependency (under ``try``). Neither may hide an import circle: import-linter's
``acyclic_siblings`` contract counts imports inside functions. A module says why once, in a
comment starting ``# Imports inside functions:`` above its first definition, or each such
import says it on its own line or the line above it.
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
MARK = "# Imports inside functions:"


def _unexplained(path: pathlib.Path) -> list[int]:
    text = path.read_text()
    if any(line.startswith(MARK) and len(line) > len(MARK) + 10 for line in text.splitlines()):
        return []
    lines = text.splitlines()
    tree = ast.parse(text)
    tried: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try):
            for inner in node.body:
                for sub in ast.walk(inner):
                    tried.add(id(sub))
    out = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in tried:
                near = [lines[node.lineno - 1], *(lines[i] for i in range(max(node.lineno - 3, 0), node.lineno - 1))]
                if not any("#" in line for line in near):
                    out.append(node.lineno)
    return sorted(set(out))


def test_every_import_inside_a_function_says_why() -> None:
    bad = {}
    for path in sorted(ROOT.glob("packages/*/src/**/*.py")):
        lines = _unexplained(path)
        if lines:
            bad[str(path.relative_to(ROOT))] = lines
    assert not bad, f"imports inside functions without a reason (a '{MARK} ...' comment, or one at the import): {bad}"
