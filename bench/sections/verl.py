"""The `verl` section of `nox -s bench` (bench/run.py verl)."""

from __future__ import annotations

import json
import os
import subprocess

from common import ROOT, verl_env, write


def run() -> None:
    """A step through verl's RayWorkerGroup against envfleet's own group, run on verl's lock (`nox -s tests-verl`)."""
    found = verl_env()
    if found is None:
        print("verl: no venv with verl (run `nox -s tests-verl` first, or set ENVFLEET_VERL_PYTHON), skipped")
        return
    python, env = found
    out = subprocess.run([python, os.path.join(ROOT, "bench", "verl_group.py")], capture_output=True, text=True, timeout=3600, env=env)
    if out.returncode != 0:
        print(f"verl: benchmark failed:\n{out.stderr[-3000:]}")
        return
    result = json.loads(out.stdout[out.stdout.index('{"rows"') :])
    overlap = result["overlap"]
    write(
        "verl",
        result["rows"],
        [
            "Target: a LIBERO step through verl's group costs at most 5% more than through envfleet's own group.",
            "verl's group is RayWorkerGroup over envfleet_ray.verl.EnvWorker (verl 0.9.1, tensordict 0.10), built as verl's "
            "trainer builds the Env role; a step is env_wg.env_interact_step(data).get().batch, through Ray's task path and "
            "verl's DataProto pickling. envfleet's group takes the local lane (the worker runs on the driver's node).",
            f"Two stages of one worker submitted together, against one stage alone ({overlap['case']}): "
            f"{overlap['envfleet_two_stages_over_one']:.2f}x through envfleet's group, "
            f"{overlap['verl_two_stages_over_one']:.2f}x through verl's (target: at most 1.2x).",
        ],
        {"overlap": overlap},
    )
    _verl_vla(python, env)


def _verl_vla(python: str, verl: dict[str, str]) -> None:
    """A step in verl-vla's order of calls (verl 0.7.1 laid over the same venv, as `nox -s tests-verl-vla` does)."""
    overlay = os.path.join(ROOT, ".nox", "verl-vla-overlay")
    if not os.path.isdir(os.path.join(overlay, "verl")):
        print("verl-vla: no verl 0.7.1 overlay (run `nox -s tests-verl-vla` first), skipped")
        return
    env = {**verl, "PYTHONPATH": os.pathsep.join(p for p in (overlay, verl.get("PYTHONPATH", "")) if p)}
    script = os.path.join(ROOT, "bench", "verl_vla_group.py")
    out = subprocess.run([python, script], capture_output=True, text=True, timeout=3600, env=env)
    if out.returncode != 0:
        print(f"verl-vla: benchmark failed:\n{out.stderr[-3000:]}")
        return
    write_verl_vla(json.loads(out.stdout[out.stdout.index('{"rows"') :]))


def write_verl_vla(result: dict) -> None:
    """The verl_vla tables and notes from ``bench/verl_vla_group.py``'s JSON."""
    write(
        "verl_vla",
        result["rows"],
        [
            "A step through verl 0.7.1's RayWorkerGroup over envfleet_ray.verl_vla.EnvWorker, built as verl-vla's TrainCluster "
            "builds its Env role and called as its EnvLoop calls it (env_interact_step(data, mode='train').get(), tensor "
            "'action'), against the same env through envfleet's own group (local lane); one worker, one stage, steps alternated "
            "in batches so that the machine's load hits both; the first reset (after the processes started, 10 settle steps of "
            "all-zero actions) timed once each. Target: steady state within 5% on LIBERO.",
            "verl-vla's order costs Ray's task round trip, verl's DataProto pickling and the adapter's key mapping (obs.* / next.*).",
            *result.get("skipped", []),
        ],
    )
    if result.get("rollout"):
        write(
            "verl_vla_rollout",
            result["rollout"],
            [
                "TrainCluster's order of calls (init_worker, reset_env(mode='train'), env_interact_step(data, mode='train')) over "
                "envfleet_ray.verl_vla.EnvWorker and over verl-vla's own EnvWorker + LiberoEnv (verl-vla 8a18e3f, from "
                "ENVFLEET_VERL_VLA), each a RayWorkerGroup with role='env', one typed EnvTrainConfig of verl-vla's classes for "
                "both, same venv, same run; steps alternated in batches. Target: steady state >= 4x verl-vla's own env worker.",
            ],
        )
