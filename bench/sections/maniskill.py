"""The `maniskill` section of ``nox -s bench``: ManiSkill3 sub-steps per second on the CPU sim.

- envfleet through :class:`envfleet_ray.EnvWorker` (the plain class, in this process; its
  shards are processes) with ``render: last`` against ``render: all``;
- gymnasium's ``AsyncVectorEnv`` over the same ManiSkill env (``gym.make`` wrapped in
  ManiSkill's own ``CPUGymWrapper``, one process per env: the way ManiSkill's docs run
  its CPU sim in parallel), which renders every step.

2 envs (one process each on both sides), the base and hand cameras at 224x224, chunks
of 8 random actions. ManiSkill is in the tests session's venv once ``nox -s
tests-maniskill`` has added its lock there; run as a script by that venv's Python, this module measures one
case and prints it as JSON.
"""

from __future__ import annotations

import functools
import glob
import json
import os
import sys
import time
from typing import Any

import numpy as np

# Run as a script by ManiSkill's venv, this module finds bench/ (common) on PYTHONPATH.
from common import ROOT, rate_in_venv, vector_env_rate, write

NUM_ENVS, SIZE, CHUNK, WARMUP = 2, 224, 8, 1
# A short run to check that the section works: ENVFLEET_BENCH_MANISKILL_ROUNDS=1 ENVFLEET_BENCH_MANISKILL_CHUNKS=1.
CHUNKS = int(os.environ.get("ENVFLEET_BENCH_MANISKILL_CHUNKS", "6"))
ROUNDS = int(os.environ.get("ENVFLEET_BENCH_MANISKILL_ROUNDS", "3"))
TASK = "PushCube-v1"
TARGET = 5.0  # render last / AsyncVectorEnv, from issue #27

__all__ = ["run", "sim_python"]


def sim_python() -> str | None:
    """The Python of a venv with ManiSkill: ``$ENVFLEET_MANISKILL_PYTHON``, or the tests session's
    venv once ``nox -s tests-maniskill`` has added ManiSkill's lock to it."""
    if os.environ.get("ENVFLEET_MANISKILL_PYTHON"):
        return os.environ["ENVFLEET_MANISKILL_PYTHON"]
    venv = os.path.join(ROOT, ".nox", "tests")
    if glob.glob(os.path.join(venv, "lib", "python3*", "site-packages", "mani_skill")):
        return os.path.join(venv, "bin", "python")
    return None


def _actions(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, size=(NUM_ENVS, CHUNK, 7)).astype(np.float32)


def envfleet_rate(render: str) -> float:
    """Sub-steps per second of ``NUM_ENVS`` ManiSkill envs through ``EnvWorker.env_interact_step``."""
    from envfleet.dataproto import DataProto
    from envfleet_ray.runtime.worker import EnvWorker

    train = {
        "simulator_type": "maniskill",
        "task_name": TASK,
        "num_envs": NUM_ENVS,
        "render": render,
        "init_params": {"camera_heights": SIZE, "camera_widths": SIZE},
        "maniskill": {"envs_per_process": 1},
        "start_timeout_s": 1800,  # a shared machine under load starts ManiSkill slowly; start-up is not what is timed
    }
    worker = EnvWorker(
        {"train": train, "rollout": {"pipeline_stage_num": 1}, "actor": {"model": {"num_action_chunks": CHUNK, "action_dim": 7}}}
    )
    try:
        worker.init_worker()
        worker.init_simulator()
        worker.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": np.arange(NUM_ENVS)}))

        def step(k: int) -> None:
            # .batch: the trainer reads the tensors, so building the TensorDict is counted.
            _ = worker.env_interact_step(DataProto.from_dict(non_tensors={"actions": _actions(k)}, meta_info={"stage_id": 0})).batch

        for k in range(WARMUP):
            step(k)
        t0 = time.perf_counter()
        for k in range(CHUNKS):
            step(100 + k)
        return NUM_ENVS * CHUNK * CHUNKS / (time.perf_counter() - t0)
    finally:
        worker.close()


def _make_maniskill() -> Any:
    from envfleet_maniskill.device import default_icd
    from envfleet_maniskill.gym_args import reference_kwargs

    os.environ.setdefault("VK_ICD_FILENAMES", default_icd())  # before sapien is imported
    import gymnasium as gym
    import mani_skill.envs  # noqa: F401  (registers the tasks)
    from mani_skill.utils.wrappers.gymnasium import CPUGymWrapper

    env = gym.make(TASK, **reference_kwargs(SIZE))  # the arguments the backend builds its envs with
    return CPUGymWrapper(env)


def async_rate() -> float:
    """Sub-steps per second of gymnasium's ``AsyncVectorEnv`` (spawn, shared memory) over the same envs."""
    from gymnasium.vector import AsyncVectorEnv

    from envfleet_maniskill.device import default_icd

    os.environ.setdefault("VK_ICD_FILENAMES", default_icd())  # inherited by the spawned children
    vec = AsyncVectorEnv([functools.partial(_make_maniskill) for _ in range(NUM_ENVS)], shared_memory=True, context="spawn")
    try:
        vec.reset(seed=list(range(NUM_ENVS)))
        return vector_env_rate(vec, _actions, WARMUP, CHUNKS)
    finally:
        vec.close()


def _case(python: str, case: str) -> float:
    return rate_in_venv("maniskill", python, __file__, case, timeout=3600)


def run() -> None:
    """Print and write docs/benchmarks/maniskill.md."""
    python = sim_python()
    if python is None:
        print("maniskill: no ManiSkill venv (run `nox -s tests-maniskill` first, or set ENVFLEET_MANISKILL_PYTHON), skipped")
        return
    # The cases alternate, round after round, so that a slow spell of the shared machine hits all of them.
    runs: dict[str, list[float]] = {"last": [], "all": [], "async": []}
    for _ in range(ROUNDS):
        for case in runs:
            runs[case].append(_case(python, case))
            print(case, round(runs[case][-1], 2), flush=True)
    med = {k: float(np.median(v)) for k, v in runs.items()}
    rows: list[dict[str, Any]] = [
        {"what": "envfleet EnvWorker, render last", "sub-steps/s": med["last"]},
        {"what": "envfleet EnvWorker, render all", "sub-steps/s": med["all"]},
        {"what": "gymnasium AsyncVectorEnv of ManiSkill's CPUGymWrapper (renders every step)", "sub-steps/s": med["async"]},
    ]
    ratio = med["last"] / med["async"]
    write(
        "maniskill",
        rows,
        [
            f"{NUM_ENVS} envs of {TASK} (CPU sim, Vulkan on lavapipe), one per process on both sides, base and hand cameras "
            f"at {SIZE}x{SIZE}, chunks of {CHUNK} random actions; {CHUNKS} chunks timed after {WARMUP}, start-up not counted.",
            f"render last / render all: {med['last'] / med['all']:.2f}x; render last / AsyncVectorEnv: {ratio:.2f}x "
            f"(target >= {TARGET:.0f}x: {'met' if ratio >= TARGET else 'not met'}).",
            f"Each figure is the median of {ROUNDS} rounds in which the three cases alternate; the runs: "
            f"{json.dumps({k: [round(x, 2) for x in v] for k, v in runs.items()})}.",
        ],
    )


if __name__ == "__main__":
    case = sys.argv[1]
    rate = async_rate() if case == "async" else envfleet_rate(case)
    print(json.dumps({"case": case, "rate": rate}))
