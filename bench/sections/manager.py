"""The `manager` section of `nox -s bench` (bench/run.py manager)."""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
from common import timed, write
from configs import toy_cfg


def _manager_rate(n: int, hw: int, repeat: int, **train: Any) -> float:
    from envfleet import ProcessEnvManager

    with ProcessEnvManager(toy_cfg(n, hw, **train)) as mgr:
        mgr.reset_envs_to_state_ids(np.arange(n))
        actions = np.zeros((n, 1, 7), np.float32)
        return timed(lambda: mgr.chunk_step(actions), repeat, warmup=20)


_FIXED_ROUNDS, _FIXED_CALLS = 5, 300


def _fixed_cost(n: int, rounds: int = _FIXED_ROUNDS, calls: int = _FIXED_CALLS) -> tuple[float, float, float]:
    """Per-call seconds of chunk_step on ``n`` shards of a zero-cost env with 4x4 images: (median, mean, 90th percentile).

    Every call is timed on its own, in ``rounds`` rounds, so that a slow spell of the
    machine shows up in the mean and the 90th percentile instead of moving the median.
    """
    from envfleet import ProcessEnvManager

    with ProcessEnvManager(toy_cfg(n, 4, **{"toy.frozen": True})) as mgr:
        mgr.reset_envs_to_state_ids(np.arange(n))
        actions = np.zeros((n, 1, 7), np.float32)
        for _ in range(50):
            mgr.chunk_step(actions)
        times = []
        for _ in range(rounds):
            for _ in range(calls):
                t0 = time.perf_counter()
                mgr.chunk_step(actions)
                times.append(time.perf_counter() - t0)
    return float(np.median(times)), float(np.mean(times)), float(np.percentile(times, 90))


def _toy_in_process(hw: int, repeat: int) -> float:
    """Seconds per chunk_step of one toy env called directly (the env's own cost)."""
    from envfleet.env import EnvContext
    from envfleet_toy.env import ToyEnv

    env = ToyEnv(toy_cfg(1, hw).train, EnvContext(num_envs=1, action_dim=7, num_action_chunks=1))
    env.reset_envs_to_state_ids(np.array([0]))
    actions = np.zeros((1, 1, 7), np.float32)
    return timed(lambda: env.chunk_step(actions), repeat, warmup=20)


