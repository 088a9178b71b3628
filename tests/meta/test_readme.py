"""The README's two commands stay true: CI runs exactly the README's test command."""

from __future__ import annotations

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
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
