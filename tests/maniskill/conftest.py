"""The ManiSkill suite runs in ``nox -s tests-maniskill``, whose venv has ManiSkill; elsewhere it is not collected.

SAPIEN's BRDF lookup table (about 11 CPU-s per process on lavapipe) is computed once per
test run and handed to every shard process through ``ENVFLEET_MANISKILL_BRDF_LUT``
(:mod:`envfleet_maniskill.brdf_lut`). ManiSkill run alone in the test process computes its
own, so the tests that compare the two prove the shared table gives bit-identical images.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator

import pytest

collect_ignore_glob: list[str] = [] if importlib.util.find_spec("mani_skill") else ["test_*.py"]


@pytest.fixture(scope="session", autouse=True)
def shared_brdf_lut(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The path of SAPIEN's table, computed once in a fresh process, exported to every shard."""
    from envfleet_maniskill.brdf_lut import LUT_ENV, compute

    path = compute(str(tmp_path_factory.mktemp("brdf") / "brdf_lut.npy"))
    old = os.environ.get(LUT_ENV)
    os.environ[LUT_ENV] = path
    try:
        yield path
    finally:
        if old is None:
            os.environ.pop(LUT_ENV, None)
        else:
            os.environ[LUT_ENV] = old
