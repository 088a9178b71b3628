"""Making the env a config names, and describing its spaces: the part that imports gymnasium.

Used where the env runs: in a shard (:mod:`envfleet_gymnasium.env`) and in the spec probe's
child process (:mod:`envfleet_gymnasium.child`), both under ``train.simulator_python``.

The env is made as a user makes it: ``gymnasium.make(id, **kwargs)``, with
``render_mode="rgb_array"`` for ``render: rgb_array`` and ``max_episode_steps`` when set, so that
gymnasium's own wrappers (its env checker, order enforcing, time limit) are the ones a
``gymnasium.vector.SyncVectorEnv`` over the same call has. A ``module:Id`` id imports
``module`` first, as gymnasium does; an id ``ns/Name-v0`` whose namespace nobody registered yet
imports a module named ``ns`` when there is one (``gym_pusht/PushT-v0`` imports ``gym_pusht``),
as LeRobot's env factory does.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

# Imports inside functions: gymnasium and the env's own package load only where an env is made or described
# (the shard, the probe's child), in the env's venv.

__all__ = ["BOUNDS_LIMIT", "CaseError", "prepare_id", "make_env", "describe", "describe_frame", "env_packages", "set_gl"]


class CaseError(RuntimeError):
    """The env cannot be made or used as envfleet needs; ``kind`` says which check failed
    (``gymnasium``, ``module``, ``unknown_id``, ``kwargs``, ``make``, ``reset_seed``, ``reset``, ``render``)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def set_gl(platform: str | None) -> None:
    """``MUJOCO_GL`` (and ``PYOPENGL_PLATFORM`` with it) where the environment does not set it, before any renderer loads."""
    if platform:
        os.environ.setdefault("MUJOCO_GL", platform)
        if os.environ["MUJOCO_GL"] in ("egl", "osmesa"):
            os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])


def _gymnasium() -> Any:
    try:
        import gymnasium
    except ImportError as exc:
        raise CaseError("gymnasium", f"gymnasium does not import here ({exc}): install it into train.simulator_python's venv") from exc
    return gymnasium


def prepare_id(env_id: str) -> str:
    """Import what registers ``env_id`` (its ``module:`` part, or its namespace's module); returns ``env_id``.

    :raises CaseError: ``module`` when that module does not import.
    """
    gymnasium = _gymnasium()
    module, sep, _ = env_id.partition(":")
    if sep:
        try:
            importlib.import_module(module)
        except Exception as exc:
            raise CaseError("module", f"module {module!r} (of id {env_id!r}) does not import: {type(exc).__name__}: {exc}") from exc
        return env_id
    namespace = env_id.split("/", 1)[0] if "/" in env_id else None
    if namespace and not any(spec.namespace == namespace for spec in gymnasium.envs.registry.values()):
        try:
            importlib.import_module(namespace)
        except ModuleNotFoundError as exc:
            if exc.name != namespace:
                raise CaseError("module", f"module {namespace!r} (the namespace of id {env_id!r}) does not import: {exc}") from exc
        except Exception as exc:
            raise CaseError(
                "module", f"module {namespace!r} (the namespace of id {env_id!r}) does not import: {type(exc).__name__}: {exc}"
            ) from exc
    return env_id


def make_env(request: Mapping[str, Any]) -> Any:
    """``gymnasium.make`` for a request of :meth:`envfleet_gymnasium.case.Case.make_request`.

    :raises CaseError: ``module`` or ``unknown_id``; any other error of the env's constructor as it is.
    """
    gymnasium = _gymnasium()
    env_id = prepare_id(str(request["id"]))
    kwargs = dict(request.get("kwargs") or {})
    if request.get("render"):
        kwargs["render_mode"] = "rgb_array"
    if request.get("max_episode_steps") is not None:
        kwargs["max_episode_steps"] = int(request["max_episode_steps"])
    errors = gymnasium.error
    unknown = tuple(
        getattr(errors, name)
        for name in ("NameNotFound", "NamespaceNotFound", "VersionNotFound", "DeprecatedEnv", "UnregisteredEnv")
        if hasattr(errors, name)
    )
    try:
        return gymnasium.make(env_id, **kwargs)
    except unknown as exc:
        raise CaseError("unknown_id", f"{type(exc).__name__}: {exc}") from exc


