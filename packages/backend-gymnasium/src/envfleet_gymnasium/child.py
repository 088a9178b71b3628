"""The spec probe's child process: ``python -m envfleet_gymnasium.child REQUEST``, under ``train.simulator_python``.

It makes the env once (:func:`envfleet_gymnasium.make.make_env`), describes its observation and
action spaces, checks that ``reset`` takes ``seed`` and resets with the first seed (twice: are the
non-image entries the same?), renders once when the config asks for ``render()`` (the frame's shape is
known only so), times a few steps (:func:`step_seconds`), hashes the env's source files, closes the env and prints one line, ``MARKER`` and a JSON object: the answer, or the
check that failed (``kind``) and why. :mod:`envfleet_gymnasium.probe` starts it and keeps the answer.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
import json
import sys
import time
import traceback
from typing import Any

import numpy as np

from .make import CaseError, describe, describe_frame, env_packages, make_env, set_gl

__all__ = ["MARKER", "TIMED_STEPS", "TIMED_SECONDS", "step_seconds", "sources", "file_digest", "run", "main"]

#: The prefix of the answer's line (an env may print on stdout too).
MARKER = "envfleet-gymnasium-probe: "


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _accepts_seed(env: Any) -> bool:
    try:
        params = inspect.signature(env.unwrapped.reset).parameters
    except (TypeError, ValueError):  # a builtin without a signature: try it
        return True
    return "seed" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _flat_values(obs: Any) -> list[np.ndarray]:
    """The observation's non-image entries as arrays, in order."""
    if isinstance(obs, dict):
        return [v for key in obs for v in _flat_values(obs[key])]
    if isinstance(obs, tuple):
        return [v for item in obs for v in _flat_values(item)]
    arr = np.asarray(obs)
    return [] if (arr.dtype == np.uint8 and arr.ndim == 3) else [arr]


#: The step timing's budget: at most this many steps (an env runs at least as many in any rollout), and no
#: more once this many seconds have passed.
TIMED_STEPS, TIMED_SECONDS = 5, 0.05


def step_seconds(env: Any, seed: int) -> float | None:
    """The median time of one ``env.step`` with actions sampled from its space (seeded), over at most
    :data:`TIMED_STEPS` steps or :data:`TIMED_SECONDS` (at least one); ``None`` when a step raises.
    ``train.gymnasium.envs_per_process: auto`` picks the layout from it."""
    try:
        env.action_space.seed(seed)
        times: list[float] = []
        spent = 0.0
        while len(times) < TIMED_STEPS and (not times or spent < TIMED_SECONDS):
            action = env.action_space.sample()
            t0 = time.perf_counter()
            _, _, terminated, truncated, _ = env.step(action)
            dt = time.perf_counter() - t0
            times.append(dt)
            spent += dt
            if terminated or truncated:
                env.reset(seed=seed)
    except Exception:
        return None
    return float(np.median(times))


def sources(env: Any, env_id: str) -> dict[str, str]:
    """The source files that define the env (its class's module, its entry point's and the id's
    ``module:`` part), each with a hash of its contents: a cached answer is probed again when one changes."""
    names = {type(env.unwrapped).__module__}
    entry = getattr(getattr(env, "spec", None), "entry_point", None)
    if isinstance(entry, str):
        names.add(entry.split(":", 1)[0])
    module, sep, _ = env_id.partition(":")
    if sep:
        names.add(module)
    out = {}
    for name in sorted(names):
        path = getattr(sys.modules.get(name), "__file__", None)
        if path:
            digest = file_digest(path)
            if digest is not None:
                out[path] = digest
    return out


def file_digest(path: str) -> str | None:
    """A hash of a file's contents (``None``: it cannot be read)."""
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()[:16]
    except OSError:
        return None


def run(request: dict[str, Any]) -> dict[str, Any]:
    """Probe the env of ``request`` (a :meth:`~envfleet_gymnasium.case.Case.make_request`); the answer as a dict."""
    started = time.perf_counter()
    set_gl(request.get("mujoco_gl"))
    env_id = str(request["id"])
    try:
        env = make_env(request)
    except CaseError:
        raise
    except Exception as exc:
        kind = "make"
        if request.get("kwargs"):
            try:  # the same id without the kwargs: if it builds, the kwargs were what it refused
                make_env({**request, "kwargs": {}}).close()
                kind = "kwargs"
            except Exception:
                pass
        raise CaseError(kind, f"{type(exc).__name__}: {exc}") from exc
    try:
        if not _accepts_seed(env):
            raise CaseError("reset_seed", f"{type(env.unwrapped).__name__}.reset() has no 'seed' argument")
        seed = int(request.get("seed", 0))
        try:
            first, _ = env.reset(seed=seed)
        except TypeError as exc:
            if "seed" in str(exc):
                raise CaseError("reset_seed", f"reset(seed={seed}) raised TypeError: {exc}") from exc
            raise CaseError("reset", f"reset(seed={seed}) raised TypeError: {exc}") from exc
        except Exception as exc:
            raise CaseError("reset", f"reset(seed={seed}) raised {type(exc).__name__}: {exc}") from exc
        frame = None
        if request.get("render"):
            try:
                frame = describe_frame(env.render())
            except CaseError:
                raise
            except Exception as exc:
                raise CaseError("render", f"render() raised {type(exc).__name__}: {exc}") from exc
        again, _ = env.reset(seed=seed)
        a, b = _flat_values(first), _flat_values(again)
        deterministic = len(a) == len(b) and all(x.shape == y.shape and np.array_equal(x, y) for x, y in zip(a, b))
        step_s = step_seconds(env, seed)
        from envfleet.shards.rendering import loaded_render_stack

        spec = env.spec
        packages = env_packages(env, env_id)
        out = {
            "ok": True,
            "id": env_id,
            "spec_id": getattr(spec, "id", None),
            "entry_point": str(getattr(spec, "entry_point", "")),
            "max_episode_steps": getattr(spec, "max_episode_steps", None),
            "nondeterministic": bool(getattr(spec, "nondeterministic", False)),
            "env_class": type(env.unwrapped).__name__,
            # With bounds: the faces present the env's own observation space (envfleet_gymnasium.spaces).
            "obs": describe(env.observation_space, bounds=True),
            "action": describe(env.action_space, bounds=True),
            "render": frame,
            "deterministic_reset": bool(deterministic),
            "step_s": step_s,
            "sources": sources(env, env_id),
            "render_stack": loaded_render_stack() or ("opengl" if "OpenGL" in sys.modules else None),
            "env_packages": packages,
            "versions": {d: _version(d) for d in sorted({"gymnasium", "envfleet", "envfleet-gymnasium", *packages})},
            "python": sys.executable,
            "python_version": sys.version.split()[0],
        }
    finally:
        try:
            env.close()
        except Exception:  # closing is best effort: the answer is made
            pass
    out["seconds"] = round(time.perf_counter() - started, 3)
    return out


def main(argv: list[str] | None = None) -> int:
    """Probe the request in ``argv[0]`` (JSON) and print the answer's line; exit code 0 either way."""
    args = sys.argv[1:] if argv is None else argv
    request = json.loads(args[0])
    try:
        out = run(request)
    except CaseError as exc:
        out = {"ok": False, "kind": exc.kind, "message": str(exc)}
    except Exception as exc:
        tail = traceback.format_exc().strip().splitlines()[-6:]
        out = {"ok": False, "kind": "make", "message": f"{type(exc).__name__}: {exc}", "traceback": tail}
    sys.stdout.flush()
    print(MARKER + json.dumps(out, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
