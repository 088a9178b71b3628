"""The gymnasium backend's tests: gymnasium's own classic envs (and tests/gymnasium_backend/fixture_envs.py)
in the tests session's venv; LeRobot's PushT and ALOHA, each in its venv, in ``nox -s tests-gymnasium``.

The PushT and ALOHA tests are collected only where ``nox -s tests-gymnasium`` names those venvs
(``ENVFLEET_PUSHT_PYTHON``, ``ENVFLEET_ALOHA_PYTHON``): never in the main venv. Every test here probes
into a cache of its own (``ENVFLEET_GYMNASIUM_CACHE``), and the repository's root is on ``sys.path``,
which shard processes inherit, so that a config can name ``tests.gymnasium_backend.fixture_envs:<id>``.
"""

from __future__ import annotations

import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ.setdefault("ENVFLEET_GYMNASIUM_CACHE", tempfile.mkdtemp(prefix="envfleet-gymnasium-cache-"))

collect_ignore_glob: list[str] = []
if not os.environ.get("ENVFLEET_PUSHT_PYTHON"):
    collect_ignore_glob.append("test_pusht*.py")
if not os.environ.get("ENVFLEET_ALOHA_PYTHON"):
    collect_ignore_glob.append("test_aloha*.py")
