"""The `async` section of `nox -s bench` (bench/run.py async): first-ready stepping against lockstep.

Env sub-steps per second, and the share of time envs wait (1 - the simulator time of every
chunk, summed over shards, over envs x wall time), of one stage stepped

- ``lockstep``: ``chunk_step`` on every env, each call as long as its slowest shard;
- ``first_ready``: ``send_chunk`` / ``recv_chunk(min_ready=1)``, each env sent its next chunk as
  soon as its result is back (no policy: the actions are fixed);
- ``torchrl_async_env_pool`` (toy only): TorchRL's ``AsyncEnvPool`` (threading backend) over one
  ``envfleet.torchrl`` env per env, each its own shard process, driven by
  ``async_step_and_maybe_reset_send`` / ``_recv(min_get=1)``: TorchRL resets the envs whose
  episode ended (the face leaves ``auto_reset`` to TorchRL).

Cases:

- ``toy``: 8 envs, one per process, chunks of 8, episodes of 10 chunks with ``auto_reset``. Each
  env's chunk costs ``env_sleep_s`` x a Pareto(1.5) draw (>= 1, mean 3), and a reset costs 20
  mean chunks; the costs are sleeps (``train.toy.env_sleep_s``, ``step_cost_tail``,
  ``reset_sleep_s``): a simulator that waits on a device, so that the 2 cores of the shared
  machine do not cap the figure. Target: first-ready >= 1.5x lockstep.
- ``libero``: 4 libero_spatial envs, one per process, 64x64, chunks of 8, episodes of 2 chunks
  with ``auto_reset`` (a reset, its settle steps and initial state, every other chunk). CPU-bound
  on this machine: 4 processes share its cores.

``ENVFLEET_BENCH_QUICK=1``: shorter runs, to check that the section runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/, when run alone
from common import ROOT, verl_env, write
from configs import libero_installed, toy_cfg

QUICK = os.environ.get("ENVFLEET_BENCH_QUICK") == "1"
TOY_N, TOY_CHUNK, TOY_EPISODE_CHUNKS = 8, 8, 10
ENV_SLEEP_S, TAIL = 0.01, 1.5
MEAN_CHUNK_S = ENV_SLEEP_S * (1 + 1 / (TAIL - 1))  # a Pareto(1.5) factor's mean is 3
RESET_SLEEP_S = 20 * MEAN_CHUNK_S
TOY_SECONDS = 4.0 if QUICK else 15.0
LIBERO_N, LIBERO_CHUNK, LIBERO_CHUNKS = 4, 8, (4 if QUICK else 12)


def _toy_train(auto_reset: bool = True, n: int = TOY_N, seed: int = 0) -> Any:
    return toy_cfg(
        n,
        32,
        TOY_CHUNK,
        seed=seed,
        auto_reset=auto_reset,
        max_episode_steps=TOY_EPISODE_CHUNKS * TOY_CHUNK,
        **{
            "toy.env_sleep_s": ENV_SLEEP_S,
            "toy.step_cost_tail": TAIL,
            "toy.reset_sleep_s": RESET_SLEEP_S,
            "toy.envs_per_process": 1,
        },
    )


def _actions(n: int, chunk: int, k: int) -> np.ndarray:
    rng = np.random.default_rng(k)
    return rng.uniform(-1, 1, (n, chunk, 7)).astype(np.float32)


def lockstep(mgr: Any, chunk: int, seconds: float | None = None, chunks: int | None = None) -> dict[str, float]:
    """Step every env in lockstep for ``seconds`` (or ``chunks`` calls): sub-steps/s and the wait share."""
    n = mgr.num_envs
    busy, calls = 0.0, 0
    t0 = time.perf_counter()
    while (seconds is not None and time.perf_counter() - t0 < seconds) or (chunks is not None and calls < chunks):
        mgr.chunk_step(_actions(n, chunk, calls))
        busy += sum(shard.sim_s for shard in mgr.shards)
        calls += 1
    wall = time.perf_counter() - t0
    return {"steps_per_s": calls * n * chunk / wall, "wait_share": 1 - busy / (n * wall), "env_chunks": calls * n, "wall_s": wall}


def first_ready(mgr: Any, chunk: int, seconds: float | None = None, chunks: int | None = None) -> dict[str, float]:
    """Step each env again as soon as its result is back, for ``seconds`` (or ``chunks`` per env)."""
    n = mgr.num_envs
    done = np.zeros(n, dtype=np.int64)
    busy0 = mgr.first_ready.sim_busy_s
    t0 = time.perf_counter()
    mgr.send_chunk(np.arange(n), _actions(n, chunk, 0))
    in_flight = n
    while in_flight:
        out = mgr.recv_chunk(1)
        in_flight -= len(out.env_ids)
        done[out.env_ids] += 1
        over = (seconds is not None and time.perf_counter() - t0 >= seconds) or (chunks is not None and done.min() >= chunks)
        again = out.env_ids if not over else out.env_ids[:0]
        if chunks is not None and not over:
            again = again[done[again] < chunks]
        if len(again):
            acts = np.stack([_actions(n, chunk, int(done[e]))[e] for e in again])
            mgr.send_chunk(again, acts)
            in_flight += len(again)
    wall = time.perf_counter() - t0
    busy = mgr.first_ready.sim_busy_s - busy0
    total = int(done.sum())
    return {"steps_per_s": total * chunk / wall, "wait_share": 1 - busy / (n * wall), "env_chunks": total, "wall_s": wall}


def _managed(cfg: Any, fn: Any, **kwargs: Any) -> dict[str, float]:
    from envfleet import ProcessEnvManager

    with ProcessEnvManager(cfg) as mgr:
        mgr.reset_envs_to_state_ids(np.arange(mgr.num_envs) % len(mgr.get_all_state_ids()))
        return dict(fn(mgr, int(cfg.actor.model.num_action_chunks), **kwargs))


def torchrl_pool(seconds: float) -> dict[str, float]:
    """TorchRL's AsyncEnvPool over TOY_N one-env envfleet TorchRL envs (auto-reset by TorchRL).

    Each is env 0 of its own stage, so each gets its own ``train.seed`` for its own cost draws.
    """
    import functools

    import torch
    from torchrl.envs import AsyncEnvPool

    from envfleet.torchrl import make_env

    pool = AsyncEnvPool([functools.partial(make_env, _toy_train(auto_reset=False, n=1, seed=i)) for i in range(TOY_N)], backend="threading")
    try:
        td = pool.reset()
        done = np.zeros(TOY_N, dtype=np.int64)
        t0 = time.perf_counter()
        td["action"] = torch.from_numpy(_actions(TOY_N, TOY_CHUNK, 0)[:, None])
        pool.async_step_and_maybe_reset_send(td)
        in_flight = TOY_N
        while in_flight:
            _, nxt = pool.async_step_and_maybe_reset_recv(min_get=1)
            ids = [int(i) for i in np.asarray(nxt.get("env_index").tolist()).reshape(-1)]
            in_flight -= len(ids)
            done[ids] += 1
            if time.perf_counter() - t0 < seconds:
                nxt["action"] = torch.stack([torch.from_numpy(_actions(TOY_N, TOY_CHUNK, int(done[e]))[e][None]) for e in ids])
                pool.async_step_and_maybe_reset_send(nxt)
                in_flight += len(ids)
        wall = time.perf_counter() - t0
    finally:
        pool.close()
    total = int(done.sum())
    return {"steps_per_s": total * TOY_CHUNK / wall, "wait_share": float("nan"), "env_chunks": total, "wall_s": wall}


def measure_toy() -> dict[str, dict[str, float]]:
    """The toy rows: lockstep, first-ready, and TorchRL's pool where torchrl imports."""
    out = {
        "lockstep": _managed(_toy_train(), lockstep, seconds=TOY_SECONDS),
        "first_ready": _managed(_toy_train(), first_ready, seconds=TOY_SECONDS),
    }
    try:
        import torchrl  # noqa: F401
    except ImportError:
        return out
    out["torchrl_async_env_pool"] = torchrl_pool(TOY_SECONDS)
    return out


