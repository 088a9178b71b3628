"""A tiny LeRobot policy for the toy backend: a real ``PreTrainedPolicy`` (no hub weights exist here).

It reads ``observation.state`` (the toy's ``(px, py, gx, gy, dx, dy, dist, task)``) and plans a
chunk of ``n_action_steps`` actions that reach the goal in that many sub-steps when it is near
enough, popping one action per ``select_action`` call as LeRobot's chunking policies (ACT, pi0) do.
``gain=0`` makes it stand still (never succeeds).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import torch
from lerobot.configs import FeatureType, PolicyFeature
from lerobot.configs.policies import PreTrainedConfig
from lerobot.optim import AdamConfig
from lerobot.policies import PreTrainedPolicy
from torch import Tensor, nn

SPEED = 0.05  # the toy's displacement per sub-step at action 1 (envfleet_toy.env.SPEED)


@PreTrainedConfig.register_subclass("envfleet_toy_reacher")
@dataclass
class ReacherConfig(PreTrainedConfig):
    """The reacher's config: chunk length and gain."""

    n_action_steps: int = 1
    gain: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        self.input_features = {"observation.state": PolicyFeature(type=FeatureType.STATE, shape=(8,))}
        self.output_features = {"action": PolicyFeature(type=FeatureType.ACTION, shape=(7,))}

    @property
    def observation_delta_indices(self) -> None:
        return None

    @property
    def action_delta_indices(self) -> None:
        return None

    @property
    def reward_delta_indices(self) -> None:
        return None

    def get_optimizer_preset(self) -> AdamConfig:
        return AdamConfig()

    def get_scheduler_preset(self) -> None:
        return None

    def validate_features(self) -> None:
        return None


class Reacher(PreTrainedPolicy):
    """Moves the point toward the goal; see the module doc."""

    config_class = ReacherConfig
    name = "envfleet_toy_reacher"

    def __init__(self, config: ReacherConfig) -> None:
        super().__init__(config)
        self.scale = nn.Parameter(torch.tensor(float(config.gain)), requires_grad=False)
        self.observations_read = 0
        self._queue: deque[Tensor] = deque()

    def get_optim_params(self) -> dict:
        return {}

    def reset(self) -> None:
        self._queue.clear()

    def forward(self, batch: dict[str, Tensor]) -> tuple[Tensor, dict | None]:
        raise NotImplementedError("the reacher is not trained")

    def predict_action_chunk(self, batch: dict[str, Tensor], **kwargs: object) -> Tensor:
        state = batch["observation.state"]
        n = self.config.n_action_steps
        step = torch.clamp(state[:, 4:6] / (SPEED * n), -1.0, 1.0) * self.scale
        actions = torch.zeros(state.shape[0], n, 7)
        actions[:, :, :2] = step[:, None, :]
        return actions

    def select_action(self, batch: dict[str, Tensor], **kwargs: object) -> Tensor:
        if not self._queue:
            self.observations_read += 1
            self._queue.extend(self.predict_action_chunk(batch).transpose(0, 1))
        return self._queue.popleft()
