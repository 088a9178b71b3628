"""Every public module, class and function of the four packages has a docstring (the API reference shows them)."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = [
    ROOT / "packages" / "core" / "src" / "envfleet",
    ROOT / "packages" / "ray-worker" / "src" / "envfleet_ray",
    ROOT / "packages" / "backend-libero" / "src" / "envfleet_libero",
    ROOT / "packages" / "backend-isaac" / "src" / "envfleet_isaac",
]
# Methods that implement a documented protocol; their docstring is the protocol's.
PROTOCOL = {
    "observation_spec",
    "get_all_state_ids",
    "get_state_task_ids",
    "reset_envs_to_state_ids",
    "chunk_step",
    "flush_video",
    "get_state",
    "load_state",
    "close",
    "bind_observation_buffers",
    # envfleet_ray.runtime.routes: Share and Route
    "ray_results",
    "ready",
    "result",
    "send",
}


def missing() -> list[str]:
    out = []
    for pkg in PACKAGES:
        for path in sorted(pkg.rglob("*.py")):
            if path.name.startswith("_") and path.name != "__init__.py":
                continue
            tree = ast.parse(path.read_text())
            rel = path.relative_to(ROOT)
            if not ast.get_docstring(tree):
                out.append(f"{rel}: module")
            for node in tree.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                    if not ast.get_docstring(node):
                        out.append(f"{rel}: {node.name}")
                    if isinstance(node, ast.ClassDef):
                        for sub in node.body:
                            if (
                                isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef))
                                and not sub.name.startswith("_")
                                and sub.name not in PROTOCOL
                                and not ast.get_docstring(sub)
                            ):
                                out.append(f"{rel}: {node.name}.{sub.name}")
    return out


def test_public_names_have_docstrings() -> None:
    assert missing() == []
