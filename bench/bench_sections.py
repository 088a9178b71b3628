"""The benchmark sections of bench/run.py. Each measures, prints and writes its figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import numpy as np
from run import IMG, OUT, ROOT, timed, write

# ---------------------------------------------------------------------------------------------- manager


def toy_overrides(n: int, hw: int, chunk: int = 1, *extra: str) -> list[str]:
    """Overrides of a toy config of ``n`` envs, ``hw`` x ``hw`` images, chunks of ``chunk``, episodes that never end."""
    return [
        "train.simulator_type=toy",
        f"train.num_envs={n}",
        f"actor.model.num_action_chunks={chunk}",
        f"train.init_params.camera_heights={hw}",
        f"train.init_params.camera_widths={hw}",
        "train.max_episode_steps=100000",
        *extra,
    ]


def _toy_cfg(n: int, hw: int, chunk: int = 1, **train: Any) -> Any:
    from envfleet.config import load_config

    return load_config(overrides=toy_overrides(n, hw, chunk, *[f"train.{k}={v}" for k, v in train.items()]))


def _manager_rate(n: int, hw: int, repeat: int, **train: Any) -> float:
    from envfleet.manager import ProcessEnvManager

    with ProcessEnvManager(_toy_cfg(n, hw, **train)) as mgr:
        mgr.reset_envs_to_state_ids(np.arange(n))
        actions = np.zeros((n, 1, 7), np.float32)
        return timed(lambda: mgr.chunk_step(actions), repeat, warmup=20)


_FIXED_ROUNDS, _FIXED_CALLS = 5, 300


def _fixed_cost(n: int, rounds: int = _FIXED_ROUNDS, calls: int = _FIXED_CALLS) -> tuple[float, float, float]:
    """Per-call seconds of chunk_step on ``n`` shards of a zero-cost env with 4x4 images: (median, mean, 90th percentile).

    Every call is timed on its own, in ``rounds`` rounds, so that a slow spell of the
    machine shows up in the mean and the 90th percentile instead of moving the median.
    """
    from envfleet.manager import ProcessEnvManager

    with ProcessEnvManager(_toy_cfg(n, 4, **{"toy.frozen": True})) as mgr:
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

    env = ToyEnv(_toy_cfg(1, hw).train, EnvContext(num_envs=1, action_dim=7, num_action_chunks=1))
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

        self.env = ToyEnv(_toy_cfg(1, hw).train, EnvContext(num_envs=1, action_dim=7, num_action_chunks=1))
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


def bench_manager() -> None:
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


# ---------------------------------------------------------------------------------------------- worker / pipeline


def _ray() -> None:
    from envfleet_ray import init_ray

    init_ray(num_cpus=4)


def bench_worker() -> None:
    """env_interact_step through the actor against calling the stage's manager directly (toy and LIBERO)."""
    import ray

    from envfleet.dataproto import DataProto
    from envfleet.manager import ProcessEnvManager
    from envfleet_ray.group import EnvWorkerGroup

    _ray()
    rows = []
    frozen = _toy_cfg(2, 64, chunk=8, **{"toy.frozen": True})
    cases: list[tuple[str, Any, int, bool]] = [
        ("toy, zero cost (toy.frozen), 2 envs, 64x64, chunk 8", frozen, 100, True),
        ("toy drawing every sub-step (step_cost_s=0), 2 envs, 64x64, chunk 8", _toy_cfg(2, 64, chunk=8), 70, True),
        ("toy, zero cost, through Ray's task path (local_lane=False)", frozen, 100, False),
    ]
    if _libero_installed():
        cases.append(("LIBERO spatial, 2 envs, 128x128, chunk 8, render last", _libero_cfg(2, 128, "last", stages=1), 3, True))
    for label, cfg, repeat, lane in cases:
        n = int(cfg.train.num_envs)
        chunk = int(cfg.actor.model.num_action_chunks)
        actions = np.zeros((n, chunk, 7), np.float32)
        # Both paths are up at once and measured in alternating batches, so that a slow
        # spell of the machine hits both alike.
        mgr = ProcessEnvManager(cfg)
        group = EnvWorkerGroup(cfg, num_workers=1, local_lane=lane)
        try:
            mgr.start_simulator()
            ids = mgr.get_all_state_ids()[:n]
            mgr.reset_envs_to_state_ids(ids)
            group.init_worker()
            group.init_simulator()
            stages = group.stage_num
            group.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": np.resize(ids, n * stages)})).get()
            data = DataProto.from_dict(non_tensors={"actions": actions}, meta_info={"stage_id": 0})
            direct, actor = [], []
            for _ in range(5):
                direct.append(timed(lambda mgr=mgr, actions=actions: mgr.chunk_step(actions), repeat, warmup=2))
                # .batch: the trainer reads the tensors, so building the TensorDict is counted.
                actor.append(timed(lambda group=group, data=data: group.env_interact_step(data).get().batch, repeat, warmup=2))
            t_direct, t_actor = float(np.median(direct)), float(np.median(actor))
        finally:
            group.shutdown()
            mgr.close()
        rows.append(
            {
                "case": label,
                "manager direct (ms)": t_direct * 1e3,
                "through the actor (ms)": t_actor * 1e3,
                "added (ms)": (t_actor - t_direct) * 1e3,
                "added (%)": (t_actor / t_direct - 1) * 100,
            }
        )
    t_noop = _ray_noop_round_trip()
    ray.shutdown()
    write(
        "worker",
        rows,
        [
            "Targets: at most 5% more for LIBERO, at most 2 ms more for the zero-cost toy.",
            "The actor path is EnvWorkerGroup.env_interact_step(...).get().batch: the DataProto's trip to the actor and back "
            "and building its TensorDict on the driver. The worker runs on the driver's node, so the step takes the local "
            "lane (a Unix socket served inside the actor) unless the row says otherwise.",
            f"Ray's own round trip to an actor method that does nothing, on this machine: {t_noop * 1e3:.2f} ms.",
        ],
        {"ray_noop_ms": t_noop * 1e3},
    )


