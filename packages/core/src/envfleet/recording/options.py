"""``train.record``: what a rollout records, and where (see docs/recording.md)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["RecordConfig", "RecordFormat", "RecordFrames", "RecordImages", "RecordKeep"]


class RecordFormat(str, Enum):
    """The dataset formats a rollout can record."""

    lerobot = "lerobot"  # LeRobot's v3.0 dataset format, as lerobot 0.6.1 reads it


class RecordFrames(str, Enum):
    """What one frame of a recorded dataset is."""

    step = "step"  # one control step (sub-step) of the simulator: what LeRobot's policies train on
    chunk = "chunk"  # one chunk step: one decision of the policy, its whole chunk as the action


class RecordImages(str, Enum):
    """How camera images are stored."""

    video = "video"  # LeRobot's video features: one mp4 per episode and camera (video_codec, crf)
    image = "image"  # LeRobot's image features: a lossless PNG per frame, in the frames' parquet


class RecordKeep(str, Enum):
    """Which finished episodes are written."""

    all = "all"  # every finished episode (those cut by a simulator restart marked as such)
    success = "success"  # only episodes that succeeded (success_once) and were not cut by a restart


@dataclass
class RecordConfig:
    """``train.record``: record every finished episode of every stage as a dataset.

    One dataset per worker rank and stage, ``{dir}/{mode}/rank_{rank}_stage_{stage}``.
    """

    format: RecordFormat | None = None  # null: nothing is recorded; lerobot: LeRobot v3.0 datasets
    dir: str = "datasets"  # where the datasets go; envfleet rollout puts a relative path under --out
    # step: a frame per sub-step (the backend's control rate; the recorded envs render every sub-step);
    # chunk: a frame per chunk step (the chunk sent, flattened, as the action).
    frames: RecordFrames = RecordFrames.chunk
    # The dataset's frames per second; null: the backend's control rate with frames: step, 10 with frames: chunk.
    fps: int | None = None
    keep: RecordKeep = RecordKeep.all  # all, or success: only the episodes that succeeded
    min_length: int = 1  # episodes with fewer frames are not written (counted as too_short)
    # Camera images (uint8 [H, W, 3]) recorded; null: every camera of the backend's spec.
    image_keys: list[str] | None = None
    images: RecordImages = RecordImages.video  # video: mp4 per episode; image: PNG per frame (LeRobot's image features)
    # The video encoder (a PyAV codec name) and its options. libx264rgb at crf 0 is lossless:
    # decoded frames equal the simulator's images bit for bit.
    video_codec: str = "libx264rgb"
    pix_fmt: str = "rgb24"
    crf: int = 0
    # Finished episodes waiting for the writer thread; when full, the step waits and the wait is reported.
    queue_episodes: int = 32
