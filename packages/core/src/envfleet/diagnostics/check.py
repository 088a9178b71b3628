"""Build and step a backend once, the way a rollout would: ``envfleet backends --check``.

>>> result = check_backend("toy")  # doctest: +SKIP
>>> result.ok, result.line()  # doctest: +SKIP
(True, 'toy: ok (build 0.41 s, reset 0.01 s, step 0.01 s)')
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from ..config import load_config
from ..plugins import get_backend
from ..shards.manager import ProcessEnvManager

__all__ = ["CheckResult", "check_backend", "smallest_config"]


@dataclass
class CheckResult:
    """What one backend's check gave: ``ok``, the seconds each phase took, or the cause of a failure."""

    name: str
    ok: bool
    cause: str = ""
    seconds: dict[str, float] = field(default_factory=dict)

    def line(self) -> str:
        """One line for the terminal."""
        if self.ok:
            return f"{self.name}: ok (" + ", ".join(f"{k} {v:.2f} s" for k, v in self.seconds.items()) + ")"
        return f"{self.name}: FAILED: {self.cause}"


def smallest_config(name: str, overrides: Sequence[str] = (), num_action_chunks: int | None = 2) -> Any:
    """The config of one env of backend ``name``: its ``BackendSpec.check_config``, then ``overrides``.

    ``num_action_chunks`` sets the chunk size (``None``: the config's default).
    """
    spec = get_backend(name)
    base: dict[str, Any] = {"train": {"simulator_type": name, "num_envs": 1}}
    if num_action_chunks is not None:
        base["actor"] = {"model": {"num_action_chunks": num_action_chunks}}
    data = OmegaConf.merge(OmegaConf.create(base), OmegaConf.create(dict(spec.check_config)))
    assert isinstance(data, DictConfig)
    return load_config(data=data, overrides=list(overrides))


def check_backend(name: str, overrides: Sequence[str] = ()) -> CheckResult:
    """Load a config for backend ``name`` (its ``BackendSpec.check_config`` and ``overrides``), start one
    env in a shard process, reset it to its first state id and step it with one chunk of zeros."""
    seconds: dict[str, float] = {}
    try:
        cfg = smallest_config(name, overrides)
        t0 = time.perf_counter()
        with ProcessEnvManager(cfg) as mgr:  # entering starts the simulator
            seconds["build"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            mgr.reset_envs_to_state_ids(mgr.get_all_state_ids()[:1])
            seconds["reset"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            mgr.chunk_step(np.zeros((1, mgr.chunk, mgr.action_dim), np.float32))
            seconds["step"] = time.perf_counter() - t0
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return CheckResult(name, False, f"{type(exc).__name__}: {first}", seconds)
    return CheckResult(name, True, "", seconds)
