"""``train.record``: what a rollout records, and where (see docs/recording.md)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["RecordConfig", "RecordFormat"]


class RecordFormat(str, Enum):
    """The dataset formats a rollout can record."""

    lerobot = "lerobot"  # LeRobot's v3.0 dataset format, as lerobot 0.6.1 reads it


@dataclass
class RecordConfig:
    """``train.record``: record every finished episode of every stage as a dataset.

    One dataset per worker rank and stage, ``{dir}/{mode}/rank_{rank}_stage_{stage}``.
    """

    format: RecordFormat | None = None  # null: nothing is recorded; lerobot: LeRobot v3.0 datasets
    dir: str = "datasets"  # where the datasets go; envfleet rollout puts a relative path under --out
    fps: int = 10  # frames per second written in the dataset (one frame per chunk step)
    # Camera images (uint8 [H, W, 3]) recorded as video features; null: every camera of the backend's spec.
    image_keys: list[str] | None = None
    # The video encoder (a PyAV codec name) and its options. libx264rgb at crf 0 is lossless:
    # decoded frames equal the simulator's images bit for bit.
    video_codec: str = "libx264rgb"
    pix_fmt: str = "rgb24"
    crf: int = 0
    # Finished episodes waiting for the writer thread; when full, the step waits and the wait is reported.
    queue_episodes: int = 32
