"""LIBERO-plus's sensor noise: five image corruptions at ten severities, seeded.

A noise task ``_noise_K`` corrupts the agentview camera's image at every observation: ``K`` 1-10
motion blur, 11-20 Gaussian blur, 21-30 zoom blur, 31-40 fog, 41-50 glass blur, severity
``(K - 1) % 10 + 1``. These are ImageNet-C's corruptions (Hendrycks and Dietterich) with
LIBERO-plus's ten-step severity tables, written here from that description with NumPy and SciPy:

- motion blur: a one-sided line kernel of Gaussian weights (ImageMagick's ``MotionBlurImage``,
  ``radius``, ``sigma``) at a random angle in [-45, 45) degrees;
- Gaussian blur: ``sigma`` per severity, each channel, edges repeated (``skimage``'s ``gaussian``);
- zoom blur: the mean of the image and its centre zoomed by each factor of a range (linear);
- fog: a diamond-square plasma fractal added, the range compressed to keep the image's maximum;
- glass blur: blurred, pixels swapped with random neighbours within ``delta`` a few times, blurred again.

What differs from LIBERO-plus's code, on purpose:

- **Seeded.** Every random draw comes from the generator the caller passes, which envfleet seeds
  from ``train.seed``, the state id and the episode step (:func:`frame_rng`): the same state id
  gives the same noisy frames in any run, any process, with ``render: last`` or ``all``.
  LIBERO-plus draws from NumPy's global generator, which LIBERO also uses to place fixtures.
- **Any image size.** LIBERO-plus's fog adds a 256x256 fractal and its glass blur swaps pixels in
  the first 224x224 only (ImageNet's size); here the fractal is as large as the image and the swaps
  cover all of it. Zoom blur crops both sides (LIBERO-plus assumes a square image).
- No ``np.float_`` (removed in NumPy 2) and no ImageMagick.

The result is ``uint8``, truncated as LIBERO-plus does (``astype(np.uint8)`` of a float in [0, 255]).
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage

__all__ = ["KINDS", "kind_of", "frame_rng", "corrupt"]

#: The corruptions in the order of the noise levels (1-10, 11-20, ...).
KINDS: tuple[str, ...] = ("motion_blur", "gaussian_blur", "zoom_blur", "fog", "glass_blur")

# LIBERO-plus's severity tables (one row per severity 1..10).
_MOTION = [(5, 2), (8, 3), (10, 4), (12, 5), (15, 6), (18, 8), (20, 10), (25, 12), (30, 15), (35, 20)]
_GAUSSIAN = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
_ZOOM = [
    (1.11, 0.01),
    (1.16, 0.01),
    (1.21, 0.02),
    (1.26, 0.02),
    (1.31, 0.03),
    (1.36, 0.01),
    (1.41, 0.01),
    (1.46, 0.02),
    (1.51, 0.02),
    (1.56, 0.03),
]
_FOG = [(0.5, 3), (1.0, 2.8), (1.5, 2.5), (2.0, 2.2), (2.5, 2.0), (3.0, 1.8), (3.5, 1.6), (4.0, 1.5), (4.5, 1.4), (5.0, 1.3)]
_GLASS = [(0.5, 1, 3), (0.7, 1, 3), (0.9, 2, 3), (1.0, 2, 2), (1.1, 3, 2), (1.3, 3, 2), (1.5, 4, 2), (1.8, 4, 2), (2.2, 5, 1), (2.5, 5, 1)]


def kind_of(level: int) -> tuple[str, int]:
    """``(corruption, severity)`` of noise level ``level`` (1-50)."""
    if not 1 <= int(level) <= 50:
        raise ValueError(f"LIBERO-plus noise level {level} does not exist (1 .. 50)")
    return KINDS[(int(level) - 1) // 10], (int(level) - 1) % 10 + 1


def frame_rng(seed: int, state_id: int, step: int) -> np.random.Generator:
    """The generator of one frame's noise: ``train.seed``, the state id and the episode step (0 after a reset)."""
    return np.random.default_rng([int(seed) & 0xFFFFFFFF, int(state_id), int(step), 0x11BE30])


def _gaussian(x: np.ndarray, sigma: float) -> np.ndarray:
    return np.asarray(ndimage.gaussian_filter(x, sigma=(sigma, sigma, 0), mode="nearest", truncate=4.0))


