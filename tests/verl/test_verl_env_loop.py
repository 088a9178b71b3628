"""Opt-in: verl's own ``EnvLoop`` (``verl/experimental/vla/env_loop.py``, from verl's git history,
for example tag v0.7.1; verl 0.9.1 on the package index no longer ships it) drives envfleet's
worker. Set ``ENVFLEET_VERL_ENV_LOOP`` to the path of that file; the file is never committed here.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest
import ray
import torch
from verl import DataProto

from envfleet_ray import init_ray

from .roles import build_roles, verl_config

W, S, N, CHUNK, MAX_STEPS = 2, 2, 2, 4, 12
ENV_LOOP = os.environ.get("ENVFLEET_VERL_ENV_LOOP")

pytestmark = pytest.mark.skipif(
    not ENV_LOOP,
    reason="set ENVFLEET_VERL_ENV_LOOP to verl's verl/experimental/vla/env_loop.py (from verl's git history, e.g. tag v0.7.1)",
)


def load_env_loop() -> type:
    assert ENV_LOOP is not None
    if not os.path.isfile(ENV_LOOP):
        pytest.fail(f"ENVFLEET_VERL_ENV_LOOP={ENV_LOOP!r} is not a file")
    spec = importlib.util.spec_from_file_location("verl_env_loop", ENV_LOOP)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.EnvLoop  # type: ignore[no-any-return]


def test_verls_env_loop_drives_envfleet() -> None:
    env_loop_cls = load_env_loop()
    init_ray(num_cpus=8)
    try:
        toy = {"simulator_type": "toy", "num_envs": N, "max_episode_steps": MAX_STEPS}
        config = verl_config(toy, stages=S, chunk=CHUNK)
        env_wg, rollout_wg = build_roles(config, env_workers=W)
        loop = env_loop_cls(env_wg=env_wg, rollout_wg=rollout_wg, config=config)  # runs init_worker and init_simulator
        rounds = MAX_STEPS // CHUNK
        for first in (0, 8):
            ids = np.arange(first, first + W * S * N)
            prompts = DataProto.from_dict(non_tensors={"state_ids": ids, "task_ids": ids // 10})
            reset_future = env_wg.reset_envs_to_state_ids(prompts)
            out = loop.generate_sequences(prompts, reset_future)
            assert tuple(out.batch["action"].shape) == (W * S * N, rounds, CHUNK, 7)
            assert tuple(out.batch["complete"].shape) == (W * S * N, rounds, CHUNK)
            assert out.batch["env_state_id"].tolist() == ids.tolist()
            # Zero actions never reach a goal; the last chunk of each episode hits the step limit,
            # which the toy reports as truncation, not termination.
            assert not out.batch["complete"].any()
            assert torch.equal(out.batch["seen_state"][:, 0], out.batch["seen_state"][:, -1])
        metrics = env_wg.finish_rollout()  # the loop already called it once per round; this one is empty
        assert [m["chunks"] for m in metrics] == [0] * W
        env_wg.close()
    finally:
        ray.shutdown()
