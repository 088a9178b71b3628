"""The local lane's cost on one tree: a zero-cost toy stepped through ``EnvWorkerGroup`` and its
manager called directly, interleaved batches; prints the fastest and the median batch (ms per step).

Run each tree's code in its own process, alternated, with that tree's sources first on PYTHONPATH
(``git worktree add --detach /tmp/base COMMIT`` for an older commit)::

    T=/tmp/base; PYTHONPATH=$T/packages/core/src:$T/packages/ray-worker/src:$T/tests/plugins/envfleet-toy/src \\
        .nox/tests/bin/python bench/lane_ab.py $T

It uses the tree's own ``bench/configs.py`` (``start_ray``, ``toy_cfg``), as ``bench/before_after.py``
runs each tree's own bench.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

BATCHES, STEPS = 30, 100


def main(tree: str) -> None:
    sys.path.insert(0, os.path.join(tree, "bench"))
    import ray
    from configs import start_ray, toy_cfg

    from envfleet import ProcessEnvManager
    from envfleet.dataproto import DataProto
    from envfleet_ray.runtime.group import EnvWorkerGroup

    start_ray()
    cfg = toy_cfg(2, 64, chunk=8, **{"toy.frozen": True})
    ids = np.arange(2)
    actions = np.zeros((2, 8, 7), np.float32)
    group = EnvWorkerGroup(cfg, num_workers=1)
    manager = ProcessEnvManager(cfg)
    try:
        group.init_worker()
        group.init_simulator()
        group.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": ids})).get()
        manager.start_simulator()
        manager.reset_envs_to_state_ids(ids)
        data = DataProto.from_dict(non_tensors={"actions": actions}, meta_info={"stage_id": 0})
        actor, direct = [], []
        for _ in range(BATCHES):
            t0 = time.perf_counter()
            for _ in range(STEPS):
                _ = group.env_interact_step(data).get().batch  # the trainer reads the tensors
            actor.append((time.perf_counter() - t0) / STEPS * 1e3)
            t0 = time.perf_counter()
            for _ in range(STEPS):
                manager.chunk_step(actions)
            direct.append((time.perf_counter() - t0) / STEPS * 1e3)
    finally:
        group.shutdown()
        manager.close()
        ray.shutdown()
    figures = {
        "actor_min": min(actor),
        "actor_median": float(np.median(actor)),
        "direct_min": min(direct),
        "direct_median": float(np.median(direct)),
    }
    print(json.dumps({"tree": tree, **{k: round(v, 3) for k, v in figures.items()}}))


if __name__ == "__main__":
    main(os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
