"""The `metaworld` section of ``nox -s bench``: MetaWorld sub-steps per second.

- envfleet with ``render: last`` against ``render: all``, the worker in the main venv and
  the shards in MetaWorld's venv (``train.simulator_python``);
- gymnasium's ``AsyncVectorEnv`` over the same MetaWorld envs (it renders every step);
- the same envfleet run with the worker itself in MetaWorld's venv (shards under the
  worker's own Python), against the run above: what another venv costs.

MetaWorld's venv is ``$ENVFLEET_METAWORLD_PYTHON`` or the one ``nox -s tests-metaworld``
builds (.nox/metaworld-sim). Run as a script by that venv's Python, this module measures
one case and prints it as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import numpy as np

# Run as a script by MetaWorld's venv, this module finds bench/ (common) on PYTHONPATH. Its own folder
# comes first on sys.path then, and the shard processes started here, which inherit sys.path, would
# import this very file as MetaWorld's `metaworld` package ("no attribute 'MT1'").
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]
from common import ROOT, rate_in_venv, vector_env_rate, write

NUM_ENVS, SIZE, CHUNK, CHUNKS, WARMUP, ROUNDS = 2, 128, 8, 12, 2, 3
TASK = "pick-place-v3"

__all__ = ["run", "sim_python"]


def sim_python() -> str | None:
    """MetaWorld's venv interpreter, if one exists."""
    for path in (os.environ.get("ENVFLEET_METAWORLD_PYTHON", ""), os.path.join(ROOT, ".nox", "metaworld-sim", "bin", "python")):
        if path and os.path.exists(path):
            return path
    return None


def _actions(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, size=(NUM_ENVS, CHUNK, 4)).astype(np.float32)


def envfleet_rate(render: str, simulator_python: str | None) -> float:
    """Sub-steps per second of ``NUM_ENVS`` MetaWorld envs through ``ProcessEnvManager``."""
    from envfleet import ProcessEnvManager
    from envfleet.config import load_config

    train = {
        "simulator_type": "metaworld",
        "task_suite_name": TASK,
        "num_envs": NUM_ENVS,
        "render": render,
        "simulator_python": simulator_python,
        "init_params": {"camera_heights": SIZE, "camera_widths": SIZE},
    }
    cfg = load_config(data={"train": train, "actor": {"model": {"num_action_chunks": CHUNK}}})
    with ProcessEnvManager(cfg) as mgr:
        mgr.reset_envs_to_state_ids(np.arange(NUM_ENVS))
        for k in range(WARMUP):
            mgr.chunk_step(_actions(k))
        t0 = time.perf_counter()
        for k in range(CHUNKS):
            mgr.chunk_step(_actions(100 + k))
        return NUM_ENVS * CHUNK * CHUNKS / (time.perf_counter() - t0)


class _MetaworldGym:
    """A gymnasium env over one MetaWorld task variation, observation = the rendered image (as a VLA reads it)."""

    def __init__(self, variation: int) -> None:
        import gymnasium as gym
        import metaworld

        mt1 = metaworld.MT1(TASK, seed=42)
        self.env = mt1.train_classes[TASK](render_mode="rgb_array", camera_name="corner2", width=SIZE, height=SIZE)
        self.task = mt1.train_tasks[variation]
        self.observation_space = gym.spaces.Box(0, 255, (SIZE, SIZE, 3), np.uint8)
        self.action_space = gym.spaces.Box(-1, 1, (4,), np.float32)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        self.env.set_task(self.task)
        self.env.reset()
        return self.env.render()[::-1, ::-1].copy(), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        _, reward, _, _, info = self.env.step(action)
        return self.env.render()[::-1, ::-1].copy(), float(reward), False, False, {"success": float(info["success"])}

    def close(self) -> None:
        self.env.close()


def _make(variation: int) -> Any:
    import gymnasium as gym

    class Env(_MetaworldGym, gym.Env):  # type: ignore[misc]
        pass

    return Env(variation)


def async_rate() -> float:
    """Sub-steps per second of gymnasium's ``AsyncVectorEnv`` (spawn, shared memory) over the same envs."""
    import functools

    from gymnasium.vector import AsyncVectorEnv

    vec = AsyncVectorEnv([functools.partial(_make, i) for i in range(NUM_ENVS)], shared_memory=True, context="spawn")
    try:
        vec.reset()
        return vector_env_rate(vec, _actions, WARMUP, CHUNKS)
    finally:
        vec.close()


def _in_sim_venv(python: str, case: str) -> float:
    return rate_in_venv("metaworld", python, __file__, case, timeout=1800)


def run() -> None:
    """Print and write docs/benchmarks/metaworld.md."""
    python = sim_python()
    if python is None:
        print("metaworld: no MetaWorld venv (run `nox -s tests-metaworld` first, or set ENVFLEET_METAWORLD_PYTHON), skipped")
        return
    rows: list[dict[str, Any]] = []

    def row(what: str, rate: float) -> None:
        rows.append({"what": what, "sub-steps/s": rate})
        print(rows[-1], flush=True)

    # The cases alternate, round after round, so that a slow spell of the shared machine hits all of them.
    runs: dict[str, list[float]] = {"other": [], "same": [], "all": [], "async": []}
    for _ in range(ROUNDS):
        runs["other"].append(envfleet_rate("last", python))
        runs["same"].append(_in_sim_venv(python, "same-venv"))
        runs["all"].append(envfleet_rate("all", python))
        runs["async"].append(_in_sim_venv(python, "async"))
    med = {k: float(np.median(v)) for k, v in runs.items()}
    row("envfleet, render last, shards in MetaWorld's venv (worker in the main venv)", med["other"])
    row("envfleet, render all, shards in MetaWorld's venv", med["all"])
    row("gymnasium AsyncVectorEnv (renders every step), in MetaWorld's venv", med["async"])
    row("envfleet, render last, worker and shards in MetaWorld's venv", med["same"])
    last, all_, asyn, same_rate = (r["sub-steps/s"] for r in rows)
    write(
        "metaworld",
        rows,
        [
            f"{NUM_ENVS} envs of {TASK}, one per process, one {SIZE}x{SIZE} corner2 image, chunks of {CHUNK} random actions; "
            f"{CHUNKS} chunks timed after {WARMUP}.",
            f"render last / render all: {last / all_:.2f}x; render last / AsyncVectorEnv: {last / asyn:.2f}x.",
            f"Another venv / the same venv: {last / same_rate:.2f} (target: no measurable difference). Each figure is the "
            f"median of {ROUNDS} rounds in which the four cases alternate; the runs: {json.dumps({k: [round(x, 1) for x in v] for k, v in runs.items()})}.",
        ],
    )


if __name__ == "__main__":
    case = sys.argv[1]
    rate = envfleet_rate("last", None) if case == "same-venv" else async_rate()
    print(json.dumps({"case": case, "rate": rate}))