class _GymEnv:
    """A gymnasium env for AsyncVectorEnv: ``trivial`` emits the toy's first images every step;
    otherwise it runs the toy env itself (the same drawing code as the manager's shards)."""

    def __init__(self, hw: int, trivial: bool) -> None:
        import gymnasium as gym

        from envfleet.env import EnvContext
        from envfleet_toy.env import ToyEnv

        self.env = ToyEnv(toy_cfg(1, hw).train, EnvContext(num_envs=1, action_dim=7, num_action_chunks=1))
        self.trivial = trivial
        self.first = {k: v[0].copy() for k, v in self.env.reset_envs_to_state_ids(np.array([0])).obs.items()}
        img = gym.spaces.Box(0, 255, (hw, hw, 3), np.uint8)
        self.observation_space = gym.spaces.Dict(
            {"full_image": img, "wrist_image": img, "state": gym.spaces.Box(-np.inf, np.inf, (8,), np.float32)}
        )
        self.action_space = gym.spaces.Box(-1, 1, (7,), np.float32)

    def reset(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        return self.first, {}

    def step(self, action: np.ndarray) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        if self.trivial:
            return self.first, 0.0, False, False, {}
        out = self.env.chunk_step(np.asarray(action, np.float32).reshape(1, 1, 7))
        return {k: v[0] for k, v in out.obs.items()}, float(out.rewards[0, 0]), False, False, {}


def _make_gym_env(hw: int, trivial: bool) -> Any:
    import gymnasium as gym

    class Wrapped(gym.Env):  # type: ignore[misc]
        def __init__(self) -> None:
            self.inner = _GymEnv(hw, trivial)
            self.observation_space = self.inner.observation_space
            self.action_space = self.inner.action_space

        def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
            return self.inner.reset()

        def step(self, action: np.ndarray) -> Any:
            return self.inner.step(action)

    return Wrapped()


def _async_rate(n: int, hw: int, repeat: int, trivial: bool) -> float:
    from functools import partial

    from gymnasium.vector import AsyncVectorEnv

    venv = AsyncVectorEnv([partial(_make_gym_env, hw, trivial) for _ in range(n)], shared_memory=True, context="spawn")
    try:
        venv.reset()
        actions = np.zeros((n, 7), np.float32)
        return timed(lambda: venv.step(actions), repeat, warmup=20)
    finally:
        venv.close()


def run() -> None:
    """ProcessEnvManager against gymnasium's AsyncVectorEnv and an in-process memcpy; fixed cost of a call."""
    n, hw = 8, 256
    t_mgr = _manager_rate(n, hw, 300, **{"toy.frozen": True})
    t_mgr_toy = _manager_rate(n, hw, 300)
    t_async_trivial = _async_rate(n, hw, 300, trivial=True)
    t_async_toy = _async_rate(n, hw, 300, trivial=False)
    nbytes = n * 2 * hw * hw * 3 + n * 8 * 4
    src = np.random.default_rng(0).integers(0, 255, nbytes, dtype=np.uint8)
    dst = np.empty_like(src)
    t_copy = timed(lambda: np.copyto(dst, src), 300)
    t_fixed, t_fixed_mean, t_fixed_p90 = _fixed_cost(n)
    t_fixed_toy = _manager_rate(n, 4, 500)
    t_toy_env = _toy_in_process(hw, 1000)
    t_toy_env_small = _toy_in_process(4, 1000)

    def row(what: str, seconds: float) -> dict[str, Any]:
        return {"what": what, "env steps/s": n / seconds, "ms per call": seconds * 1e3}

    rows = [
        row(f"ProcessEnvManager, {n} zero-cost toy envs (toy.frozen, one per shard), 2x{hw}x{hw}x3 images, chunk 1", t_mgr),
        row(f"gymnasium AsyncVectorEnv(shared_memory=True), {n} trivial envs emitting the same images", t_async_trivial),
        row(f"ProcessEnvManager, {n} toy envs drawing every step (step_cost_s=0), same images", t_mgr_toy),
        row(f"gymnasium AsyncVectorEnv(shared_memory=True), {n} envs running the same toy code", t_async_toy),
        row(f"in-process memcpy of the same {nbytes / 2**20:.1f} MiB (the limit)", t_copy),
        row(f"fixed cost: ProcessEnvManager, {n} shards of a zero-cost env (toy.frozen), 4x4 images (median call)", t_fixed),
        row("the same calls, mean", t_fixed_mean),
        row(f"ProcessEnvManager, {n} toy envs (step_cost_s=0), 4x4 images", t_fixed_toy),
    ]
    notes = [
        f"ProcessEnvManager / AsyncVectorEnv, zero-cost envs emitting the images: {t_async_trivial / t_mgr:.2f}x (target >= 1.5x)",
        f"ProcessEnvManager / AsyncVectorEnv, both running the toy's drawing code: {t_async_toy / t_mgr_toy:.2f}x",
        "Both zero-cost envs return the same arrays every step and the framework copies them into shared memory "
        "(gymnasium's worker; envfleet's shard), then into the arrays it returns.",
        f"fixed cost of one chunk_step on {n} shards of a zero-cost env: median {t_fixed * 1e3:.2f} ms, mean "
        f"{t_fixed_mean * 1e3:.2f} ms, 90th percentile {t_fixed_p90 * 1e3:.2f} ms over {_FIXED_ROUNDS * _FIXED_CALLS:,} calls timed one by one "
        "(target <= 1 ms)",
        f"One toy env's own chunk_step, called in-process: {t_toy_env * 1e6:.0f} us at {hw}x{hw}, {t_toy_env_small * 1e6:.0f} us at 4x4 "
        f"(Python bookkeeping and drawing); {n} of them on this machine's {os.cpu_count()} cores account for most of the "
        "difference between the last two rows.",
        "toy.frozen: chunk_step simulates nothing and returns the same result, so the fixed-cost row measures the "
        "manager alone (messages, shared memory, merging the shards' replies).",
    ]
    write(
        "manager",
        rows,
        notes,
        {
            "ratio_vs_async": t_async_trivial / t_mgr,
            "ratio_vs_async_same_code": t_async_toy / t_mgr_toy,
            "fixed_cost_ms": t_fixed * 1e3,
            "fixed_cost_mean_ms": t_fixed_mean * 1e3,
            "fixed_cost_p90_ms": t_fixed_p90 * 1e3,
            "memcpy_ms": t_copy * 1e3,
        },
    )
