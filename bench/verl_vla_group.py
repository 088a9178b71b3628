"""verl-vla's side of the `verl` bench section; prints one JSON object ``{"rows": [...], "rollout": [...]}``.

- ``rows``: a step through verl-vla's order of calls (verl 0.7.1's RayWorkerGroup over
  ``envfleet_ray.verl_vla.EnvWorker``, as verl-vla's ``TrainCluster`` builds its Env role) against
  the same step through envfleet's own EnvWorkerGroup: the toy, and LIBERO's first reset and steady
  state apart.
- ``rollout`` (only with ``ENVFLEET_VERL_VLA``, a verl-vla checkout, whose ``src`` goes on the
  path): a rollout in ``TrainCluster``'s order (``init_worker``, ``reset_env``, then
  ``env_interact_step`` calls) over envfleet's adapter against the same over verl-vla's own
  ``EnvWorker`` + ``LiberoEnv``, one typed ``EnvTrainConfig`` for both, alternated in one run.

Run on verl's lock (where tests-verl runs) with verl 0.7.1 first on PYTHONPATH (``bench/run.py verl`` starts it, as
``nox -s tests-verl-vla`` does). ``ENVFLEET_BENCH_REPS`` shortens a check (calls per timed batch
on LIBERO; default 3); ``ENVFLEET_BENCH_NO_LIBERO`` leaves LIBERO out.

Both sides of ``rows`` run one LIBERO layout, ``train.libero.envs_per_process`` (default 1,
one process per env, the layout of verl-vla's own LiberoEnv; ``ENVFLEET_BENCH_ENVS_PER_PROCESS``
sets it): left to the backend's default, envfleet's group (1 CPU reserved per worker) and
verl's workers (none reserved, so the process's cores decide) get different layouts, and the
row would compare layouts instead of the adapter's cost.

    python bench/verl_vla_group.py
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from typing import Any

import numpy as np
import ray
import torch
from common import comparison_row  # bench/ is this script's directory, first on sys.path
from configs import toy_overrides
from verl import DataProto as VerlDataProto
from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
from verl_group import alternated, alternated_batches, close_verl_group
from verl_vla_libero import torch_init_states

from envfleet.config import load_config
from envfleet.dataproto import DataProto
from envfleet.plugins import list_backends
from envfleet.states import ResetPlan
from envfleet_ray import init_ray
from envfleet_ray.runtime.group import EnvWorkerGroup
from envfleet_ray.verl_vla import EnvWorker
from envfleet_ray.verl_vla_config import read_config

CHECKOUT = os.environ.get("ENVFLEET_VERL_VLA", "")
REPS = int(os.environ.get("ENVFLEET_BENCH_REPS", "3"))
# LIBERO's rows build both sides this many times and pool their batches: a whole build's speed
# moves by up to 10% from one build to the next on this machine (2026-12-02: envfleet's group
# 451, 499 and 412 ms a step in three builds), more than the 5% the adapter is held to.
BUILDS = int(os.environ.get("ENVFLEET_BENCH_VERL_VLA_BUILDS", "3"))
N, HW, CHUNK = 2, 128, 8  # LIBERO: 2 envs of libero_spatial, 128x128, chunk 8
EPP = int(os.environ.get("ENVFLEET_BENCH_ENVS_PER_PROCESS", "1"))  # LIBERO envs per shard process, both sides
LIBERO = [
    "train.simulator_type=libero",
    "train.task_suite_name=libero_spatial",
    f"train.num_envs={N}",
    f"train.init_params.camera_heights={HW}",
    f"train.init_params.camera_widths={HW}",
    f"actor.model.num_action_chunks={CHUNK}",
    "train.max_episode_steps=100000",
    "train.settle_steps=10",
    "train.libero.settle_action=zeros",
    f"train.libero.envs_per_process={EPP}",
]
LIBERO_SIM = {
    "simulator_type": "libero",
    "libero": {
        "task_suite_name": "libero_spatial",
        "max_episode_steps": 100000,
        "camera_heights": HW,
        "camera_widths": HW,
        "task_ids": [0],
    },
    # envfleet's keys over the mapped ones: the same layout as envfleet's group above.
    "envfleet": {"libero": {"envs_per_process": EPP}},
}


def vla_config(simulator: dict[str, Any], num_envs: int) -> dict[str, Any]:
    """verl-vla's cluster.env in its yaml layout: one stage, train only."""
    return {
        "env_loop": {"pipeline_stage_num": 1, "max_interactions": 10},
        "env_worker": {"auto_reset": False, "num_envs": num_envs, "modes": ["train"], "device": "cpu", "simulator": simulator},
    }


