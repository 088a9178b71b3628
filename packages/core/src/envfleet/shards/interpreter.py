"""The Python that a stage's shard processes run under: ``train.simulator_python``.

A shard talks to its worker only through a socket and shared memory, so it can run
under another interpreter than the worker's: a venv holding envfleet core, one
backend and that backend's simulator, with dependencies that would clash with the
worker's (MetaWorld pins MuJoCo 3.3.0, LIBERO runs on 3.17; Isaac Lab 3.0 needs
Python 3.12).

The worker still finds the backend in its own environment: the backend's light
registration module (its ``envfleet`` entry point, which imports no simulator)
gives the config schema, the observation spec and the defaults that the worker
needs before any shard starts. The simulator interpreter is asked, once, in a small
probe process, whether it can run that backend: envfleet core at the worker's
version, the backend package at the worker's version, the module of its env
factory and the simulator distributions the backend names. Any gap is a
:class:`SimulatorPythonError` naming the interpreter, what is missing and the pip
command that fixes it.

>>> python, env = shard_command(cfg.train, get_backend("metaworld"))  # doctest: +SKIP
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse

from ..errors import SimulatorPythonError
from ..plugins import BackendSpec
from ..plugins.spec import split_factory

__all__ = ["SimulatorPythonError", "ProbeResult", "resolve_python", "is_own_python", "probe", "pip_target", "shard_command"]

#: Seconds a probe may take: it imports nothing heavy (importlib.metadata, find_spec of a light module).
PROBE_TIMEOUT_S = 60.0

# Run by the simulator interpreter. Only the standard library and find_spec: no simulator import.
_PROBE = r"""
import importlib.metadata as md, importlib.util, json, sys
want = json.loads(sys.argv[1])
dists = {}
for name in want["dists"]:
    try:
        dists[name] = md.version(name)
    except md.PackageNotFoundError:
        dists[name] = None
modules = {}
for name in want["modules"]:
    try:
        modules[name] = importlib.util.find_spec(name) is not None
    except Exception as exc:
        modules[name] = "%s: %s" % (type(exc).__name__, exc)
