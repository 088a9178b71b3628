"""The observation spec without a simulator in the caller: the gymnasium env probed once, in a child process.

The manager allocates shared memory from the observation spec before any shard starts, and a
gymnasium env's spaces are known only from the env. So the first time a config names an env,
:func:`probe` starts ``python -m envfleet_gymnasium.child`` under ``train.simulator_python`` (the env's
own venv; the worker's Python when unset), which makes the env, describes its spaces and, for
``render: rgb_array``, renders once (:mod:`envfleet_gymnasium.child`). Its answer is kept:

- in this process, for the life of the process;
- on disk, in ``$ENVFLEET_GYMNASIUM_CACHE`` (default ``$XDG_CACHE_HOME/envfleet/gymnasium``, else
  ``~/.cache/envfleet/gymnasium``), one JSON file per *make key*: the id, ``kwargs``,
  ``max_episode_steps``, the render mode and the interpreter's path.

Invalidation. A cached answer records the versions of the distributions that decide it (gymnasium,
envfleet, envfleet-gymnasium and the env's own package, the one its entry point's module comes from,
e.g. ``gym-pusht``). Each use asks the interpreter for those versions again (a child that imports
nothing but ``importlib.metadata``, a few tens of milliseconds); any difference, or a change of the
make key, probes again and replaces the file. So does an edit of the env's source files (the module of
its class, of its entry point and of the id's ``module:`` part, hashed by the child): an env in a plain
module of the user's own has no version to tell. ``ENVFLEET_GYMNASIUM_CACHE=off`` probes every time and
writes nothing.

A probe that fails is not cached: its error is raised again, each time, as a
:class:`~envfleet.errors.ConfigError` naming the check that failed. The child runs in a process
group of its own, and a probe that outlives its deadline (``train.start_timeout_s``) is killed with
its group: nothing is left running.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import tempfile
import threading
from typing import Any

from envfleet.errors import ConfigError
from envfleet.plugins import get_backend
from envfleet.shards.interpreter import shard_command

from .case import Case
from .child import MARKER, file_digest

__all__ = ["PROBE_FORMAT", "CACHE_ENV", "ProbeError", "cache_dir", "probe", "probe_count", "clear_memo"]

#: The answer's format: an answer written by another format is probed again
#: (3: the observation space's description holds its Box bounds).
PROBE_FORMAT = 3
CACHE_ENV = "ENVFLEET_GYMNASIUM_CACHE"
_OFF = ("", "0", "off", "none", "false")

_VERSIONS = r"""
import importlib.metadata as md, json, sys
out = {}
for name in json.loads(sys.argv[1]):
    try:
        out[name] = md.version(name)
    except md.PackageNotFoundError:
        out[name] = None
print(json.dumps(out))
"""

_lock = threading.Lock()
_memo: dict[tuple[str, str], dict[str, Any]] = {}
_probes = 0


class ProbeError(ConfigError):
    """The env a config names cannot run as envfleet needs it; ``kind`` is the check that failed."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def cache_dir() -> str | None:
    """Where answers are kept on disk; ``None`` when ``$ENVFLEET_GYMNASIUM_CACHE`` turns the cache off."""
    value = os.environ.get(CACHE_ENV)
    if value is not None:
        return None if value.strip().lower() in _OFF else os.path.abspath(os.path.expanduser(value))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "envfleet", "gymnasium")


def probe_count() -> int:
    """How many child probes this process started (tests: a cache hit starts none)."""
    return _probes


def clear_memo() -> None:
    """Forget the answers kept in this process (the files stay)."""
    with _lock:
        _memo.clear()


def _interpreter(cfg: Any) -> tuple[str, dict[str, str]]:
    """The interpreter and environment a shard of this section would get (``train.simulator_python``, checked)."""
    return shard_command(cfg, get_backend("gymnasium"))