#: A Box's bounds of more values than this are recorded only where each is one number throughout.
BOUNDS_LIMIT = 4096


def _bound(values: np.ndarray) -> Any:
    """A Box's ``low`` or ``high`` as JSON: one number where every value is that number (an image's 0 and
    255), else the nested list; ``None`` where that list would be longer than :data:`BOUNDS_LIMIT`.
    Whole-number dtypes stay ints, so that int64 bounds are exact."""
    flat = values.reshape(-1)
    if flat.size and (flat == flat[0]).all():
        return flat[0].item()
    return values.tolist() if flat.size <= BOUNDS_LIMIT else None


def describe(space: Any, bounds: bool = False) -> dict[str, Any]:
    """A gymnasium space as plain JSON data (:mod:`envfleet_gymnasium.carry` reads it).

    :param bounds: record a Box's ``low`` / ``high``: one number where it is the same throughout (an
        image's), else a list; a large Box whose bounds vary is recorded without them.
    """
    from gymnasium import spaces

    text = repr(space)
    out: dict[str, Any] = {"repr": text if len(text) <= 200 else text[:197] + "..."}
    if isinstance(space, spaces.Box):
        out.update(type="Box", shape=list(space.shape), dtype=space.dtype.name)
        low, high = (_bound(space.low), _bound(space.high)) if bounds else (None, None)
        if low is not None and high is not None:
            out.update(low=low, high=high)
    elif isinstance(space, spaces.Discrete):
        out.update(type="Discrete", n=int(space.n), start=int(space.start), dtype=np.dtype(space.dtype).name)
    elif isinstance(space, spaces.MultiDiscrete):
        out.update(type="MultiDiscrete", nvec=space.nvec.tolist(), start=space.start.tolist(), dtype=space.dtype.name)
    elif isinstance(space, spaces.MultiBinary):
        # n as given (4 or [4]): gymnasium's MultiBinary compares it, not the shape.
        n = space.n if isinstance(space.n, (int, np.integer)) else list(space.n)
        out.update(type="MultiBinary", shape=list(space.shape), n=n if isinstance(n, list) else int(n), dtype=space.dtype.name)
    elif isinstance(space, spaces.Dict):
        out.update(type="Dict", spaces=[[str(k), describe(v, bounds)] for k, v in space.spaces.items()])
    elif isinstance(space, spaces.Tuple):
        out.update(type="Tuple", spaces=[describe(v, bounds) for v in space.spaces])
    else:
        out.update(type=type(space).__name__)
    return out


def describe_frame(frame: Any) -> dict[str, Any]:
    """What ``render()`` returned, as a Box's description; a frame envfleet cannot carry is a :class:`CaseError`."""
    if not isinstance(frame, np.ndarray) or frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[-1] != 3:
        what = f"{frame.dtype}{list(frame.shape)}" if isinstance(frame, np.ndarray) else type(frame).__name__
        raise CaseError("render", f"render() returned {what}: render: rgb_array needs a uint8 [H, W, 3] frame")
    return {"type": "Box", "shape": list(frame.shape), "dtype": "uint8", "repr": f"render() frame uint8{list(frame.shape)}"}


def env_packages(env: Any, env_id: str) -> dict[str, str]:
    """The distributions that provide ``env`` (its entry point's top module and the id's ``module:`` part), with versions."""
    modules = set()
    spec = getattr(env, "spec", None)
    entry = getattr(spec, "entry_point", None)
    if isinstance(entry, str):
        modules.add(entry.split(":", 1)[0].split(".", 1)[0])
    elif entry is not None:
        modules.add(str(getattr(entry, "__module__", "")).split(".", 1)[0])
    module, sep, _ = env_id.partition(":")
    if sep:
        modules.add(module.split(".", 1)[0])
    try:
        owners = importlib.metadata.packages_distributions()
    except Exception:  # pragma: no cover - a broken site-packages
        owners = {}
    out = {}
    for top in sorted(m for m in modules if m):
        for dist in owners.get(top, []):
            try:
                out[dist] = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                continue
    return out
