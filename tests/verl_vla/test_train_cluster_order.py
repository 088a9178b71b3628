"""envfleet's verl-vla adapter as the Env role of verl-vla's TrainCluster, through verl 0.7.1's
RayWorkerGroup, in TrainCluster's and EnvLoop's order of calls and with their keys (see
``sequence.py``); a scripted policy stands in for the GPU model. Toy backend: 2 workers x
2 stages x 2 envs.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest
import ray
import torch

from envfleet.errors import ConfigError
from envfleet_ray.runtime.placement import PlacementError
from envfleet_ray.verl import EnvResourcePool
from envfleet_ray.verl_vla_config import read_config

from ..conftest import pid_alive
from ..ray_worker.raytools import loopback_cluster
from .sequence import SPEED, Rollout, VerlVlaSequence

W, S, N = 2, 2, 2
SIM = {"sim": 1.0}  # per env worker: the simulator node's resource
ROWS = W * S * N
TASKS, TRIALS = 3, 4  # the toy's tasks and fixed initial states per task: state id = task * TRIALS + trial


def env_config(auto_reset: bool, chunk: int, interactions: int, horizon: int, **simulator: Any) -> dict[str, Any]:
    """verl-vla's cluster.env in its yaml layout, naming the toy backend."""
    return {
        "env_loop": {"pipeline_stage_num": S, "max_interactions": interactions},
        "env_worker": {
            "auto_reset": auto_reset,
            "num_envs": N,
            "modes": ["train", "eval"],
            "device": "cpu",
            "simulator_start_timeout_s": 180,
            "action_execution": {"mode": "serial", "interpolation": {"enable": False}, "serial_smoothing": {"enable": False}},
            "teleop": {"enable": False},
            "recorder": {"enable": False, "recorders": ["lerobot", "video"]},
            "target_step_hz": None,
            "simulator": {
                "simulator_type": "toy",
                "seed": 7,
                "envfleet": {
                    "max_episode_steps": horizon,
                    "init_params": {"camera_heights": 32, "camera_widths": 32, "camera_names": ["table", "wrist"]},
                    # depth and side_image: observations outside verl-vla's three, passed through in LeRobot's naming.
                    "toy": {"num_tasks": TASKS, "states_per_task": TRIALS, "envs_per_process": 2, "depth": "float32", "side_camera": True},
                },
                **simulator,
            },
        },
    }


@pytest.fixture(scope="module")
def local_ray():
    """Two Ray nodes on loopback, one Ray start for the module: the head plays the policy's node
    (no ``sim`` resource), the other a simulator node (``{"sim": 6}``); the env pools ask for
    ``{"sim": 1}`` per worker (:class:`~envfleet_ray.verl.EnvResourcePool`)."""
    cluster = loopback_cluster(num_cpus=2)
    cluster.add_node(num_cpus=6, resources={"sim": 6}, node_ip_address="127.0.0.1")
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False, logging_level="WARNING")
    try:
        yield
    finally:
        ray.shutdown()
        cluster.shutdown()


def sim_nodes() -> set[str]:
    return {n["NodeID"] for n in ray.nodes() if n["Alive"] and "sim" in n["Resources"]}


def check_step_keys(out: Rollout, chunk: int) -> None:
    """Keys, shapes and dtypes of every reset and step, as verl-vla's LIBERO env gives them."""
    reset = out.reset
    assert len(reset) == ROWS
    for key, shape, dtype in [
        ("observation.images.image", (32, 32, 3), torch.uint8),
        ("observation.images.wrist_image", (32, 32, 3), torch.uint8),
        ("observation.state", (8,), torch.float32),
        ("observation.images.side_image", (32, 32, 3), torch.uint8),
        ("observation.depth", (32, 32), torch.float32),
    ]:
        assert tuple(reset.batch[key].shape[1:]) == shape and reset.batch[key].dtype == dtype, key
    assert reset.non_tensor_batch["task"].dtype == object and reset.non_tensor_batch["task_id"].dtype == np.int64
    assert reset.non_tensor_batch["eval_episode_id"].dtype == np.int64
    for stage_steps in out.steps:
        for st in stage_steps:
            r = st.result
            n = len(st.obs)
            assert n == W * N
            for key in (
                "obs.observation.images.image",
                "obs.observation.images.wrist_image",
                "obs.observation.state",
                "obs.observation.images.side_image",
                "obs.observation.depth",
            ):
                assert r.batch[key].shape[0] == n and r.batch[key].dtype == reset.batch[key[4:]].dtype, key
            for key, dtype in [
                ("next.reward", torch.float32),
                ("next.terminated", torch.bool),
                ("next.truncated", torch.bool),
                ("next.success", torch.bool),
            ]:
                assert tuple(r.batch[key].shape) == (n, chunk) and r.batch[key].dtype == dtype, key
            assert set(r.non_tensor_batch) == {"obs.task", "obs.task_id", "obs.eval_episode_id"}


