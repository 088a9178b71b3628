"""The `pipeline` section of `nox -s bench` (bench/run.py pipeline)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from common import IMG, timed, write
from configs import container, start_ray, toy_cfg


def run() -> None:
    """2 stages, a sleep policy serving one stage at a time with latency = one stage's chunk time."""
    import ray

    from envfleet.dataproto import DataProto
    from envfleet_ray.commands.loop import EnvLoop
    from envfleet_ray.commands.policies import SleepPolicy
    from envfleet_ray.runtime.group import EnvWorkerGroup

    start_ray()
    chunk, n = 8, 2
    # One env per shard, each sub-step costing 6 ms: a stage chunk ~ 48 ms of simulator time, using both cores.
    from envfleet.config import load_config

    cfg = load_config(
        data=container(toy_cfg(n, 64, chunk=chunk)), overrides=["rollout.pipeline_stage_num=2", "train.toy.step_cost_s=0.006"]
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
