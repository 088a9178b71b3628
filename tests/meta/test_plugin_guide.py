"""Follow docs/plugins.md from scratch: a fresh venv, the guide's files, `envfleet backends`, the conformance suite,
and the guide's plugin declared for the previous plugin API."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import venv

ROOT = pathlib.Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "plugins.md"


def guide_files() -> dict[str, str]:
    """Every code block of the guide that carries a title= file name."""
    text = GUIDE.read_text()
    blocks = re.findall(r'```\w+ title="([^"]+)"\n(.*?)```', text, flags=re.S)
    return {name: body for name, body in blocks}


def test_guide_has_the_plugin_files() -> None:
    files = guide_files()
    for name in ("pyproject.toml", "plugin.py", "env.py", "test_conformance.py"):
        assert any(path.endswith(name) for path in files), f"the guide lost its {name} block"


def test_following_the_guide_in_a_fresh_venv(tmp_path) -> None:
    for rel, body in guide_files().items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = str(env_dir / "bin" / "python")
    pins = str(ROOT / "requirements" / "py311.txt")
    # Without PYTHONDONTWRITEBYTECODE (a CI setting, not a user's), each module is compiled once, when first imported.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE")}
    env["PATH"] = f"{env_dir / 'bin'}{os.pathsep}{env['PATH']}"

    def run(*cmd: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=timeout)
        assert out.returncode == 0, f"{' '.join(cmd)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
        return out

    # envfleet itself (core with its testing extra, and the command), pinned; then the guide's package, as a user installs it.
    # --no-compile: pip would byte-compile every module of Ray and the other dependencies, most never imported here
    # (most of this install's CPU time).
    core = str(ROOT / "packages" / "core")
    envfleet_pkgs = (f"envfleet[testing] @ file://{core}", str(ROOT / "packages" / "ray-worker"))
    run(py, "-m", "pip", "install", "-q", "--no-compile", "-c", pins, *envfleet_pkgs)
    run(py, "-m", "pip", "install", "-q", "-c", pins, "./envfleet-line")
    envfleet = str(env_dir / "bin" / "envfleet")
    listed = run(envfleet, "backends").stdout
    assert re.search(r"^line\s+envfleet-line\s+0\.1\.0", listed, flags=re.M), listed
    checked = run(envfleet, "backends", "--check", "line").stdout
    assert re.search(r"line: ok \(build [0-9.]+ s", checked), checked
    suite = run(py, "-m", "pytest", "-v", "-p", "no:cacheprovider", "envfleet-line/tests")
    assert re.search(r"\d+ passed", suite.stdout) and "failed" not in suite.stdout, suite.stdout
    for declared in ("test_auto_reset", "test_ignore_terminations"):  # the declared keys are tested, not skipped
        assert f"TestLineConformance::{declared} PASSED" in suite.stdout, suite.stdout
    # A rollout with auto_reset, as the guide shows it: every task is described by its own episodes.
    out_dir = tmp_path / "run"
    rollout = run(
        envfleet,
        "rollout",
        "--steps",
        "12",
        "--policy",
        "random",
        "--out",
        str(out_dir),
        "train.simulator_type=line",
        "train.num_envs=3",
        "actor.model.num_action_chunks=4",
        "train.max_episode_steps=8",
        "train.auto_reset=true",
    )
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["episodes"] >= 12, (summary, rollout.stdout)  # 12 chunks of 4 sub-steps, 3 envs, 8-step episodes
    for task, row in summary["per_task"].items():
        assert row["description"].endswith(f"(task {task})"), summary["per_task"]

    # The same plugin as written for the previous plugin API (1.0: no implements), reinstalled:
    # listed as deprecated with its fix, and it still builds and steps with auto_reset, warning by name.
    plugin = tmp_path / "envfleet-line" / "src" / "envfleet_line" / "plugin.py"
    source = plugin.read_text()
    declared = '            implements={"auto_reset", "ignore_terminations"},\n            api_version="2.0",'
    assert source.count(declared) == 1, "the guide's BackendSpec no longer declares implements and api_version as this test expects"
    plugin.write_text(source.replace(declared, '            api_version="1.0",'))
    run(py, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", "./envfleet-line")
    listed = run(envfleet, "backends").stdout
    assert (
        "deprecated: backend line (envfleet-line) uses plugin API 1.0" in listed
        and 'fix: BackendSpec(..., api_version="2.0", implements=' in listed
    ), listed
    old = run(envfleet, "backends", "--check", "line", "train.auto_reset=true")
    assert re.search(r"line: ok \(build [0-9.]+ s", old.stdout), old.stdout
    assert "PluginDeprecationWarning: backend 'line' (package envfleet-line) is written for envfleet plugin API 1.0" in old.stderr, (
        old.stderr
    )
    assert 'implements={"auto_reset"}' in old.stderr, old.stderr
