"""verl-vla's side of the CI tests, written here because verl-vla is on no package index.

- the Env role built as verl-vla's ``TrainCluster._init_workers`` builds it:
  ``RayClassWithInitArgs(cls=ray.remote(EnvWorker), config=<cluster.env>, role="env")`` in a
  ``RayWorkerGroup`` of its own CPU pool, then ``init_worker()``;
- a scripted policy in place of verl-vla's ``VLARolloutWorker`` (its model needs a GPU), on
  the ``"rollout"`` mesh, non-blocking, answering ``action`` ``[n, T, 7]`` and ``critic_value``;
- ``TrainCluster``'s sequence: ``rollout()`` (a reset future, kept from the last rollout;
  ``EnvLoop``'s stages side by side, each generate -> ``env_interact_step(data, mode=)`` ->
  get, ``max_interactions`` times; ``finish_rollout()``; the next reset future) and
  ``eval()`` (``get_eval_benchmark_size``; ``reset_env(mode="eval", reset_eval=first)``
  until every case has one episode), ending in ``shutdown()`` (``ray.kill`` only);
- trajectory records and metrics computed from the collected keys the way ``TrainCluster``
  computes them (``data/...``, ``val/benchmark_size``, ``val/per_task_success_rate/task_{id}``).

The driver checks on the way what ``EnvLoop`` relies on: each stage's observations reach
the policy row for row, and each step's keys, shapes and dtypes.
"""

from __future__ import annotations

from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import ray
import torch
from verl import DataProto
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, make_nd_compute_dataproto_dispatch_fn, register
from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

from envfleet_ray.verl import EnvResourcePool
from envfleet_ray.verl_vla import EnvWorker

__all__ = ["ScriptedRolloutWorker", "VerlVlaSequence", "Step", "records", "metrics", "SPEED"]

SPEED = 0.05  # the toy's motion per sub-step at full action
OBS_KEYS = ("observation.images.image", "observation.images.wrist_image", "observation.state")


class ScriptedRolloutWorker(Worker):
    """Stands in for verl-vla's GPU policy: steers the toy's point at its goal for the tasks in
    ``solve`` and holds still otherwise; echoes the state it was shown (``seen_state``)."""

    def __init__(self, config: dict[str, Any], role: str | None = None) -> None:
        super().__init__()
        self.chunk = int(config["chunk"])
        self.solve = set(config["solve"])
        self.push = float(config.get("push", 0.0))  # x action of every row: +push for even eval cases, -push for odd
        self._register_dispatch_collect_info("rollout", dp_rank=self.rank, is_collect=True)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Nothing to load."""

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="rollout"), blocking=False)
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        state = prompts.batch["observation.state"].double()
        n = len(prompts)
        task_id = np.asarray(prompts.non_tensor_batch["task_id"])
        to_goal = state[:, 4:6] / (SPEED * self.chunk)  # reach the goal over one chunk, at most full speed
        steer = torch.tensor([int(t) in self.solve for t in task_id], dtype=torch.bool)
        action = torch.zeros(n, self.chunk, 7)
        action[:, :, :2] = torch.where(steer[:, None], to_goal.clamp(-1, 1), torch.zeros_like(to_goal)).float()[:, None, :]
        if self.push:
            case = torch.as_tensor(np.asarray(prompts.non_tensor_batch["eval_episode_id"], dtype=np.int64))
            action[:, :, 0] = torch.where(case % 2 == 0, self.push, -self.push)[:, None]
        return DataProto.from_dict(
            tensors={"action": action, "critic_value": torch.zeros(n), "seen_state": prompts.batch["observation.state"].clone()},
            non_tensors={"seen_task": np.asarray(prompts.non_tensor_batch["task"], dtype=object)},
        )


@dataclass
class Step:
    """One interaction of one stage: what the policy saw, what it sent and what came back."""

    stage: int
    obs: DataProto
    action: DataProto
    result: DataProto


@dataclass
class Rollout:
    """What one ``rollout()`` or eval pass collected."""

    reset: DataProto
    steps: list[list[Step]] = field(default_factory=list)  # per stage, in order
    finish: list[Any] = field(default_factory=list)


def staged(data: DataProto, workers: int, stages: int) -> list[DataProto]:
    """Each stage's rows of a reset (worker-major, stage-major in a worker), as EnvLoop splits them."""
    per_stage: list[list[DataProto]] = [[] for _ in range(stages)]
    for part in data.chunk(workers):
        for s, rows in enumerate(part.chunk(stages)):
            per_stage[s].append(rows)
    return [DataProto.concat(p) for p in per_stage]


