"""Opt-in: verl-vla's own ``TrainCluster`` and ``EnvLoop``, unmodified, drive envfleet.

Set ``ENVFLEET_VERL_VLA`` to a verl-vla checkout (its ``src/verl_vla``; never committed here)
and install requirements/verl-vla-extra-py311.txt (the tests-verl-vla session does both
when the variable is set). As verl-vla's workflows do, the cluster is built inside a Ray
task; envfleet's worker gets there by the Ray ``worker_process_setup_hook``
``envfleet_ray.verl_vla.use_envfleet``, as on a ``vvla-eval`` command line. A scripted
policy stands in for verl-vla's ``VLARolloutWorker`` (its model needs a GPU).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from typing import Any

import pytest
import ray

from envfleet_ray import init_ray

from ..conftest import pid_alive
from .sequence import ScriptedRolloutWorker

CHECKOUT = os.environ.get("ENVFLEET_VERL_VLA")

pytestmark = pytest.mark.skipif(not CHECKOUT, reason="set ENVFLEET_VERL_VLA to a verl-vla checkout (github.com/verl-project/verl-vla)")


class ScriptedPolicy(ScriptedRolloutWorker):
    """verl-vla builds its rollout role with ``(config=actor_rollout_ref, role="rollout")``."""

    CHUNK = 8
    SOLVE = (0,)

    def __init__(self, config: Any, role: str | None = None) -> None:
        super().__init__({"chunk": self.CHUNK, "solve": self.SOLVE}, role)


class LiberoPolicy(ScriptedPolicy):
    """LIBERO's state is not the toy's: steer nothing, so every action is zero (the tasks stay unsolved)."""

    CHUNK = 4
    SOLVE = ()


@pytest.fixture(scope="module")
def hooked_ray():
    assert CHECKOUT is not None
    src = os.path.join(CHECKOUT, "src")
    if not os.path.isdir(os.path.join(src, "verl_vla")):
        pytest.fail(f"ENVFLEET_VERL_VLA={CHECKOUT!r} has no src/verl_vla")
    sys.path.insert(0, src)
    os.environ["PYTHONPATH"] = os.pathsep.join([src, os.getcwd(), os.environ.get("PYTHONPATH", "")])
    with tempfile.TemporaryDirectory(prefix="ray", dir="/tmp") as tmp:  # a Ray of its own (see test_train_cluster_order)
        init_ray(num_cpus=12, _temp_dir=tmp, runtime_env={"worker_process_setup_hook": "envfleet_ray.verl_vla.use_envfleet"})
        yield
        ray.shutdown()


def cluster_config(simulator: Any, auto_reset: bool, modes: list[str], workers: int, interactions: int, execution: Any = None) -> Any:
    """verl-vla's EnvLoopTrainClusterConfig, typed, built from verl-vla's own classes."""
    from verl_vla.recorder.config import RecorderConfig
    from verl_vla.train_cluster.config import (
        ActorRolloutRefConfig,
        EnvLoopConfig,
        EnvLoopTrainClusterConfig,
        EnvLoopTrainResourceConfig,
        EnvTrainConfig,
        ResourceConfig,
    )
    from verl_vla.workers.env.config import EnvWorkerConfig

    env_worker = EnvWorkerConfig(
        auto_reset=auto_reset,
        num_envs=2 if simulator.simulator_type == "toy" else 1,
        modes=modes,
        simulator=simulator,
        recorder=RecorderConfig(enable=False),
        **({} if execution is None else {"action_execution": execution}),
    )
    return EnvLoopTrainClusterConfig(
        resource=EnvLoopTrainResourceConfig(
            env=ResourceConfig(device="cpu", workers_per_node=workers), model=ResourceConfig(device="cpu", workers_per_node=1)
        ),
        env=EnvTrainConfig(env_loop=EnvLoopConfig(pipeline_stage_num=2, max_interactions=interactions), env_worker=env_worker),
        actor_rollout_ref=ActorRolloutRefConfig(model=None),  # the scripted policy reads no model
    )


@ray.remote
def run_train_cluster(config: Any, policy: type, rollouts: int) -> dict[str, Any]:
    """As verl-vla's workflows: TrainCluster(config).start() inside a Ray task, then rollout and eval."""
    import verl_vla.train_cluster.cluster as cluster

    from envfleet_ray.verl_vla import EnvWorker

    assert cluster.EnvWorker is EnvWorker, "the worker_process_setup_hook did not run in this task's process"
    cluster.VLARolloutWorker = policy  # the GPU model's stand-in
    tc = cluster.TrainCluster(config)
    tc.start()
    out: dict[str, Any] = {"rollouts": []}
    try:
        env_wg = tc.worker_groups["env"]
        out["pids"] = [info["pid"] for info in env_wg.node_info()] + [
            p for info in env_wg.node_info() for per_mode in info["shard_pids"].values() for stage in per_mode for p in stage if p
        ]
        for _ in range(rollouts):
            data, _datasets, metrics = tc.rollout()
            out["rollouts"].append((data, metrics))
        out["eval"] = tc.eval()
    finally:
        tc.shutdown()
    return out


