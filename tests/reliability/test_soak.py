"""Soak: many chunk steps with resets between episodes; memory, file descriptors and segments must not grow.

CI runs a short soak on the toy backend; ``nox -s chaos`` runs 2,000 chunk steps on
the toy backend and 200 on LIBERO.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import ray

from envfleet.config import load_config
from envfleet.dataproto import DataProto
from envfleet.plugins import list_backends
from envfleet_ray import init_ray
from envfleet_ray.runtime.group import EnvWorkerGroup

from .harness import CHAOS, FaultReport, complete_step, scale, segments_of


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def soak(overrides: list[str], chunks: int, name: str) -> FaultReport:
    init_ray(num_cpus=4)
    cfg = load_config(overrides=overrides)
    group = EnvWorkerGroup(cfg, num_workers=1)
    report = FaultReport(name)
    try:
        group.init_worker()
        group.init_simulator()
        S, N = group.stage_num, group.num_envs
        chunk = int(cfg.actor.model.num_action_chunks)
        ids = group.get_all_state_ids()
        rng = np.random.default_rng(0)
        warmup = max(chunks // 10, 5)
        baseline: dict[str, object] = {}
        done = np.ones((S, N), dtype=bool)
        cursor = 0
        for i in range(chunks):
            if done.all():
                take = np.resize(np.roll(ids, -cursor), S * N)
                cursor += S * N
                group.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": take})).get()
                done[:] = False
            s = i % S
            actions = (rng.uniform(-1, 1, (N, chunk, 7)) * 0.5).astype(np.float32)
            out = group.env_interact_step(DataProto.from_dict(non_tensors={"actions": actions}, meta_info={"stage_id": s})).get()
            report.chunks_requested += 1
            report.chunks_returned += int(complete_step(out, N, chunk))
            report.env_steps_requested += N * chunk
            report.env_steps_returned += int(out.batch["rews"].numel())
            done[s] = (out.batch["terminations"][:, -1] | out.batch["truncations"][:, -1]).numpy()
            if i == warmup:
                info = group.node_info()[0]
                shards = [p for stage in info["shard_pids"]["train"] for p in stage]
                baseline = {
                    "worker": info["pid"],
                    "shards": shards,
                    "rss": {p: rss_kb(p) for p in [info["pid"], *shards]},
                    "fds": fds(info["pid"]),
                    "segments": len(segments_of({info["pid"]})),
                }
        rss_after = {p: rss_kb(p) for p in baseline["rss"]}  # type: ignore[attr-defined]
        growth = {p: (rss_after[p] - v) / v for p, v in baseline["rss"].items()}  # type: ignore[attr-defined]
        worst = max(growth.values())
        report.notes += [
            f"RSS growth after warm-up: worker {growth[baseline['worker']] * 100:+.1f}%, "
            f"worst shard {max(growth[p] for p in baseline['shards']) * 100:+.1f}%",  # type: ignore[attr-defined]
            f"open fds of the worker: {baseline['fds']} -> {fds(baseline['worker'])}",  # type: ignore[arg-type]
            f"shared-memory segments: {baseline['segments']} -> {len(segments_of({baseline['worker']}))}",  # type: ignore[arg-type]
        ]
        report.save()
        assert worst < 0.05, f"resident memory grew by {worst * 100:.1f}% after warm-up: {growth}"
        assert fds(baseline["worker"]) <= baseline["fds"], "the worker's open file descriptors grew"  # type: ignore[arg-type]
        assert len(segments_of({baseline["worker"]})) <= baseline["segments"], "shared-memory segments grew"  # type: ignore[arg-type]
        assert report.env_steps_returned == report.env_steps_requested
        return report
    finally:
        group.shutdown()
        ray.shutdown()


def test_soak_toy() -> None:
    chunks = scale(300, 2000)
    soak(
        [
            "train.simulator_type=toy",
            "train.num_envs=2",
            "rollout.pipeline_stage_num=2",
            "actor.model.num_action_chunks=8",
            "train.max_episode_steps=32",
        ],
        chunks,
        f"soak-toy-{chunks}",
    )


@pytest.mark.skipif(not CHAOS, reason="the LIBERO soak (200 chunk steps) runs in `nox -s chaos`")
def test_soak_libero() -> None:
    assert "libero" in list_backends(), "the LIBERO backend is not installed"
    soak(
        [
            "train.simulator_type=libero",
            "train.task_suite_name=libero_spatial",
            "train.num_envs=1",
            "rollout.pipeline_stage_num=2",
            "actor.model.num_action_chunks=8",
            "train.max_episode_steps=40",
            "train.init_params.camera_heights=128",
            "train.init_params.camera_widths=128",
        ],
        200,
        "soak-libero-200",
    )
