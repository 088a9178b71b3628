"""The comparison with LIBERO-plus's own env runs in ``nox -s tests-libero-plus``, which builds that env's venv.

LIBERO-plus pins numpy<2, mujoco<3.4 and robosuite<1.5, so its env never runs in the main venv:
without ``ENVFLEET_LIBEROPLUS_PYTHON`` (its venv's Python) and ``ENVFLEET_LIBEROPLUS_MUJOCO`` (a
folder holding the MuJoCo it pins, laid over the main venv for envfleet's second run) these
tests are not collected (the ``tests`` session).
"""

from __future__ import annotations

import os

collect_ignore_glob: list[str] = (
    [] if os.environ.get("ENVFLEET_LIBEROPLUS_PYTHON") and os.environ.get("ENVFLEET_LIBEROPLUS_MUJOCO") else ["test_*.py"]
)
