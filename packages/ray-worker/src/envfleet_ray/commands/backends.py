"""``envfleet backends``: the installed backends, the plugins that failed to load, and with ``--check`` one step of each."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from . import UsageError

# Imports inside functions: each subcommand loads what it runs, so `envfleet --help` and the other subcommands
# start fast.

__all__ = ["add_parser", "run", "cmd_backends"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``envfleet backends`` to ``subparsers``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "backends", help="list installed backends and plugins that failed to load (exit code 1 if any did)"
    )
    parser.add_argument("--check", action="store_true", help="also build and step each backend once (exit code 1 if any fails)")
    parser.add_argument("names", nargs="*", help="with --check: the backends to check (default all), and key=value overrides")
    return parser


def run(args: argparse.Namespace) -> int:
    """Run ``envfleet backends`` with parsed ``args``."""
    if args.names and not args.check:
        raise UsageError("envfleet backends: backend names and overrides go with --check")
    return cmd_backends(args.check, args.names)


def cmd_backends(check: bool = False, names: Sequence[str] = ()) -> int:
    """Print the installed backends and the plugins that failed to load; with ``check``, build and
    step each backend once. Returns 1 if a plugin failed to load or a check failed, else 0."""
    from envfleet.plugins import PLUGIN_API_VERSION, deprecations, list_backends, plugin_failures

    specs = list_backends()
    if specs:
        width = max(len("backend"), *(len(n) for n in specs))
        print(f"{'backend':<{width}}  package              version   description")
        for name, spec in specs.items():
            print(f"{name:<{width}}  {spec.package or '-':<20} {spec.version or '-':<9} {spec.description}")
    else:
        print("no backends installed (pip install envfleet-libero, envfleet-isaac, or your own plugin)")
    old = [d for spec in specs.values() for d in deprecations(spec)]
    if old:  # they still run, the old way: a notice for their authors, not a failure
        print(f"\nbackends written for an older plugin API (this envfleet's is {PLUGIN_API_VERSION}; they run as before):")
        for deprecation in old:
            print(f"  deprecated: {deprecation.line()}")
    failures = plugin_failures()
    if failures:
        print("\nplugins that failed to load:")
        for failure in failures:
            print(f"  {failure.name}: {failure.what}: {type(failure.error).__name__}: {failure.error}")
    if not check:
        return 1 if failures else 0
    from envfleet.diagnostics.check import check_backend

    overrides = [n for n in names if "=" in n]
    chosen = [n for n in names if "=" not in n] or list(specs)
    unknown = [n for n in chosen if n not in specs]
    if unknown:
        raise UsageError(f"envfleet backends --check: not installed: {', '.join(unknown)} (installed: {', '.join(specs) or 'none'})")
    print("\nchecks (build one env, reset it, step one chunk):")
    results = [check_backend(name, overrides) for name in chosen]
    for result in results:
        print(f"  {result.line()}", flush=True)
    return 1 if failures or not all(r.ok for r in results) else 0
