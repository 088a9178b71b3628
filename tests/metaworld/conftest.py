"""The MetaWorld suite runs in ``nox -s tests-metaworld``, which builds MetaWorld's venv and names it here.

MetaWorld pins MuJoCo 3.3.0, so it is never installed in the main venv: without
``ENVFLEET_METAWORLD_PYTHON`` these tests are not collected (the ``tests`` session).
"""

from __future__ import annotations

import os

collect_ignore_glob: list[str] = [] if os.environ.get("ENVFLEET_METAWORLD_PYTHON") else ["test_*.py"]
