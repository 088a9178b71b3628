"""A plugin written for the previous plugin API (envfleet-reacher, tests/plugins/: a real MuJoCo
arm, no ``implements``, no ``api_version``), unchanged, through the user's commands: ``envfleet
rollout`` with ``auto_reset: true`` on a real local Ray, ``envfleet backends`` and ``envfleet doctor``.
Its own conformance suite is tests/plugins/envfleet-reacher/tests, run as its author wrote it."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

from envfleet.plugins import get_backend

ENVFLEET = [sys.executable, "-m", "envfleet_ray.cli"]
NOTICE = "backend reacher (envfleet-reacher) uses plugin API 1.0: since plugin API 2.0 a backend declares the optional core keys"
FIX = 'fix: BackendSpec(..., api_version="2.0", implements={...the keys its env honours})'


def test_the_reacher_is_an_unchanged_plugin_of_api_1() -> None:
    reacher = get_backend("reacher")
    assert reacher.api_version is None and not reacher.implements and reacher.package == "envfleet-reacher"


def test_rollout_with_auto_reset_runs_it_and_warns_naming_it(tmp_path) -> None:
    out = subprocess.run(
        [
            *ENVFLEET,
            "rollout",
            "--steps",
            "6",
            "--out",
            str(tmp_path),
            "--no-progress",
            "train.simulator_type=reacher",
            "train.num_envs=2",
            "train.auto_reset=true",
            "train.max_episode_steps=8",
            "actor.model.num_action_chunks=4",  # actor.model.action_dim: the backend's 2, since envfleet 0.1.0's config change
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "RAY_ADDRESS": ""},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    warned = [line for line in out.stderr.splitlines() if line.startswith("warning: PluginDeprecationWarning:")]
    assert len(warned) == 1, out.stderr  # once, though the command loads the config twice
    assert "backend 'reacher' (package envfleet-reacher) is written for envfleet plugin API 1.0" in warned[0]
    assert "this config sets auto_reset, passed to its env unchecked" in warned[0]
    assert 'implements={"auto_reset"}' in warned[0]
    summary = json.loads((tmp_path / "summary.json").read_text())
    # 6 chunks of 4 sub-steps per env and episodes of at most 8: the env's own auto-reset ran each
    # env through 3 episodes or more; without it an env finishes one and idles.
    assert summary["episodes"] >= 2 * 3, summary


def test_backends_and_doctor_name_it_what_changed_and_the_fix(capsys) -> None:
    from envfleet_ray.commands.backends import cmd_backends
    from envfleet_ray.commands.doctor import doctor

    cmd_backends()
    listed = capsys.readouterr().out
    (line,) = [x for x in listed.splitlines() if "deprecated:" in x]
    assert NOTICE in line and line.endswith(FIX), listed
    out = io.StringIO()
    code = doctor(["reacher"], out=out)
    text = out.getvalue()
    assert code == 0, text  # a deprecation is a warning, not a failure
    assert f"warn  deprecated: {NOTICE}" in text and FIX in text, text
    assert "ok    backend reacher imports (envfleet_reacher.env:ReacherEnv)" in text, text