def _toy_rows() -> dict[str, dict[str, float]]:
    try:
        import torchrl  # noqa: F401

        return measure_toy()
    except ImportError:
        pass
    found = verl_env()
    if found is None:
        print("async: no venv with torchrl (run `nox -s tests-torchrl` first): the AsyncEnvPool row is not run")
        return measure_toy()
    python, verl = found
    env = {**verl, "PYTHONPATH": os.pathsep.join(p for p in (os.path.join(ROOT, "bench"), verl.get("PYTHONPATH", "")) if p)}
    out = subprocess.run([python, os.path.abspath(__file__), "toy"], stdout=subprocess.PIPE, text=True, timeout=1800, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"async: the toy measurement under {python} failed (exit {out.returncode})")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def _libero() -> Any:
    from envfleet.config import load_config

    return load_config(
        overrides=[
            "train.simulator_type=libero",
            "train.task_suite_name=libero_spatial",
            f"train.num_envs={LIBERO_N}",
            "train.init_params.camera_heights=64",
            "train.init_params.camera_widths=64",
            f"actor.model.num_action_chunks={LIBERO_CHUNK}",
            f"train.max_episode_steps={2 * LIBERO_CHUNK}",
            "train.auto_reset=true",
            "train.libero.envs_per_process=1",
        ]
    )


