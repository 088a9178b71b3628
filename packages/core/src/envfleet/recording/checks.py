"""Checks of ``train.record`` before anything starts: the format, the dependencies, the directory.

A ``train.record.dir`` holds envfleet's datasets only: its marker file says so, and every dataset
directory in it has ``meta/envfleet.json``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import ConfigError
from .lerobot import ENVFLEET_META, read_json
from .options import RecordConfig, RecordFormat
from .writer import RecordingError

# Imports inside functions: PyAV and pyarrow (the record extra) load only where a dataset is checked, read or
# written.

__all__ = [
    "MARKER",
    "dataset_root",
    "check_record_dir",
    "require_record_deps",
    "check_record_config",
    "is_envfleet_dataset",
    "cameras",
]

MARKER = "envfleet-record.json"  # in train.record.dir: says the directory holds envfleet's datasets


def dataset_root(record_dir: str, mode: str, rank: int, stage: int) -> str:
    """Where the dataset of one worker rank and stage goes."""
    return os.path.join(record_dir, mode, f"rank_{rank}_stage_{stage}")


def check_record_dir(record_dir: str, root: str | None) -> None:
    """Refuse a ``train.record.dir`` that holds something other than envfleet's datasets; mark it as envfleet's.

    :raises ConfigError: the path is a file, a non-empty directory without envfleet's marker, or a
        dataset directory without ``meta/envfleet.json``.
    """
    if os.path.exists(record_dir) and not os.path.isdir(record_dir):
        raise ConfigError(f"train.record.dir {record_dir!r} is a file; expected a directory for envfleet's datasets")
    if os.path.isdir(record_dir) and os.listdir(record_dir) and not os.path.exists(os.path.join(record_dir, MARKER)):
        raise ConfigError(
            f"train.record.dir {record_dir!r} exists and is not an envfleet dataset directory (no {MARKER}); "
            "choose a new or empty directory"
        )
    if root is not None and os.path.exists(root) and os.listdir(root) and not os.path.exists(os.path.join(root, ENVFLEET_META)):
        raise ConfigError(f"{root!r} exists and is not an envfleet dataset (no {ENVFLEET_META}); choose another train.record.dir")
    try:
        os.makedirs(record_dir, exist_ok=True)
        _mark(record_dir)
    except OSError as exc:
        raise RecordingError(f"train.record.dir {record_dir!r} cannot be written: {exc}") from exc


def _mark(record_dir: str) -> None:
    """Create ``record_dir``'s marker once, whichever of several workers starting together gets there first.

    The marker is created exclusively and written in one call: no temporary file appears in the directory,
    where another worker's :func:`check_record_dir` would see a non-empty directory without the marker.
    """
    body = json.dumps({"format": "lerobot", "layout": "{mode}/rank_{rank}_stage_{stage}"}).encode()
    try:
        fd = os.open(os.path.join(record_dir, MARKER), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return
    try:
        os.write(fd, body)
    finally:
        os.close(fd)


def require_record_deps(cfg: RecordConfig) -> None:
    """Raise :class:`~envfleet.errors.ConfigError` with the install command if recording cannot work here."""
    try:
        import av
        import pyarrow  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"train.record needs PyAV and pyarrow ({exc}): pip install 'envfleet[record]'") from None
    if cfg.video_codec not in av.codecs_available:
        raise ConfigError(f"train.record.video_codec {cfg.video_codec!r} is not an encoder of this PyAV build; e.g. libx264rgb, libx264")
    if str(getattr(cfg.images, "value", cfg.images)) == "image" and "png" not in av.codecs_available:
        raise ConfigError("train.record.images: image needs PyAV's png encoder, which this PyAV build lacks; record images: video")


def check_record_config(section: Any) -> None:
    """Check an env section's ``record`` before anything starts: the dependencies, the codec and the directory.

    :raises ConfigError: an unknown format, a missing dependency or codec, a directory that is not envfleet's.
    """
    cfg = section.record
    if cfg.format is None:
        return
    if RecordFormat(cfg.format) is not RecordFormat.lerobot:
        raise ConfigError(f"train.record.format {cfg.format!r}: expected one of {[f.value for f in RecordFormat]} or null")
    require_record_deps(cfg)
    check_record_dir(str(cfg.dir), None)


def cameras(spec: Mapping[str, Any], chosen: Any) -> list[str]:
    """The cameras recorded: ``chosen`` (``record.image_keys``), or every uint8 ``[H, W, 3]`` of ``spec``.

    :raises ConfigError: ``chosen`` names a key that is not a camera image.
    """
    images = [k for k, s in spec.items() if np.dtype(s.dtype) == np.uint8 and len(s.shape) == 3 and s.shape[-1] == 3]
    if chosen is None:
        return images
    keys = [str(k) for k in chosen]
    wrong = [k for k in keys if k not in images]
    if wrong:
        raise ConfigError(f"train.record.image_keys is {keys}: {wrong} not among the backend's camera images {images}")
    return keys


def is_envfleet_dataset(root: str) -> bool:
    """Whether ``root`` holds a dataset envfleet recorded."""
    path = os.path.join(root, ENVFLEET_META)
    return os.path.exists(path) and bool(read_json(path).get("envfleet_dataset"))
