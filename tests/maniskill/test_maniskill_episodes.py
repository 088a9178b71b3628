"""ManiSkill through envfleet against ManiSkill run alone: same images bit for bit, in two shard processes
and in this one; the download refusal at config load; a killed shard's restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from envfleet.config import load_config
from envfleet.errors import ConfigError
from envfleet.shards.manager import ProcessEnvManager

from .common import CHUNK, moving_actions, plain_maniskill

TASK = "PushCube-v1"
STATE_ID = 5


def _cfg(**maniskill: object) -> object:
    return load_config(
        data={
            "train": {
                "simulator_type": "maniskill",
                "task_name": TASK,
                "num_envs": 2,
                "init_params": {"camera_heights": 64, "camera_widths": 64},
                "maniskill": {"envs_per_process": 1, **maniskill},
            }
        },
        overrides=[f"actor.model.num_action_chunks={CHUNK}", "actor.model.action_dim=7"],
    )


def test_same_state_id_same_images_in_two_processes_and_manikill_alone(no_leaks: None) -> None:
    """Two shard processes reset to one state id and given one chunk of actions (LIBERO's gripper sign)
    hand out the images ManiSkill gives run alone with reset(seed=state id), bit for bit (the shards
    with SAPIEN's BRDF table computed once in another process, ManiSkill alone with its own); then a
    killed shard is rebuilt and hands out its fresh reset."""
    chunks = moving_actions(3, 1, chunks=2)[:, 0]  # [2, CHUNK, 7], ManiSkill's sign
    alone = plain_maniskill(TASK, STATE_ID, chunks)
    libero_sign = chunks.copy()
    libero_sign[..., -1] *= -1
    with ProcessEnvManager(_cfg(gripper_sign="libero"), stage_id=0) as mgr:
        assert len(mgr.shards) == 2, "one env per shard process"
        # The shards use SAPIEN's table computed once (conftest); ManiSkill alone computed its own.
        assert mgr.renderer_info()["brdf_lut"] == os.environ["ENVFLEET_MANISKILL_BRDF_LUT"]
        pids = mgr.shard_pids()
        assert len(set(pids)) == 2
        got = [mgr.reset_envs_to_state_ids(np.array([STATE_ID, STATE_ID])).obs]
        for chunk in libero_sign:
            got.append(mgr.chunk_step(np.stack([chunk, chunk])).obs)
        assert not np.array_equal(got[0]["full_image"], got[-1]["full_image"]), "the arm did not move"
        for when, (obs, ref) in enumerate(zip(got, alone)):
            for key in ("full_image", "wrist_image"):
                for env in (0, 1):
                    np.testing.assert_array_equal(obs[key][env], ref[key], err_msg=f"env {env} {key!r} after {when} chunk(s)")
            np.testing.assert_array_equal(obs["state"][:, :9], np.stack([ref["qpos"], ref["qpos"]]))

        os.kill(pids[0], signal.SIGKILL)
        time.sleep(0.2)
        out = mgr.chunk_step(np.stack([libero_sign[0], libero_sign[0]]))
        assert out.infos["sim_restarted"].tolist() == [True, False]
        np.testing.assert_array_equal(out.obs["full_image"][0], alone[0]["full_image"])  # a fresh reset to the state id
        assert mgr.stats.restarts == 1
        assert not mgr.chunk_step(np.zeros((2, CHUNK, 7), np.float32)).infos["sim_restarted"].any()


def test_a_task_whose_assets_would_download_is_refused_at_config_load() -> None:
    """PickSingleYCB-v1 needs the YCB assets from a hub: the config is refused, naming the task and the asset."""
    with pytest.raises(ConfigError, match=r"PickSingleYCB-v1.*needs assets.*ycb.*never downloads"):
        load_config(data={"train": {"simulator_type": "maniskill", "task_name": "PickSingleYCB-v1"}})


def test_the_refusal_never_prompts_without_a_terminal() -> None:
    """With no stdin (a batch job), the refusal is an error and exit code 1 within the time limit, never a prompt."""
    code = (
        "from envfleet.config import load_config\n"
        "load_config(data={'train': {'simulator_type': 'maniskill', 'task_name': 'PickSingleYCB-v1'}})\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert "ConfigError" in proc.stderr and "ycb" in proc.stderr
    assert "(y|n)" not in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("maniskill", "match"),
    [
        ({"reward_mode": "shaped"}, r"train\.maniskill\.reward_mode.*\['sparse', 'dense', 'normalized_dense', 'none'\]"),
        ({"sim_backend": "pci:0"}, r"train\.maniskill\.sim_backend"),
        ({"gripper_sign": "flipped"}, r"train\.maniskill\.gripper_sign"),
        ({"sensor_configs": {"width": 100}}, r"sensor_configs\.width.*camera_widths"),
        ({"robot_uids": "xarm6_robotiq"}, r"train\.maniskill\.state_dim.*xarm6_robotiq|xarm6"),
    ],
)
def test_bad_sections_are_refused_at_config_load(maniskill: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(data={"train": {"simulator_type": "maniskill", "task_name": TASK, "maniskill": maniskill}})


def test_task_name_is_required() -> None:
    with pytest.raises(ConfigError, match=r"train\.task_name.*ManiSkill env id"):
        load_config(data={"train": {"simulator_type": "maniskill"}})