def _run(command: list[str], env: dict[str, str], timeout: float) -> tuple[int, str, str]:
    """Run ``command`` in a session of its own; past ``timeout`` its whole process group is killed."""
    proc = subprocess.Popen(
        command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        raise
    finally:
        try:  # anything the env started and left behind goes with the group
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return proc.returncode, out, err


def _versions(python: str, env: dict[str, str], dists: list[str]) -> dict[str, str | None]:
    code, out, _ = _run([python, "-c", _VERSIONS, json.dumps(dists)], env, 120.0)
    lines = out.strip().splitlines()
    if code != 0 or not lines:
        return {}
    return dict(json.loads(lines[-1]))


def _message(case: Case, python: str, answer: dict[str, Any]) -> ProbeError:
    kind = str(answer.get("kind"))
    why = str(answer.get("message"))
    where = f"under {python}"
    text = {
        "gymnasium": f"simulator_type gymnasium {where}: {why}",
        "module": f"config key 'train.gymnasium.id' is {case.id!r}: {why} {where}",
        "unknown_id": (
            f"config key 'train.gymnasium.id' is {case.id!r}, which gymnasium does not know {where}: {why}. "
            "Name a registered id, or 'module:Id' to import the module that registers it first"
        ),
        "kwargs": f"config key 'train.gymnasium.kwargs' ({dict(case.kwargs)}) is refused by {case.name} (it builds without them): {why}",
        "reset_seed": (
            f"{case.name} cannot start from a fixed initial state: {why}. envfleet resets env i to state id k with "
            "reset(seed=train.gymnasium.seeds[k]), so its reset must take seed"
        ),
        "reset": f"{case.name} fails its first reset {where}: {why}",
        "render": f"config key 'train.gymnasium.render' is rgb_array, but {case.name} cannot give a frame: {why}",
        "make": f"{case.name} does not build {where}: {why}",
    }.get(kind, f"{case.name}: {why}")
    tail = answer.get("traceback")
    if tail:
        text += "\n" + "\n".join(str(line) for line in tail)
    return ProbeError(kind, text)


def _cache_path(directory: str, case: Case, python: str) -> str:
    key = json.dumps({"format": PROBE_FORMAT, "make": json.loads(case.make_key()), "python": python}, sort_keys=True)
    return os.path.join(directory, hashlib.sha256(key.encode()).hexdigest()[:24] + ".json")


def _read(path: str, case: Case, python: str, env: dict[str, str]) -> dict[str, Any] | None:
    try:
        with open(path) as fh:
            entry = json.load(fh)
    except (OSError, ValueError):
        return None
    if entry.get("format") != PROBE_FORMAT or entry.get("make") != json.loads(case.make_key()) or entry.get("python") != python:
        return None
    answer = entry.get("answer") or {}
    recorded = answer.get("versions") or {}
    if not recorded or _versions(python, env, sorted(recorded)) != recorded:
        return None
    if any(file_digest(path) != digest for path, digest in (answer.get("sources") or {}).items()):
        return None  # the env's own source was edited (a module of the user's, with no version to tell)
    return dict(answer)


def _write(path: str, case: Case, python: str, answer: dict[str, Any]) -> None:
    entry = {"format": PROBE_FORMAT, "make": json.loads(case.make_key()), "python": python, "answer": answer}
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            json.dump(entry, fh, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError:  # a read-only home: the answer is kept in this process only
        pass


def probe(cfg: Any) -> dict[str, Any]:
    """The probe's answer for env section ``cfg`` (``train`` or ``val``): from this process, the disk, or a child.

    :raises ConfigError: the section names an env that cannot run (a :class:`ProbeError` naming the check),
        or the probe did not finish within ``train.start_timeout_s``.
    :raises SimulatorPythonError: ``train.simulator_python`` cannot run the backend.
    """
    global _probes
    case = Case.from_section(cfg)
    python, env = _interpreter(cfg)
    if case.mujoco_gl:
        env.setdefault("MUJOCO_GL", case.mujoco_gl)
        if env["MUJOCO_GL"] in ("egl", "osmesa"):
            env.setdefault("PYOPENGL_PLATFORM", env["MUJOCO_GL"])
    memo_key = (python, case.make_key())
    with _lock:
        if memo_key in _memo:
            return dict(_memo[memo_key])
    directory = cache_dir()
    path = _cache_path(directory, case, python) if directory else None
    answer = _read(path, case, python, env) if path else None
    if answer is None:
        timeout = float(cfg.get("start_timeout_s", 300.0) or 300.0) if hasattr(cfg, "get") else 300.0
        request = {**case.make_request(), "mujoco_gl": case.mujoco_gl}
        with _lock:
            _probes += 1
        try:
            code, out, err = _run([python, "-m", "envfleet_gymnasium.child", json.dumps(request)], env, timeout)
        except subprocess.TimeoutExpired:
            raise ProbeError(
                "timeout",
                f"the spec probe of {case.name} did not finish within {timeout:.0f} s (train.start_timeout_s) under {python}: "
                "building the env, its first reset or its render hangs",
            ) from None
        lines = [line[len(MARKER) :] for line in out.splitlines() if line.startswith(MARKER)]
        if not lines:
            tail = "\n".join((err or out).strip().splitlines()[-8:])
            raise ProbeError("make", f"the spec probe of {case.name} under {python} exited with code {code} and no answer:\n{tail}")
        answer = json.loads(lines[-1])
        if not answer.get("ok"):
            raise _message(case, python, answer)
        if path:
            _write(path, case, python, answer)
    with _lock:
        _memo[memo_key] = dict(answer)
    return dict(answer)
