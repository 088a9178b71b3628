"""A LIBERO-plus rollout through the EnvWorker (in-process, its real shard processes): metrics per dimension.

Two envs run one task of each dimension this install runs (libero_plus_goal, one trial each),
one chunk per episode; ``finish_rollout`` labels each task's row with its dimension and sums the
rows per dimension, and the group's merge of two workers' metrics sums them again.
"""

from __future__ import annotations

import numpy as np

from envfleet.config import load_config
from envfleet.dataproto import DataProto
from envfleet_libero.plus.data import plus_tasks
from envfleet_ray.runtime.metrics import merge_metrics
from envfleet_ray.runtime.worker import EnvWorker

RUNNABLE = ("camera", "robot", "language", "noise", "layout")
CHUNK = 2


def test_env_worker_reports_success_per_dimension() -> None:
    tasks = plus_tasks("libero_plus_goal")
    chosen = [next(t for t in tasks if t.dimension == d and not t.needs_assets) for d in RUNNABLE]
    cfg = load_config(
        overrides=[
            "train.simulator_type=libero",
            "train.task_suite_name=libero_plus_goal",
            "train.num_envs=2",
            "rollout.pipeline_stage_num=1",
            f"actor.model.num_action_chunks={CHUNK}",
            f"train.max_episode_steps={CHUNK}",
            "train.settle_steps=0",
            "train.init_params.camera_heights=64",
            "train.init_params.camera_widths=64",
            f"train.libero.plus.tasks=[{','.join(str(t.plus_id) for t in chosen)}]",
            "train.libero.plus.trials=1",
        ]
    )
    worker = EnvWorker(cfg, rank=0)
    try:
        worker.init_worker()
        worker.init_simulator()
        ids = worker.get_all_state_ids().tolist()
        assert len(ids) == len(RUNNABLE)  # one trial of each task, in LIBERO-plus's order
        actions = np.zeros((2, CHUNK, 7), dtype=np.float32)
        actions[..., -1] = -1.0
        for pair in ([0, 1], [2, 3], [4, 0]):
            worker.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": np.array(pair)}))
            out = worker.env_interact_step(DataProto.from_dict(non_tensors={"actions": actions}, meta_info={"stage_id": 0}))
            assert out.batch["episode_ended"].all()  # each episode is one chunk long
        metrics = worker.finish_rollout()
    finally:
        worker.close()
    order = sorted(chosen, key=lambda t: t.plus_id)
    assert {int(k): row["group"] for k, row in metrics["per_task"].items()} == {i: t.dimension for i, t in enumerate(order)}
    groups = metrics["per_group"]
    assert list(groups) == [t.dimension for t in order]  # in the order the dimensions first appear
    assert {d: g["episodes"] for d, g in groups.items()} == {d: 1 for d in RUNNABLE} | {order[0].dimension: 2}
    for g in groups.values():
        assert g["successes"] <= g["episodes"] and g["success_rate"] == g["successes"] / g["episodes"]
    # Two workers' metrics, merged as EnvWorkerGroup merges them: the rows per dimension add up.
    total = merge_metrics([metrics, {**metrics, "rank": 1}])
    assert {d: g["episodes"] for d, g in total["per_group"].items()} == {d: 2 * g["episodes"] for d, g in groups.items()}
    assert all(row["group"] in RUNNABLE for row in total["per_task"].values())
