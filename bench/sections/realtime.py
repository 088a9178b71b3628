"""The `realtime` section of ``nox -s bench``: ``train.execution`` against ``mode: chunk``, side by side.

**Overlap.** A policy loop on one stage: observe, think, send the chunk. The policy thinks as long
as the simulator takes for the sub-steps a call runs (``HORIZON`` of a chunk of ``CHUNK``), measured
first in ``mode: chunk``; a sleeping policy, and a small torch MLP on the CPU (on 2 cores it competes
with the simulators). Per row: env sub-steps per second and the time the policy waits for the env
per call (the call's wall time). Rows:

- ``mode: chunk``: each call runs its whole chunk while the policy waits;
- ``clock: wall``, horizon ``HORIZON``: the shard's loop runs the chunk's tail while the policy
  thinks about the next one (``envfleet.shards.realtime``).

Cases: the toy (its sub-steps sleep, a simulator that waits on a device), LeRobot's PushT (4 envs, in
the venv of ``nox -s tests-gymnasium``) and LIBERO (2 libero_spatial envs, 64x64).

**Cost.** ``clock: sim`` at delay 0 against ``mode: chunk``: the same calls, in turns, the median of
each: the schedule's own cost (on LIBERO and the toy).

``ENVFLEET_BENCH_QUICK=1``: shorter runs, to check that the section runs.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/, when run alone
from common import write
from configs import libero_installed

QUICK = os.environ.get("ENVFLEET_BENCH_QUICK") == "1"
CHUNK, HORIZON = 8, 4
CALLS = 6 if QUICK else 30
COST_CALLS = 10 if QUICK else 60
REALTIME_WALL = ["train.execution.mode=realtime", "train.execution.clock=wall", f"train.execution.horizon={HORIZON}"]
TAIL_RUN = [*REALTIME_WALL, f"train.execution.wall_tick={CHUNK - HORIZON}"]


def _toy(*extra: str) -> Any:
    from envfleet.config import load_config

    return load_config(
        overrides=[
            "train.simulator_type=toy",
            "train.num_envs=4",
            f"actor.model.num_action_chunks={CHUNK}",
            "train.max_episode_steps=100000",
            "train.init_params.camera_heights=64",
            "train.init_params.camera_widths=64",
            "train.toy.envs_per_process=2",
            "train.toy.step_cost_s=0.001",
            *extra,
        ]
    )


def _pusht(*extra: str) -> Any | None:
    from envfleet.config import load_config
    from sections.gymnasium import PUSHT_ENVFLEET, sim_python

    python = sim_python("pusht")
    if python is None:
        return None
    train = {"simulator_type": "gymnasium", "num_envs": 4, "simulator_python": python, "gymnasium": dict(PUSHT_ENVFLEET)}
    train["gymnasium"]["envs_per_process"] = 2
    return load_config(data={"train": train, "actor": {"model": {"num_action_chunks": CHUNK}}}, overrides=list(extra))


def _libero(*extra: str) -> Any | None:
    if not libero_installed():
        return None
    from configs import libero_overrides

    from envfleet.config import load_config

    return load_config(overrides=[*libero_overrides(2, 64, "last", 1, CHUNK), "train.max_episode_steps=100000", *extra])


def _actions(n: int, dim: int, k: int) -> np.ndarray:
    return np.random.default_rng(k).uniform(-1, 1, (n, CHUNK, dim)).astype(np.float32)


class SleepPolicy:
    """Thinks for ``seconds`` (a sleep: a policy on another device)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self, obs: dict[str, np.ndarray], n: int, dim: int, k: int) -> np.ndarray:
        time.sleep(self.seconds)
        return _actions(n, dim, k)


class TorchPolicy:
    """A small MLP over the flattened first camera and the state, on the CPU, repeated to take about ``seconds``."""

    def __init__(self, seconds: float, obs: dict[str, np.ndarray], dim: int) -> None:
        import torch

        torch.manual_seed(0)
        torch.set_num_threads(1)
        self.torch = torch
        features = int(np.prod(obs["full_image"].shape[1:])) + int(np.prod(obs["state"].shape[1:]))
        self.net = torch.nn.Sequential(torch.nn.Linear(features, 512), torch.nn.ReLU(), torch.nn.Linear(512, CHUNK * dim))
        self.dim = dim
        x = self._input(obs)
        t0 = time.perf_counter()
        with torch.no_grad():
            self.net(x)
        once = time.perf_counter() - t0
        self.repeat = max(1, round(seconds / max(once, 1e-4)))

    def _input(self, obs: dict[str, np.ndarray]) -> Any:
        n = obs["state"].shape[0]
        image = self.torch.from_numpy(obs["full_image"].reshape(n, -1).astype(np.float32) / 255.0)
        return self.torch.cat([image, self.torch.from_numpy(obs["state"].reshape(n, -1).astype(np.float32))], dim=1)

    def __call__(self, obs: dict[str, np.ndarray], n: int, dim: int, k: int) -> np.ndarray:
        x = self._input(obs)
        with self.torch.no_grad():
            for _ in range(self.repeat):
                out = self.net(x)
        return self.torch.tanh(out).reshape(n, CHUNK, dim).numpy()