def env_role(worker: type, config: Any) -> tuple[RayWorkerGroup, RayResourcePool]:
    """The Env role as verl-vla's TrainCluster builds it, one worker on a CPU pool of its own (returned beside it)."""
    pool = RayResourcePool(process_on_nodes=[1], use_gpu=False, max_colocate_count=1)
    cls = RayClassWithInitArgs(cls=ray.remote(worker), config=config, role="env")
    return RayWorkerGroup(resource_pool=pool, ray_cls_with_init=cls, device_name="cpu"), pool


def once(fn: Any) -> float:
    """Seconds one call of ``fn`` takes."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def adapter_state_ids(group: EnvWorkerGroup, config: dict[str, Any]) -> np.ndarray:
    """The state ids the adapter's first ``reset_env(mode="train")`` picks (one worker, one
    stage), so that envfleet's group can be reset to the very same scenes."""
    settings = read_config(config)
    plan = ResetPlan(
        group.get_all_state_ids(),
        group.get_state_task_ids(),
        **settings.filters,
        seed=settings.seed,
        process=0,
        processes=1,
        num_envs=settings.num_envs,
    )
    return plan.next_train(settings.num_envs)


def one_build(cfg: Any, config: dict[str, Any], repeat: int) -> tuple[float, float, list[float], list[float]]:
    """Both sides built once, reset to the same states, stepped in alternating batches: the two first
    resets' seconds and the two sides' seconds per step of each batch."""
    n, chunk = int(cfg.train.num_envs), int(cfg.actor.model.num_action_chunks)
    ours = EnvWorkerGroup(cfg, num_workers=1)
    theirs, pool = env_role(EnvWorker, config)
    try:
        ours.init_worker()
        ours.init_simulator()
        theirs.init_worker()
        ids = adapter_state_ids(ours, config)
        reset_ours = once(lambda: ours.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": ids})).get())
        reset_theirs = once(lambda: theirs.reset_env(mode="train").get())
        ours_data = DataProto.from_dict(non_tensors={"actions": np.zeros((n, chunk, 7), np.float32)}, meta_info={"stage_id": 0})
        theirs_data = VerlDataProto.from_dict(tensors={"action": torch.zeros(n, chunk, 7)}, meta_info={"stage_id": 0})

        def ours_step() -> Any:
            return ours.env_interact_step(ours_data).get().batch

        def theirs_step() -> Any:
            return theirs.env_interact_step(theirs_data, mode="train").get().batch

        a, b = alternated_batches(ours_step, theirs_step, repeat)
    finally:
        theirs.close()
        ours.shutdown()
        # verl-vla's TrainCluster.shutdown() only kills the actors (envfleet's worker cleans up after itself).
        close_verl_group(theirs, pool)
    return reset_ours, reset_theirs, a, b


def step_cost(label: str, overrides: list[str], simulator: dict[str, Any], repeat: int, builds: int = 1) -> list[dict[str, Any]]:
    """The same env stepped through both groups (:func:`one_build`), ``builds`` times, the batches
    pooled. LIBERO's rows add each one's first reset (the median over the builds)."""
    cfg = load_config(overrides=overrides)
    config = vla_config(simulator, int(cfg.train.num_envs))
    resets: tuple[list[float], list[float]] = ([], [])
    steps: tuple[list[float], list[float]] = ([], [])
    per_build: list[float] = []
    for _ in range(builds):
        reset_ours, reset_theirs, a, b = one_build(cfg, config, repeat)
        resets[0].append(reset_ours)
        resets[1].append(reset_theirs)
        steps[0].extend(a)
        steps[1].extend(b)
        per_build.append(float(np.median(b)) / float(np.median(a)))
    case = f"{label}, steady-state step" + (
        f" ({builds} builds pooled; verl-vla's order over envfleet's group per build: {', '.join(f'{r:.3f}' for r in per_build)})"
        if builds > 1
        else ""
    )
    rows = [comparison_row(case, "envfleet's group", float(np.median(steps[0])), "verl-vla's order", float(np.median(steps[1])))]
    if "libero" in label.lower():
        first = comparison_row(
            f"{label}, first reset", "envfleet's group", float(np.median(resets[0])), "verl-vla's order", float(np.median(resets[1]))
        )
        rows.insert(0, first)
    return rows


def typed_config(checkout_src: str) -> Any:
    """One ``EnvTrainConfig`` of verl-vla's own classes (its ``LiberoSimulatorConfig`` in its
    ``SimulatorConfig``), given unchanged to both workers."""
    sys.path.insert(0, checkout_src)
    from verl_vla.envs.libero.config import LiberoSimulatorConfig
    from verl_vla.recorder.config import RecorderConfig
    from verl_vla.train_cluster.config import EnvLoopConfig, EnvTrainConfig
    from verl_vla.workers.env.config import EnvWorkerConfig, SimulatorConfig

    libero = LiberoSimulatorConfig(
        task_suite_name="libero_spatial", task_ids=[0], max_episode_steps=100000, camera_heights=HW, camera_widths=HW, reset_warmup_steps=10
    )
    worker = EnvWorkerConfig(
        num_envs=N,
        modes=["train"],
        device="cpu",
        simulator=SimulatorConfig(simulator_type="libero", libero=libero),
        recorder=RecorderConfig(enable=False),
    )
    return EnvTrainConfig(env_loop=EnvLoopConfig(pipeline_stage_num=1, max_interactions=10), env_worker=worker)


def rollout_cost(config: Any, repeat: int) -> list[dict[str, Any]]:
    """TrainCluster's order over envfleet's adapter and over verl-vla's own EnvWorker + LiberoEnv."""
    from verl_vla.workers.env.env_worker import EnvWorker as TheirWorker

    ours, ours_pool = env_role(EnvWorker, config)
    theirs, theirs_pool = env_role(TheirWorker, config)
    label = f"LIBERO spatial task 0, {N} envs, {HW}x{HW}, chunk {CHUNK}, TrainCluster's order"
    try:
        start_ours = once(lambda: ours.init_worker())
        start_theirs = once(lambda: theirs.init_worker())
        reset_ours = once(lambda: ours.reset_env(mode="train").get())
        reset_theirs = once(lambda: theirs.reset_env(mode="train").get())
        data = VerlDataProto.from_dict(tensors={"action": torch.zeros(N, CHUNK, 7)}, meta_info={"stage_id": 0})
        a, b = alternated(
            lambda: ours.env_interact_step(data, mode="train").get(), lambda: theirs.env_interact_step(data, mode="train").get(), repeat
        )
    finally:
        close_verl_group(ours, ours_pool)
        close_verl_group(theirs, theirs_pool)
    rows = [
        comparison_row(f"{label}, init_worker", "envfleet's adapter", start_ours, "verl-vla's env worker", start_theirs),
        comparison_row(f"{label}, first reset_env", "envfleet's adapter", reset_ours, "verl-vla's env worker", reset_theirs),
        comparison_row(f"{label}, steady-state env_interact_step", "envfleet's adapter", a, "verl-vla's env worker", b),
    ]
    for row, (x, y) in zip(rows, ((start_ours, start_theirs), (reset_ours, reset_theirs), (a, b)), strict=True):
        row["verl-vla / envfleet (x)"] = y / x
    return rows


def main() -> int:
    src = os.path.join(CHECKOUT, "src") if CHECKOUT else ""
    tmp = tempfile.TemporaryDirectory(prefix="envfleet-verl-vla-")
    if src:
        # Ray's workers (started by init_ray, with this environment) import verl-vla's EnvWorker and
        # LiberoEnv from the checkout and find the init states where verl-vla's LiberoEnv reads them.
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH", "")) if p)
        if "libero" in list_backends():
            os.environ["LIBERO_CONFIG_PATH"] = torch_init_states(tmp.name, "libero_spatial")
    init_ray(num_cpus=4)
    toy = toy_overrides(2, 64, 8, "train.toy.frozen=true")
    toy_sim = {
        "simulator_type": "toy",
        "envfleet": {"max_episode_steps": 100000, "toy": {"frozen": True}, "init_params": {"camera_heights": 64, "camera_widths": 64}},
    }
    rows = step_cost("toy, zero cost (toy.frozen), 2 envs, 64x64, chunk 8", toy, toy_sim, 100)
    rollout: list[dict[str, Any]] = []
    notes: list[str] = []
    if "libero" in list_backends() and not os.environ.get("ENVFLEET_BENCH_NO_LIBERO"):
        label = f"LIBERO spatial, {N} envs, {HW}x{HW}, chunk {CHUNK}, render last, {EPP} env(s) per process"
        rows += step_cost(label, LIBERO, LIBERO_SIM, REPS, BUILDS)
        if src:
            rollout = rollout_cost(typed_config(src), REPS)
        else:
            notes.append("verl-vla's own EnvWorker + LiberoEnv not measured: set ENVFLEET_VERL_VLA to a verl-vla checkout")
    ray.shutdown()
    tmp.cleanup()
    json.dump({"rows": rows, "rollout": rollout, "skipped": notes}, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    sys.exit(main())
