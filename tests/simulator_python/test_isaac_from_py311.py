"""Isaac Lab 3.0 shards (its Python 3.12 venv, the one ``nox -s tests-isaac`` builds) driven by a worker on Python 3.11.

A Ray job on Python 3.11 runs an EnvWorker whose shards start under the Isaac
venv's interpreter through ``train.simulator_python``: the worker imports nothing
of Isaac Lab (which does not install on 3.11).
"""

from __future__ import annotations

import importlib.util
import os
import sys

import numpy as np
import ray
import torch

from envfleet.config import load_config
from envfleet.dataproto import DataProto
from envfleet.shards.interpreter import probe
from envfleet_ray import init_ray
from envfleet_ray.runtime.group import EnvWorkerGroup

from ..isaac.common import assert_no_segments_left, pusher_train

ISAAC_PYTHON_ENV = "ENVFLEET_ISAAC_PYTHON"
N, CHUNK = 2, 4


def test_isaac_shards_under_python_312_from_a_311_worker() -> None:
    python = os.environ.get(ISAAC_PYTHON_ENV, "")
    assert os.path.isfile(python), f"{ISAAC_PYTHON_ENV}={python!r}: build the Isaac venv first (nox -s tests-isaac)"
    assert sys.version_info[:2] == (3, 11) and importlib.util.find_spec("isaaclab") is None
    assert probe(python, ["isaaclab"], []).version.startswith("3.12.")
    cfg = load_config(
        data={"train": pusher_train(num_envs=N, simulator_python=python, isaac={"state_bank_size": 4})},
        overrides=[f"actor.model.num_action_chunks={CHUNK}", "actor.model.action_dim=2"],
    )
    init_ray(num_cpus=2)
    try:
        group = EnvWorkerGroup(cfg, num_workers=1)
        worker_pid = int(group.nodes[0]["pid"])
        try:
            group.init_worker()
            group.init_simulator()
            assert group.get_all_state_ids().tolist() == [0, 1, 2, 3]
            reset = group.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": np.array([1, 2])})).get()
            assert reset.batch["full_image"].shape == (N, 64, 64, 3) and reset.batch["full_image"].dtype == torch.uint8
            assert list(reset.non_tensor_batch["task_descriptions"]) == ["push the red cube to the green goal"] * N
            actions = np.random.default_rng(0).uniform(-1, 1, (N, CHUNK, 2)).astype(np.float32)
            out = group.env_interact_step(DataProto.from_dict(non_tensors={"actions": actions}, meta_info={"stage_id": 0})).get()
            assert out.batch["state"].shape == (N, 8) and out.batch["rews"].shape == (N, CHUNK)
            assert not torch.equal(out.batch["state"], reset.batch["state"]), "the scene did not move"
        finally:
            group.shutdown()
        assert_no_segments_left(worker_pid)
    finally:
        ray.shutdown()
