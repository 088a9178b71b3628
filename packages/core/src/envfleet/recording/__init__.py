"""Recording rollouts as datasets: LeRobot's v3.0 format, one dataset per worker rank and stage.

Turned on by ``train.record.format: lerobot`` (see :class:`RecordConfig` and docs/recording.md).
:class:`~envfleet.shards.manager.ProcessEnvManager` feeds a :class:`StageRecorder` on every reset
and step; episodes are encoded (PyAV) and written (pyarrow) by a writer thread behind a bounded
queue. Needs ``pip install 'envfleet[record]'``.
"""

from __future__ import annotations

from .lerobot import Episode, LeRobotDatasetFiles
from .options import RecordConfig, RecordFormat
from .reader import episode_video, find_datasets, read_episodes, read_frames, read_info
from .stage import MARKER, StageRecorder, check_record_config, check_record_dir, dataset_root, is_envfleet_dataset
from .writer import DatasetWriter, RecordingError

__all__ = [
    "RecordConfig",
    "RecordFormat",
    "StageRecorder",
    "DatasetWriter",
    "RecordingError",
    "Episode",
    "LeRobotDatasetFiles",
    "check_record_config",
    "check_record_dir",
    "dataset_root",
    "is_envfleet_dataset",
    "MARKER",
    "find_datasets",
    "read_info",
    "read_episodes",
    "read_frames",
    "episode_video",
]
