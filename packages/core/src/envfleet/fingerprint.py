"""The protocol fingerprint: what decides a result's numbers, and a short hash of it.

A success rate is comparable with another only when the evaluation protocol is the
same: the simulator and renderer versions, the renderer itself (EGL or OSMesa, a GPU or
llvmpipe), the cameras, image flip, action transform, settle steps, episode length,
seed, render mode, which initial states were used, and what of the backend's own section
decides results (``BackendSpec.protocol_parts``, e.g. LIBERO's instruction source), and the
named protocol selected (``train.protocol``: name, version, success metric, overrides). :func:`protocol` collects the
parts a config, a backend and a running shard know; :func:`fingerprint` adds the set of
state ids and hashes everything. Two runs of the same config on the same machine give
the same hash; changing any of those parts changes it.

>>> fp = fingerprint({"backend": "toy", "seed": 42}, [3, 1, 2, 3])
>>> fp["state_ids"]["count"], len(fp["hash"])
(3, 12)
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from .execution import describe
from .named_protocols import protocol_record

__all__ = ["protocol", "fingerprint", "package_versions"]


def package_versions(distributions: Iterable[str]) -> dict[str, str]:
    """Installed version of each distribution (``"not installed"`` when missing)."""
    out: dict[str, str] = {}
    for dist in distributions:
        if not dist or dist in out:
            continue
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def protocol(section: Any, spec: Any, renderer: Mapping[str, str]) -> dict[str, Any]:
    """The protocol of one env section (``train`` or ``val``) of backend ``spec``, rendered by ``renderer``."""
    cams = section.init_params
    own = getattr(spec, "protocol_parts", None)
    parts: dict[str, Any] = {str(spec.name): dict(own(section))} if own is not None else {}
    named = protocol_record(section, spec)
    if named is not None:
        parts["named_protocol"] = named
    record = section.get("record") if hasattr(section, "get") else None
    if record is not None and record.get("format") is not None:
        # What recording asks of the simulator: with frames: step the recorded envs render every sub-step.
        step = str(getattr(record.frames, "value", record.frames)) == "step"
        parts["recording"] = {"frames": "step" if step else "chunk", "renders": "every sub-step" if step else str(section.render)}
    execution = describe(section)
    if execution is not None:  # the schedule of actions is part of the experiment (mode chunk leaves the hash as it was)
        parts["execution"] = execution
    return {
        "backend": str(spec.name),
        "packages": package_versions(["envfleet", spec.package, *spec.result_packages]),
        "renderer": {str(k): str(v) for k, v in sorted(renderer.items())},
        "task_suite_name": section.task_suite_name,
        "task_name": section.task_name or section.env_id,
        "cameras": {"names": [str(c) for c in cams.camera_names], "height": int(cams.camera_heights), "width": int(cams.camera_widths)},
        "flip_images": bool(section.flip_images),
        "action_transform": str(section.action_transform),
        "settle_steps": int(section.settle_steps),
        "max_episode_steps": section.max_episode_steps,
        "ignore_terminations": bool(section.ignore_terminations),
        "seed": int(section.seed),
        "render": str(section.render),
        **parts,
    }


def fingerprint(parts: Mapping[str, Any], state_ids: Iterable[int]) -> dict[str, Any]:
    """``parts`` plus the state ids used (count and hash of the sorted set) and ``hash``, 12 hex digits of all of it."""
    ids = np.unique(np.fromiter((int(i) for i in state_ids), dtype=np.int64))
    out = {**parts, "state_ids": {"count": int(ids.size), "sha256": hashlib.sha256(ids.tobytes()).hexdigest()[:16]}}
    out.pop("hash", None)
    out["hash"] = hashlib.sha256(json.dumps(out, sort_keys=True, default=str).encode()).hexdigest()[:12]
    return out
