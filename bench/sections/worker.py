"""The `worker` section of `nox -s bench` (bench/run.py worker)."""

from __future__ import annotations

from typing import Any

import numpy as np
from common import timed, write
from configs import libero_cfg, libero_installed, start_ray, toy_cfg


def run() -> None:
    """env_interact_step through the actor against calling the stage's manager directly (toy and LIBERO)."""
    import ray

    from envfleet import ProcessEnvManager
    from envfleet.dataproto import DataProto
    from envfleet_ray.runtime.group import EnvWorkerGroup

    start_ray()
    rows = []
    frozen = toy_cfg(2, 64, chunk=8, **{"toy.frozen": True})
    cases: list[tuple[str, Any, int, bool]] = [
        ("toy, zero cost (toy.frozen), 2 envs, 64x64, chunk 8", frozen, 100, True),
        ("toy drawing every sub-step (step_cost_s=0), 2 envs, 64x64, chunk 8", toy_cfg(2, 64, chunk=8), 70, True),
        ("toy, zero cost, through Ray's task path (local_lane=False)", frozen, 100, False),
    ]
    if libero_installed():
        cases.append(("LIBERO spatial, 2 envs, 128x128, chunk 8, render last", libero_cfg(2, 128, "last", stages=1), 3, True))
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