def check_next_follows_action(out: Rollout, chunk: int) -> int:
    """Each row's next observation is its own observation moved by its own action; rows whose
    episode ended in the chunk are skipped. The toy's state says which task each row runs, so
    the returned task id is checked against the observation it labels (also after an auto-reset)."""
    checked = 0
    for stage_steps in out.steps:
        for st in stage_steps:
            state = st.obs.batch["observation.state"].double().numpy()
            nxt = st.result.batch["obs.observation.state"].double().numpy()
            act = st.action.batch["action"].double().numpy()
            done = (st.result.batch["next.terminated"] | st.result.batch["next.truncated"]).any(dim=1).numpy()
            expected = state[:, :2] + SPEED * np.clip(act[:, :, :2], -1, 1).sum(axis=1)
            live = ~done
            np.testing.assert_allclose(nxt[live, :2], expected[live], atol=1e-5)
            checked += int(live.sum())
            tasks = st.result.non_tensor_batch["obs.task_id"]
            np.testing.assert_allclose(nxt[:, 7] * TASKS, tasks, atol=1e-5)
    return checked


def shard_pids(seq: VerlVlaSequence) -> list[int]:
    pids = []
    for info in seq.env_wg.node_info():
        pids.append(info["pid"])
        for per_mode in info["shard_pids"].values():
            for stage in per_mode:
                pids += [p for p in stage if p]
    return pids


def shutdown_leaves_nothing(seq: VerlVlaSequence) -> None:
    pids = shard_pids(seq)
    assert len(pids) == W * (1 + 2 * S * N // 2)  # each worker and its shards (2 envs per shard), train and eval
    seq.shutdown()
    deadline = time.time() + 60
    while time.time() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.2)
    assert not [p for p in pids if pid_alive(p)], "processes left after TrainCluster.shutdown()"


