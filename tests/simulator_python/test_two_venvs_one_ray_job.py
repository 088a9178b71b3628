"""One Ray job, two worker groups: MetaWorld shards in MetaWorld's venv (MuJoCo 3.3.0), LIBERO in the main one (3.17).

The workers both run in the main Python 3.11 venv. MetaWorld's frames must equal
plain MetaWorld run in its venv with the same conventions, and LIBERO's must equal
LIBERO's own env, bit for bit: running the two side by side changes neither.
"""

from __future__ import annotations

import importlib.metadata

import numpy as np
import ray

from envfleet.config import load_config
from envfleet.dataproto import DataProto
from envfleet_metaworld.tasks import INSTRUCTIONS, TASKS
from envfleet_ray import init_ray
from envfleet_ray.runtime.group import EnvWorkerGroup

from ..libero.reference import CAMERAS, random_actions, run_alone
from ..libero.test_libero_fidelity import CHUNK as LIBERO_CHUNK
from ..libero.test_libero_fidelity import SEED, SETTLE
from ..libero.test_libero_fidelity import SIZE as LIBERO_SIZE
from ..metaworld.common import CHUNK, direct_run, metaworld_train, moving_actions

MW_TASK, MW_VARIATION = "button-press-v3", 5


def _step(group: EnvWorkerGroup, actions: np.ndarray) -> dict[str, np.ndarray]:
    out = group.env_interact_step(DataProto.from_dict(non_tensors={"actions": actions}, meta_info={"stage_id": 0})).get()
    return {k: out.batch[k].numpy().copy() for k in ("full_image", "wrist_image", "state") if k in out.batch.keys()}


def test_metaworld_and_libero_side_by_side() -> None:
    assert importlib.metadata.version("mujoco") == "3.17.0", "the worker's venv must be the main one (MuJoCo 3.17)"
    mw_cfg = load_config(data={"train": metaworld_train(num_envs=1), "actor": {"model": {"num_action_chunks": CHUNK}}})
    lib_cfg = load_config(
        data={
            "train": {
                "simulator_type": "libero",
                "task_suite_name": "libero_spatial",
                "num_envs": 1,
                "seed": SEED,
                "settle_steps": SETTLE,
                "init_params": {"camera_heights": LIBERO_SIZE, "camera_widths": LIBERO_SIZE, "camera_names": CAMERAS},
            },
            "actor": {"model": {"num_action_chunks": LIBERO_CHUNK, "action_dim": 7}},
        }
    )
    mw_actions = moving_actions(7, 2)
    lib_actions = random_actions(3, 2, LIBERO_CHUNK)
    init_ray(num_cpus=2)
    try:
        mw = EnvWorkerGroup(mw_cfg, num_workers=1)
        lib = EnvWorkerGroup(lib_cfg, num_workers=1)
        try:
            for group in (mw, lib):
                group.init_worker()
                group.init_simulator()
            sid = TASKS.index(MW_TASK) * 50 + MW_VARIATION
            mw_first = mw.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": np.array([sid])})).get()
            lib_first = lib.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": np.array([0])})).get()
            mw_frames = [{k: mw_first.batch[k].numpy().copy() for k in ("full_image", "state")}]
            lib_frames = [{k: lib_first.batch[k].numpy().copy() for k in ("full_image", "wrist_image", "state")}]
            for k in range(2):
                mw_frames.append(_step(mw, mw_actions[k][None]))
                lib_frames.append(_step(lib, lib_actions[k][None]))
            assert list(mw_first.non_tensor_batch["task_descriptions"]) == [INSTRUCTIONS[MW_TASK]]
        finally:
            mw.shutdown()
            lib.shutdown()
    finally:
        ray.shutdown()
    mw_ref = direct_run([{"task": MW_TASK, "variation": MW_VARIATION, "actions": mw_actions}])[0]
    assert np.abs(mw_ref["states"][-1][:3] - mw_ref["states"][0][:3]).max() > 0.01, "the arm barely moved"
    for j, frame in enumerate(mw_frames):
        np.testing.assert_array_equal(frame["full_image"][0], mw_ref["images"][j], err_msg=f"MetaWorld image differs at {j}")
        np.testing.assert_array_equal(frame["state"][0], mw_ref["states"][j], err_msg=f"MetaWorld state differs at {j}")
    lib_ref = run_alone("libero_spatial", 0, 0, lib_actions, seed=SEED, settle=SETTLE, size=LIBERO_SIZE)
    assert lib_ref.language == lib_first.non_tensor_batch["task_descriptions"][0]
    for j, (frame, ref) in enumerate(zip(lib_frames, lib_ref.frames)):
        for key in ("full_image", "wrist_image", "state"):
            np.testing.assert_array_equal(frame[key][0], ref[key], err_msg=f"LIBERO {key} differs at {j}")
