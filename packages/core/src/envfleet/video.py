"""Stage videos: every rendered frame of a stage's envs, tiled into a grid with labels.

Needs ``imageio`` with its ffmpeg wheel and Pillow (``pip install 'envfleet[video]'``).
Frames are kept in memory until :meth:`VideoRecorder.flush`, which hands them to a
background thread, so writing a file never blocks the next step.
"""

from __future__ import annotations

import math
import os
import threading
from typing import Any

import numpy as np

from .env import ObservationSpec
from .errors import ConfigError

# Imports inside functions: imageio and Pillow are the video extra: they load only when a video is written or
# labelled.

__all__ = ["VideoRecorder", "image_keys", "require_video_deps", "side_by_side", "tile_frames"]


def _is_image(spec: Any) -> bool:
    return np.dtype(spec.dtype) == np.uint8 and len(spec.shape) == 3 and spec.shape[-1] == 3


def image_keys(spec: ObservationSpec, chosen: Any = None) -> list[str]:
    """The observations a video draws: ``chosen`` (``video_cfg.image_keys``), or every camera image
    (uint8 ``[H, W, 3]``) of ``spec`` in its order.

    :raises ConfigError: ``chosen`` names a key the spec lacks or one that is not a camera image.
    """
    images = [key for key, arr in spec.items() if _is_image(arr)]
    if chosen is None:
        return images
    keys = [str(k) for k in chosen]
    wrong = [k for k in keys if k not in images]
    if wrong or not keys:
        raise ConfigError(
            f"train.video_cfg.image_keys is {keys}: {wrong or 'empty'} not among the backend's camera images "
            f"(uint8 [H, W, 3]) {images}; name some of those, or null for all of them"
        )
    return keys


def side_by_side(obs: dict[str, np.ndarray], keys: list[str]) -> np.ndarray:
    """Each env's images of ``keys`` next to each other: ``[n, max H, sum W, 3]`` (shorter ones padded below)."""
    parts = [obs[key] for key in keys]
    if len(parts) == 1:
        return parts[0]
    height = max(p.shape[1] for p in parts)
    parts = [p if p.shape[1] == height else np.pad(p, ((0, 0), (0, height - p.shape[1]), (0, 0), (0, 0))) for p in parts]
    return np.concatenate(parts, axis=2)


def require_video_deps() -> None:
    """Raise :class:`~envfleet.errors.ConfigError` with the install command if video writing cannot work."""
    try:
        import imageio  # noqa: F401
        import imageio_ffmpeg  # noqa: F401
        import PIL  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            f"train.video_cfg.save_video is true, but writing videos needs imageio, imageio-ffmpeg and Pillow ({exc}); "
            "install them with: pip install 'envfleet[video]'"
        ) from None


def tile_frames(images: np.ndarray, labels: list[str] | None = None) -> np.ndarray:
    """Tile ``[n,H,W,3]`` uint8 images into one near-square grid, each with a text label."""
    n, h, w, _ = images.shape
    cols = math.ceil(math.sqrt(n))
    rows = math.ceil(n / cols)
    grid = np.zeros((rows * h, cols * w, 3), dtype=np.uint8)
    for i in range(n):
        r, c = divmod(i, cols)
        grid[r * h : (r + 1) * h, c * w : (c + 1) * w] = images[i]
    if labels:
        from PIL import Image, ImageDraw

        pil = Image.fromarray(grid)
        draw = ImageDraw.Draw(pil)
        for i, text in enumerate(labels[:n]):
            r, c = divmod(i, cols)
            x, y = c * w + 2, r * h + 1
            draw.rectangle([x - 1, y, x + 6 * len(text) + 1, y + 10], fill=(0, 0, 0))
            draw.text((x, y), text, fill=(255, 255, 255))
        grid = np.asarray(pil)
    return grid


class VideoRecorder:
    """Collects tiled frames of a stage and writes them as mp4 files in the background.

    :param obs_spec: the backend's observation spec; the camera images of ``video_cfg.image_keys``
        (null: all of them) are drawn side by side in each env's tile. Without a spec, ``full_image``.
    """

    def __init__(self, video_cfg: Any, num_envs: int, obs_spec: ObservationSpec | None = None) -> None:
        require_video_deps()
        self.keys = image_keys(obs_spec, video_cfg.get("image_keys")) if obs_spec is not None else ["full_image"]
        self.fps = int(video_cfg.fps)
        self.max_frames = int(video_cfg.max_frames)
        self.num_envs = num_envs
        self.frames: list[np.ndarray] = []
        self._threads: list[threading.Thread] = []
        self._counters: dict[str, int] = {}
        self._errors: list[BaseException] = []

    def add(self, obs: dict[str, np.ndarray], task_ids: Any, rewards: Any, success: Any) -> None:
        """Record one frame of every env from its camera images, labelled with task, reward and success."""
        if not self.keys or any(key not in obs for key in self.keys):
            return
        images = side_by_side(obs, self.keys)
        labels = []
        for i in range(images.shape[0]):
            parts = [f"t{int(task_ids[i])}" if task_ids is not None else f"e{i}"]
            if rewards is not None:
                parts.append(f"r{float(np.asarray(rewards[i]).sum()):.1f}")
            if success is not None and bool(success[i]):
                parts.append("OK")
            labels.append(" ".join(parts))
        self.frames.append(tile_frames(images, labels))
        if len(self.frames) > self.max_frames:
            del self.frames[0]

    def flush(self, directory: str) -> str | None:
        """Write the frames so far to ``directory/{n}.mp4`` in the background; return the path."""
        if not self.frames:
            return None
        frames, self.frames = self.frames, []
        n = self._counters.get(directory, 0)
        os.makedirs(directory, exist_ok=True)
        while os.path.exists(os.path.join(directory, f"{n}.mp4")):
            n += 1
        self._counters[directory] = n + 1
        path = os.path.join(directory, f"{n}.mp4")
        thread = threading.Thread(target=self._write, args=(path, frames), name=f"envfleet-video-{n}", daemon=True)
        thread.start()
        self._threads.append(thread)
        return path

    def _write(self, path: str, frames: list[np.ndarray]) -> None:
        import imageio.v2 as imageio

        try:
            # Frame sizes must be multiples of 16 for most players; pad rather than resize.
            h, w = frames[0].shape[:2]
            ph, pw = (-h) % 16, (-w) % 16
            with imageio.get_writer(path, fps=self.fps, codec="libx264", macro_block_size=1, quality=7) as writer:
                for frame in frames:
                    if ph or pw:
                        frame = np.pad(frame, ((0, ph), (0, pw), (0, 0)))
                    writer.append_data(frame)  # type: ignore[attr-defined]
        except BaseException as exc:
            self._errors.append(exc)

    def wait(self) -> None:
        """Block until every flushed file is written; re-raise a writer's error."""
        for thread in self._threads:
            thread.join()
        self._threads = []
        if self._errors:
            err, self._errors = self._errors[0], []
            raise RuntimeError(f"writing a video failed: {err}") from err

    def close(self) -> None:
        """Wait for pending writes."""
        try:
            self.wait()
        except RuntimeError:
            pass
