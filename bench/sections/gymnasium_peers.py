"""Part of the `gymnasium` section of ``nox -s bench``: cheap gymnasium envs, step for step against the vector envs
their users compare envfleet with.

CartPole-v1 and HalfCheetah-v5 at 1, 2, 16 and 64 envs, chunks of 8 random actions (the same for every
case), auto-reset on, seeds 0..N-1. Side by side, in turns within each round:

- envfleet: a ``ProcessEnvManager`` with the default layout (``train.gymnasium.envs_per_process: auto``),
  ``chunk_step`` per chunk; and, for the record, the two layouts ``auto`` chooses between
  (``train.in_process: true``; one shard process per core);
- gymnasium's ``SyncVectorEnv`` and ``AsyncVectorEnv`` and SB3's ``SubprocVecEnv`` (start method fork),
  stepped one action at a time;
- EnvPool 1.2.5 on its own C++ CartPole-v1 and HalfCheetah-v4, in a venv of its own
  (``.nox/bench-envpool``, which ``nox -s bench`` builds from requirements/bench-envpool.txt), with 1 and
  with 2 threads: the better of the two is its figure.

Each figure is sub-steps per second: at least ``SECONDS`` of chunks timed after a warm-up, the median of
``ROUNDS`` rounds. Run as a script by EnvPool's venv, this module measures one EnvPool case and prints it
as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]  # as a script, this folder (with a module named gymnasium) must not shadow the package
from common import ROOT, write

ENVS = {"cartpole": ("CartPole-v1", "CartPole-v1", 0), "halfcheetah": ("HalfCheetah-v5", "HalfCheetah-v4", 6)}
SIZES = (1, 2, 16, 64)
CHUNK, ROUNDS, SECONDS, WARMUP = 8, 2, 1.0, 5
ENVPOOL_PYTHON = os.path.join(ROOT, ".nox", "bench-envpool", "bin", "python")

__all__ = ["run", "actions"]


def actions(env: str, n: int, k: int) -> np.ndarray:
    """Chunk ``k``'s actions ``[n, CHUNK, dim]`` float32 (CartPole: 0 or 1 in a column of one)."""
    rng = np.random.default_rng(1000 + k)
    dim = ENVS[env][2]
    if dim == 0:
        return rng.integers(0, 2, (n, CHUNK, 1)).astype(np.float32)
    return rng.uniform(-1, 1, (n, CHUNK, dim)).astype(np.float32)


def _rate(step_chunk: Callable[[int], None], n: int) -> float:
    for k in range(WARMUP):
        step_chunk(k)
    chunks, t0 = 0, time.perf_counter()
    while True:
        step_chunk(WARMUP + chunks % 50)
        chunks += 1
        spent = time.perf_counter() - t0
        if spent >= SECONDS:
            return n * CHUNK * chunks / spent


def envfleet_rate(env: str, n: int, layout: str) -> float:
    """envfleet's manager: ``layout`` ``auto`` (the default), ``in_process`` or ``processes`` (one per core)."""
    from envfleet.config import load_config
    from envfleet.shards.manager import ProcessEnvManager

    section: dict[str, Any] = {"id": ENVS[env][0], "seeds": list(range(n))}
    train: dict[str, Any] = {"simulator_type": "gymnasium", "num_envs": n, "auto_reset": True, "gymnasium": section}
    if layout == "in_process":
        train["in_process"] = True
    elif layout == "processes":
        train["in_process"] = False
    cfg = load_config(data={"train": train, "actor": {"model": {"num_action_chunks": CHUNK}}})
    chunks = [actions(env, n, k) for k in range(WARMUP + 50)]
    with ProcessEnvManager(cfg) as mgr:
        mgr.reset_envs_to_state_ids(np.arange(n))
        return _rate(lambda k: mgr.chunk_step(chunks[k]), n)


def _as_env_actions(env: str, chunk: np.ndarray) -> np.ndarray:
    return chunk[..., 0].astype(np.int64) if ENVS[env][2] == 0 else chunk


def vector_rate(env: str, n: int, kind: str) -> float:
    """gymnasium's ``sync`` / ``async`` vector env or SB3's ``subproc`` VecEnv, one action a step."""
    import gymnasium

    env_id = ENVS[env][0]
    steps = [_as_env_actions(env, actions(env, n, k)).swapaxes(0, 1) for k in range(WARMUP + 50)]
    if kind == "subproc":
        from stable_baselines3.common.vec_env import SubprocVecEnv

        venv = SubprocVecEnv([lambda: gymnasium.make(env_id) for _ in range(n)], start_method="fork")
        venv.seed(0)
        venv.reset()
    else:
        cls = gymnasium.vector.SyncVectorEnv if kind == "sync" else gymnasium.vector.AsyncVectorEnv
        venv = cls([lambda: gymnasium.make(env_id) for _ in range(n)])
        venv.reset(seed=list(range(n)))

    def chunk(k: int) -> None:
        for a in steps[k]:
            venv.step(a)

    try:
        return _rate(chunk, n)
    finally:
        venv.close()


