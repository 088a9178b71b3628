"""``envfleet protocols [NAME ...]``: the named evaluation protocols the installed backends ship.

Without names: one line per protocol (backend, name, version, title, source). With names:
what each sets, key by key, its per-suite keys, where it comes from, and its notes.
"""

from __future__ import annotations

import argparse
from typing import Any

from envfleet.named_protocols import available, leaves

# Imports inside functions: each subcommand loads what it runs, so `envfleet --help` and the other subcommands
# start fast.

__all__ = ["add_parser", "run", "describe"]


def describe(backend: str, proto: Any) -> list[str]:
    """The lines ``envfleet protocols NAME`` prints for one protocol."""
    lines = [f"{proto['name']} (version {proto['version']}, backend {backend}): {proto['title']}"]
    if proto.get("file"):
        lines.append(f"  file: {proto['file']}")
    for source in proto.get("sources", []):
        lines.append(f"  source: {source['repo']} @ {source['commit']}")
        lines += [f"    {path}" for path in source.get("files", [])]
    lines.append(f"  success metric: {proto['success_metric']}")
    lines.append("  sets:")
    for key, value in leaves(proto.get("sets", {})).items():
        lines.append(f"    train.{key} = {value!r}")
    by_suite = proto.get("by_suite") or {}
    if by_suite:
        lines.append("  per suite:")
        for suite, keys in by_suite.items():
            lines.append(f"    {suite}: " + ", ".join(f"train.{k} = {v!r}" for k, v in leaves(keys).items()))
    for note in proto.get("notes", []) or []:
        lines.append(f"  note: {note}")
    return lines


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``protocols`` subcommand to the ``envfleet`` parser's subparsers."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "protocols",
        help="list the named evaluation protocols (train.protocol) and show what each sets",
        description="List the named evaluation protocols of the installed backends; with names, show what each sets and its source.",
    )
    parser.add_argument("names", nargs="*", help="protocols to show in full (default: list them all)")
    return parser


def run(args: argparse.Namespace) -> int:
    """Run ``envfleet protocols``; an unknown name raises a ``KeyError`` listing the known ones."""
    from envfleet.plugins import list_backends

    found = {(backend, name): proto for backend, spec in list_backends().items() for name, proto in available(spec).items()}
    if not args.names:
        if not found:
            print("no installed backend ships a named protocol")
        for (backend, name), proto in sorted(found.items()):
            src = proto["sources"][0]
            print(f"{name:<12} v{proto['version']:<3} {backend:<8} {proto['title']} [{src['repo']} @ {src['commit'][:7]}]")
        return 0
    known = sorted({name for _, name in found})
    for wanted in args.names:
        hits = [(b, p) for (b, n), p in sorted(found.items()) if n == wanted]
        if not hits:
            raise KeyError(f"envfleet protocols: no protocol named {wanted!r} (known: {', '.join(known) or 'none'})")
        for backend, proto in hits:
            print("\n".join(describe(backend, proto)))
    return 0