def unprefix(data: DataProto, prefix: str) -> DataProto:
    """The keys under ``prefix`` with it removed (verl-vla's ``get_dataproto_from_prefix``)."""
    tensors = {k[len(prefix) :]: v for k, v in data.batch.items() if k.startswith(prefix)}
    non_tensors = {k[len(prefix) :]: v for k, v in data.non_tensor_batch.items() if k.startswith(prefix)}
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)


class VerlVlaSequence:
    """verl-vla's TrainCluster around envfleet's adapter: ``start()``, ``rollout()``, ``eval()``, ``shutdown()``."""

    def __init__(
        self,
        env_config: dict[str, Any],
        workers: int,
        chunk: int,
        solve: tuple[int, ...],
        push: float = 0.0,
        sim: dict[str, float] | None = None,
    ) -> None:
        self.env_config = env_config
        self.sim = sim  # the env pool's extra Ray resources per worker (EnvResourcePool), as a cluster's sim nodes offer
        self.workers = workers
        self.stages = int(env_config["env_loop"]["pipeline_stage_num"])
        self.max_interactions = int(env_config["env_loop"]["max_interactions"])
        self.auto_reset = bool(env_config["env_worker"].get("auto_reset", False))
        self.policy = {"chunk": chunk, "solve": solve, "push": push}
        self.reset_future: Any = None
        self.carry: dict[str, np.ndarray | None] = {"length": None, "reward": None}

    def start(self) -> None:
        self.pools = [
            EnvResourcePool([self.workers], use_gpu=False, max_colocate_count=1, resources=self.sim, placement_timeout_s=120)
            if self.sim
            else RayResourcePool(process_on_nodes=[self.workers], use_gpu=False, max_colocate_count=1),
            RayResourcePool([1], use_gpu=False, max_colocate_count=1),
        ]
        env = RayClassWithInitArgs(cls=ray.remote(EnvWorker), config=self.env_config, role="env")
        rollout = RayClassWithInitArgs(cls=ray.remote(ScriptedRolloutWorker), config=self.policy, role="rollout")
        self.env_wg = RayWorkerGroup(resource_pool=self.pools[0], ray_cls_with_init=env, device_name="cpu")
        self.rollout_wg = RayWorkerGroup(resource_pool=self.pools[1], ray_cls_with_init=rollout, device_name="cpu")
        self.rollout_wg.init_model()
        self.env_wg.init_worker()

    def _pass(self, reset_future: Any, mode: str) -> Rollout:
        """EnvLoop.generate_sequences: the stages side by side, each its own chain of calls."""
        out = Rollout(reset=reset_future.get())
        obs = staged(out.reset, self.workers, self.stages)
        pending = {s: self.rollout_wg.generate_sequences(obs[s]) for s in range(self.stages)}

        def stage_loop(s: int) -> list[Step]:
            steps, current = [], obs[s]
            for i in range(self.max_interactions):
                action = pending[s].get()
                # The policy saw this stage's own envs, row for row.
                assert torch.equal(action.batch["seen_state"], current.batch["observation.state"])
                assert action.non_tensor_batch["seen_task"].tolist() == current.non_tensor_batch["task"].tolist()
                action.meta_info["stage_id"] = s
                result = self.env_wg.env_interact_step(action, mode=mode).get()
                steps.append(Step(s, current, action, result))
                current = unprefix(result, "obs.")
                if i + 1 < self.max_interactions:
                    pending[s] = self.rollout_wg.generate_sequences(current)
            return steps

        with ThreadPoolExecutor(self.stages) as pool:
            out.steps = list(pool.map(stage_loop, range(self.stages)))
        out.finish = self.env_wg.finish_rollout()
        return out

    def rollout(self) -> tuple[Rollout, dict[str, float]]:
        future = self.reset_future if self.reset_future is not None else self.env_wg.reset_env()
        out = self._pass(future, "train")
        self.reset_future = self.env_wg.reset_env()
        return out, metrics(records(out, self.auto_reset, self.carry), "data")

    def eval(self, max_passes: int = 40) -> tuple[list[Rollout], dict[str, float], np.ndarray]:
        size = int(self.env_wg.get_eval_benchmark_size()[0])
        accepted = np.zeros(size, dtype=np.int64)
        kept: list[dict[str, Any]] = []
        passes: list[Rollout] = []
        carry: dict[str, np.ndarray | None] = {"length": None, "reward": None}
        while len(kept) < size:
            assert len(passes) < max_passes, f"eval did not cover the benchmark in {max_passes} passes: {accepted.tolist()}"
            out = self._pass(self.env_wg.reset_env(mode="eval", reset_eval=not passes), "eval")
            passes.append(out)
            for record in records(out, self.auto_reset, carry):
                case = record["eval_episode_id"]
                if 0 <= case < size and accepted[case] < 1:
                    accepted[case] += 1
                    kept.append(record)
        return passes, {**metrics(kept, "val"), "val/benchmark_size": float(size)}, accepted

    def shutdown(self) -> None:
        """verl-vla's TrainCluster.shutdown: ray.kill every worker, remove the placement groups."""
        for wg in (self.env_wg, self.rollout_wg):
            for worker in wg._workers:
                ray.kill(worker, no_restart=True)
        for pool in self.pools:
            for pg in pool.pgs or []:
                ray.util.remove_placement_group(pg)