def test_train_cluster_sequence_without_auto_reset_scripted_policy_for_the_gpu_model(local_ray) -> None:
    """Filtered pool (tasks 2 and 0, three trials each), no auto-reset: rollout twice, eval, bad inputs, shutdown."""
    chunk, interactions = 8, 6
    cfg = env_config(False, chunk, interactions, horizon=chunk * interactions, task_ids=[2, 0], num_trials_per_task=3)
    seq = VerlVlaSequence(cfg, workers=W, chunk=chunk, solve=(0,), sim=SIM)
    seq.start()
    # The env pool's bundles ask for the sim resource: every env worker is on the sim node.
    assert {info["node_id"] for info in seq.env_wg.node_info()} <= sim_nodes()
    pool = [8, 9, 10, 0, 1, 2]
    assert seq.env_wg.get_eval_benchmark_size() == [len(pool)] * W
    first, m1 = seq.rollout()
    second, m2 = seq.rollout()
    for out in (first, second):
        check_step_keys(out, chunk)
        assert check_next_follows_action(out, chunk) > 0
        # Train draws come from the filtered pool and carry no eval case.
        assert set(out.reset.non_tensor_batch["task_id"].tolist()) <= {0, 2}
        assert out.reset.non_tensor_batch["eval_episode_id"].tolist() == [-1] * ROWS
    # Without auto-reset each rollout starts from a reset: no episode carries over, every row ends.
    assert m1["data/trajectory_count"] == m2["data/trajectory_count"] == ROWS
    for m in (m1, m2):
        for task in (0, 2):
            key = f"data/per_task_success_rate/task_{task}"
            if key in m:
                assert m[key] == (1.0 if task == 0 else 0.0), (key, m)
    # The two rollouts' draws differ (seeded per seed, rank and stage, drawn anew each reset).
    assert first.reset.non_tensor_batch["task"].tolist() != second.reset.non_tensor_batch["task"].tolist() or not torch.equal(
        first.reset.batch["observation.state"], second.reset.batch["observation.state"]
    )
    # envfleet's own metrics come back from finish_rollout, per mode.
    assert sum(f["train"]["episodes"] for f in first.finish) == ROWS

    passes, val, accepted = seq.eval()
    # One pass: 8 slots deal the 6 cases in order, processes rank*stages+stage, the last batch
    # filled from the start; each case is accepted once.
    assert len(passes) == 1
    assert passes[0].reset.non_tensor_batch["eval_episode_id"].tolist() == [0, 1, 2, 3, 4, 5, 0, 1]
    assert passes[0].reset.non_tensor_batch["task_id"].tolist() == [2, 2, 2, 0, 0, 0, 2, 2]
    assert accepted.tolist() == [1] * len(pool)
    assert val["val/benchmark_size"] == 6.0 and val["val/trajectory_count"] == 6.0
    assert val["val/per_task_success_rate/task_0"] == 1.0 and val["val/per_task_success_rate/task_2"] == 0.0
    # reset_eval rewinds: a second eval deals the same cases again.
    again = seq.env_wg.reset_env(mode="eval", reset_eval=True).get()
    assert again.non_tensor_batch["eval_episode_id"].tolist() == [0, 1, 2, 3, 4, 5, 0, 1]

    check_bad_inputs(seq, chunk)
    shutdown_leaves_nothing(seq)


def test_train_cluster_sequence_with_auto_reset_scripted_policy_for_the_gpu_model(local_ray) -> None:
    """Auto-reset from a filtered pool (tasks 1 and 0, two trials each): finished envs restart
    at states drawn from the pool; the second rollout continues the first's episodes and lengths
    carry over; eval covers the 4 cases once."""
    chunk, interactions, horizon = 8, 3, 40
    cfg = env_config(True, chunk, interactions, horizon=horizon, task_ids=[1, 0], num_trials_per_task=2)
    seq = VerlVlaSequence(cfg, workers=W, chunk=chunk, solve=(0,), sim=SIM)
    seq.start()
    first, _ = seq.rollout()
    second, m2 = seq.rollout()
    fresh = []  # the observations finished envs restarted at
    for out in (first, second):
        check_step_keys(out, chunk)
        assert check_next_follows_action(out, chunk) > 0
        for stage_steps in out.steps:
            for st in stage_steps:
                r = st.result
                done = (r.batch["next.terminated"] | r.batch["next.truncated"]).any(dim=1)
                assert set(r.non_tensor_batch["obs.task_id"].tolist()) <= {0, 1}
                fresh += [
                    (int(t), row) for t, row in zip(r.non_tensor_batch["obs.task_id"][done.numpy()], r.batch["obs.observation.state"][done])
                ]
    assert fresh  # task 0 is solved in its first chunk: its envs restart every chunk
    # reset_env with auto_reset hands back the latest observations: rollout 2 starts where 1 ended.
    last = [first.steps[s][-1].result for s in range(S)]
    starts = second.steps
    for s in range(S):
        assert torch.equal(starts[s][0].obs.batch["observation.state"], last[s].batch["obs.observation.state"])
        assert starts[s][0].obs.non_tensor_batch["task_id"].tolist() == last[s].non_tensor_batch["obs.task_id"].tolist()
    # Tasks 1 and 2 are never solved: they truncate at the horizon (5 chunks), inside rollout 2,
    # and their records carry rollout 1's three chunks: every one is exactly the horizon long.
    recs_failed = [k for k in m2 if k.startswith("data/per_task_success_rate/task_") and not k.endswith("_0")]
    assert recs_failed and all(m2[k] == 0.0 for k in recs_failed)
    from .sequence import records

    carry: dict[str, Any] = {"length": None, "reward": None}
    records(first, True, carry)
    lengths = [r["length"] for r in records(second, True, carry) if r["task_id"] != 0]
    assert lengths and set(lengths) == {horizon}

    passes, val, accepted = seq.eval()
    # Every restart began a pool state's episode: its first observation is that state's, as
    # eval's reset (which deals all 4 cases) shows it.
    reset = passes[0].reset
    starts = {
        int(c): (int(t), row)
        for c, t, row in zip(reset.non_tensor_batch["eval_episode_id"], reset.non_tensor_batch["task_id"], reset.batch["observation.state"])
    }
    assert sorted(starts) == [0, 1, 2, 3]
    for task, row in fresh:
        assert any(task == t and torch.equal(row, start) for t, start in starts.values()), (task, row)
    assert accepted.tolist() == [1] * 4
    assert val["val/benchmark_size"] == 4.0 and val["val/trajectory_count"] == 4.0
    assert val["val/per_task_success_rate/task_0"] == 1.0 and val["val/per_task_success_rate/task_1"] == 0.0
    shutdown_leaves_nothing(seq)


