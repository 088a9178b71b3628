"""Named protocols end to end: a config naming one runs through `envfleet rollout`, EnvWorkerGroup on
Ray and the in-process EnvWorker, loaded once and never loaded again on the way to the shards.

A loaded config sets every key, the protocol's included; loading it again used to read those keys as
the user's and refuse them as a clash with the protocol. Here each path runs one chunk of real LIBERO.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
import yaml

from envfleet.config import load_config
from envfleet.dataproto import DataProto
from envfleet.errors import ConfigError
from envfleet.plugins import get_backend
from envfleet.plugins import spec as spec_module

# Two protocols with different sources and camera sizes; each covers libero_spatial.
PROTOCOLS = ["libero", "openvla"]


def _config(name: str) -> dict[str, Any]:
    return {
        "train": {"simulator_type": "libero", "task_suite_name": "libero_spatial", "num_envs": 1, "protocol": name},
        "rollout": {"pipeline_stage_num": 1},
        "actor": {"model": {"num_action_chunks": 8}},
    }


def _step(worker_or_group: Any, num_envs: int) -> DataProto:
    actions = np.zeros((num_envs, 8, 7), dtype=np.float32)
    actions[:, :, 0] = 0.3  # the arm moves
    return DataProto.from_dict(non_tensors={"actions": actions}, meta_info={"stage_id": 0})


@pytest.mark.parametrize("name", PROTOCOLS)
def test_envfleet_rollout_runs_a_named_protocol(tmp_path, name: str) -> None:
    path = tmp_path / "protocol.yaml"
    path.write_text(yaml.safe_dump(_config(name)))
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "envfleet_ray.cli", "rollout", "--config", str(path), "--steps", "1", "--policy", "zero"]
    proc = subprocess.run([*cmd, "--out", str(out)], capture_output=True, text=True, timeout=900, env={**os.environ, "RAY_ADDRESS": ""})
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["env_steps"] == 8 and summary["sim_restarts"] == 0
    assert summary["fingerprint"]["named_protocol"]["name"] == name


def test_a_conflicting_value_is_still_refused_with_its_message(tmp_path) -> None:
    data = _config("openvla")
    data["train"]["settle_steps"] = 15
    with pytest.raises(
        ConfigError, match=r"'train.settle_steps' is 15, but protocol 'openvla' \(version 1\) sets 'train.settle_steps' to 10"
    ):
        load_config(data=data)
    data["train"]["settle_steps"] = 10  # the protocol's own value: no conflict
    assert load_config(data=data).train.settle_steps == 10


@pytest.fixture(scope="module")
def local_ray():
    import ray

    from envfleet_ray import init_ray

    init_ray(num_cpus=2)
    yield
    ray.shutdown()


@pytest.mark.parametrize("name", PROTOCOLS)
def test_env_worker_group_runs_a_named_protocol(local_ray, name: str) -> None:
    from envfleet_ray import EnvWorkerGroup

    cfg = load_config(data=_config(name))
    group = EnvWorkerGroup(cfg, num_workers=1, cpus_per_worker=1)
    try:
        group.init_worker()
        group.init_simulator()
        ids = np.zeros(1, dtype=np.int64)
        group.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": ids, "task_ids": ids})).get()
        out = group.env_interact_step(_step(group, 1)).get()
        assert tuple(out.batch["full_image"].shape[1:3]) == (cfg.train.init_params.camera_heights, cfg.train.init_params.camera_widths)
        assert out.batch["rews"].shape == (1, 8)
    finally:
        group.shutdown()


def test_the_backend_spec_is_computed_once_where_the_config_is_loaded(monkeypatch) -> None:
    """One stage of LIBERO through the in-process EnvWorker: its observation spec is computed once in
    this process (by load_config), not again by the worker or its manager; each shard computes its own."""
    from envfleet_ray import EnvWorker

    spec = get_backend("libero")
    calls: list[int] = []
    original = spec.observation_spec

    def counting(cfg: Any, num_envs: int) -> Any:
        calls.append(num_envs)
        return original(cfg, num_envs)

    monkeypatch.setattr(spec_module, "_SPECS", {})  # nothing computed before this test counts
    object.__setattr__(spec, "observation_spec", counting)
    try:
        cfg = load_config(data=_config("openvla"))
        worker = EnvWorker(cfg)
        try:
            worker.init_worker()
            worker.init_simulator()
            ids = np.zeros(1, dtype=np.int64)
            worker.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": ids, "task_ids": ids}))
            out = worker.env_interact_step(_step(worker, 1))
            assert out.batch["full_image"].shape[1:3] == (256, 256)  # openvla's cameras
        finally:
            worker.close()
    finally:
        object.__setattr__(spec, "observation_spec", original)
    assert calls == [1], f"the spec was computed {len(calls)} times in the driver: {calls}"