def _ray_noop_round_trip() -> float:
    import ray

    @ray.remote(num_cpus=0)
    class Noop:
        def call(self) -> None:
            return None

    actor = Noop.remote()  # type: ignore[attr-defined]
    try:
        ray.get(actor.call.remote())
        return timed(lambda: ray.get(actor.call.remote()), 300, warmup=20)
    finally:
        ray.kill(actor)


def bench_pipeline() -> None:
    """2 stages, a sleep policy serving one stage at a time with latency = one stage's chunk time."""
    import ray

    from envfleet.dataproto import DataProto
    from envfleet_ray.group import EnvWorkerGroup
    from envfleet_ray.loop import EnvLoop
    from envfleet_ray.policies import SleepPolicy

    _ray()
    chunk, n = 8, 2
    # One env per shard, each sub-step costing 6 ms: a stage chunk ~ 48 ms of simulator time, using both cores.
    from envfleet.config import load_config

    cfg = load_config(
        data=_container(_toy_cfg(n, 64, chunk=chunk)), overrides=["rollout.pipeline_stage_num=2", "train.toy.step_cost_s=0.006"]
    )
    group = EnvWorkerGroup(cfg, num_workers=1)
    rows = []
    try:
        group.init_worker()
        group.init_simulator()
        ids = group.get_all_state_ids()[: n * 2]
        group.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": ids})).get()
        step = DataProto.from_dict(non_tensors={"actions": np.zeros((n, chunk, 7), np.float32)}, meta_info={"stage_id": 0})
        t_env = timed(lambda: group.env_interact_step(step).get(), 10, warmup=2)
        policy = SleepPolicy(chunk, 7, t_env)
        cycles = 20
        stats = EnvLoop(group, policy).run(cycles + 2)
        cycle = float(np.median(stats.cycle_s[2:]))
        ideal = max(2 * t_env, 2 * policy.seconds)  # max(total env time, total policy time) over the 2 stages
        rows.append(
            {
                "stage chunk time (ms)": t_env * 1e3,
                "policy latency (ms)": t_env * 1e3,
                "cycle, pipelined (ms)": cycle * 1e3,
                "ideal max(env, policy) (ms)": ideal * 1e3,
                "no overlap (ms)": 4 * t_env * 1e3,
                "cycle / ideal": cycle / ideal,
            }
        )
    finally:
        group.shutdown()
        ray.shutdown()
    write("pipeline", rows, ["Target: cycle / ideal <= 1.15 (2.0 without overlap)."], {"ratio": rows[0]["cycle / ideal"]})
    _plot_pipeline(rows[0])


