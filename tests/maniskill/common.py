"""Shared settings of the ManiSkill tests: small images, short chunks, and ManiSkill run alone."""

from __future__ import annotations

from typing import Any

import numpy as np

SIZE = 64
CHUNK = 4
ACTION_DIM = 7  # pd_ee_delta_pose on the Panda: position (3), rotation (3), gripper (1)


def maniskill_train(task: str = "PushCube-v1", **extra: Any) -> dict[str, Any]:
    """A ``train`` section for ``task`` with 64x64 images from the base and hand cameras."""
    maniskill = extra.pop("maniskill", {})
    return {
        "simulator_type": "maniskill",
        "task_name": task,
        "init_params": {"camera_heights": SIZE, "camera_widths": SIZE},
        "maniskill": maniskill,
        **extra,
    }


def moving_actions(seed: int, n: int, chunks: int = 1) -> np.ndarray:
    """``[chunks, n, CHUNK, 7]`` float32 actions that move the arm and open and close the gripper."""
    rng = np.random.default_rng(seed)
    actions = rng.uniform(-1, 1, size=(chunks, n, CHUNK, ACTION_DIM)).astype(np.float32)
    actions[..., -1] = np.sign(actions[..., -1])
    return actions


def plain_maniskill(task: str, seed: int, chunks: np.ndarray) -> list[dict[str, np.ndarray]]:
    """ManiSkill run alone in this process (``gym.make`` with the backend's reference arguments): images and qpos
    after ``reset(seed=seed)`` and after each chunk of ``chunks`` (``[c, CHUNK, 7]``, ManiSkill's gripper sign)."""
    import os

    from envfleet_maniskill.device import default_icd
    from envfleet_maniskill.gym_args import reference_kwargs

    os.environ.setdefault("VK_ICD_FILENAMES", default_icd())
    import gymnasium as gym
    import mani_skill.envs  # noqa: F401

    env = gym.make(task, **reference_kwargs(SIZE))
    try:
        out = []
        obs, _ = env.reset(seed=seed)
        out.append(_frame(obs))
        for chunk in chunks:
            for action in chunk:
                obs, *_ = env.step(action)
            out.append(_frame(obs))
        return out
    finally:
        env.close()


def _frame(obs: dict[str, Any]) -> dict[str, np.ndarray]:
    data = obs["sensor_data"]
    return {
        "full_image": data["base_camera"]["rgb"][0].cpu().numpy(),
        "wrist_image": data["hand_camera"]["rgb"][0].cpu().numpy(),
        "qpos": obs["agent"]["qpos"][0].cpu().numpy(),
    }
