"""The gymnasium backend runs the core conformance suite: on an env whose images come from ``render()``
(gymnasium's Pendulum) and on one with its images in the observation (Pendulum with its frame in it)."""

from __future__ import annotations

from envfleet.testing import EnvConformance

from .common import PIXEL_PENDULUM, gym_train


class TestPendulumRendersConformance(EnvConformance):
    config_data = {"train": gym_train("Pendulum-v1", render="rgb_array", seeds=8)}
    config_overrides = ["actor.model.num_action_chunks=4"]


class TestPixelPendulumConformance(EnvConformance):
    # The frame in the observation under verl's name, full_image: the suite's flip check looks at it by that name.
    config_data = {"train": gym_train(PIXEL_PENDULUM, seeds=8, image_keys={"full_image": "pixels"})}
    config_overrides = ["actor.model.num_action_chunks=4"]
