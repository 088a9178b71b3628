"""The ManiSkill suite runs in ``nox -s tests-maniskill``, whose venv has ManiSkill; elsewhere it is not collected."""

from __future__ import annotations

import importlib.util

collect_ignore_glob: list[str] = [] if importlib.util.find_spec("mani_skill") else ["test_*.py"]