def envpool_rate(env: str, n: int, threads: int) -> float:
    """EnvPool's own env (in its venv): ``num_threads`` threads, a batch of every env."""
    import envpool

    pool = envpool.make(ENVS[env][1], env_type="gymnasium", num_envs=n, batch_size=n, num_threads=threads, seed=0)
    pool.reset()
    steps = [_as_env_actions(env, actions(env, n, k)).swapaxes(0, 1) for k in range(WARMUP + 50)]

    def chunk(k: int) -> None:
        for a in steps[k]:
            pool.step(a)

    try:
        return _rate(chunk, n)
    finally:
        pool.close()


def _envpool(env: str, n: int) -> float | None:
    if not os.path.exists(ENVPOOL_PYTHON):
        return None
    import subprocess

    best = 0.0
    for threads in sorted({1, min(2, n)}):
        out = subprocess.run(
            [ENVPOOL_PYTHON, os.path.abspath(__file__), env, str(n), str(threads)],
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "PYTHONPATH": os.path.join(ROOT, "bench")},
        )
        if out.returncode != 0:
            raise RuntimeError(f"EnvPool case {env} x{n} ({threads} threads) failed:\n{out.stderr[-2000:]}")
        best = max(best, float(json.loads(out.stdout.strip().splitlines()[-1])["rate"]))
    return best


CASES: dict[str, Callable[[str, int], float | None]] = {
    "envfleet": lambda env, n: envfleet_rate(env, n, "auto"),
    "envfleet in the caller": lambda env, n: envfleet_rate(env, n, "in_process"),
    "envfleet in processes": lambda env, n: envfleet_rate(env, n, "processes"),
    "SyncVectorEnv": lambda env, n: vector_rate(env, n, "sync"),
    "AsyncVectorEnv": lambda env, n: vector_rate(env, n, "async"),
    "SubprocVecEnv": lambda env, n: vector_rate(env, n, "subproc"),
    "EnvPool": _envpool,
}


def run(envs: tuple[str, ...] = tuple(ENVS), sizes: tuple[int, ...] = SIZES) -> None:
    """Print the table and write docs/benchmarks/gymnasium_peers.md."""
    from envfleet.config import load_config
    from envfleet_gymnasium.layout import Choice, cores
    from envfleet_gymnasium.probe import probe

    runs: dict[tuple[str, int, str], list[float]] = {}
    chosen: dict[tuple[str, int], str] = {}
    for _ in range(ROUNDS):
        for env in envs:
            for n in sizes:
                for case, measure in CASES.items():
                    rate = measure(env, n)
                    if rate is not None:
                        runs.setdefault((env, n, case), []).append(rate)
                        print(f"{env} x{n} {case}: {rate:,.0f}", flush=True)
    for env in envs:
        step_s = probe(load_config(data={"train": {"simulator_type": "gymnasium", "gymnasium": {"id": ENVS[env][0]}}}).train).get("step_s")
        for n in sizes:
            choice = Choice.of(n, CHUNK, step_s, cores())
            chosen[(env, n)] = "in the caller" if choice.in_process else f"{choice.per_process} per process"
    med = {key: float(np.median(v)) for key, v in runs.items()}
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for env in envs:
        for n in sizes:
            row: dict[str, Any] = {"env": ENVS[env][0], "envs": n, "envfleet layout (auto)": chosen[(env, n)]}
            for case in CASES:
                if (env, n, case) in med:
                    row[case] = med[(env, n, case)]
            sync = med.get((env, n, "SyncVectorEnv"))
            pool = med.get((env, n, "EnvPool"))
            ours = med[(env, n, "envfleet")]
            row["envfleet / Sync"] = f"{ours / sync:.2f}x" if sync else "-"
            row["envfleet / EnvPool"] = f"{ours / pool:.2f}x" if pool else "-"
            rows.append(row)
    if not os.path.exists(ENVPOOL_PYTHON):
        notes.append("EnvPool is not measured: no .nox/bench-envpool (nox -s bench builds it from requirements/bench-envpool.txt).")
    notes.append(
        f"Sub-steps per second; {len(SIZES)} sizes, chunks of {CHUNK} random actions, auto-reset on, seeds 0..N-1; each figure "
        f"at least {SECONDS:g} s of chunks after {WARMUP} warm-up chunks, the median of {ROUNDS} rounds in which the cases "
        "alternate. EnvPool runs its own C++ envs (HalfCheetah-v4, not v5), with 1 and 2 threads, the better figure shown."
    )
    notes.append(f"The runs: {json.dumps({f'{e} x{n} {c}': [round(x) for x in v] for (e, n, c), v in runs.items()})}")
    write("gymnasium_peers", rows, notes)


if __name__ == "__main__":
    name, count, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print(json.dumps({"case": f"{name} x{count} {threads} threads", "rate": envpool_rate(name, count, threads)}))
