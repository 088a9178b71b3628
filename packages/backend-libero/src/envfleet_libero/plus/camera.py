"""LIBERO-plus's camera perturbation: where the agentview camera goes for view ``(H, V, S, R, E)``.

From LIBERO-plus's description of its camera dimension and its problem classes' ``_setup_camera``:
starting from the task's own agentview pose (position, ``wxyz`` quaternion),

1. with ``V != 0``, the camera orbits by ``V`` degrees about the axis parallel to y through
   ``(0, 0, 0.8)`` (a positive ``V`` lifts it: the rotation is by ``-V`` about +y), then
2. it orbits by ``H`` degrees about the world's z axis (always applied, ``H`` may be 0);
3. with ``S != 100``, its distance to ``(0, 0, 0.8)`` is scaled by ``S / 100``;
4. with ``R != 0``, its orientation alone turns by ``R`` degrees about z, and
5. with ``E != 0``, by ``-E`` degrees about y.

After each step LIBERO-plus rounds every coordinate to 4 decimals, so even the identity view
``(0, 0, 100, 0, 0)`` moves the camera by up to 5e-5 m against LIBERO's. Its problem classes do so
for every task, a layout task (no ``_view_`` suffix) included: done here too (the identity view,
:attr:`.data.PlusTask.camera_view`), so that every task sees LIBERO-plus's camera. Orientation is composed as
``rotation * camera`` (the camera rotated in the world frame).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["PIVOT", "perturbed_pose"]

#: The point the camera orbits and is scaled about.
PIVOT = np.array([0.0, 0.0, 0.8])


def _axis_angle_quat(axis: Sequence[float], degrees: float) -> np.ndarray:
    """``wxyz`` quaternion of a rotation by ``degrees`` about unit ``axis``."""
    half = np.radians(degrees) / 2.0
    return np.concatenate([[np.cos(half)], np.sin(half) * np.asarray(axis, dtype=np.float64)])


def _qmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product ``a * b`` of ``wxyz`` quaternions."""
    aw, ax, ay, az = a
    bw, bx, by, bz = b
    return np.array(
        [
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ]
    )


def _rotate(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Vector ``v`` rotated by unit ``wxyz`` quaternion ``q``."""
    w, u = q[0], q[1:]
    return np.asarray(v + 2.0 * np.cross(u, np.cross(u, v) + w * v), dtype=np.float64)


def _unit(q: np.ndarray) -> np.ndarray:
    return q / np.linalg.norm(q)


def _round(x: np.ndarray) -> np.ndarray:
    return np.round(np.asarray(x, dtype=np.float64), 4)


def perturbed_pose(pos: Sequence[float], quat: Sequence[float], view: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """The agentview camera's ``(pos, wxyz quat)`` for view ``(H, V, S, R, E)``, from its task pose ``(pos, quat)``.

    >>> p, q = perturbed_pose([0.6586131746834771, 0.0, 1.6103500240372423], [0.638, 0.3048, 0.3048, 0.638], (0, 0, 100, 0, 0))
    >>> p.tolist()
    [0.6586, 0.0, 1.6104]
    """
    h, v, s, r, e = (int(x) for x in view)
    p = np.asarray(pos, dtype=np.float64)
    q = _unit(np.asarray(quat, dtype=np.float64))
    if v != 0:
        turn = _axis_angle_quat((0.0, 1.0, 0.0), -v)
        p, q = _round(_rotate(turn, p - PIVOT) + PIVOT), _round(_qmul(turn, q))
    turn = _axis_angle_quat((0.0, 0.0, 1.0), h)
    p, q = _round(_rotate(turn, p)), _round(_qmul(turn, _unit(q)))
    if s != 100:
        p = _round(PIVOT + (p - PIVOT) * (s / 100.0))
    if r != 0:
        q = _round(_qmul(_axis_angle_quat((0.0, 0.0, 1.0), r), _unit(q)))
    if e != 0:
        q = _round(_qmul(_axis_angle_quat((0.0, 1.0, 0.0), -e), _unit(q)))
    return p, q
