"""The README's two commands stay true: CI runs exactly the README's test command."""

from __future__ import annotations

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def readme_commands(path: str = "README.md") -> list[str]:
    text = (ROOT / path).read_text()
    block = text.split("```bash", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.strip().splitlines()]


def test_ci_runs_the_readme_test_command() -> None:
    main_job, tests = readme_commands()
    ci = (ROOT / ".ci" / "run").read_text()
    assert tests in ci
    assert "nox -s demo" in main_job


def test_demo_session_uses_the_example_config() -> None:
    nox_text = (ROOT / "noxfile.py").read_text()
    assert "examples/libero_demo.yaml" in nox_text
    assert (ROOT / "examples" / "libero_demo.yaml").exists()


def test_quickstart_shows_the_readme_commands() -> None:
    assert readme_commands("docs/quickstart.md") == readme_commands()


def test_the_test_command_runs_every_default_session() -> None:
    import ast

    tree = ast.parse((ROOT / "noxfile.py").read_text())
    defaults: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(ast.unparse(t) == "nox.options.sessions" for t in node.targets):
            defaults = list(ast.literal_eval(node.value))
    assert defaults, "noxfile.py sets no nox.options.sessions"
    _, tests = readme_commands()
    listed = tests.split(" -s ", 1)[1].split()
    assert listed == defaults
