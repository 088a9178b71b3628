"""envfleet's conformance suite, run against the reacher backend, as its author wrote it."""

from envfleet.testing import EnvConformance


class TestReacherConformance(EnvConformance):
    config_data = {"train": {"simulator_type": "reacher", "num_envs": 2, "render": "all"}}
    config_overrides = ["actor.model.num_action_chunks=4", "actor.model.action_dim=2"]