def _container(cfg: Any) -> dict[str, Any]:
    from omegaconf import OmegaConf

    data = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(data, dict)
    data.pop("val", None)
    return {str(k): v for k, v in data.items()}


def _plot_pipeline(row: dict[str, Any]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    os.makedirs(IMG, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 3))
    labels = ["no overlap", "pipelined", "ideal"]
    values = [row["no overlap (ms)"], row["cycle, pipelined (ms)"], row["ideal max(env, policy) (ms)"]]
    ax.barh(labels, values, color=["#bbbbbb", "#3b7dd8", "#58a55c"])
    ax.set_xlabel("ms per cycle (2 stages, each stepped once)")
    ax.set_title("Pipelining: policy for one stage while the other steps")
    fig.tight_layout()
    fig.savefig(os.path.join(IMG, "bench_pipeline.png"), dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------- LIBERO


def _libero_installed() -> bool:
    from envfleet.plugins import list_backends

    return "libero" in list_backends()


def _libero_cfg(n: int, hw: int, render: str, stages: int = 1, chunk: int = 8) -> Any:
    from envfleet.config import load_config

    return load_config(
        overrides=[
            "train.simulator_type=libero",
            "train.task_suite_name=libero_spatial",
            f"train.num_envs={n}",
            f"train.render={render}",
            f"train.init_params.camera_heights={hw}",
            f"train.init_params.camera_widths={hw}",
            f"actor.model.num_action_chunks={chunk}",
            f"rollout.pipeline_stage_num={stages}",
            "train.max_episode_steps=100000",
        ]
    )


def bench_libero() -> None:
    """LIBERO sub-steps/s through ProcessEnvManager vs plain OffScreenRenderEnv loops side by side."""
    if not _libero_installed():
        print("libero: backend not installed, skipped")
        return
    from envfleet.manager import ProcessEnvManager

    chunk, chunks = 8, 4
    rows = []
    for hw in (128, 256):
        for render in ("last", "all"):
            for n in (2, 4):
                cfg = _libero_cfg(n, hw, render, chunk=chunk)
                rng = np.random.default_rng(0)
                with ProcessEnvManager(cfg) as mgr:
                    mgr.reset_envs_to_state_ids(mgr.get_all_state_ids()[:n])
                    mgr.chunk_step((rng.uniform(-1, 1, (n, chunk, 7)) * 0.3).astype(np.float32))
                    t0 = time.perf_counter()
                    for _ in range(chunks):
                        mgr.chunk_step((rng.uniform(-1, 1, (n, chunk, 7)) * 0.3).astype(np.float32))
                    rate = n * chunk * chunks / (time.perf_counter() - t0)
                    rss = _rss_mb(mgr.shard_pids())
                limit = _plain_libero_rate(n, hw, render, chunk, chunks)
                rows.append(
                    {
                        "size": hw,
                        "render": render,
                        "envs": n,
                        "envfleet sub-steps/s": rate,
                        "plain loops sub-steps/s (limit)": limit,
                        "envfleet / limit": rate / limit,
                        "RSS per env process (MB)": rss,
                    }
                )
                print(rows[-1], flush=True)
    notes = []
    for hw in (128, 256):
        for n in (2, 4):
            last = next(r for r in rows if r["size"] == hw and r["envs"] == n and r["render"] == "last")
            allr = next(r for r in rows if r["size"] == hw and r["envs"] == n and r["render"] == "all")
            notes.append(
                f"{hw}x{hw}, {n} envs: render last / render all = {last['envfleet sub-steps/s'] / allr['envfleet sub-steps/s']:.1f}x (target >= 4x at chunk 8)"
            )
    notes.append(
        "Targets: envfleet >= 0.9 of the limit (the same number of plain OffScreenRenderEnv processes run side by side, rendering the same sub-steps)."
    )
    write("libero", rows, notes)
    _plot_libero(rows)


def _rss_mb(pids: list[int | None]) -> float:
    values = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        values.append(int(line.split()[1]) / 1024)
        except (OSError, TypeError):
            pass
    return float(np.mean(values)) if values else float("nan")


def _plain_libero_rate(n: int, hw: int, render: str, chunk: int, chunks: int) -> float:
    """n plain LIBERO loops, one per process, stepping at the same time; combined sub-steps/s."""
    import tempfile

    script = os.path.join(ROOT, "bench", "plain_libero.py")
    with tempfile.TemporaryDirectory(prefix="envfleet_barrier_") as barrier:
        procs = [
            subprocess.Popen(
                [sys.executable, script, str(hw), render, str(chunk), str(chunks), str(i), str(n), barrier],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env={**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")},
            )
            for i in range(n)
        ]
        outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    start = min(o["t_start"] for o in outs)
    end = max(o["t_end"] for o in outs)
    return n * chunk * chunks / (end - start)


def _plot_libero(rows: list[dict[str, Any]]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    os.makedirs(IMG, exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), sharey=True)
    for ax, hw in zip(axes, (128, 256)):
        for render, color in (("last", "#3b7dd8"), ("all", "#d8703b")):
            sel = [r for r in rows if r["size"] == hw and r["render"] == render]
            xs = [r["envs"] for r in sel]
            ax.plot(xs, [r["envfleet sub-steps/s"] for r in sel], "o-", color=color, label=f"envfleet, render {render}")
            ax.plot(
                xs,
                [r["plain loops sub-steps/s (limit)"] for r in sel],
                "x--",
                color=color,
                alpha=0.6,
                label=f"plain loops, render {render}",
            )
        ax.set_title(f"LIBERO {hw}x{hw}, chunk 8")
        ax.set_xlabel("envs")
        ax.set_xticks([2, 4])
    axes[0].set_ylabel("sub-steps / s")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(IMG, "bench_libero.png"), dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------- Isaac


def bench_isaac() -> None:
    """Runs the Isaac benchmark script in the Python 3.12 venv of `nox -s tests-isaac`, if it exists."""
    candidates = sorted(
        p
        for p in (
            os.path.join(ROOT, ".nox", "tests-isaac", "bin", "python"),
            os.environ.get("ENVFLEET_ISAAC_PYTHON", ""),
        )
        if p and os.path.exists(p)
    )
    script = next(
        (
            p
            for p in (
                os.path.join(ROOT, "tests", "isaac", "bench_isaac.py"),
                os.path.join(ROOT, "packages", "backend-isaac", "bench_isaac.py"),
            )
            if os.path.exists(p)
        ),
        None,
    )
    if not candidates or script is None:
        print("isaac: no Python 3.12 venv with Isaac Lab (run `nox -s tests-isaac` first), skipped")
        return
    rows = []
    for num_envs in (4, 16):
        out = subprocess.run(
            [candidates[0], script, "--num-envs", str(num_envs)],
            capture_output=True,
            text=True,
            timeout=3600,
            env={**os.environ, "OMNI_KIT_ACCEPT_EULA": "YES", "WARP_CACHE_PATH": os.path.join(ROOT, ".nox", ".cache", "warp")},
        )
        if out.returncode != 0:
            print(f"isaac: benchmark failed:\n{out.stderr[-2000:]}")
            return
        result = json.loads(out.stdout[out.stdout.index("{") :])
        rows.append({k: v for k, v in result.items() if isinstance(v, (int, float, str, bool))})
        print(rows[-1], flush=True)
    write(
        "isaac",
        rows,
        [
            "Target: envfleet / direct >= 0.95 (`ratio`). Both sides simulate the same states and actions; `identical_observations` checks it.",
            "The Isaac side runs on Python 3.12 (Isaac Lab 3.0, kit-less, Newton on CPU) in the venv of `nox -s tests-isaac`.",
        ],
    )


__all__ = ["bench_dataproto", "bench_isaac", "bench_libero", "bench_manager", "bench_pipeline", "bench_worker", "OUT"]


# ---------------------------------------------------------------------------------------------- verl


def bench_verl() -> None:
    """A step through verl's RayWorkerGroup against envfleet's own group, run in the venv of `nox -s tests-verl`."""
    python = next(
        (
            p
            for p in (os.environ.get("ENVFLEET_VERL_PYTHON", ""), os.path.join(ROOT, ".nox", "tests-verl", "bin", "python"))
            if p and os.path.exists(p)
        ),
        None,
    )
    if python is None:
        print("verl: no venv with verl (run `nox -s tests-verl` first, or set ENVFLEET_VERL_PYTHON), skipped")
        return
    out = subprocess.run([python, os.path.join(ROOT, "bench", "verl_group.py")], capture_output=True, text=True, timeout=3600)
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


# ---------------------------------------------------------------------------------------------- dataproto

# The DataProto of the commit before verl's whole surface was added: the figures compare
# against it, loaded from git at run time, so "no slower than before" is measured in one run.
_DATAPROTO_BEFORE = "81eac0b"


def _dataproto_before_file() -> str | None:
    """envfleet/dataproto.py as it was at ``_DATAPROTO_BEFORE``, written to a temporary file (None without git)."""
    import tempfile

    try:
        source = subprocess.run(
            ["git", "-C", ROOT, "show", f"{_DATAPROTO_BEFORE}:packages/core/src/envfleet/dataproto.py"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    path = os.path.join(tempfile.mkdtemp(prefix="envfleet-bench-"), "dataproto_before.py")
    with open(path, "w") as fh:
        fh.write(source)
    return path


def bench_dataproto() -> None:
    """concat, chunk and a pickle round trip of step-sized DataProtos, before and after verl's whole surface."""
    before = _dataproto_before_file()
    versions: dict[str, list[str]] = {"after": []} if before is None else {"before": [before], "after": []}
    script = os.path.join(ROOT, "bench", "dataproto_ops.py")
    times: dict[str, dict[str, list[float]]] = {}
    # Each version in a fresh process per round (bench/dataproto_ops.py says why), the two
    # alternating in both orders, so that a slow spell of the machine hits both alike.
    for rnd in range(6):
        for name in versions if rnd % 2 == 0 else reversed(list(versions)):
            out = subprocess.run([sys.executable, script, *versions[name]], capture_output=True, text=True, check=True, timeout=600)
            for op, seconds in json.loads(out.stdout.strip().splitlines()[-1]).items():
                times.setdefault(op, {v: [] for v in versions})[name].append(seconds)
    rows = []
    for op, per in times.items():
        row: dict[str, Any] = {"operation": op}
        for name in versions:
            row[f"{name} (us)"] = float(np.median(per[name])) * 1e6
        if before is not None:
            row["after / before"] = row["after (us)"] / row["before (us)"]
        rows.append(row)
    notes = [
        "Target: concat, chunk and pickling no slower than before verl's whole surface was added "
        f"(before = envfleet/dataproto.py at commit {_DATAPROTO_BEFORE}, loaded from git in the same run).",
        "A step result: 8 envs, two 128x128x3 uint8 images, 8-d state, [8, 8] rews/terminations/truncations, "
        "12 small info columns, task descriptions; meta_info {'stage_id': 0}. Each figure is the median of 6 rounds, "
        "each version in a fresh process per round, before and after alternating in both orders.",
        "concat takes the parts as a worker's results arrive (unpickled, TensorDict not yet built), as the group concatenates them.",
    ]
    if before is None:
        notes.append("No git checkout here: only the current code was measured.")
    write("dataproto", rows, notes)