def run() -> None:
    """Measure and write docs/benchmarks/async.md."""
    rows: list[dict[str, Any]] = []
    results = {"toy": _toy_rows()}
    if libero_installed():
        results["libero"] = {
            "lockstep": _managed(_libero(), lockstep, chunks=LIBERO_CHUNKS),
            "first_ready": _managed(_libero(), first_ready, chunks=LIBERO_CHUNKS),
        }
    for case, by_mode in results.items():
        base = by_mode["lockstep"]["steps_per_s"]
        for mode, r in by_mode.items():
            rows.append(
                {
                    "case": case,
                    "stepping": mode,
                    "env sub-steps/s": r["steps_per_s"],
                    "vs lockstep": r["steps_per_s"] / base,
                    "envs wait (%)": r["wait_share"] * 100 if r["wait_share"] == r["wait_share"] else "-",
                    "env chunks": int(r["env_chunks"]),
                }
            )
    notes = [
        f"toy: {TOY_N} envs, one per process, chunks of {TOY_CHUNK}, episodes of {TOY_EPISODE_CHUNKS} chunks, auto-reset; "
        f"an env's chunk sleeps {ENV_SLEEP_S} s x Pareto({TAIL}) (mean {MEAN_CHUNK_S:.2f} s), a reset {RESET_SLEEP_S:.2f} s "
        f"(20 mean chunks); {TOY_SECONDS:g} s per row.",
        f"libero: {LIBERO_N} libero_spatial envs, one per process, 64x64, chunks of {LIBERO_CHUNK}, episodes of 2 chunks, "
        f"auto-reset; {LIBERO_CHUNKS} chunks per env per row.",
        "envs wait: 1 - (simulator seconds of every chunk, summed over shards) / (envs x wall seconds).",
        "torchrl_async_env_pool: TorchRL's AsyncEnvPool (threading) over one envfleet TorchRL env per env; TorchRL resets "
        "finished envs between chunks.",
    ]
    write("async", rows, notes)


if __name__ == "__main__":
    if sys.argv[1:] == ["toy"]:
        print(json.dumps(measure_toy()))
    else:
        run()
