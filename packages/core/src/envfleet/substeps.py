"""Sub-step observations for ``train.record.frames: step``: what the recorded envs hand out besides a chunk's last.

A chunk step returns the observation after its last sub-step only. A dataset recorded per step needs
the observation after every sub-step, so for a section that records per step the backend's
observation spec gains, for each recorded key (the cameras of ``record.image_keys`` and ``state``),
a key ``substep/<key>`` of shape ``[chunk, *shape]``: row ``k`` is the observation after sub-step
``k`` of the chunk (a sub-step not simulated, after the episode ended, is left as it was). They
travel through the shard's shared memory with the others; the manager takes them out of the result
before a caller sees it and hands them to the recorder. Only the recorded section's envs render
every sub-step, and only when recording per step: ``render: last`` is off for them, for nobody else.

A backend that writes them declares ``BackendSpec.control_fps`` (its sub-steps per second of
simulated time, the dataset's fps) and ``substep_observations=True``; a :class:`~envfleet.batched_env.BatchedEnv`
calls :meth:`~envfleet.batched_env.BatchedEnv.keep_substep` after writing sub-step ``k``'s observation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .env import ArraySpec

__all__ = ["PREFIX", "records_substeps", "recorded_keys", "substep_spec", "split_substeps"]

PREFIX = "substep/"


def records_substeps(section: Any) -> bool:
    """Whether env section ``section`` (``train`` / ``val``) records a frame per sub-step."""
    record = section.get("record") if hasattr(section, "get") else getattr(section, "record", None)
    if record is None or record.get("format") is None:
        return False
    return str(getattr(record.get("frames"), "value", record.get("frames"))) == "step"


def recorded_keys(spec: Mapping[str, Any], image_keys: Any) -> list[str]:
    """The observation keys a dataset records: the cameras (``image_keys``, or every uint8 ``[H, W, 3]``) and ``state``."""
    images = [k for k, s in spec.items() if np.dtype(s.dtype) == np.uint8 and len(s.shape) == 3 and s.shape[-1] == 3]
    chosen = images if image_keys is None else [str(k) for k in image_keys if str(k) in images]
    return [*chosen, *(["state"] if "state" in spec else [])]


def substep_spec(section: Any, spec: Mapping[str, Any], chunk: int | None) -> dict[str, ArraySpec]:
    """The ``substep/<key>`` entries a section recording per step adds to ``spec``; ``{}`` otherwise.

    :raises ValueError: recording per step with no fixed chunk length.
    """
    if not records_substeps(section):
        return {}
    if chunk is None:
        raise ValueError("train.record.frames: step needs a fixed chunk length (actor.model.num_action_chunks)")
    keys = recorded_keys(spec, section.record.image_keys)
    return {PREFIX + k: ArraySpec((int(chunk), *spec[k].shape), np.dtype(spec[k].dtype)) for k in keys}


def split_substeps(obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Take the ``substep/`` entries out of ``obs`` (in place) and return them, keyed without the prefix."""
    return {key[len(PREFIX) :]: obs.pop(key) for key in [k for k in obs if k.startswith(PREFIX)]}
