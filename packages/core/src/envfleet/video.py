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

from .errors import ConfigError

__all__ = ["VideoRecorder", "require_video_deps", "tile_frames"]


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
    """Collects tiled frames of a stage and writes them as mp4 files in the background."""

    def __init__(self, video_cfg: Any, num_envs: int) -> None:
        require_video_deps()
        self.fps = int(video_cfg.fps)
        self.max_frames = int(video_cfg.max_frames)
        self.num_envs = num_envs
        self.frames: list[np.ndarray] = []
        self._threads: list[threading.Thread] = []
        self._counters: dict[str, int] = {}
        self._errors: list[BaseException] = []

    def add(self, obs: dict[str, np.ndarray], task_ids: Any, rewards: Any, success: Any) -> None:
        """Record one frame of every env from ``obs["full_image"]``, labelled with task, reward and success."""
        images = obs.get("full_image")
        if images is None:
            return
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
