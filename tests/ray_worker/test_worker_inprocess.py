"""EnvWorker in-process with the toy backend: every seed method, stage split, outputs, bad input."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from envfleet.config import load_config
from envfleet.dataproto import DataProto
from envfleet.errors import InvalidInputError
from envfleet_ray.runtime.worker import EnvWorker, create_env_batch_dataproto, put_tensor_cpu

from ..conftest import toy_cfg

N, S, CHUNK = 2, 2, 4


@pytest.fixture(scope="module")
def worker():
    w = EnvWorker(toy_cfg(N, CHUNK, S, max_episode_steps=8), rank=0)
    w.init_worker()
    w.init_simulator()
    yield w
    w.close()


def step_data(stage: object, n: int = N, seed: int = 0, **meta: object) -> DataProto:
    acts = np.random.default_rng(seed).uniform(-1, 1, (n, CHUNK, 7)).astype(np.float32)
    return DataProto.from_dict(non_tensors={"actions": acts}, meta_info={"stage_id": stage, **meta})


def reset(worker: EnvWorker, ids: list[int], tasks: list[int] | None = None) -> DataProto:
    nt = {"state_ids": np.array(ids)}
    if tasks is not None:
        nt["task_ids"] = np.array(tasks)
    return worker.reset_envs_to_state_ids(DataProto.from_dict(non_tensors=nt))


def test_get_all_state_ids(worker) -> None:
    ids = worker.get_all_state_ids()
    assert ids.tolist() == list(range(30))
    assert worker.get_state_task_ids().tolist() == [i // 10 for i in range(30)]


def test_reset_splits_by_stage_and_concatenates_stage_major(worker) -> None:
    out = reset(worker, [0, 11, 22, 3], [0, 1, 2, 0])
    assert len(out) == N * S
    assert out.batch["state_id"].tolist() == [0, 11, 22, 3]
    assert out.non_tensor_batch["stage_id"].tolist() == [0, 0, 1, 1]
    assert out.non_tensor_batch["task_descriptions"][2] == "reach the blue goal (task 2)"
    assert out.batch["full_image"].shape == (4, 64, 64, 3) and out.batch["full_image"].dtype == torch.uint8


def test_env_interact_step_keys_shapes_dtypes(worker) -> None:
    reset(worker, [0, 1, 2, 3])
    out = worker.env_interact_step(step_data(1))
    assert out.meta_info["stage_id"] == 1
    b = out.batch
    assert b["full_image"].shape == (N, 64, 64, 3) and b["full_image"].dtype == torch.uint8
    assert b["wrist_image"].shape == (N, 64, 64, 3)
    assert b["state"].shape == (N, 8) and b["state"].dtype == torch.float32
    assert b["rews"].shape == (N, CHUNK) and b["rews"].dtype == torch.float32
    assert b["terminations"].dtype == torch.bool and b["truncations"].shape == (N, CHUNK)
    for key in ("success_once", "episode_return", "episode_length", "state_id", "task_id", "episode_ended", "sim_restarted"):
        assert key in b.keys(), key
    assert b["state_id"].tolist() == [2, 3]  # stage 1 holds the second half of the reset
    assert list(out.non_tensor_batch["task_descriptions"]) == ["reach the red goal (task 0)"] * 2


def test_stages_are_independent(worker) -> None:
    reset(worker, [0, 1, 2, 3])
    a = worker.env_interact_step(step_data(0, seed=5))
    b = worker.env_interact_step(step_data(0, seed=5))
    c = worker.env_interact_step(step_data(1, seed=5))
    assert a.batch["episode_length"].tolist() == [CHUNK, CHUNK]
    assert b.batch["episode_length"].tolist() == [2 * CHUNK, 2 * CHUNK]
    assert c.batch["episode_length"].tolist() == [CHUNK, CHUNK]


def test_finish_rollout_counts_episodes_per_task(worker) -> None:
    worker.finish_rollout()  # clear
    reset(worker, [0, 10, 20, 21])
    for _ in range(2):  # max_episode_steps=8 = 2 chunks: every env truncates
        for s in range(S):
            worker.env_interact_step(step_data(s))
    m = worker.finish_rollout("train")
    assert m["episodes"] == 4
    assert {t: r["episodes"] for t, r in m["per_task"].items()} == {0: 1, 1: 1, 2: 2}
    assert m["per_task"][2]["mean_length"] == 8
    assert m["env_steps"] == 2 * S * N * CHUNK
    assert set(m["time"]) == {"simulator_s", "transfer_s", "worker_s"}
    assert m["time"]["simulator_s"] > 0 and m["sim_restarts"] == 0
    assert worker.finish_rollout("train")["episodes"] == 0


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (lambda: DataProto.from_dict(non_tensors={"actions": np.zeros((N, CHUNK, 7), np.float32)}), "stage_id'\\] is missing"),
        (lambda: step_data(S), "out of range: this worker has stages 0..1"),
        (lambda: step_data(-1), "out of range"),
        (lambda: step_data("0"), "must be an int"),
        (lambda: step_data(0.0), "must be an int"),
        (lambda: step_data(True), "must be an int"),
        (lambda: step_data(0, n=N + 1), "shape"),
        (lambda: DataProto.from_dict(non_tensors={"acts": np.zeros((N, CHUNK, 7))}, meta_info={"stage_id": 0}), "no 'actions'"),
        (lambda: step_data(0, mode="test"), "mode must be 'train' or 'val'"),
    ],
    ids=["no-stage", "stage-too-big", "stage-negative", "stage-str", "stage-float", "stage-bool", "wrong-n", "no-actions", "bad-mode"],
)
def test_bad_step_input_then_usable(worker, data, match) -> None:
    reset(worker, [0, 1, 2, 3])
    with pytest.raises(InvalidInputError, match=match):
        worker.env_interact_step(data())
    assert worker.env_interact_step(step_data(0)).batch["rews"].shape == (N, CHUNK)


@pytest.mark.parametrize(
    ("ids", "tasks", "match"),
    [
        ([0, 1, 2], None, "has 3 entries, expected num_envs \\* stage_num = 2 \\* 2 = 4"),
        ([0, 1, 2, 99], None, "state id 99"),
        ([0, 1, 2, 3], [0, 0, 0, 1], "task id 1 does not match state id 3"),
    ],
    ids=["short", "unknown-id", "task-mismatch"],
)
def test_bad_reset_input_then_usable(worker, ids, tasks, match) -> None:
    with pytest.raises(InvalidInputError, match=match):
        reset(worker, ids, tasks)
    assert len(reset(worker, [4, 5, 6, 7])) == 4


def test_empty_batch_rejected(worker) -> None:
    with pytest.raises(InvalidInputError, match=r"num_envs=2"):
        worker.env_interact_step(
            DataProto.from_dict(non_tensors={"actions": np.zeros((0, CHUNK, 7), np.float32)}, meta_info={"stage_id": 0})
        )


def test_put_tensor_cpu_works_in_place_like_verls() -> None:
    t = torch.arange(6).reshape(2, 3).t()
    inner = {"d": t, "e": "x"}
    d = {"a": t, "b": 1, "c": inner}
    out = put_tensor_cpu(d)
    assert out is d and d["c"] is inner  # the same dicts, updated in place
    assert d["a"].is_contiguous() and d["c"]["d"].is_contiguous() and d["b"] == 1 and inner["e"] == "x"
    assert torch.equal(d["a"], t)


def _arrays(n: int = 2) -> dict[str, np.ndarray]:
    return {
        "full_image": np.full((n, 4, 4, 3), 7, np.uint8),
        "wrist_image": np.full((n, 4, 4, 3), 9, np.uint8),
        "state": np.ones((n, 8), np.float32),
    }


def _flags(n: int = 2) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.zeros((n, 3), np.float32), np.zeros((n, 3), bool), np.zeros((n, 3), bool)


def test_create_env_batch_dataproto_takes_verls_env_worker_layout() -> None:
    seed = create_env_batch_dataproto({"images_and_states": _arrays(), "task_descriptions": ["a", "b"]}, *_flags(), {})
    flat = create_env_batch_dataproto({**_arrays(), "task_descriptions": ["a", "b"]}, *_flags(), {})
    assert sorted(seed.batch.keys()) == ["full_image", "rews", "state", "terminations", "truncations", "wrist_image"]
    for key in ("full_image", "wrist_image", "state"):
        assert torch.equal(seed.batch[key], flat.batch[key])
    assert seed.non_tensor_batch["task_descriptions"].tolist() == ["a", "b"]


@pytest.mark.parametrize(
    ("obs", "fragment"),
    [
        ({"images": _arrays(), "task_descriptions": ["a", "b"]}, "obs has keys ['images', 'task_descriptions']: expected"),
        ({"images_and_states": {**_arrays(), "depth": np.zeros((2, 4, 4))}}, "['depth'] unknown, expected some of"),
        ({"images_and_states": _arrays(), "extra": 1}, "obs has keys ['extra', 'images_and_states']"),
        ({"images_and_states": [1, 2]}, "(verl's env-worker layout)"),
        ({"task_descriptions": ["a", "b"]}, "obs has keys ['task_descriptions']: expected"),
    ],
    ids=["unknown-top-key", "unknown-nested-key", "extra-beside-nested", "nested-not-a-mapping", "no-observation"],
)
def test_create_env_batch_dataproto_rejects_an_unknown_layout(obs, fragment) -> None:
    with pytest.raises(InvalidInputError) as err:
        create_env_batch_dataproto(obs, *_flags(), {})
    assert fragment in str(err.value)


def test_create_env_batch_dataproto_infos() -> None:
    d = create_env_batch_dataproto(
        {"full_image": np.zeros((2, 4, 4, 3), np.uint8), "state": np.zeros((2, 8), np.float32), "task_descriptions": ["a", "b"]},
        *_flags(),
        {"names": np.array(["x", "y"], dtype=object), "rews": np.ones(2)},
        {"stage_id": 1},
    )
    assert "wrist_image" not in d.batch.keys()
    assert d.non_tensor_batch["names"].tolist() == ["x", "y"]
    assert d.batch["info_rews"].tolist() == [1.0, 1.0]  # a clashing info name is kept, prefixed
    assert d.meta_info == {"stage_id": 1}


def test_finish_rollout_pairs_each_task_with_its_own_description_under_auto_reset() -> None:
    """With auto_reset, a step's descriptions are those of the episodes that follow; the metrics
    must describe each task by the episodes that ended, not by the ones that replaced them."""
    cfg = load_config(
        overrides=[
            "train.simulator_type=toy",
            "train.num_envs=3",
            "actor.model.num_action_chunks=4",
            "train.max_episode_steps=4",  # every chunk ends every episode: each row changes task often
            "train.auto_reset=true",
        ]
    )
    w = EnvWorker(cfg, rank=0)
    try:
        w.init_worker()
        w.init_simulator()
        w.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": np.array([0, 10, 20])}))
        for seed in range(8):
            w.env_interact_step(step_data(0, n=3, seed=seed))
        per_task = w.finish_rollout()["per_task"]
    finally:
        w.close()
    assert sorted(per_task) == [0, 1, 2]
    for task, row in per_task.items():
        assert row["description"].endswith(f"(task {task})"), (task, row["description"])


def _seeker(ignore_terminations: bool, **extra: str) -> EnvWorker:
    overrides = [
        "train.simulator_type=toy",
        "train.num_envs=1",
        "actor.model.num_action_chunks=8",
        "train.max_episode_steps=64",
        f"train.ignore_terminations={str(ignore_terminations).lower()}",
        *[f"{k}={v}" for k, v in extra.items()],
    ]
    w = EnvWorker(load_config(overrides=overrides), rank=0)
    w.init_worker()
    w.init_simulator()
    return w


def _run_through_the_goal(w: EnvWorker, state_id: int = 4) -> dict:
    """Head for the goal in a straight line and keep going: the point crosses the goal mid-chunk."""
    first = w.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": np.array([state_id])}))
    px, py, gx, gy = first.batch["state"][0, :4].tolist()
    direction = np.array([gx - px, gy - py]) / np.hypot(gx - px, gy - py)
    actions = np.zeros((1, 8, 7), np.float32)
    actions[..., :2] = direction
    for _ in range(8):
        w.env_interact_step(DataProto.from_dict(non_tensors={"actions": actions}, meta_info={"stage_id": 0}))
    return w.finish_rollout()


@pytest.mark.parametrize("ignore_terminations", [False, True], ids=["terminations-end-episodes", "ignore-terminations"])
def test_both_success_metrics_on_an_episode_that_succeeds_mid_chunk(ignore_terminations) -> None:
    w = _seeker(ignore_terminations)
    try:
        metrics = _run_through_the_goal(w)
    finally:
        w.close()
    (row,) = metrics["per_task"].values()
    assert row["episodes"] == 1 and row["successes"] == 1 and row["successful_at_reset"] == 0
    # Ended at its first success, the episode is a success at its end too; run on through the
    # goal (ignore_terminations), it ends outside it.
    assert row["successes_at_end"] == (0 if ignore_terminations else 1)
    if ignore_terminations:
        assert row["mean_length"] == 64
    else:
        assert row["mean_length"] < 64
    assert metrics["warnings"] == []


def test_fingerprint_is_stable_and_sensitive_and_videos_get_a_sidecar(tmp_path) -> None:
    import json

    def fingerprint_of(state_id: int = 4, **extra: str) -> dict:
        w = _seeker(False, **extra)
        try:
            return _run_through_the_goal(w, state_id)
        finally:
            w.close()

    base = fingerprint_of()["fingerprint"]
    assert base == fingerprint_of()["fingerprint"]  # the same config on the same machine
    assert base["backend"] == "toy" and base["state_ids"]["count"] == 1 and base["packages"]["envfleet"]
    # The toy draws with numpy: its renderer record is the shard's GL settings.
    assert base["renderer"] == {k.lower(): os.environ[k] for k in ("MUJOCO_GL", "PYOPENGL_PLATFORM") if os.environ.get(k)}
    changed = {
        "seed": fingerprint_of(**{"train.seed": "7"}),
        "render": fingerprint_of(**{"train.render": "all"}),
        "cameras": fingerprint_of(**{"train.init_params.camera_heights": "32"}),
        "horizon": fingerprint_of(**{"train.max_episode_steps": "63"}),
        "state ids": fingerprint_of(state_id=5),
    }
    for what, metrics in changed.items():
        assert metrics["fingerprint"]["hash"] != base["hash"], what
    video = fingerprint_of(**{"train.video_cfg.save_video": "true", "train.video_cfg.video_base_dir": str(tmp_path)})
    (path,) = video["videos"]
    sidecar = json.loads(open(path[: -len(".mp4")] + ".json").read())
    assert sidecar["video"] == "0.mp4" and sidecar["stage"] == 0 and sidecar["fingerprint"]["hash"] == video["fingerprint"]["hash"]