def _motion_blur(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    radius, sigma = _MOTION[severity - 1]
    angle = np.radians(rng.uniform(-45.0, 45.0))
    steps = np.arange(2 * radius + 1, dtype=np.float64)
    weights = np.exp(-(steps**2) / (2.0 * sigma**2))
    weights /= weights.sum()
    h, w = x.shape[:2]
    rows, cols = np.arange(h)[:, None], np.arange(w)[None, :]
    out = np.zeros_like(x)
    for k, weight in zip(steps, weights):
        # Pixel k of the line lies ahead of the pixel, along the angle, rounded half down (ImageMagick's offsets).
        dy, dx = int(np.ceil(k * np.sin(angle) - 0.5)), int(np.ceil(k * np.cos(angle) - 0.5))
        out += weight * x[np.clip(rows + dy, 0, h - 1), np.clip(cols + dx, 0, w - 1)]
    return out


def _clipped_zoom(x: np.ndarray, factor: float) -> np.ndarray:
    h, w = x.shape[:2]
    ch, cw = int(np.ceil(h / factor)), int(np.ceil(w / factor))
    top, left = (h - ch) // 2, (w - cw) // 2
    zoomed = ndimage.zoom(x[top : top + ch, left : left + cw], (factor, factor, 1), order=1)
    th, tw = (zoomed.shape[0] - h) // 2, (zoomed.shape[1] - w) // 2
    return np.asarray(zoomed[th : th + h, tw : tw + w])


def _zoom_blur(x: np.ndarray, severity: int) -> np.ndarray:
    stop, step = _ZOOM[severity - 1]
    factors = np.arange(1.0, stop, step)
    x = x.astype(np.float32)
    out = np.zeros_like(x)
    for factor in factors:
        out += _clipped_zoom(x, float(factor))
    return np.asarray((x + out) / (len(factors) + 1))


def _plasma(size: int, decay: float, rng: np.random.Generator) -> np.ndarray:
    """A ``size`` x ``size`` diamond-square fractal in [0, 1] (``size`` a power of two)."""
    grid = np.zeros((size, size))
    stride, wibble = size, 100.0

    def jitter(values: np.ndarray) -> np.ndarray:
        return values / 4 + wibble * rng.uniform(-wibble, wibble, values.shape)

    while stride >= 2:
        half = stride // 2
        corners = grid[0:size:stride, 0:size:stride]
        square = corners + np.roll(corners, -1, axis=0)
        square = square + np.roll(square, -1, axis=1)
        grid[half:size:stride, half:size:stride] = jitter(square)
        centres = grid[half:size:stride, half:size:stride]
        corners = grid[0:size:stride, 0:size:stride]
        grid[0:size:stride, half:size:stride] = jitter(centres + np.roll(centres, 1, axis=0) + corners + np.roll(corners, -1, axis=1))
        grid[half:size:stride, 0:size:stride] = jitter(centres + np.roll(centres, 1, axis=1) + corners + np.roll(corners, -1, axis=0))
        stride //= 2
        wibble /= decay
    grid -= grid.min()
    return grid / grid.max()


def _fog(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    amount, decay = _FOG[severity - 1]
    h, w = x.shape[:2]
    size = 1 << int(np.ceil(np.log2(max(h, w, 2))))
    top = x.max()
    x = x + amount * _plasma(size, decay, rng)[:h, :w, None]
    return np.asarray(x * top / (top + amount))


def _glass_blur(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    sigma, delta, iterations = _GLASS[severity - 1]
    img = (np.clip(_gaussian(x, sigma), 0, 1) * 255).astype(np.uint8)
    h, w = img.shape[:2]
    rows = np.arange(h - 1 - delta, delta, -1)
    cols = np.arange(w - 1 - delta, delta, -1)
    for _ in range(iterations):
        shifts = rng.integers(-delta, delta, size=(len(rows), len(cols), 2))
        _swap_neighbours(img, rows, cols, shifts)
    return _gaussian(img / 255.0, sigma)


def _swap_neighbours(img: np.ndarray, rows: np.ndarray, cols: np.ndarray, shifts: np.ndarray) -> None:
    """Swap each pixel ``(r, c)``, in order, with ``(r + dy, c + dx)``: sequential, as the corruption is defined."""
    _swap_kernel()(img, rows, cols, shifts)


_SWAP = None


def _swap_kernel():  # type: ignore[no-untyped-def]
    # numba (robosuite's dependency) compiles the sequential loop once per process; 200k swaps a frame.
    global _SWAP
    if _SWAP is None:
        import numba  # its import (LLVM) costs a second: only a process that glass-blurs pays it

        @numba.njit(cache=False)
        def swap(img, rows, cols, shifts):  # type: ignore[no-untyped-def]
            for i in range(rows.shape[0]):
                for j in range(cols.shape[0]):
                    r, c = rows[i], cols[j]
                    r2, c2 = r + shifts[i, j, 1], c + shifts[i, j, 0]
                    for ch in range(img.shape[2]):
                        tmp = img[r, c, ch]
                        img[r, c, ch] = img[r2, c2, ch]
                        img[r2, c2, ch] = tmp

        _SWAP = swap
    return _SWAP


def corrupt(image: np.ndarray, level: int, rng: np.random.Generator) -> np.ndarray:
    """``image`` (uint8 ``[H, W, 3]``) with noise level ``level`` (1-50) applied; a new uint8 array."""
    kind, severity = kind_of(level)
    x = np.asarray(image, dtype=np.float64) / 255.0
    if kind == "motion_blur":
        out = _motion_blur(x, severity, rng)
    elif kind == "gaussian_blur":
        out = _gaussian(x, _GAUSSIAN[severity - 1])
    elif kind == "zoom_blur":
        out = _zoom_blur(x, severity)
    elif kind == "fog":
        out = _fog(x, severity, rng)
    else:
        out = _glass_blur(x, severity, rng)
    return (np.clip(out, 0.0, 1.0) * 255).astype(np.uint8)