def check_bad_inputs(seq: VerlVlaSequence, chunk: int) -> None:
    """Bad inputs through verl-vla's dispatch: each a clear error, the worker usable after it."""
    wg = seq.env_wg
    from verl import DataProto

    def step(action: Any, stage: Any = 0, mode: str = "train", tensor: bool = True) -> Any:
        data = DataProto.from_dict(tensors={"action": action}) if tensor else DataProto.from_dict(non_tensors={"other": np.zeros(W * N)})
        data.meta_info["stage_id"] = stage
        return wg.env_interact_step(data, mode=mode).get()

    good = torch.zeros(W * N, chunk, 7)
    nan = good.clone()
    nan[1, 2, 3] = float("nan")
    cases = [
        (lambda: wg.reset_env(mode="bogus").get(), "mode must be 'train' or 'eval'"),
        (lambda: wg.reset_env(mode="eval", reset_eval="yes").get(), "reset_eval must be a bool"),
        (lambda: step(None, tensor=False), "has no 'action'"),
        (lambda: step(torch.zeros(W * N, chunk, 5)), "action_dim=7"),
        (lambda: step(nan), "must be finite"),
        (lambda: step(good, stage=5), "out of range"),
        (lambda: step(good, mode="bogus"), "mode must be 'train' or 'eval'"),
    ]
    for call, match in cases:
        with pytest.raises(Exception, match=match):
            call()
        # still usable: a valid reset and step
        wg.reset_env().get()
        assert len(step(good)) == W * N


@pytest.mark.parametrize(
    ("path", "value", "match"),
    [
        (("action_execution", "mode"), "eager", "must be 'serial' or 'async'"),
        (("action_execution", "smooth_overlapping_actions"), True, "smooth_overlapping_actions and .*mode: serial do not go together"),
        (("teleop", "enable"), True, "teleoperation"),
        (("target_step_hz",), 10.0, "target_step_hz and .*action_execution.mode: serial do not go together"),
        (("simulator", "simulator_type"), "arena", "verl-vla's own simulator"),
        (("modes",), ["train", "test"], "expected some of"),
    ],
)
def test_unserved_keys_are_config_errors(path: tuple[str, ...], value: Any, match: str) -> None:
    cfg = env_config(False, 4, 2, horizon=8, task_ids=[1])
    node = cfg["env_worker"]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(ConfigError, match=match):
        read_config(cfg)


