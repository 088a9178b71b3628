"""A gymnasium env by its id through everything envfleet offers: ``envfleet rollout`` (a local Ray), the gymnasium
face checked by gymnasium's own checker, SB3's VecEnv, and ``envfleet serve`` over loopback (the TorchRL face:
tests/torchrl/test_gymnasium_backend.py; the EnvWorker: the conformance classes)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time

import numpy as np
from gymnasium.vector import VectorEnv

from envfleet import ProcessEnvManager
from envfleet.config import load_config
from envfleet.gym import make_vector_env
from envfleet.sb3 import make_vec_env

from ..conftest import child_pids, pid_alive
from .common import SCRIPTED, box_actions, gym_train
from .conftest import ROOT

CHUNK = 4


def _cfg(**section: object):
    return load_config(
        data={"train": gym_train("Pendulum-v1", render="rgb_array", seeds=6, **section), "actor": {"model": {"num_action_chunks": CHUNK}}}
    )


def test_envfleet_rollout(tmp_path) -> None:
    out = tmp_path / "run"
    env = {**os.environ, "RAY_ADDRESS": "", "PYTHONPATH": ROOT}
    cmd = [sys.executable, "-m", "envfleet_ray.cli", "rollout", "--steps", "6", "--no-progress", "--out", str(out), "--policy", "random"]
    cmd += [
        "train.simulator_type=gymnasium",
        "train.gymnasium.id=Pendulum-v1",
        "train.gymnasium.render=rgb_array",
        "train.gymnasium.seeds=4",
    ]
    cmd += ["train.num_envs=2", "rollout.pipeline_stage_num=2", "actor.model.num_action_chunks=4", "train.max_episode_steps=8"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["backend"] == "gymnasium" and summary["episodes"] >= 4 and summary["sim_restarts"] == 0
    fp = summary["fingerprint"]
    assert fp["gymnasium"]["id"] == "Pendulum-v1"
    assert fp["gymnasium"]["render_last"].startswith("render() is called at the read sub-step only")
    assert fp["gymnasium"]["env_packages"] == {"gymnasium": fp["gymnasium"]["gymnasium"]}
    assert summary["per_task"]["0"]["description"] == "Pendulum-v1"


def test_gymnasium_face(no_leaks: None) -> None:
    env = make_vector_env(_cfg(), render_mode="rgb_array")
    try:
        assert isinstance(env, VectorEnv) and env.num_envs == 2
        obs, _ = env.reset(seed=0)
        assert obs["full_image"].shape == (2, 500, 500, 3) and obs["state"].shape == (2, 3)
        assert env.single_action_space.shape == (CHUNK, 1)
        for _ in range(3):
            obs, rew, term, trunc, _ = env.step(box_actions(0, 2, CHUNK, 1))
            assert rew.shape == (2,) and term.dtype == bool and trunc.dtype == bool
        assert env.render()[0].shape == (500, 500, 3)
    finally:
        env.close()


def test_sb3_face(no_leaks: None) -> None:
    venv = make_vec_env(_cfg())
    try:
        obs = venv.reset()
        assert obs["state"].shape == (2, 3)
        obs, rew, _, infos = venv.step(box_actions(1, 2, CHUNK, 1))
        assert rew.shape == (2,) and len(infos) == 2
    finally:
        venv.close()


def _serve(tmp_path, overrides: list[str]) -> tuple[subprocess.Popen[str], str, list[str]]:
    config = tmp_path / "serve.yaml"
    config.write_text("train:\n  simulator_type: gymnasium\n")
    cmd = [sys.executable, "-m", "envfleet_ray.cli", "serve", "--config", str(config), "--port", "0", "--insecure", *overrides]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONPATH": ROOT})
    lines: list[str] = []
    found: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            match = re.search(r"listening on (\S+)", line)
            if match:
                found.append(match.group(1))

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.time() + 120
    while not found:
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            raise AssertionError("envfleet serve did not start:\n" + "".join(lines))
        time.sleep(0.1)
    return proc, found[0], lines


def test_envfleet_serve_gives_what_runs_in_process(tmp_path, no_leaks: None) -> None:
    from envfleet.remote import build_manager

    keys = ["train.gymnasium.id=" + SCRIPTED, "train.gymnasium.seeds=[3,4,5]", "train.gymnasium.kwargs.terminate_at=6"]
    base = ["train.num_envs=2", "actor.model.num_action_chunks=4", "rollout.pipeline_stage_num=1", *keys]
    proc, address, lines = _serve(tmp_path, ["train.simulator_type=gymnasium", *base])
    try:
        local = load_config(overrides=["train.simulator_type=gymnasium", *base])
        remote = load_config(overrides=["train.simulator_type=gymnasium", *base, f"train.remote.address={address}"])
        actions = box_actions(2, 2, 4, 2)
        results = []
        for cfg in (local, remote):
            mgr = build_manager(cfg) if cfg is remote else ProcessEnvManager(cfg)
            mgr.start_simulator()
            try:
                run = [mgr.reset_envs_to_state_ids(np.array([2, 0]))]
                run += [mgr.chunk_step(actions), mgr.chunk_step(actions)]
                results.append(run)
            finally:
                mgr.close()
        for a, b in zip(*results):
            for key in a.obs:
                np.testing.assert_array_equal(a.obs[key], b.obs[key])
        assert results[1][2].terminations[:, 1].all()  # terminate_at=6: the second chunk's sub-step 1
    finally:
        shards = [p for p in child_pids(proc.pid) if pid_alive(p)]
        proc.terminate()
        proc.wait(60)
        deadline = time.time() + 20
        while time.time() < deadline and any(pid_alive(p) for p in shards):
            time.sleep(0.1)
        assert not [p for p in shards if pid_alive(p)], "".join(lines)