print(json.dumps({"version": sys.version.split()[0], "executable": sys.executable, "dists": dists, "modules": modules}))
"""


@dataclass(frozen=True)
class ProbeResult:
    """What a simulator interpreter has: its version, distribution versions (None: absent), importable modules."""

    python: str
    version: str
    dists: dict[str, str | None]
    modules: dict[str, bool | str]


_lock = threading.Lock()
_checked: dict[tuple[str, str], ProbeResult] = {}


def resolve_python(value: str | None) -> str:
    """The absolute path of the interpreter ``value`` names (a path or a command on ``PATH``); the worker's own for None.

    :raises SimulatorPythonError: when there is no such executable.
    """
    if value is None or str(value).strip() == "":
        return sys.executable
    raw = os.path.expanduser(str(value))
    path = raw if os.sep in raw else (shutil.which(raw) or raw)
    path = os.path.abspath(path)
    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        raise SimulatorPythonError(
            f"train.simulator_python is {value!r}, but {path} is not an executable file. Build a venv for the backend with "
            "`envfleet venv BACKEND --dir DIR` and set train.simulator_python to the path it prints, or set it to null "
            "to run the shards under the worker's own Python."
        )
    return path


def is_own_python(path: str) -> bool:
    """Whether ``path`` is the worker's interpreter (compared as paths: a venv's python is a link to its base)."""
    return os.path.abspath(path) == os.path.abspath(sys.executable)


def pip_target(dist: str) -> str:
    """What to give ``pip install`` so that another venv gets this process's ``dist`` at the same version and source.

    An install from a local directory (editable or not) is named by that directory; otherwise ``name==version``.
    """
    try:
        found = importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        return dist
    text = found.read_text("direct_url.json")
    if text:
        info = json.loads(text)
        url = urlparse(str(info.get("url", "")))
        if url.scheme == "file":
            path = unquote(url.path)
            return f"-e {path}" if info.get("dir_info", {}).get("editable") else path
    return f"{dist}=={found.version}"


def _own_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _shard_env(python: str) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    if is_own_python(python):
        # The child must find envfleet the way the parent does (editable installs, tests).
        env["PYTHONPATH"] = os.pathsep.join([p for p in sys.path if p] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    else:
        # Another venv is complete in itself: the worker's paths would shadow its packages with the worker's versions.
        env.pop("PYTHONPATH", None)
        env.pop("PYTHONHOME", None)
    return env


def probe(python: str, dists: list[str], modules: list[str]) -> ProbeResult:
    """Ask ``python`` (in the environment a shard would get) for the versions of ``dists`` and whether ``modules`` import.

    :raises SimulatorPythonError: when the interpreter does not run or does not answer.
    """
    try:
        done = subprocess.run(
            [python, "-c", _PROBE, json.dumps({"dists": dists, "modules": modules})],
            env=_shard_env(python),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise SimulatorPythonError(f"train.simulator_python {python} could not be run: {type(exc).__name__}: {exc}") from exc
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
        raise SimulatorPythonError(f"train.simulator_python {python} is not a working Python (exit code {done.returncode}):\n{tail}")
    data = json.loads(lines[-1])
    return ProbeResult(python=python, version=str(data["version"]), dists=dict(data["dists"]), modules=dict(data["modules"]))


def _factory_module(spec: BackendSpec) -> str:
    return split_factory(spec.env_factory)[0]


def _problems(result: ProbeResult, spec: BackendSpec) -> list[str]:
    py = result.python
    found: list[str] = []
    own = [("envfleet", "envfleet core")] + ([(spec.package, f"the backend package of {spec.name!r}")] if spec.package else [])
    for dist, what in own:
        mine, theirs = _own_version(dist), result.dists.get(dist)
        fix = f"`{py} -m pip install --no-deps {pip_target(dist)}`"
        if theirs is None:
            found.append(f"it has no {dist} ({what}); install it with {fix}")
        elif mine is not None and mine != theirs:
            found.append(f"it has {dist} {theirs} while the worker has {mine}: the two must match; install the worker's with {fix}")
    module = _factory_module(spec)
    if module is not None and result.modules.get(module) is not True:
        detail = result.modules.get(module)
        why = f" ({detail})" if isinstance(detail, str) else ""
        fix = f"`{py} -m pip install --no-deps {pip_target(spec.package)}`" if spec.package else "installing the package that provides it"
        found.append(f"it cannot import {module}, the env factory of backend {spec.name!r}{why}; fix it with {fix}")
    missing = [d for d in spec.result_packages if result.dists.get(d) is None]
    if missing:
        found.append(
            f"it lacks the simulator packages {', '.join(missing)}; build the venv from the backend's pinned lock with "
            f"`envfleet venv {spec.name} --python {py}` or `{py} -m pip install {' '.join(missing)}`"
        )
    return found


def shard_command(env_cfg: Any, spec: BackendSpec) -> tuple[str, dict[str, str]]:
    """The interpreter and the environment for a shard of backend ``spec`` under the env section ``env_cfg``.

    The worker's own interpreter is used as it is. Another one is probed once per process
    and backend; the answer is kept only when it passes.

    :raises SimulatorPythonError: naming the interpreter, what it lacks and the pip command that fixes it.
    """
    python = resolve_python(env_cfg.get("simulator_python") if hasattr(env_cfg, "get") else None)
    if is_own_python(python):
        return python, _shard_env(python)
    key = (python, spec.name)
    with _lock:
        if key not in _checked:
            dists = ["envfleet", *([spec.package] if spec.package else []), *spec.result_packages]
            module = _factory_module(spec)
            result = probe(python, dists, ["envfleet.shards.server", *([module] if module else [])])
            problems = _problems(result, spec)
            if problems:
                raise SimulatorPythonError(
                    f"train.simulator_python {python} (Python {result.version}) cannot run backend {spec.name!r}: " + "; ".join(problems)
                )
            _checked[key] = result
    return python, _shard_env(python)
