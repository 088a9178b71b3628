"""Reading back a dataset envfleet recorded, from the format's own files (pyarrow, PyAV), without LeRobot.

For ``envfleet report`` (an episode's video and outcome) and for checks where LeRobot is not installed.
"""

from __future__ import annotations

import glob
import os
from typing import Any

import numpy as np

from .lerobot import DATA_PATH, ENVFLEET_META, VIDEO_PATH, counted_episodes, decode_png, read_json, video_key

# Imports inside functions: PyAV and pyarrow (the record extra) load only where a dataset is read.

__all__ = ["find_datasets", "read_info", "read_episodes", "read_frames", "episode_video"]


def find_datasets(record_dir: str) -> list[str]:
    """Every dataset under ``record_dir`` (``{mode}/rank_{rank}_stage_{stage}``), sorted."""
    return sorted(os.path.dirname(os.path.dirname(p)) for p in glob.glob(os.path.join(record_dir, "*", "*", ENVFLEET_META)))


def read_info(root: str) -> dict[str, Any]:
    """``meta/info.json`` with ``meta/envfleet.json`` under the key ``envfleet``."""
    info = dict(read_json(os.path.join(root, "meta", "info.json")))
    info["envfleet"] = read_json(os.path.join(root, ENVFLEET_META))
    return info


def read_episodes(root: str) -> list[dict[str, Any]]:
    """The rows of ``meta/episodes``, counted by ``info.json`` (an episode not counted there is not complete)."""
    return counted_episodes(root)


def episode_video(root: str, row: dict[str, Any], camera: str) -> str:
    """The mp4 file that holds camera ``camera`` of episode ``row`` (a row of :func:`read_episodes`)."""
    key = video_key(camera)
    where = {"chunk_index": row[f"videos/{key}/chunk_index"], "file_index": row[f"videos/{key}/file_index"]}
    return os.path.join(root, VIDEO_PATH.format(video_key=key, **where))


def read_frames(root: str, row: dict[str, Any]) -> dict[str, np.ndarray]:
    """Episode ``row``'s frames: each parquet column as an array, and each camera's decoded video (uint8 ``[T, H, W, 3]``)."""
    import av
    import pyarrow.parquet as pq

    where = {"chunk_index": row["data/chunk_index"], "file_index": row["data/file_index"]}
    table = pq.read_table(os.path.join(root, DATA_PATH.format(**where)))
    table = table.filter(np.asarray(table.column("episode_index").to_numpy()) == row["episode_index"])
    features = read_json(os.path.join(root, "meta", "info.json"))["features"]
    out: dict[str, np.ndarray] = {}
    for name in table.column_names:
        if features.get(name, {}).get("dtype") == "image":  # PNG per frame
            out[name] = np.stack([decode_png(cell["bytes"]) for cell in table.column(name).to_pylist()])
            continue
        values = table.column(name).to_numpy(zero_copy_only=False)
        out[name] = np.stack(list(values)) if values.dtype == object else values  # fixed-size lists: [T, width]
    for key, feat in features.items():
        if feat["dtype"] != "video":
            continue
        camera = key.removeprefix("observation.images.")
        with av.open(episode_video(root, row, camera)) as container:
            out[key] = np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])
    return out
