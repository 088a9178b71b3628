"""The Isaac suite needs Python 3.12 and Isaac Lab (``nox -s tests-isaac``); elsewhere it is not collected."""

from __future__ import annotations

import importlib.util
import sys

collect_ignore_glob: list[str] = []
if sys.version_info < (3, 12) or importlib.util.find_spec("isaaclab") is None:
    collect_ignore_glob = ["test_*.py"]
