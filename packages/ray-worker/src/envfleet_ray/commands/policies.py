"""Policies for the rollout loop: ``zero``, ``random``, ``sleep:SECONDS`` and ``module:callable``.

A policy is any callable ``(obs: DataProto) -> np.ndarray [n, chunk, action_dim]``.
``module:callable`` imports exactly the module the user names and takes exactly
the attribute named; nothing in a config value is evaluated as code.

The attribute is either the policy itself, or a **factory** that builds it: a
function or class whose parameters include ``chunk`` and ``action_dim`` (and, if it
wants one, ``seed``), called with those as keyword arguments::

    def make_policy(chunk: int, action_dim: int, seed: int = 0) -> Policy:
        model = load_my_model()
        return lambda obs: model.act(obs, chunk)      # [n, chunk, action_dim] float32

    envfleet rollout --policy my_pkg.policies:make_policy ...
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from envfleet.dataproto import DataProto
from envfleet.errors import ConfigError
from envfleet.plugins.spec import import_factory, split_factory

__all__ = ["Policy", "ZeroPolicy", "RandomPolicy", "SleepPolicy", "load_policy"]

Policy = Callable[[DataProto], np.ndarray]


class ZeroPolicy:
    """All-zero actions (the gripper stays as it is)."""

    def __init__(self, chunk: int, action_dim: int) -> None:
        self.chunk, self.action_dim = chunk, action_dim

    def __call__(self, obs: DataProto) -> np.ndarray:
        return np.zeros((len(obs), self.chunk, self.action_dim), dtype=np.float32)


class RandomPolicy:
    """Uniform actions in ``[-scale, scale]`` from a seeded generator."""

    def __init__(self, chunk: int, action_dim: int, seed: int = 0, scale: float = 1.0) -> None:
        self.chunk, self.action_dim, self.scale = chunk, action_dim, scale
        self.rng = np.random.default_rng(seed)

    def __call__(self, obs: DataProto) -> np.ndarray:
        shape = (len(obs), self.chunk, self.action_dim)
        return (self.rng.uniform(-1.0, 1.0, size=shape) * self.scale).astype(np.float32)


class SleepPolicy(ZeroPolicy):
    """Zero actions after a fixed latency: a stand-in for a model in benchmarks."""

    def __init__(self, chunk: int, action_dim: int, seconds: float) -> None:
        super().__init__(chunk, action_dim)
        self.seconds = seconds

    def __call__(self, obs: DataProto) -> np.ndarray:
        time.sleep(self.seconds)
        return super().__call__(obs)


def _is_factory(obj: Any) -> bool:
    try:
        params = inspect.signature(obj).parameters
    except (TypeError, ValueError):
        return False
    return "chunk" in params and "action_dim" in params


def load_policy(spec: str, chunk: int, action_dim: int, seed: int = 0) -> Policy:
    """Build a policy from ``zero``, ``random``, ``sleep:SECONDS`` or ``package.module:callable``.

    For ``module:callable`` the attribute may be a policy callable, or a factory (see
    the module doc) called with ``chunk``, ``action_dim`` and, when it takes one, ``seed``.

    :raises ConfigError: naming the spec and what was expected.
    """
    spec = spec.strip()
    if spec == "zero":
        return ZeroPolicy(chunk, action_dim)
    if spec == "random":
        return RandomPolicy(chunk, action_dim, seed)
    if spec.startswith("sleep:"):
        try:
            seconds = float(spec.split(":", 1)[1])
        except ValueError:
            raise ConfigError(f"policy {spec!r}: expected sleep:SECONDS with a number, e.g. sleep:0.1") from None
        if not seconds >= 0:
            raise ConfigError(f"policy {spec!r}: the latency must be >= 0 seconds")
        return SleepPolicy(chunk, action_dim, seconds)
    try:
        module_name, attr = split_factory(spec)
    except ValueError:
        raise ConfigError(f"policy {spec!r} is not one of: zero, random, sleep:SECONDS, or package.module:callable") from None
    try:
        obj = import_factory(spec)
    except ImportError as exc:
        raise ConfigError(f"policy {spec!r}: cannot import module {module_name!r}: {exc}") from None
    except AttributeError:
        raise ConfigError(f"policy {spec!r}: module {module_name!r} has no attribute {attr!r}") from None
    if _is_factory(obj):
        params = inspect.signature(obj).parameters
        kwargs = {"chunk": chunk, "action_dim": action_dim, **({"seed": seed} if "seed" in params else {})}
        obj = obj(**kwargs)
    elif isinstance(obj, type):
        obj = obj(chunk, action_dim)
    if not callable(obj):
        raise ConfigError(f"policy {spec!r}: {attr!r} is not callable")
    return obj  # type: ignore[no-any-return]
