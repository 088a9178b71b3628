"""A dataset's normalisation statistics, as LeRobot 0.6.1 defines them: per episode, then aggregated.

LeRobot's policies normalise their inputs and outputs with ``meta/stats.json``: for every feature
``min``, ``max``, ``mean``, ``std``, ``count`` and the quantiles ``q01``, ``q10``, ``q50``, ``q90``,
``q99``. LeRobot's writer computes them per episode when it saves the episode
(``lerobot.datasets.compute_stats.compute_episode_stats``), keeps them in the episode's row of
``meta/episodes`` (columns ``stats/<feature>/<stat>``), and folds them into the dataset's statistics
(``aggregate_stats``, one episode at a time). This module computes the same quantities by the same
definitions, without importing LeRobot:

- a numeric feature: over the episode's frames, per dimension; quantiles from a 5000-bin histogram
  between the episode's min and max, interpolated within the bin; fewer than two frames: the
  quantiles are the mean;
- an image: an evenly spaced sample of the episode's frames (all of them up to 100), each
  channel-first and strided down when a side reaches 300 pixels; per channel over the sample's
  pixels, divided by 255; ``count`` is the number of frames sampled;
- aggregated: count-weighted mean, the pooled variance, min of mins, max of maxes, and the
  count-weighted mean of each quantile.

Arrays keep the dtype LeRobot computes in (float32 for float32 and uint8 features, float64 for
integers), so the figures agree with LeRobot's to float rounding (tests/lerobot compares them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["QUANTILES", "feature_stats", "image_stats", "episode_stats", "aggregate", "to_json", "from_json", "flatten"]

QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
_Q_KEYS = tuple(f"q{int(q * 100):02d}" for q in QUANTILES)
_BINS = 5000

Stats = dict[str, np.ndarray]


def _quantile(hist: np.ndarray, edges: np.ndarray, target: float) -> Any:
    """The value below which ``target`` of the histogram's counts lie, interpolated within its bin."""
    cumsum = np.cumsum(hist)
    idx = int(np.searchsorted(cumsum, target))
    if idx == 0:
        return edges[0]
    if idx >= len(cumsum):
        return edges[-1]
    before = cumsum[idx - 1]
    inside = cumsum[idx] - before
    if inside == 0:
        return edges[idx]
    return edges[idx] + (target - before) / inside * (edges[idx + 1] - edges[idx])


def _rows_stats(rows: np.ndarray, count: int) -> Stats:
    """Statistics of ``rows`` ``[samples, dims]`` per dimension; ``count`` is what is reported as the count."""
    if rows.shape[0] < 2:
        mean = np.mean(rows, axis=0)
        out = {"min": np.min(rows, axis=0), "max": np.max(rows, axis=0), "mean": mean, "std": np.std(rows, axis=0)}
        out.update({q: mean.copy() for q in _Q_KEYS})
        out["count"] = np.array([count])
        return out
    rows = rows.astype(np.result_type(rows.dtype, np.float32), copy=False)
    mean = np.mean(rows, axis=0)
    mean_sq = np.mean(rows**2, axis=0)
    low, high = np.min(rows, axis=0), np.max(rows, axis=0)
    quantiles: list[list[Any]] = [[] for _ in _Q_KEYS]
    for d in range(rows.shape[1]):
        edges = np.linspace(low[d] - 1e-10, high[d] + 1e-10, _BINS + 1)
        hist = np.histogram(rows[:, d], bins=edges)[0].astype(np.float64)
        for j, q in enumerate(QUANTILES):
            quantiles[j].append(_quantile(hist, edges, q * rows.shape[0]))
    out = {"min": low, "max": high, "mean": mean, "std": np.sqrt(np.maximum(0, mean_sq - mean**2)), "count": np.array([count])}
    out.update({key: np.array(values) for key, values in zip(_Q_KEYS, quantiles)})
    return out