def loop(cfg: Any, policy: Any, calls: int) -> dict[str, float]:
    """The policy loop on ``cfg``'s stage: sub-steps per second, and the policy's mean wait per call."""
    from envfleet import ProcessEnvManager

    with ProcessEnvManager(cfg) as mgr:
        n, dim = mgr.num_envs, mgr.action_dim
        obs = mgr.reset_envs_to_state_ids(mgr.get_all_state_ids()[:n]).obs
        for k in range(2):  # warm-up
            obs = mgr.chunk_step(policy(obs, n, dim, k)).obs
        waits, steps = [], 0
        t0 = time.perf_counter()
        for k in range(calls):
            actions = policy(obs, n, dim, 100 + k)
            c0 = time.perf_counter()
            out = mgr.chunk_step(actions)
            waits.append(time.perf_counter() - c0)
            obs, steps = out.obs, steps + out.rewards.shape[1]
        wall = time.perf_counter() - t0
    return {"steps_per_s": n * steps / wall, "wait_ms": 1e3 * float(np.mean(waits)), "sub_steps_per_call": steps / calls}


def think_time(cfg: Any) -> float:
    """The simulator's time for ``HORIZON`` sub-steps of ``cfg`` in mode chunk (no policy): the policy's thinking time."""
    result = loop(cfg, SleepPolicy(0.0), max(4, CALLS // 3))
    return HORIZON * cfg.train.num_envs / result["steps_per_s"]


def overlap_rows(case: str, make: Any) -> list[dict[str, Any]]:
    chunked, wall, tail = make(), make(*REALTIME_WALL), make(*TAIL_RUN)
    if chunked is None:
        return []
    think = think_time(chunked)
    rows = []
    from envfleet import ProcessEnvManager

    with ProcessEnvManager(chunked) as probe:  # the torch policy's input shapes
        probe_obs = probe.reset_envs_to_state_ids(probe.get_all_state_ids()[: probe.num_envs]).obs
        dim = probe.action_dim
    for name, policy in (("sleep", SleepPolicy(think)), ("torch MLP (CPU)", TorchPolicy(think, probe_obs, dim))):
        base = loop(chunked, policy, CALLS)
        runs = [
            ("mode: chunk", base),
            (f"clock: wall, horizon {HORIZON}", loop(wall, policy, CALLS)),
            (f"clock: wall, horizon {HORIZON}, wall_tick {CHUNK - HORIZON}", loop(tail, policy, CALLS)),
        ]
        for execution, r in runs:
            rows.append(
                {
                    "case": case,
                    "policy": f"{name}, {think * 1e3:.0f} ms",
                    "execution": execution,
                    "env sub-steps/s": r["steps_per_s"],
                    "vs mode chunk": r["steps_per_s"] / base["steps_per_s"],
                    "policy waits per call (ms)": r["wait_ms"],
                    "sub-steps per call": r["sub_steps_per_call"],
                }
            )
    return rows


def cost_rows(case: str, make: Any) -> list[dict[str, Any]]:
    """``clock: sim`` at delay 0 against mode chunk, in turns on two managers: the median call of each."""
    from envfleet import ProcessEnvManager

    chunked, sim = make(), make("train.execution.mode=realtime")
    if chunked is None:
        return []
    times: dict[str, list[float]] = {"mode: chunk": [], "clock: sim, delay 0": []}
    with ProcessEnvManager(chunked) as a, ProcessEnvManager(sim) as b:
        managers = {"mode: chunk": a, "clock: sim, delay 0": b}
        for mgr in managers.values():
            mgr.reset_envs_to_state_ids(mgr.get_all_state_ids()[: mgr.num_envs])
        for k in range(COST_CALLS):
            for label, mgr in managers.items():
                actions = _actions(mgr.num_envs, mgr.action_dim, k)
                t0 = time.perf_counter()
                mgr.chunk_step(actions)
                times[label].append(time.perf_counter() - t0)
    base = float(np.median(times["mode: chunk"]))
    return [
        {"case": case, "execution": label, "median call (ms)": 1e3 * float(np.median(t)), "vs mode chunk": float(np.median(t)) / base}
        for label, t in times.items()
    ]


def run() -> None:
    """Measure and write docs/benchmarks/realtime.md and realtime_cost.md."""
    overlap: list[dict[str, Any]] = []
    for case, make in (("toy, 4 envs", _toy), ("PushT, 4 envs", _pusht), ("LIBERO, 2 envs", _libero)):
        overlap += overlap_rows(case, make)
    notes = [
        f"chunks of {CHUNK}; clock: wall returns {HORIZON} sub-steps after the observation and runs the chunk's tail while the "
        "policy thinks; the policy thinks as long as the simulator takes for those sub-steps in mode chunk.",
        f"{CALLS} calls per row after 2 untimed; env sub-steps/s counts every env's sub-steps run in the timed calls.",
        "policy waits: the mean wall time of chunk_step, the time the policy has its next chunk and waits for the env.",
        "clock: wall runs the tail one sub-step per backend call while the policy thinks (each renders), then the rest of "
        f"the window in one call; wall_tick {CHUNK - HORIZON} runs the tail in one call (one render), a chunk arriving "
        "meanwhile taking over at its end.",
        "toy: each env sub-step busy-waits 1 ms; PushT: 96x96 render, 2 envs per process; LIBERO: libero_spatial, 64x64, two cameras.",
    ]
    write("realtime", overlap, notes)
    cost: list[dict[str, Any]] = []
    for case, make in (("toy, 4 envs", _toy), ("LIBERO, 2 envs", _libero)):
        cost += cost_rows(case, make)
    write("realtime_cost", cost, [f"{COST_CALLS} calls of each, in turns; the median call. clock: sim at delay 0 runs the same sub-steps."])


if __name__ == "__main__":
    run()
