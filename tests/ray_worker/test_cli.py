"""The `envfleet` command, run as a user runs it (a subprocess), with the toy backend."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ENVFLEET = [sys.executable, "-m", "envfleet_ray.cli"]


def run(*args: str, cwd: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ENVFLEET, *args], capture_output=True, text=True, cwd=cwd, timeout=timeout, env={**os.environ, "RAY_ADDRESS": ""}
    )


def test_backends_lists_toy_and_the_broken_plugins_and_fails() -> None:
    out = run("backends")
    # The test venv has envfleet-broken installed: its plugins fail, so a plugin's CI would see exit code 1.
    assert out.returncode == 1, out.stderr
    assert "toy" in out.stdout and "envfleet-toy" in out.stdout and "0.1.0" in out.stdout
    assert "broken: failed to import: ImportError" in out.stdout and "unobtainium" in out.stdout
    assert "typo: has an invalid hook: LookupError: unknown hook 'envfleet_register_backend'" in out.stdout
    assert "unmarked: has an invalid hook" in out.stdout and "no @hookimpl marker" in out.stdout
    assert "empty: failed to register" in out.stdout and "never called registry.register" in out.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["rollout", "--bogus"], "unrecognized arguments: --bogus"),
        (["rollout", "--workers", "0", "train.simulator_type=toy"], "--workers must be >= 1"),
        (["rollout", "--steps", "x"], "invalid int value"),
        (["rollout", "--config", "missing.yaml"], "config file not found: 'missing.yaml'"),
        (["rollout", "train.simulator_type=toyy"], "unknown backend 'toyy'"),
        (["rollout", "train.simulator_type=toy", "train.num_env=2"], "Did you mean 'train.num_envs'"),
        (["rollout", "train.simulator_type=toy", "train.num_envs=two"], "'train.num_envs' has a wrong value"),
        (["rollout", "train.simulator_type=toy", "train.libero.y=2"], "config section 'train.libero' is for backend 'libero'"),
        (["rollout", "--policy", "no_such_module_xyz:policy", "train.simulator_type=toy"], "cannot import module 'no_such_module_xyz'"),
        (["rollout", "--policy", "os.path:join;rm", "train.simulator_type=toy"], "is not one of: zero, random"),
        (["rollout", "--policy", "sleep:soon", "train.simulator_type=toy"], "sleep:SECONDS with a number"),
        (["rollout", "train.simulator_type"], "key=value"),
    ],
    ids=[
        "bad-flag",
        "zero-workers",
        "bad-int",
        "missing-config",
        "unknown-backend",
        "misspelt-key",
        "mistyped-key",
        "foreign-section",
        "policy-import",
        "policy-injection",
        "policy-sleep",
        "bad-override",
    ],
)
def test_bad_options_end_with_one_line_and_exit_2(args, message, capsys) -> None:
    from envfleet_ray.cli import main

    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_bad_option_as_a_user_sees_it() -> None:
    out = run("rollout", "train.simulator_type=toy", "train.num_env=2", timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip() == "error: unknown config key 'train.num_env'. Did you mean 'train.num_envs'?"


def test_rollout_writes_summary(tmp_path) -> None:
    out = run(
        "rollout",
        "--steps",
        "4",
        "--workers",
        "1",
        "--out",
        str(tmp_path / "run"),
        "--policy",
        "zero",
        "train.simulator_type=toy",
        "train.num_envs=2",
        "rollout.pipeline_stage_num=2",
        "actor.model.num_action_chunks=4",
        "train.max_episode_steps=8",
        "train.video_cfg.save_video=true",
    )
    assert out.returncode == 0, out.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    for key in (
        "backend",
        "task_suite_name",
        "workers",
        "stages",
        "num_envs",
        "env_steps",
        "wall_s",
        "env_steps_per_s",
        "success_rate",
        "per_task",
        "videos",
        "sim_restarts",
    ):
        assert key in summary, key
    assert summary["backend"] == "toy" and summary["stages"] == 2 and summary["workers"] == 1
    assert summary["env_steps"] == 4 * 2 * 2 * 4
    assert sum(t["episodes"] for t in summary["per_task"].values()) == 8
    assert len(summary["videos"]) == 2 and all(os.path.getsize(v) > 0 for v in summary["videos"])
    assert all(str(tmp_path) in v for v in summary["videos"])
    assert "env steps/s" in out.stdout and "description" in out.stdout


def test_rollout_reports_each_restart_with_its_cause(tmp_path) -> None:
    """A simulator that crashes is restarted; where and why it crashed reach the output and summary.json."""
    out = run(
        "rollout",
        "--steps",
        "3",
        "--out",
        str(tmp_path / "run"),
        "--policy",
        "zero",
        "train.simulator_type=toy",
        "train.num_envs=2",
        "actor.model.num_action_chunks=4",
        "train.toy.exit_on_step=1",  # each shard's process exits during its second chunk
    )
    assert out.returncode == 0, out.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    causes = summary["restart_causes"]
    assert summary["sim_restarts"] == len(causes) == 2, causes  # two shards (one env each), one crash each
    assert sorted((c["stage"], c["shard"], c["envs"]) for c in causes) == [(0, 0, "0"), (0, 1, "1")]
    for cause in causes:
        assert cause["rank"] == 0 and cause["exit"] == "exited with code 7" and "during step" in cause["cause"]
        assert any("exit_on_step=1 reached" in line for line in cause["stderr_tail"]), cause["stderr_tail"]
    assert (
        "restart: worker 0 stage 0 shard 1 (envs 1): " in out.stdout and "last output: toy: train.toy.exit_on_step=1 reached" in out.stdout
    )


def test_a_failure_while_running_is_one_line_that_says_how_to_see_more(tmp_path) -> None:
    args = [
        "rollout",
        "--steps",
        "2",
        "--out",
        str(tmp_path / "run"),
        "train.simulator_type=toy",
        "train.num_envs=1",
        "train.toy.raise_on_step=0",
    ]
    out = run(*args)
    assert out.returncode == 1, out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "raise_on_step=0 reached" in last and "--traceback or ENVFLEET_TRACEBACK=1 shows where" in last
    assert "Traceback (most recent call last)" not in out.stderr
    full = run(*args, "--traceback")
    assert full.returncode == 1 and "Traceback (most recent call last)" in full.stderr and "shows where" not in full.stderr


def test_backends_check_builds_and_steps_each_backend() -> None:
    ok = run("backends", "--check", "toy")
    assert "toy: ok (build " in ok.stdout and "step " in ok.stdout, ok.stdout
    bad = run("backends", "--check", "toy", "train.toy.raise_in_constructor=true")
    assert bad.returncode == 1
    assert "toy: FAILED: EnvFleetSimulatorError: backend 'toy' raised while building the env" in bad.stdout
    assert "raise_in_constructor is set" in bad.stdout
    usage = run("backends", "--check", "nosuch")
    assert usage.returncode == 2 and "not installed: nosuch" in usage.stderr


def test_ctrl_c_writes_the_partial_summary_and_leaves_nothing_behind(tmp_path) -> None:
    """SIGINT to the command's process group, as a terminal's Ctrl-C sends it, mid-rollout."""
    import re
    import signal
    import threading
    import time

    from ..conftest import pid_alive, shm_segments

    before = shm_segments()
    out_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [
            *ENVFLEET,
            "rollout",
            "--steps",
            "100000",
            "--out",
            str(out_dir),
            "--policy",
            "zero",
            "train.simulator_type=toy",
            "train.num_envs=2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "RAY_ADDRESS": "", "ENVFLEET_PROGRESS": "1"},
        start_new_session=True,
        # As in a terminal: a job started in the background without job control (a CI runner's,
        # say) inherits SIGINT ignored, and then Python installs no KeyboardInterrupt handler.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    out: list[str] = []
    err: list[str] = []
    drains = [
        threading.Thread(target=lambda: out.extend(iter(lambda: proc.stdout.read(1), "")), daemon=True),  # type: ignore[union-attr]
        threading.Thread(target=lambda: err.extend(iter(lambda: proc.stderr.read(1), "")), daemon=True),  # type: ignore[union-attr]
    ]
    for drain in drains:
        drain.start()
    try:
        # Ctrl-C once the progress bar has counted env steps: the group is up and a step came back,
        # however long the first reset took on a loaded machine.
        deadline = time.time() + 240
        while not re.search(r"\|\s*[1-9][0-9]*/[0-9]+", "".join(err)) and time.time() < deadline:
            assert proc.poll() is None, "".join(err)
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for drain in drains:
            drain.join(timeout=30)
    stdout, stderr = "".join(out), "".join(err)
    assert proc.returncode == 130, stderr
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["env_steps"] > 0
    assert "interrupted" in stdout and "Traceback" not in stderr
    deadline = time.time() + 30
    while time.time() < deadline and (shm_segments() - before or any(_session_pids(proc.pid))):
        time.sleep(0.5)
    assert shm_segments() - before == set()
    assert not [p for p in _session_pids(proc.pid) if pid_alive(p)]


def _session_pids(sid: int) -> list[int]:
    """Live processes in session ``sid`` (the command and everything it started)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                pids.append(int(entry))
    return pids


def test_an_unwritable_output_directory_is_one_line(tmp_path, capsys) -> None:
    from envfleet_ray.cli import main

    blocker = tmp_path / "taken"
    blocker.write_text("a file where the output directory should go")
    code = main(["rollout", "--steps", "1", "--out", str(blocker), "train.simulator_type=toy"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1, err
    assert err[0].startswith("error: FileExistsError: ") and str(blocker) in err[0] and "--traceback" in err[0]
