"""The ``envfleet`` command: assembles the subcommands of :mod:`envfleet_ray.commands` (``backends``, ``doctor``,
``venv``, ``compare``, ``protocols``, ``serve`` and ``rollout``, the main job) and turns a failure into one line and an exit code."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
import warnings
from collections.abc import Sequence
from typing import Any

from envfleet.errors import EnvFleetError, PluginDeprecationWarning

from .commands import NAMES, UsageError

__all__ = ["main", "build_parser", "TRACEBACK_ENV"]

TRACEBACK_ENV = "ENVFLEET_TRACEBACK"  # set to 1 to print the full traceback of a failure


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one clear line, exit code 2, no traceback
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``envfleet`` command."""
    parser = _Parser(
        prog="envfleet",
        description="Environment workers for RL of robot policies.",
        epilog=f"--traceback (anywhere on the line) or {TRACEBACK_ENV}=1: print the full traceback of a failure.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in NAMES:
        importlib.import_module(f".commands.{name}", __package__).add_parser(sub)
    return parser


def _show_plugin_deprecations() -> None:
    """Print each :class:`~envfleet.errors.PluginDeprecationWarning` once, as a ``warning:`` line on stderr.

    Python hides a ``DeprecationWarning`` raised inside a library, and this one is for whoever
    runs the command as much as for the plugin's author: it names the plugin to update.
    """
    warnings.filterwarnings("default", category=PluginDeprecationWarning)
    shown: set[str] = set()
    original = warnings.showwarning

    def show(
        message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None, line: str | None = None
    ) -> None:
        if not issubclass(category, PluginDeprecationWarning):
            original(message, category, filename, lineno, file, line)
        elif str(message) not in shown:
            shown.add(str(message))
            print(f"warning: {category.__name__}: {message}", file=sys.stderr, flush=True)

    warnings.showwarning = show


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``envfleet`` command.

    A failure ends with one line naming the problem: exit code 2 for usage and config
    errors, 1 for a failure while running, whose line says that ``--traceback`` or
    ``ENVFLEET_TRACEBACK=1`` prints the full traceback too.
    """
    _show_plugin_deprecations()
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    show = "--traceback" in argv or os.environ.get(TRACEBACK_ENV, "") not in ("", "0")
    argv = [a for a in argv if a != "--traceback"]
    hint = "" if show else f" (--traceback or {TRACEBACK_ENV}=1 shows where)"
    try:
        args = parser.parse_args(argv)
        return int(importlib.import_module(f".commands.{args.command}", __package__).run(args))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if show:
            traceback.print_exc()
        message = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
        first = message.strip().splitlines()[0] if message.strip() else type(exc).__name__
        if not isinstance(exc, (EnvFleetError, KeyError)):
            first = f"{type(exc).__name__}: {first}"
        # A config error says all there is to fix; a failure while running says where to look.
        usage = isinstance(exc, (EnvFleetError, KeyError)) and not isinstance(exc, RuntimeError)
        print(f"error: {first}{'' if usage else hint}", file=sys.stderr)
        return 2 if usage else 1


if __name__ == "__main__":
    sys.exit(main())
