"""The ``Env`` contract: a batch of simulator instances of one backend, in one process.

A backend implements :class:`Env`; envfleet's :class:`~envfleet.shards.manager.ProcessEnvManager`
runs one or more of them (shards) in child processes and presents the stage as if it
were a single ``Env``. The calls the two share are declared once, as the
:class:`EnvSurface` protocol both satisfy: what a worker may call on a stage.

Every subclass sets these attributes in its constructor:

- ``num_envs``: how many simulator instances this object steps together;
- ``action_dim``: the last dimension of the actions it accepts;
- ``supports_state``: whether :meth:`Env.get_state` / :meth:`Env.load_state` work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["ArraySpec", "ObservationSpec", "EnvContext", "ResetResult", "ChunkStepResult", "EnvSurface", "Env"]


@dataclass(frozen=True)
class ArraySpec:
    """Shape (without the env dimension) and dtype of one observation array.

    >>> ArraySpec((128, 128, 3), "uint8").nbytes_per_env
    49152
    """

    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        object.__setattr__(self, "dtype", np.dtype(self.dtype).name)

    @property
    def nbytes_per_env(self) -> int:
        """Bytes one env's array occupies."""
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


#: Observation name (``full_image``, ``wrist_image``, ``state``, ...) to its spec.
ObservationSpec = dict[str, ArraySpec]


@dataclass(frozen=True)
class EnvContext:
    """Where an ``Env`` object sits in the fleet; passed to a backend's factory.

    ``env_offset`` is the index, within its stage, of this object's first env, so
    that a backend can give each env its own seed or state cycle.
    """

    num_envs: int
    action_dim: int
    num_action_chunks: int | None  # None: the chunk length is not fixed
    rank: int = 0
    stage_id: int = 0
    shard_id: int = 0
    env_offset: int = 0
    mode: str = "train"


@dataclass
class ResetResult:
    """What :meth:`Env.reset_envs_to_state_ids` returns: the first observation of each env."""

    obs: dict[str, np.ndarray]
    task_descriptions: list[str]
    infos: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class ChunkStepResult:
    """The outcome of one chunk of actions for every env.

    ``obs`` holds the observation after the chunk's last sub-step: ``full_image``
    uint8 ``[n,H,W,3]``, ``wrist_image`` uint8 ``[n,H,W,3]`` where the backend has
    one, ``state`` float32 ``[n,D]``. ``rewards`` is float32 ``[n, chunk]``;
    ``terminations`` and ``truncations`` are bool ``[n, chunk]``. ``infos`` maps
    names to arrays of leading dimension ``n``.
    """

    obs: dict[str, np.ndarray]
    task_descriptions: list[str]
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    infos: dict[str, np.ndarray] = field(default_factory=dict)


@runtime_checkable
class EnvSurface(Protocol):
    """The calls an :class:`Env` in one process and a :class:`~envfleet.shards.manager.ProcessEnvManager`
    over many both answer, so that a worker steps either one the same way. The type checker holds
    both classes to it (see the end of :mod:`envfleet.shards.manager`); at run time
    ``isinstance(obj, EnvSurface)`` checks that the methods and ``num_envs`` are there.
    """

    num_envs: int

    def get_all_state_ids(self) -> np.ndarray:
        """Every state id (int64, 1-D) the envs can be reset to."""
        ...

    def get_state_task_ids(self) -> np.ndarray:
        """The task id of each state id of :meth:`get_all_state_ids`, aligned with it."""
        ...

    def reset_envs_to_state_ids(self, state_ids: np.ndarray, task_ids: np.ndarray | None = None) -> ResetResult:
        """Reset env ``i`` to ``state_ids[i]`` (and check ``task_ids[i]`` when given)."""
        ...

    def chunk_step(self, actions: np.ndarray) -> ChunkStepResult:
        """Step every env through ``actions`` of shape ``[num_envs, chunk, action_dim]``."""
        ...

    def flush_video(self, subdir: str) -> list[str]:
        """Write recorded frames; return the written paths."""
        ...

    def renderer_info(self) -> dict[str, str]:
        """What renders the images."""
        ...

    def close(self) -> None:
        """Free everything. Safe to call more than once."""
        ...