def _trajectory(out: Rollout) -> dict[str, np.ndarray]:
    """Rows of the whole batch (stage by stage, as EnvLoop collates) by interaction."""
    cols: dict[str, list[Any]] = defaultdict(list)
    for i in range(len(out.steps[0])):
        steps = [out.steps[s][i] for s in range(len(out.steps))]
        cols["done"].append(torch.cat([(st.result.batch["next.terminated"] | st.result.batch["next.truncated"]) for st in steps]).numpy())
        cols["reward"].append(torch.cat([st.result.batch["next.reward"] for st in steps]).numpy())
        cols["success"].append(torch.cat([st.result.batch["next.success"] for st in steps]).numpy())
        cols["task_id"].append(np.concatenate([st.obs.non_tensor_batch["task_id"] for st in steps]))
        cols["case"].append(np.concatenate([st.obs.non_tensor_batch["eval_episode_id"] for st in steps]))
    return {k: np.stack(v, axis=1) for k, v in cols.items()}  # [rows, interactions, (T)]


def records(out: Rollout, auto_reset: bool, carry: dict[str, np.ndarray | None]) -> list[dict[str, Any]]:
    """Finished trajectories as TrainCluster records them: one per row without auto-reset (up to
    its first done, else the whole rollout); with auto-reset, one per done, lengths and returns
    carried over from the previous rollout."""
    t = _trajectory(out)
    rows, chunks, chunk = t["done"].shape
    result = []
    if not auto_reset:
        for b in range(rows):
            done = t["done"][b].reshape(-1)
            end = int(np.argmax(done)) if done.any() else done.size - 1
            result.append(
                {
                    "length": end + 1,
                    "return": float(t["reward"][b].reshape(-1)[: end + 1].sum()),
                    "success": bool(t["success"][b].reshape(-1)[: end + 1].any()),
                    "task_id": int(t["task_id"][b, 0]),
                    "eval_episode_id": int(t["case"][b, 0]),
                }
            )
        return result
    if carry["length"] is None:
        carry["length"], carry["reward"] = np.zeros(rows, np.int64), np.zeros(rows, np.float64)
    assert carry["length"] is not None and carry["reward"] is not None
    for b in range(rows):
        for c in range(chunks):
            done = t["done"][b, c]
            if not done.any():
                carry["length"][b] += chunk
                carry["reward"][b] += float(t["reward"][b, c].sum())
                continue
            end = int(np.argmax(done))
            result.append(
                {
                    "length": int(carry["length"][b]) + end + 1,
                    "return": float(carry["reward"][b]) + float(t["reward"][b, c, : end + 1].sum()),
                    "success": bool(t["success"][b, c, : end + 1].any()),
                    "task_id": int(t["task_id"][b, c]),
                    "eval_episode_id": int(t["case"][b, c]),
                }
            )
            carry["length"][b], carry["reward"][b] = 0, 0.0
    return result


def metrics(recs: list[dict[str, Any]], prefix: str) -> dict[str, float]:
    """TrainCluster's trajectory metrics: counts, success rate, and per task."""
    out = {f"{prefix}/trajectory_count": float(len(recs)), f"{prefix}/success_trajectory_count": float(sum(r["success"] for r in recs))}
    by_task: dict[int, list[bool]] = defaultdict(list)
    for r in recs:
        by_task[r["task_id"]].append(r["success"])
    for task, wins in sorted(by_task.items()):
        out[f"{prefix}/per_task_trajectory_count/task_{task}"] = float(len(wins))
        out[f"{prefix}/per_task_success_rate/task_{task}"] = float(np.mean(wins))
    return out
