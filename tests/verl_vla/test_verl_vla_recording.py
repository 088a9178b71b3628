"""verl-vla's LeRobot recorder through envfleet's adapter, in TrainCluster's order of calls
(``rollout()`` -> ``finish_rollout`` -> ``pop_lerobot_dataset``, then ``eval()`` and another pop):
each rank hands out one dataset, at verl-vla's path, holding the episodes finished since the last
pop, with the actions and task strings the scripted policy (in place of the GPU model) sent.
Toy backend: 2 workers x 2 stages x 2 envs.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
import ray

from envfleet.errors import ConfigError
from envfleet.recording import read_episodes, read_frames, read_info
from envfleet_ray.verl_vla_config import read_config

from ..ray_worker.raytools import loopback_cluster
from .sequence import Rollout, VerlVlaSequence
from .test_train_cluster_order import env_config

W, S, N = 2, 2, 2
REPO = "local/envfleet_toy"


@pytest.fixture(scope="module")
def local_ray():
    cluster = loopback_cluster(num_cpus=6)
    ray.init(address=cluster.address, log_to_driver=False, logging_level="WARNING")
    try:
        yield
    finally:
        ray.shutdown()
        cluster.shutdown()


def recording_config(root: str, chunk: int, interactions: int, horizon: int) -> dict[str, Any]:
    cfg = env_config(False, chunk, interactions, horizon=horizon, task_ids=[2, 0], num_trials_per_task=3)
    cfg["env_worker"]["recorder"] = {"enable": True, "recorders": ["lerobot"], "lerobot": {"root": root, "repo_id": REPO}}
    return cfg


def sent_episodes(passes: list[Rollout], rank: int) -> list[tuple[str, bytes]]:
    """(task, the actions sent, as bytes) of every episode of ``rank``'s rows that ended within its pass."""
    out = []
    for rollout in passes:
        for stage_steps in rollout.steps:
            for i in range(N):
                row = rank * N + i  # a stage's rows are worker-major
                actions = []
                for st in stage_steps:
                    actions.append(st.action.batch["action"][row].numpy().astype(np.float32).reshape(-1))
                    done = bool((st.result.batch["next.terminated"][row] | st.result.batch["next.truncated"][row]).any())
                    if done:
                        out.append((str(stage_steps[0].obs.non_tensor_batch["task"][row]), np.stack(actions).tobytes()))
                        break
    return sorted(out)


def popped_episodes(popped: dict[str, str], rank: int, root: str) -> list[tuple[str, bytes]]:
    assert popped == {"root": os.path.join(root, f"{REPO}_rank_{rank}"), "repo_id": f"{REPO}_rank_{rank}"}
    info = read_info(popped["root"])
    rows = read_episodes(popped["root"])
    assert info["total_episodes"] == len(rows) and {r["envfleet/rank"] for r in rows} == {rank}
    out = []
    for row in rows:
        frames = read_frames(popped["root"], row)
        assert frames["observation.images.full_image"].shape == (row["length"], 32, 32, 3)
        out.append((row["tasks"][0], frames["action"].astype(np.float32).tobytes()))
    return sorted(out)


def test_pop_lerobot_dataset_hands_out_each_ranks_episodes_once_scripted_policy_for_the_gpu_model(local_ray, tmp_path) -> None:
    chunk, interactions = 4, 4
    root = str(tmp_path / "lerobot")
    # Episodes of 3 chunks in 4 interactions: each ends within the pass (task 0 earlier, solved).
    seq = VerlVlaSequence(recording_config(root, chunk, interactions, horizon=3 * chunk), workers=W, chunk=chunk, solve=(0,))
    seq.start()
    try:
        first, _ = seq.rollout()  # TrainCluster: rollout, finish_rollout, then pop_lerobot_dataset
        popped = seq.env_wg.pop_lerobot_dataset()
        assert len(popped) == W
        for rank in range(W):
            sent = sent_episodes([first], rank)
            assert len(sent) == S * N
            assert popped_episodes(popped[rank], rank, root) == sent
        # Nothing new since: None from every rank, as verl-vla's recorder gives.
        assert seq.env_wg.pop_lerobot_dataset() == [None] * W
        passes, _, _ = seq.eval()
        popped = seq.env_wg.pop_lerobot_dataset()
        for rank in range(W):
            sent = sent_episodes(passes, rank)
            assert sent
            # The eval episodes only: the train ones were handed out before.
            assert popped_episodes(popped[rank], rank, root) == sent
            assert {r["envfleet/mode"] for r in read_episodes(popped[rank]["root"])} == {"val"}
        with pytest.raises(Exception, match="teleoperat"):
            seq.env_wg.record()
    finally:
        seq.shutdown()


def test_lerobot_recorder_maps_to_train_record(tmp_path) -> None:
    settings = read_config(recording_config(str(tmp_path), 4, 2, 8))
    assert settings.lerobot == {"root": str(tmp_path), "repo_id": REPO}
    assert settings.fleet_config["train"]["record"] == {"format": "lerobot", "dir": f"{tmp_path}/{REPO}_envfleet"}
    off = recording_config(str(tmp_path), 4, 2, 8)
    off["env_worker"]["recorder"]["recorders"] = ["video"]
    assert read_config(off).lerobot is None and "record" not in read_config(off).fleet_config["train"]
    bad = recording_config("", 4, 2, 8)
    with pytest.raises(ConfigError, match="root and repo_id"):
        read_config(bad)