def test_config_mapping_of_verl_vla_libero_section() -> None:
    cfg = env_config(False, 4, 2, horizon=8)
    cfg["env_worker"]["simulator"] = {
        "simulator_type": "libero",
        "libero": {
            "task_suite_name": "libero_goal",
            "max_episode_steps": 300,
            "seed": 3,
            "reset_warmup_steps": 5,
            "camera_heights": 128,
            "camera_widths": 128,
            "camera_names": ["agentview", "robot0_eye_in_hand"],
            "task_ids": [1, 3],
            "num_trials_per_task": 2,
        },
    }
    cfg["env_worker"]["recorder"] = {"enable": True, "recorders": ["video"], "video": {"root": "/tmp/v", "fps": 30}}
    settings = read_config(cfg)
    train = settings.fleet_config["train"]
    assert train["task_suite_name"] == "libero_goal" and train["max_episode_steps"] == 300 and train["seed"] == 3
    assert train["settle_steps"] == 5 and train["libero"] == {"settle_action": "zeros"}
    assert train["init_params"] == {"camera_heights": 128, "camera_widths": 128, "camera_names": ["agentview", "robot0_eye_in_hand"]}
    assert train["video_cfg"] == {"save_video": True, "video_base_dir": "/tmp/v", "fps": 30}
    assert settings.filters == {"task_ids": [1, 3], "num_trials_per_task": 2, "specific_reset_id": None}
    assert settings.state_dtype == torch.float64 and settings.fleet_config["actor"]["model"]["num_action_chunks"] is None


def test_train_cluster_eval_on_real_libero_scripted_policy_for_the_gpu_model(local_ray) -> None:
    """Real LIBERO through verl-vla's LIBERO section: libero_spatial task 0, two cases, one
    worker x 1 stage x 2 envs in one LIBERO process, eval only (stages and their dealing are
    the toy's part). Case 0 pushes the arm to +x, case 1 to -x."""
    chunk = 4
    cfg = env_config(False, chunk, 2, horizon=8)
    cfg["env_loop"]["pipeline_stage_num"] = 1
    cfg["env_worker"]["modes"] = ["eval"]
    cfg["env_worker"]["num_envs"] = 2
    libero = {
        "task_suite_name": "libero_spatial",
        "max_episode_steps": 8,
        "task_ids": [0],
        "num_trials_per_task": 2,
        "reset_warmup_steps": 2,
    }
    cfg["env_worker"]["simulator"] = {
        "simulator_type": "libero",
        "libero": {**libero, "camera_heights": 64, "camera_widths": 64, "camera_names": ["agentview", "robot0_eye_in_hand"]},
        "envfleet": {"libero": {"envs_per_process": 2}},
    }
    seq = VerlVlaSequence(cfg, workers=1, chunk=chunk, solve=(), push=0.8, sim=SIM)
    seq.start()
    try:
        with pytest.raises(Exception, match="mode 'train' is not started"):
            seq.env_wg.reset_env().get()
        passes, val, accepted = seq.eval()
    finally:
        pids = shard_pids(seq)
        seq.shutdown()
    assert len(passes) == 1 and accepted.tolist() == [1, 1]
    reset = passes[0].reset
    assert reset.batch["observation.state"].dtype == torch.float64 and tuple(reset.batch["observation.state"].shape) == (2, 8)
    assert reset.batch["observation.images.image"].dtype == torch.uint8 and tuple(reset.batch["observation.images.image"].shape) == (
        2,
        64,
        64,
        3,
    )
    assert tuple(reset.batch["observation.images.wrist_image"].shape) == (2, 64, 64, 3)
    assert reset.non_tensor_batch["task_id"].tolist() == [0, 0] and reset.non_tensor_batch["eval_episode_id"].tolist() == [0, 1]
    assert all(isinstance(t, str) and t for t in reset.non_tensor_batch["task"].tolist())
    for stage_steps in passes[0].steps:
        first = stage_steps[0]
        dx = first.result.batch["obs.observation.state"][:, 0] - first.obs.batch["observation.state"][:, 0]
        push = first.action.batch["action"][:, 0, 0].double()
        assert (torch.sign(dx) == torch.sign(push)).all() and (dx.abs() > 1e-3).all(), (dx, push)
        assert tuple(first.result.batch["next.success"].shape) == (2, chunk)
    assert val["val/benchmark_size"] == 2.0 and val["val/trajectory_count"] == 2.0 and val["val/per_task_success_rate/task_0"] == 0.0
    assert not [p for p in pids if _wait_gone(p)], "processes left after TrainCluster.shutdown()"


