"""``envfleet venv BACKEND``: build a simulator's venv from the backend's pinned lock.

The venv gets the lock's pins, then envfleet core and the backend package from the
same source and at the same versions as this (the worker's) environment, without
resolving again. It prints the ``train.simulator_python`` value to use.

Where the lock comes from, first found wins:

1. ``--lock FILE``;
2. ``lock.txt`` inside the backend's import package (how a backend ships its lock in
   its wheel: package data next to its plugin module);
3. in a source checkout (the backend installed from a directory),
   ``requirements/<backend>-py<major><minor>.txt`` in a parent folder of that directory.
"""

from __future__ import annotations

import argparse
import importlib.resources
import os
import subprocess
import sys
from typing import Any

from envfleet.errors import VenvError
from envfleet.plugins.spec import split_factory

# Imports inside functions: each subcommand loads what it runs, so `envfleet --help` and the other subcommands
# start fast.

__all__ = ["add_parser", "run", "find_lock", "build_venv", "VenvError"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``venv`` subcommand to the ``envfleet`` parser's subparsers."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "venv",
        help="build a backend's simulator venv from its pinned lock and print the train.simulator_python to use",
        description="Build a venv for one backend's simulator from the backend's pinned lock, with envfleet core and the "
        "backend at this environment's versions. Prints train.simulator_python=PATH.",
    )
    parser.add_argument("backend", help="a registered backend name (see `envfleet backends`)")
    parser.add_argument("--python", default=sys.executable, help="the Python to build the venv with (default: this one)")
    parser.add_argument("--dir", help="where to put the venv (default: ./.venvs/BACKEND)")
    parser.add_argument("--lock", help="a pinned requirements file to use instead of the backend's own")
    return parser


def _python_tag(python: str) -> str:
    try:
        out = subprocess.run([python, "-c", "import sys; print('%d%d' % sys.version_info[:2])"], capture_output=True, text=True, timeout=60)
    except OSError as exc:
        raise VenvError(f"--python {python}: cannot run it ({exc})") from exc
    if out.returncode != 0:
        raise VenvError(f"--python {python}: not a working Python ({out.stderr.strip().splitlines()[-1:] or out.returncode})")
    return out.stdout.strip()


def _source_dir(dist: str) -> str | None:
    from envfleet.shards.interpreter import pip_target

    target = pip_target(dist)
    path = target.removeprefix("-e ")
    return path if os.path.isdir(path) else None


def find_lock(spec: Any, python_tag: str) -> str:
    """The pinned requirements file of backend ``spec`` for Python ``python_tag`` (e.g. ``"311"``); see the module doc."""
    tried: list[str] = []
    package = split_factory(spec.env_factory)[0].split(".", 1)[0]
    shipped = importlib.resources.files(package).joinpath("lock.txt")
    if shipped.is_file():
        return str(shipped)
    tried.append(f"lock.txt in the package {package}")
    source = _source_dir(spec.package) if spec.package else None
    if source is not None:
        name = f"{spec.name}-py{python_tag}.txt"
        folder = os.path.abspath(source)
        while True:
            candidate = os.path.join(folder, "requirements", name)
            if os.path.isfile(candidate):
                return candidate
            parent = os.path.dirname(folder)
            if parent == folder:
                break
            folder = parent
        tried.append(f"requirements/{name} above {source}")
    raise VenvError(
        f"backend {spec.name!r} ships no pinned lock for Python {python_tag[0]}.{python_tag[1:]} (looked for {' and '.join(tried) or 'nothing'}): "
        "pass one with --lock FILE"
    )


def build_venv(backend: str, python: str, directory: str, lock: str | None = None) -> str:
    """Build the venv of ``backend`` at ``directory`` with ``python``; returns its interpreter's path."""
    from envfleet.plugins import get_backend
    from envfleet.shards.interpreter import pip_target

    spec = get_backend(backend)
    tag = _python_tag(python)
    lock = lock or find_lock(spec, tag)
    if not os.path.isfile(lock):
        raise VenvError(f"--lock {lock}: no such file")
    directory = os.path.abspath(directory)
    venv_python = os.path.join(directory, "bin", "python")
    if not os.path.exists(venv_python):
        subprocess.run([python, "-m", "venv", directory], check=True)
    pip = [venv_python, "-m", "pip", "install", "--disable-pip-version-check"]
    subprocess.run([*pip, "-r", lock], check=True)
    own: list[str] = []
    for dist in ["envfleet", *([spec.package] if spec.package else [])]:
        own += pip_target(dist).split(" ", 1)
    # The lock holds every dependency: envfleet and the backend go in without resolving again.
    subprocess.run([*pip, "--no-deps", *own], check=True)
    return venv_python


def run(args: argparse.Namespace) -> int:
    """Run ``envfleet venv`` with parsed ``args``; returns the exit code."""
    directory = args.dir or os.path.join(".venvs", args.backend)
    try:
        venv_python = build_venv(args.backend, args.python, directory, args.lock)
    except subprocess.CalledProcessError as exc:
        print(f"error: envfleet venv {args.backend}: {' '.join(map(str, exc.cmd))} failed with exit code {exc.returncode}", file=sys.stderr)
        return 1
    except VenvError as exc:
        print(f"error: envfleet venv {args.backend}: {exc}", file=sys.stderr)
        return 2
    print(f"train.simulator_python={venv_python}")
    return 0
