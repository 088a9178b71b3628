"""Envs whose episode ended inside a chunk: held at their final scene state, their final observation kept.

Isaac Lab steps every env of the batch at each sub-step. An env whose episode ended
must not move again until it is reset, and the chunk must return the observation of
the sub-step at which it ended (see docs/concepts.md, "Episodes"). Two objects do it:

- :class:`HeldEnvs` (one per :class:`~envfleet_isaac.env.IsaacEnv`, lives across chunks):
  which envs are held and their scene state from the moment they finished. It zeroes
  their actions before a sub-step and writes their state back after it; offload saves it.
- :class:`FrozenObservations` (one per chunk): the state vector and camera images of
  the envs that ended, taken at the sub-step they ended, put in place of the chunk's
  last observation for those envs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .tensors import State, assign_rows, map_arrays

__all__ = ["HeldEnvs", "FrozenObservations"]


class HeldEnvs:
    """The held envs of one batched Isaac Lab env and the scene state each is held at.

    :param num_envs: the batch size.
    """

    def __init__(self, num_envs: int) -> None:
        self.mask = np.zeros(num_envs, dtype=bool)
        self.state: State | None = None  # absolute scene state; rows of held envs are meaningful

    def release(self, idx: np.ndarray | None = None) -> None:
        """Envs ``idx`` (None: all) were reset: they move again."""
        if idx is None:
            self.mask[:] = False
        else:
            self.mask[idx] = False

    def mask_actions(self, action: torch.Tensor, held: np.ndarray) -> torch.Tensor:
        """``action`` with the rows of ``held`` zeroed: finished envs ignore their actions."""
        return action * torch.as_tensor(~held, device=action.device).unsqueeze(-1)

    def hold(self, scene: Any, newly: np.ndarray, device: Any) -> None:
        """Remember the scene state of envs ``newly`` whose episode just ended (absolute, for the same env)."""
        current = scene.get_state(is_relative=False)
        if self.state is None:
            self.state = map_arrays(current, lambda t: t.clone())
        else:
            assign_rows(self.state, current, torch.as_tensor(np.nonzero(newly)[0], device=device))
        self.mask |= newly

    def restore(self, scene: Any, held: np.ndarray, device: Any) -> None:
        """Write the held envs' final state back after a sub-step moved them."""
        assert self.state is not None
        ids = torch.as_tensor(np.nonzero(held)[0], dtype=torch.int32, device=device)
        rows = ids.long()
        scene.reset_to(map_arrays(self.state, lambda t: t[rows]), ids, is_relative=False)

    def get_state(self, to_host: Callable[[torch.Tensor], np.ndarray]) -> dict[str, Any]:
        """For offload: the mask and the held state, as numpy."""
        return {"held_state": None if self.state is None else map_arrays(self.state, to_host), "held_mask": self.mask.copy()}

    def load_state(self, state: dict[str, Any], to_device: Callable[[np.ndarray], torch.Tensor]) -> None:
        """Undo :meth:`get_state`."""
        self.state = None if state["held_state"] is None else map_arrays(state["held_state"], to_device)
        self.mask = np.array(state["held_mask"], dtype=bool)


class FrozenObservations:
    """The observation of the envs that ended during one chunk, at the sub-step they ended."""

    def __init__(self) -> None:
        self.state: torch.Tensor | None = None
        self.images: dict[str, torch.Tensor] = {}

    def keep_state(self, rows: torch.Tensor, state: torch.Tensor) -> None:
        """Keep rows ``rows`` of the state vector batch ``state``."""
        if self.state is None:
            self.state = torch.zeros_like(state)
        self.state[rows] = state[rows]

    def keep_images(self, rows: torch.Tensor, images: dict[str, torch.Tensor]) -> None:
        """Keep rows ``rows`` of every camera's image batch (``render: all``: the images of that sub-step)."""
        for key, img in images.items():
            if key not in self.images:
                self.images[key] = torch.zeros_like(img)
            self.images[key][rows] = img[rows]

    def apply_state(self, ended: np.ndarray, state: torch.Tensor) -> torch.Tensor:
        """``state`` with the kept rows of the envs ``ended`` in place."""
        if self.state is None:
            return state
        return torch.where(torch.as_tensor(ended, device=state.device).unsqueeze(-1), self.state, state)

    def apply_images(self, ended: np.ndarray, images: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``images`` with the kept rows of the envs ``ended`` in place."""
        if not self.images:
            return images
        mask = torch.as_tensor(ended, device=next(iter(images.values())).device).view(-1, 1, 1, 1)
        return {key: torch.where(mask, self.images[key], img) for key, img in images.items()}
