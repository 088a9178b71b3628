"""A step through verl's RayWorkerGroup against envfleet's own EnvWorkerGroup (run in the venv of
`nox -s tests-verl`, which has verl 0.9.1; `bench/run.py verl` starts it and writes the section).

Prints one JSON object: ``{"rows": [...], "ray_noop_ms": ...}``.

The LIBERO row runs one layout on both sides, ``train.libero.envs_per_process`` (default 1;
``ENVFLEET_BENCH_ENVS_PER_PROCESS`` sets it): left to the backend's default, envfleet's group
(1 CPU reserved per worker) and verl's workers (none reserved) get different layouts.

    python bench/verl_group.py
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import numpy as np
import ray
from common import comparison_row  # bench/ is this script's directory, first on sys.path
from configs import toy_overrides
from omegaconf import OmegaConf
from ray.util.placement_group import remove_placement_group
from verl import DataProto as VerlDataProto
from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

from envfleet.config import load_config
from envfleet.dataproto import DataProto
from envfleet.plugins import list_backends
from envfleet_ray import init_ray
from envfleet_ray.runtime.group import EnvWorkerGroup
from envfleet_ray.verl import EnvWorker

ROUNDS = 5
EPP = int(os.environ.get("ENVFLEET_BENCH_ENVS_PER_PROCESS", "1"))  # LIBERO envs per shard process, both sides


def batches(fn: Any, repeat: int) -> float:
    """Seconds per call of ``fn`` over ``repeat`` calls."""
    t0 = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - t0) / repeat


def alternated_batches(first: Any, second: Any, repeat: int) -> tuple[list[float], list[float]]:
    """Seconds per call of ``first`` and ``second`` in each of ``ROUNDS`` alternating batches, after a warm-up of each."""
    for fn in (first, second):
        batches(fn, 2)
    t_first, t_second = [], []
    for _ in range(ROUNDS):
        t_first.append(batches(first, repeat))
        t_second.append(batches(second, repeat))
    return t_first, t_second


def alternated(first: Any, second: Any, repeat: int) -> tuple[float, float]:
    """Median seconds per call of ``first`` and ``second``, timed in alternating batches after a warm-up of each."""
    t_first, t_second = alternated_batches(first, second, repeat)
    return float(np.median(t_first)), float(np.median(t_second))


def env_section(overrides: list[str]) -> Any:
    """verl's ``config.env`` for these envfleet overrides (envfleet validates them first)."""
    cfg = load_config(overrides=overrides)
    plain = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(plain, dict)
    plain.pop("val")
    return OmegaConf.create({"env": plain}).env


def verl_env_group(env: Any, workers: int) -> tuple[RayWorkerGroup, RayResourcePool]:
    """The Env role as verl's trainer makes it, in a resource pool of its own (returned beside it, for :func:`close_verl_group`)."""
    pool = RayResourcePool(process_on_nodes=[workers], use_gpu=False, max_colocate_count=1)
    cls = RayClassWithInitArgs(ray.remote(EnvWorker), config=env)
    return RayWorkerGroup(resource_pool=pool, ray_cls_with_init=cls, device_name="cpu"), pool


def close_verl_group(group: RayWorkerGroup, pool: RayResourcePool) -> None:
    """Kill the group's actors, as verl's and verl-vla's trainers do at shutdown, and remove the pool's
    placement groups. verl never removes them (verl 0.7.1 and 0.9.1 call no ``remove_placement_group``):
    each would hold a CPU of the bench's Ray for the rest of its run, and ``RayResourcePool`` waits for
    its placement group with no timeout. With envfleet's group at 2 CPUs per worker on
    ``init_ray(num_cpus=4)``, this script's third verl group (the overlap case) then never starts."""
    for worker in group.workers:
        ray.kill(worker)
    for pg in pool.pgs or []:
        remove_placement_group(pg)


