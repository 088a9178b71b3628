"""The MetaWorld backend runs the core conformance suite, its shards in MetaWorld's own venv."""

from __future__ import annotations

from envfleet.testing import EnvConformance

from .common import CHUNK, metaworld_train


class TestMetaworldConformance(EnvConformance):
    # mt50: the suite's resets move an env between tasks, so envs are rebuilt as well as reused.
    config_data = {"train": metaworld_train(num_envs=2)}
    config_overrides = [f"actor.model.num_action_chunks={CHUNK}"]
