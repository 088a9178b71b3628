"""A dataset recorded by envfleet (train.record.format: lerobot), loaded by LeRobot 0.6.1's own ``LeRobotDataset``.

The toy backend runs here (Python 3.12) behind the gymnasium face, which records through its
stage's manager; LeRobot then reads the files back. Video: libx264rgb at crf 0 (lossless), so the
decoded frames must equal the simulator's images bit for bit.
"""

from __future__ import annotations

import json

import numpy as np
import torch
from lerobot.datasets.lerobot_dataset import LeRobotDataset

from envfleet.gym import EnvfleetVectorEnv

N, CHUNK, DIM, SIZE = 2, 4, 7, 32


def test_lerobot_dataset_loads_what_the_gym_face_recorded(tmp_path) -> None:
    record = tmp_path / "rec"
    cfg = {
        "train": {
            "simulator_type": "toy",
            "num_envs": N,
            "max_episode_steps": 10,
            "init_params": {"camera_heights": SIZE, "camera_widths": SIZE},
            "toy": {"states_per_task": 4},
            "record": {"format": "lerobot", "dir": str(record)},
        },
        "actor": {"model": {"num_action_chunks": CHUNK, "action_dim": DIM}},
    }
    env = EnvfleetVectorEnv(cfg)
    rng = np.random.default_rng(0)
    episodes: list[dict] = []
    try:
        obs, infos = env.reset(seed=0)
        running = [
            {
                "full": [obs["full_image"][i]],
                "wrist": [obs["wrist_image"][i]],
                "state": [obs["state"][i]],
                "action": [],
                "task": infos["task_description"][i],
            }
            for i in range(N)
        ]
        for _ in range(9):
            acts = rng.uniform(-1, 1, (N, CHUNK, DIM)).astype(np.float32)
            stepped = [ep is not None for ep in running]
            obs, _, term, trunc, infos = env.step(acts)
            for i in range(N):
                ep = running[i]
                if ep is None:  # reset by this step (NextStep autoreset): a new episode from its observation
                    running[i] = {
                        "full": [obs["full_image"][i]],
                        "wrist": [obs["wrist_image"][i]],
                        "state": [obs["state"][i]],
                        "action": [],
                        "task": infos["task_description"][i],
                    }
                    continue
                assert stepped[i]
                ep["action"].append(acts[i])
                if term[i] or trunc[i]:
                    episodes.append(ep)
                    running[i] = None
                else:
                    ep["full"].append(obs["full_image"][i])
                    ep["wrist"].append(obs["wrist_image"][i])
                    ep["state"].append(obs["state"][i])
    finally:
        env.close()
    assert len(episodes) >= 2
    root = record / "train" / "rank_0_stage_0"
    ds = LeRobotDataset("envfleet/toy", root=root, video_backend="pyav")
    # The episodes are written in the order they ended; within one step, by env index.
    assert ds.num_episodes == len(episodes) and ds.num_frames == sum(len(e["action"]) for e in episodes)
    assert set(ds.meta.features) >= {"observation.images.full_image", "observation.images.wrist_image", "observation.state", "action"}
    for index, ep in enumerate(episodes):
        row = ds.meta.episodes[index]
        assert row["length"] == len(ep["action"]) and row["tasks"] == [ep["task"]]
        start = row["dataset_from_index"]
        for t in range(row["length"]):
            item = ds[start + t]
            assert item["task"] == ep["task"] and int(item["frame_index"]) == t
            assert torch.equal(item["action"], torch.from_numpy(ep["action"][t].reshape(-1)))  # to the bit
            assert torch.equal(item["observation.state"], torch.from_numpy(ep["state"][t]))
            for key, frames in (("full_image", ep["full"]), ("wrist_image", ep["wrist"])):
                # LeRobot hands images out as float [C, H, W] in [0, 1]: back to uint8 exactly.
                decoded = (item[f"observation.images.{key}"] * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()
                np.testing.assert_array_equal(decoded, frames[t])
        assert bool(ds[start + row["length"] - 1]["next.done"])
    # The face never calls finish_rollout: closing it put the stage's protocol and fingerprint in the metadata.
    meta = json.loads((root / "meta" / "envfleet.json").read_text())
    assert meta["fingerprints"][-1]["hash"] and meta["protocol"]["backend"] == "toy"
    assert not {"unknown", "error"} & set(meta["protocol"]["renderer"])  # asked of the running stage (the toy names none)