def step_cost(label: str, overrides: list[str], repeat: int) -> dict[str, Any]:
    """One stage stepped through each group, both up at once and timed in alternating batches."""
    env = env_section(overrides)
    n, chunk = int(env.train.num_envs), int(env.actor.model.num_action_chunks)
    ours = EnvWorkerGroup(load_config(overrides=overrides), num_workers=1)
    theirs, pool = verl_env_group(env, 1)
    try:
        ours.init_worker()
        ours.init_simulator()
        theirs.init_worker()
        theirs.init_simulator()
        ids = np.arange(n)
        ours.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": ids})).get()
        theirs.reset_envs_to_state_ids(VerlDataProto.from_dict(non_tensors={"state_ids": ids})).get()
        actions = np.zeros((n, chunk, 7), np.float32)
        ours_data = DataProto.from_dict(non_tensors={"actions": actions}, meta_info={"stage_id": 0})
        theirs_data = VerlDataProto.from_dict(non_tensors={"actions": actions}, meta_info={"stage_id": 0})

        def ours_step() -> Any:
            return ours.env_interact_step(ours_data).get().batch

        def theirs_step() -> Any:
            return theirs.env_interact_step(theirs_data).get().batch

        a, b = alternated(ours_step, theirs_step, repeat)
    finally:
        theirs.close()
        ours.shutdown()
        close_verl_group(theirs, pool)
    return comparison_row(label, "envfleet's group", a, "verl's group", b)


def overlap(label: str, overrides: list[str], repeat: int) -> dict[str, Any]:
    """Two stages of one worker submitted together, against one stage alone, through each group."""
    env = env_section(overrides)
    chunk = int(env.actor.model.num_action_chunks)
    ours = EnvWorkerGroup(load_config(overrides=overrides), num_workers=1)
    theirs, pool = verl_env_group(env, 1)
    out: dict[str, Any] = {"case": label}
    try:
        for name, group, proto in (("envfleet", ours, DataProto), ("verl", theirs, VerlDataProto)):
            group.init_worker()
            group.init_simulator()
            group.reset_envs_to_state_ids(proto.from_dict(non_tensors={"state_ids": np.arange(2)})).get()
            steps = [
                proto.from_dict(non_tensors={"actions": np.zeros((1, chunk, 7), np.float32)}, meta_info={"stage_id": s}) for s in (0, 1)
            ]
            one = batches(lambda group=group, steps=steps: group.env_interact_step(steps[0]).get(), repeat)
            both = batches(lambda group=group, steps=steps: [f.get() for f in [group.env_interact_step(d) for d in steps]], repeat)
            out[f"{name}_two_stages_over_one"] = both / one
    finally:
        theirs.close()
        ours.shutdown()
        close_verl_group(theirs, pool)
    return out


def main() -> int:
    init_ray(num_cpus=4)
    rows = [step_cost("toy, zero cost (toy.frozen), 2 envs, 64x64, chunk 8", toy_overrides(2, 64, 8, "train.toy.frozen=true"), 100)]
    if "libero" in list_backends():
        libero = [
            "train.simulator_type=libero",
            "train.task_suite_name=libero_spatial",
            "train.num_envs=2",
            "train.render=last",
            "train.init_params.camera_heights=128",
            "train.init_params.camera_widths=128",
            "actor.model.num_action_chunks=8",
            "train.max_episode_steps=100000",
            f"train.libero.envs_per_process={EPP}",
        ]
        rows.append(step_cost(f"LIBERO spatial, 2 envs, 128x128, chunk 8, render last, {EPP} env(s) per process", libero, 3))
    stages = overlap(
        "toy sleeping 0.2 s per chunk (a device-bound simulator), 1 env per stage, 2 stages",
        toy_overrides(1, 64, 8, "train.toy.step_sleep_s=0.2", "rollout.pipeline_stage_num=2"),
        10,
    )
    ray.shutdown()
    json.dump({"rows": rows, "overlap": stages}, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    sys.exit(main())
