"""Action conventions: what a policy emits versus what LIBERO's OSC_POSE controller takes.

LIBERO takes 7 numbers per step: six OSC pose deltas (position, axis-angle) in
``[-1, 1]`` and a gripper command, ``-1`` open and ``+1`` close. Pure numpy, no
simulator: importable anywhere, unit-testable.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ACTION_DIM", "SETTLE_ACTION", "SETTLE_ACTIONS", "apply_action_transform"]

ACTION_DIM = 7

#: The no-op LIBERO evaluations step while objects settle after a reset: no motion, gripper open.
SETTLE_ACTION = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0], dtype=np.float64)

#: ``train.libero.settle_action``: LIBERO's own no-op, or verl-vla's (all zeros: gripper at 0, not open).
SETTLE_ACTIONS = {"open": SETTLE_ACTION, "zeros": np.zeros(ACTION_DIM, dtype=np.float64)}


def apply_action_transform(actions: np.ndarray, transform: str) -> np.ndarray:
    """Map policy actions ``[..., 7]`` to LIBERO actions; returns a new float64 array.

    ``none``: unchanged. ``openvla``: the gripper channel goes through what
    OpenVLA-family models need: ``[0, 1] -> [-1, 1]`` (``2g - 1``), binarized with
    ``sign`` and negated (those models emit 1 for open, LIBERO wants -1). A gripper
    value of exactly 0.5 maps to 0 (sign of 0), as in OpenVLA's own code.

    >>> apply_action_transform(np.array([[0.1, 0, 0, 0, 0, 0, 0.9]]), "openvla")[0, -1]
    np.float64(-1.0)
    """
    # float64 before anything else: robosuite's controller math then runs at one
    # precision, whatever dtype the caller used (NumPy 2 keeps float32 * python float in float32).
    out = np.array(actions, dtype=np.float64, copy=True)
    if out.shape[-1] != ACTION_DIM:
        raise ValueError(f"LIBERO actions have {ACTION_DIM} components, got shape {list(out.shape)}")
    if transform == "none":
        return out
    if transform == "openvla":
        out[..., -1] = -np.sign(2.0 * out[..., -1] - 1.0) + 0.0  # + 0.0: no negative zeros
        return out
    raise ValueError(f"unknown action_transform {transform!r}: expected 'none' or 'openvla'")
