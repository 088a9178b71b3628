"""The subcommands of ``envfleet``, one module each: ``add_parser(subparsers)`` and ``run(args) -> exit code``.

:mod:`envfleet_ray.cli` only assembles them. A command raises :class:`UsageError` for a mistake on
its command line (exit code 2, one line, no traceback).
"""

from __future__ import annotations

__all__ = ["UsageError", "NAMES"]

#: The subcommands, in the order ``envfleet --help`` lists them (each a module of this package).
NAMES = ("backends", "doctor", "venv", "compare", "protocols", "serve", "report", "rollout")


class UsageError(Exception):
    """A mistake on a command's line: printed as one line, exit code 2."""
