"""verl's side of the tests: a rollout worker registered the verl way, and the env role built
exactly as verl's ``RobRayPPOTrainer.init_workers`` builds it.

Nothing here is envfleet's: it is what a verl user's trainer already has.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import ray
import torch
from omegaconf import DictConfig, OmegaConf
from verl import DataProto
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, make_nd_compute_dataproto_dispatch_fn, register
from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
from verl.single_controller.ray.base import create_colocated_worker_cls

from envfleet_ray.verl import EnvWorker

__all__ = ["ZeroRolloutWorker", "build_roles", "drive_in_envloop_order", "verl_config", "policy_input", "staged"]


class ZeroRolloutWorker(Worker):
    """A policy that answers zero actions and echoes what it was shown (``seen_state``)."""

    def __init__(self, config: DictConfig) -> None:
        super().__init__()
        self.config = config
        self._register_dispatch_collect_info("rollout", dp_rank=self.rank, is_collect=True)
        self.mode = "train"

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Nothing to load."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def switch_to_rollout(self) -> None:
        """verl's EnvLoop calls this before a rollout."""
        self.mode = "rollout"

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def switch_to_train(self) -> None:
        """verl's EnvLoop calls this after a rollout."""
        self.mode = "train"

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="rollout"), blocking=False)
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Zero actions ``[n, chunk, action_dim]``, a zero ``critic_value`` (verl's later EnvLoop
        reads one) and the state and descriptions it saw."""
        model = self.config.env.actor.model
        n = len(prompts)
        action = torch.zeros(n, int(model.num_action_chunks), int(model.action_dim))
        return DataProto.from_dict(
            tensors={"action": action, "critic_value": torch.zeros(n), "seen_state": prompts.batch["state"].clone()},
            non_tensors={"seen_descriptions": np.asarray(prompts.non_tensor_batch["task_descriptions"], dtype=object)},
        )


def verl_config(train: dict[str, Any], stages: int = 2, chunk: int = 4, action_dim: int = 7) -> DictConfig:
    """A whole trainer config with verl's ``env:`` section, as verl's rob_ppo_trainer.yaml lays it out."""
    profiler = {
        "_target_": "verl.utils.profiler.ProfilerConfig",
        "tool": "${oc.select:global_profiler.tool,null}",
        "enable": False,
        "all_ranks": False,
        "ranks": [],
        "save_path": "${oc.select:global_profiler.save_path,null}",
    }
    env = {
        "rollout": {"pipeline_stage_num": stages},
        "actor": {"model": {"num_action_chunks": chunk, "action_dim": action_dim}},
        "train": {
            "reward_coef": 1.0,
            "only_eval": False,
            "video_cfg": {"save_video": False, "video_base_dir": "/tmp/videos"},
            "seed": 42,
            "profiler": profiler,
            **train,
        },
        "disagg_sim": {"enable": False, "nnodes": 0},
    }
    return OmegaConf.create({"global_profiler": {"tool": None, "save_path": None}, "env": env})


def build_roles(config: DictConfig, env_workers: int) -> tuple[RayWorkerGroup, RayWorkerGroup]:
    """The env and rollout worker groups, each in its own resource pool, built the trainer's way:
    ``RayClassWithInitArgs`` -> ``create_colocated_worker_cls`` -> ``RayWorkerGroup(...).spawn``."""
    env_pool = RayResourcePool(process_on_nodes=[env_workers], use_gpu=False, max_colocate_count=1)
    rollout_pool = RayResourcePool(process_on_nodes=[1], use_gpu=False, max_colocate_count=1)
    resource_pool_to_cls = {
        env_pool: {"env": RayClassWithInitArgs(ray.remote(EnvWorker), config=config.env)},
        rollout_pool: {"actor_rollout": RayClassWithInitArgs(ray.remote(ZeroRolloutWorker), config=config)},
    }
    all_wg: dict[str, RayWorkerGroup] = {}
    for pool, class_dict in resource_pool_to_cls.items():
        worker_dict_cls = create_colocated_worker_cls(class_dict=class_dict)
        wg_dict = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=worker_dict_cls, device_name="cpu")
        all_wg.update(wg_dict.spawn(prefix_set=class_dict.keys()))
    return all_wg["env"], all_wg["actor_rollout"]


def staged(reset: DataProto, workers: int, stages: int) -> list[DataProto]:
    """Each stage's rows of a reset result (worker-major, stage-major within a worker), as verl's EnvLoop splits them."""
    per_stage: list[list[DataProto]] = [[] for _ in range(stages)]
    for worker_part in reset.chunk(workers):
        for s, part in enumerate(worker_part.chunk(stages)):
            per_stage[s].append(part)
    return [DataProto.concat(parts) for parts in per_stage]


def policy_input(obs: DataProto) -> DataProto:
    """What verl's EnvLoop hands the policy after a step: the three observations and the descriptions."""
    return DataProto(
        batch=obs.batch.select("full_image", "wrist_image", "state"),
        non_tensor_batch={"task_descriptions": obs.non_tensor_batch["task_descriptions"]},
    )


def drive_in_envloop_order(
    env_wg: RayWorkerGroup, rollout_wg: RayWorkerGroup, ids: np.ndarray, tasks: np.ndarray, rounds: int
) -> list[list[DataProto]]:
    """verl's EnvLoop's order of calls: a reset future, then per stage generate -> env_interact_step
    -> get, ``rounds`` times. Checks on the way what every backend must give verl's loop; returns
    each stage's policy inputs, round by round (the reset's first)."""
    workers = env_wg.world_size
    first = env_wg.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": ids, "task_ids": tasks})).get()
    # Rows come back worker-major, stage-major within a worker: exactly where the ids were sent.
    assert first.batch["state_id"].tolist() == ids.tolist()
    stage_col = first.non_tensor_batch["stage_id"]
    stages = int(stage_col.max()) + 1
    per_worker = len(ids) // workers
    assert stage_col.tolist() == np.repeat(np.arange(stages), per_worker // stages).tolist() * workers
    obs = staged(first, workers, stages)
    history = [list(obs)]
    rollout_wg.switch_to_rollout()
    pending = {s: rollout_wg.generate_sequences(obs[s]) for s in range(stages)}
    for _round in range(rounds):
        for s in range(stages):
            action = pending[s].get()
            # The policy saw stage s's own envs, row for row.
            assert torch.equal(action.batch["seen_state"], obs[s].batch["state"])
            assert action.non_tensor_batch["seen_descriptions"].tolist() == obs[s].non_tensor_batch["task_descriptions"].tolist()
            step = DataProto.from_dict(non_tensors={"actions": action.batch["action"].cpu().numpy()}, meta_info={"stage_id": s})
            result = env_wg.env_interact_step(step).get()
            assert isinstance(result, DataProto) and result.meta_info["stage_id"] == s
            n, chunk = action.batch["action"].shape[:2]
            for key, dtype in [("full_image", torch.uint8), ("wrist_image", torch.uint8), ("state", torch.float32)]:
                assert result.batch[key].shape[0] == n and result.batch[key].dtype == dtype, key
            for key, dtype in [("rews", torch.float32), ("terminations", torch.bool), ("truncations", torch.bool)]:
                assert tuple(result.batch[key].shape) == (n, chunk) and result.batch[key].dtype == dtype, key
            assert result.non_tensor_batch["task_descriptions"].tolist() == obs[s].non_tensor_batch["task_descriptions"].tolist()
            obs[s] = policy_input(result)
            pending[s] = rollout_wg.generate_sequences(obs[s])
        history.append(list(obs))
    for s in range(stages):
        pending[s].get()
    rollout_wg.switch_to_train()
    return history