def feature_stats(values: np.ndarray) -> Stats:
    """A numeric feature's statistics over one episode: ``values`` ``[frames]`` or ``[frames, dims]``.

    A 1-D feature's statistics have shape ``[1]``; a vector's ``[dims]``.
    """
    values = np.asarray(values)
    rows = values.reshape(-1, 1) if values.ndim == 1 else values.reshape(len(values), -1)
    stats = _rows_stats(rows, len(values))
    if values.ndim == 1:
        stats = {k: v if k == "count" else np.asarray(v).reshape(1) for k, v in stats.items()}
    return stats


def _sample(frames: int) -> list[int]:
    """Which of an episode's ``frames`` enter its image statistics: evenly spaced, all of them up to 100."""
    wanted = max(min(100, frames), min(int(frames**0.75), 10_000))
    return np.round(np.linspace(0, frames - 1, wanted)).astype(int).tolist()


def image_stats(images: Sequence[np.ndarray]) -> Stats:
    """A camera's statistics over one episode: ``images`` uint8 ``[H, W, C]`` per frame; each stat ``[C, 1, 1]`` in [0, 1]."""
    picked = []
    for index in _sample(len(images)):
        img = np.asarray(images[index]).transpose(2, 0, 1)
        _, height, width = img.shape
        if max(height, width) >= 300:
            step = int(width / 150) if width > height else int(height / 150)
            img = img[:, ::step, ::step]
        picked.append(img)
    batch = np.stack(picked)
    channels = batch.shape[1]
    stats = _rows_stats(batch.transpose(0, 2, 3, 1).reshape(-1, channels), len(picked))
    return {k: v if k == "count" else np.asarray(v).reshape(channels, 1, 1) / 255.0 for k, v in stats.items()}


def episode_stats(columns: Mapping[str, np.ndarray], images: Mapping[str, Sequence[np.ndarray]]) -> dict[str, Stats]:
    """Every feature's statistics over one episode: numeric ``columns`` and camera ``images`` by feature name."""
    out = {key: feature_stats(values) for key, values in columns.items()}
    out.update({key: image_stats(frames) for key, frames in images.items()})
    return out


def _aggregate_feature(parts: Sequence[Stats]) -> Stats:
    means = np.stack([p["mean"] for p in parts])
    variances = np.stack([p["std"] ** 2 for p in parts])
    counts = np.stack([p["count"] for p in parts])
    total = counts.sum(axis=0)
    while counts.ndim < means.ndim:
        counts = np.expand_dims(counts, axis=-1)
    mean = (means * counts).sum(axis=0) / total
    variance = ((variances + (means - mean) ** 2) * counts).sum(axis=0) / total
    out = {
        "min": np.min(np.stack([p["min"] for p in parts]), axis=0),
        "max": np.max(np.stack([p["max"] for p in parts]), axis=0),
        "mean": mean,
        "std": np.sqrt(variance),
        "count": total,
    }
    for q in _Q_KEYS:
        if all(q in p for p in parts):
            out[q] = (np.stack([p[q] for p in parts]) * counts).sum(axis=0) / total
    return out


def aggregate(parts: Sequence[Mapping[str, Stats]]) -> dict[str, Stats]:
    """The statistics of the union of ``parts`` (each a feature -> stats mapping), feature by feature."""
    keys = {key for part in parts for key in part}
    return {key: _aggregate_feature([part[key] for part in parts if key in part]) for key in sorted(keys)}


def to_json(stats: Mapping[str, Stats]) -> dict[str, dict[str, Any]]:
    """``stats`` as ``meta/stats.json`` holds them: nested lists."""
    return {key: {name: np.asarray(value).tolist() for name, value in feat.items()} for key, feat in stats.items()}


def from_json(value: Mapping[str, Mapping[str, Any]]) -> dict[str, Stats]:
    """``meta/stats.json``'s content as arrays (what :func:`aggregate` takes)."""
    return {key: {name: np.asarray(v) for name, v in feat.items()} for key, feat in value.items()}


def flatten(stats: Mapping[str, Stats]) -> dict[str, Any]:
    """One episode's statistics as the columns of its ``meta/episodes`` row: ``stats/<feature>/<stat>``, lists."""
    return {f"stats/{key}/{name}": np.asarray(value).tolist() for key, feat in stats.items() for name, value in feat.items()}
