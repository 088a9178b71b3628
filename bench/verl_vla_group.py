"""A step through verl-vla's order of calls (verl 0.7.1's RayWorkerGroup over
``envfleet_ray.verl_vla.EnvWorker``, as verl-vla's ``TrainCluster`` builds its Env role)
against the same step through envfleet's own EnvWorkerGroup. Run in tests-verl's venv with
verl 0.7.1 first on PYTHONPATH (``bench/run.py verl`` starts it, as ``nox -s tests-verl-vla``
does); prints one JSON object ``{"rows": [...]}``.

    python bench/verl_vla_group.py
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import numpy as np
import ray
import torch
from configs import toy_overrides  # bench/ is this script's directory, first on sys.path
from verl import DataProto as VerlDataProto
from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
from verl_group import alternated

from envfleet.config import load_config
from envfleet.dataproto import DataProto
from envfleet.plugins import list_backends
from envfleet_ray import init_ray
from envfleet_ray.group import EnvWorkerGroup
from envfleet_ray.verl_vla import EnvWorker


def vla_config(simulator: dict[str, Any], num_envs: int) -> dict[str, Any]:
    """verl-vla's cluster.env in its yaml layout: one stage, train only."""
    return {
        "env_loop": {"pipeline_stage_num": 1, "max_interactions": 10},
        "env_worker": {"auto_reset": False, "num_envs": num_envs, "modes": ["train"], "device": "cpu", "simulator": simulator},
    }


def step_cost(label: str, overrides: list[str], simulator: dict[str, Any], repeat: int) -> dict[str, Any]:
    """The same env stepped through both groups, both up at once and timed in alternating batches."""
    cfg = load_config(overrides=overrides)
    n, chunk = int(cfg.train.num_envs), int(cfg.actor.model.num_action_chunks)
    ours = EnvWorkerGroup(cfg, num_workers=1)
    pool = RayResourcePool(process_on_nodes=[1], use_gpu=False, max_colocate_count=1)
    cls = RayClassWithInitArgs(cls=ray.remote(EnvWorker), config=vla_config(simulator, n), role="env")
    theirs = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=cls, device_name="cpu")
    try:
        ours.init_worker()
        ours.init_simulator()
        theirs.init_worker()
        ours.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": np.arange(n)})).get()
        theirs.reset_env(mode="train").get()
        ours_data = DataProto.from_dict(non_tensors={"actions": np.zeros((n, chunk, 7), np.float32)}, meta_info={"stage_id": 0})
        theirs_data = VerlDataProto.from_dict(tensors={"action": torch.zeros(n, chunk, 7)}, meta_info={"stage_id": 0})

        def ours_step() -> Any:
            return ours.env_interact_step(ours_data).get().batch

        def theirs_step() -> Any:
            return theirs.env_interact_step(theirs_data, mode="train").get().batch

        a, b = alternated(ours_step, theirs_step, repeat)
    finally:
        theirs.close()
        ours.shutdown()
        for worker in theirs.workers:
            ray.kill(worker)
    return {
        "case": label,
        "envfleet's group (ms)": a * 1e3,
        "verl-vla's order (ms)": b * 1e3,
        "added (ms)": (b - a) * 1e3,
        "added (%)": (b / a - 1) * 100,
    }


def main() -> int:
    init_ray(num_cpus=4)
    toy = toy_overrides(2, 64, 8, "train.toy.frozen=true")
    toy_sim = {
        "simulator_type": "toy",
        "envfleet": {"max_episode_steps": 100000, "toy": {"frozen": True}, "init_params": {"camera_heights": 64, "camera_widths": 64}},
    }
    rows = [step_cost("toy, zero cost (toy.frozen), 2 envs, 64x64, chunk 8", toy, toy_sim, 100)]
    if "libero" in list_backends() and not os.environ.get("ENVFLEET_BENCH_NO_LIBERO"):
        libero = [
            "train.simulator_type=libero",
            "train.task_suite_name=libero_spatial",
            "train.num_envs=2",
            "train.init_params.camera_heights=128",
            "train.init_params.camera_widths=128",
            "actor.model.num_action_chunks=8",
            "train.max_episode_steps=100000",
        ]
        libero_sim = {
            "simulator_type": "libero",
            "libero": {
                "task_suite_name": "libero_spatial",
                "max_episode_steps": 100000,
                "camera_heights": 128,
                "camera_widths": 128,
                "task_ids": [0],
            },
        }
        rows.append(step_cost("LIBERO spatial, 2 envs, 128x128, chunk 8, render last", libero, libero_sim, 3))
    ray.shutdown()
    json.dump({"rows": rows}, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    sys.exit(main())