def gone(pids: list[int], timeout: float = 60.0) -> list[int]:
    deadline = time.time() + timeout
    while time.time() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.2)
    return [p for p in pids if pid_alive(p)]


def test_verl_vla_train_cluster_drives_envfleet_toy_scripted_policy_for_the_gpu_model(hooked_ray) -> None:
    from envfleet_ray.verl_vla import SimulatorConfig

    sim = SimulatorConfig(
        simulator_type="toy",
        seed=7,
        task_ids=[1, 0],  # auto-reset draws from this filtered pool, as verl-vla's LIBERO does
        envfleet={
            "max_episode_steps": 40,
            "init_params": {"camera_heights": 32, "camera_widths": 32},
            "toy": {"num_tasks": 3, "states_per_task": 4, "envs_per_process": 2},
        },
    )
    config = cluster_config(sim, auto_reset=True, modes=["train", "eval"], workers=2, interactions=3)
    out = ray.get(run_train_cluster.remote(config, ScriptedPolicy, 2))
    print("verl-vla TrainCluster over envfleet (toy):", {k: v for k, v in out["eval"].items() if k.startswith("val/")})
    for data, metrics in out["rollouts"]:
        print("rollout metrics:", {k: round(v, 3) for k, v in metrics.items() if k.startswith("data/")})
        assert tuple(data.batch["obs.observation.state"].shape) == (8, 3, 8)
        assert tuple(data.batch["next.success"].shape) == (8, 3, 8)
        assert tuple(data.batch["action.action"].shape) == (8, 3, 8, 7)
        assert not [k for k in metrics if k.endswith("task_2")], "an episode outside the pool (task 2)"
    second = out["rollouts"][1][1]
    # Task 1 is never solved: it truncates at 40 sub-steps inside rollout 2, with the lengths
    # carried over from rollout 1; task 0's envs restart from the pool every chunk.
    assert second["data/per_task_success_rate/task_1"] == 0.0
    val = out["eval"]
    assert val["val/benchmark_size"] == 8.0 and val["val/trajectory_count"] == 8.0
    assert val["val/per_task_success_rate/task_0"] == 1.0 and val["val/per_task_success_rate/task_1"] == 0.0
    assert "val/per_task_success_rate/task_2" not in val
    assert not gone(out["pids"]), "processes left after TrainCluster.shutdown()"


def test_verl_vla_train_cluster_drives_envfleet_libero(hooked_ray) -> None:
    """Real LIBERO (libero_spatial task 0, two cases) through verl-vla's own typed LIBERO section."""
    from verl_vla.envs.libero.config import LiberoSimulatorConfig

    from envfleet_ray.verl_vla import SimulatorConfig

    libero = LiberoSimulatorConfig(
        max_episode_steps=8, task_suite_name="libero_spatial", task_ids=[0], num_trials_per_task=2, camera_heights=128, camera_widths=128
    )
    sim = SimulatorConfig(simulator_type="libero", libero=libero)
    config = cluster_config(sim, auto_reset=False, modes=["eval"], workers=1, interactions=2)
    out = ray.get(run_train_cluster.remote(config, LiberoPolicy, 0))
    val = out["eval"]
    print("verl-vla TrainCluster over envfleet (LIBERO):", {k: v for k, v in val.items() if k.startswith("val/")})
    assert val["val/benchmark_size"] == 2.0 and val["val/trajectory_count"] == 2.0
    assert val["val/per_task_success_rate/task_0"] == 0.0
    assert not gone(out["pids"]), "processes left after TrainCluster.shutdown()"


def test_verl_vla_train_cluster_drives_envfleet_with_async_execution(hooked_ray) -> None:
    """verl-vla's ``action_execution.mode: async`` (replan after 4 of 8, overlap smoothed), its own typed config."""
    from verl_vla.envs.action_executor import ActionExecutionConfig

    from envfleet_ray.verl_vla import SimulatorConfig

    sim = SimulatorConfig(
        simulator_type="toy",
        seed=7,
        task_ids=[1, 0],
        envfleet={
            "max_episode_steps": 40,
            "init_params": {"camera_heights": 32, "camera_widths": 32},
            "toy": {"num_tasks": 3, "states_per_task": 4, "envs_per_process": 2},
        },
    )
    execution = ActionExecutionConfig(mode="async", replan_after_steps=4, smooth_overlapping_actions=True)
    config = cluster_config(sim, auto_reset=True, modes=["train", "eval"], workers=2, interactions=3, execution=execution)
    out = ray.get(run_train_cluster.remote(config, ScriptedPolicy, 1))
    data, metrics = out["rollouts"][0]
    print("verl-vla TrainCluster over envfleet, async:", {k: round(v, 3) for k, v in metrics.items() if k.startswith("data/")})
    assert tuple(data.batch["next.success"].shape) == (8, 3, 8)  # verl-vla's [n, T] per call
    assert tuple(data.batch["next.applied_action"].shape) == (8, 3, 4, 7)
    delays = data.batch["next.action_delay"]
    assert (delays[:, 0] == 0).all() and (delays <= 4).all()
    assert out["eval"]["val/benchmark_size"] == 8.0
    assert not gone(out["pids"]), "processes left after TrainCluster.shutdown()"