class Env:
    """A batch of ``num_envs`` simulator instances of one backend, in one process.

    Subclasses implement the methods that raise ``NotImplementedError``. Inputs
    reaching an ``Env`` through the manager have been checked already (shapes,
    dtypes, finiteness, id ranges); an ``Env`` used directly should raise
    :class:`~envfleet.errors.InvalidInputError` for what it cannot accept.

    ``close()`` must be safe to call twice.
    """

    num_envs: int
    action_dim: int
    supports_state: bool = False

    def observation_spec(self) -> ObservationSpec:
        """Name -> :class:`ArraySpec` of every observation array, per env."""
        raise NotImplementedError

    def get_all_state_ids(self) -> np.ndarray:
        """Every state id (int64, 1-D) this env can be reset to."""
        raise NotImplementedError

    def get_state_task_ids(self) -> np.ndarray:
        """The task id of each state id of :meth:`get_all_state_ids`, aligned with it."""
        return np.zeros(len(self.get_all_state_ids()), dtype=np.int64)

    def reset_envs_to_state_ids(self, state_ids: np.ndarray, task_ids: np.ndarray | None = None) -> ResetResult:
        """Reset env ``i`` to ``state_ids[i]`` (and check ``task_ids[i]`` when given)."""
        raise NotImplementedError

    def reset_some_envs(self, env_ids: np.ndarray, state_ids: np.ndarray, task_ids: np.ndarray | None = None) -> ResetResult:
        """Reset env ``env_ids[j]`` to ``state_ids[j]``; every other env keeps its episode.

        Optional: a backend that can reset envs one at a time implements it (gymnasium's
        ``reset_mask`` and its autoreset need it). ``env_ids`` may be empty. The result holds
        the observations, task descriptions and infos of **all** envs, as a full reset's.
        The default handles only the case of every env, in order.
        """
        env_ids = np.asarray(env_ids, dtype=np.int64)
        if np.array_equal(env_ids, np.arange(self.num_envs)):
            return self.reset_envs_to_state_ids(state_ids, task_ids)
        raise NotImplementedError(
            f"{type(self).__name__} cannot reset some of its envs and leave the others running: "
            "its backend does not implement Env.reset_some_envs(); reset every env instead"
        )

    def chunk_step(self, actions: np.ndarray) -> ChunkStepResult:
        """Step every env through ``actions`` of shape ``[num_envs, chunk, action_dim]``.

        Through the manager, ``actions`` is a **read-only** float32 array over the received
        message's bytes (no copy is made for the env): copy it before changing it in place.
        """
        raise NotImplementedError

    def flush_video(self, subdir: str) -> list[str]:
        """Write any frames recorded in-process; return the written paths.

        Most backends record nothing here: the manager records the stage's video
        from the observations it already has.
        """
        return []

    def bind_observation_buffers(self, buffers: dict[str, np.ndarray]) -> bool:
        """Optionally write observations straight into ``buffers`` (shared memory).

        Called once in the shard process with one array per observation key,
        shaped ``[num_envs, *spec.shape]``. An env that returns True promises to
        return these very arrays in ``obs`` from then on, saving a copy per call.
        The default keeps the env's own arrays (the shard copies them).
        """
        return False

    def renderer_info(self) -> dict[str, str]:
        """Optional: what renders the images, for a result's protocol fingerprint.

        For example ``{"platform": "egl", "gl_vendor": "Mesa", "gl_renderer": "llvmpipe (LLVM 15.0.7, 256 bits)"}``.
        The default is empty (the shard adds ``MUJOCO_GL`` / ``PYOPENGL_PLATFORM`` from its environment).
        """
        return {}

    def get_state(self) -> Any:
        """A picklable snapshot from which :meth:`load_state` continues the same episodes.

        Use numpy arrays and plain Python values, not torch tensors: the snapshot crosses a
        process boundary, and torch's pickling of tensors tries to share memory instead.
        """
        raise NotImplementedError(f"{type(self).__name__} does not support get_state()")

    def load_state(self, state: Any) -> None:
        """Restore a snapshot made by :meth:`get_state`."""
        raise NotImplementedError(f"{type(self).__name__} does not support load_state()")

    def close(self) -> None:
        """Free the simulator. Safe to call more than once."""