def _wait_gone(pid: int, timeout: float = 60.0) -> bool:
    """True if ``pid`` is still alive after ``timeout``."""
    deadline = time.time() + timeout
    while time.time() < deadline and pid_alive(pid):
        time.sleep(0.2)
    return pid_alive(pid)


def test_env_pool_no_node_can_hold_is_a_placement_error_at_once(local_ray) -> None:
    """An EnvResourcePool asking for more than any node offers fails before Ray's scheduler waits."""
    t0 = time.monotonic()
    for pool, match in [
        (EnvResourcePool([1], resources={"gpu_sim": 1}), r"gpu_sim"),
        (EnvResourcePool([2], resources={"sim": 4}), r"sim.*STRICT_PACK"),
    ]:
        with pytest.raises(PlacementError, match=match):
            pool.get_placement_groups(strategy="STRICT_PACK")
        assert pool.pgs is None
    assert time.monotonic() - t0 < 60  # a bounded error, not a wait for a node that never comes


def test_verl_vla_execution_keys_map_to_train_execution() -> None:
    cfg = env_config(False, 8, 2, horizon=16)
    worker = cfg["env_worker"]
    worker["action_execution"] = {
        "mode": "async",
        "replan_after_steps": 4,
        "smooth_overlapping_actions": True,
        "interpolation": {"enable": True, "factor": 3},
        "serial_smoothing": {"enable": False},
    }
    worker["target_step_hz"] = 30.0
    worker["log_step_latency"] = True
    settings = read_config(cfg)
    execution = settings.fleet_config["train"]["execution"]
    assert execution == {
        "interpolation": {"enable": True, "factor": 3},
        "mode": "realtime",
        "clock": "wall",
        "horizon": 4,
        "smooth_overlap": True,
        "target_step_hz": 30.0,
    }
    assert settings.realtime and settings.log_step_latency
    worker["simulator"]["envfleet"]["execution"] = {"clock": "sim", "delay": 2}  # envfleet's own keys win
    worker["target_step_hz"] = None
    assert read_config(cfg).fleet_config["train"]["execution"]["clock"] == "sim"
    worker["action_execution"]["serial_smoothing"] = {"enable": True, "execution_steps": 4, "blend_steps": 2}
    with pytest.raises(ConfigError, match=r"serial_smoothing.enable and .*action_execution.mode: async do not go together"):
        read_config(cfg)
    del worker["simulator"]["envfleet"]["execution"]
    worker["action_execution"] = {"mode": "serial", "serial_smoothing": {"enable": True, "execution_steps": 5, "blend_steps": 3}}
    assert read_config(cfg).fleet_config["train"]["execution"] == {
        "serial_smoothing": {"enable": True, "execution_steps": 5, "blend_steps": 3}
    }


def test_async_execution_in_verl_vla_order_of_calls_reports_what_ran(local_ray) -> None:
    """``action_execution.mode: async`` (replan after 4 of 8): verl-vla's [n, T] result shapes, and what ran."""
    chunk, interactions = 8, 3
    cfg = env_config(False, chunk, interactions, horizon=chunk * interactions, task_ids=[2, 0], num_trials_per_task=3)
    cfg["env_worker"]["action_execution"].update(mode="async", replan_after_steps=4, smooth_overlapping_actions=True)
    seq = VerlVlaSequence(cfg, workers=W, chunk=chunk, solve=(0,), sim=SIM)
    seq.start()
    out, _ = seq.rollout()
    check_step_keys(out, chunk)
    for stage_steps in out.steps:
        for k, st in enumerate(stage_steps):
            r = st.result
            assert tuple(r.batch["next.applied_action"].shape) == (W * N, 4, 7)
            assert not r.batch["next.reward"][:, 4:].any() and not r.batch["next.terminated"][:, 4:].any()  # padded to T
            if k == 0:
                assert not r.batch["next.action_delay"].any()  # the first chunk after a reset
            source = r.batch["next.action_source"].numpy()
            for i, d in enumerate(r.batch["next.action_delay"].tolist()):
                assert (source[i, d:] == 1).all(), (k, i, d, source[i])
    shutdown_leaves_nothing(seq)
