"""The spec probe's child process: ``python -m envfleet_gymnasium.child REQUEST``, under ``train.simulator_python``.

It makes the env once (:func:`envfleet_gymnasium.make.make_env`), describes its observation and
action spaces, checks that ``reset`` takes ``seed`` and resets with the first seed (twice: are the
non-image entries the same?), renders once when the config asks for ``render()`` (the frame's shape is
known only so), closes the env and prints one line, ``MARKER`` and a JSON object: the answer, or the
check that failed (``kind``) and why. :mod:`envfleet_gymnasium.probe` starts it and keeps the answer.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import json
import sys
import time
import traceback
from typing import Any

import numpy as np

from .make import CaseError, describe, describe_frame, env_packages, make_env, set_gl

__all__ = ["MARKER", "run", "main"]

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
            "obs": describe(env.observation_space),
            "action": describe(env.action_space, bounds=True),
            "render": frame,
            "deterministic_reset": bool(deterministic),
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
