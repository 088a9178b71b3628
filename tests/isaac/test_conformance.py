"""The core conformance suite on the isaac backend (the project's pusher task, kit-less, CPU)."""

from __future__ import annotations

import numpy as np

from envfleet import ProcessEnvManager
from envfleet.testing import EnvConformance

from .common import pusher_train


class TestIsaacConformance(EnvConformance):
    config_data = {"train": pusher_train(num_envs=2, isaac={"state_bank_size": 16})}
    config_overrides = ["actor.model.num_action_chunks=4", "actor.model.action_dim=2"]
    sample_size = 3

    def test_envs_start_from_different_state_ids(self, manager: ProcessEnvManager) -> None:
        """Each env of the stage gets its own state id; an id always gives the same start."""
        first = manager.reset_envs_to_state_ids(np.array([5, 9]))
        assert not np.array_equal(first.obs["state"][0], first.obs["state"][1])
        assert not np.array_equal(first.obs["full_image"][0], first.obs["full_image"][1])
        assert first.infos["state_id"].tolist() == [5, 9]
        swapped = manager.reset_envs_to_state_ids(np.array([9, 5]))
        for key in first.obs:
            np.testing.assert_array_equal(first.obs[key][0], swapped.obs[key][1], err_msg=f"state id 5 gave a different {key!r}")
            np.testing.assert_array_equal(first.obs[key][1], swapped.obs[key][0], err_msg=f"state id 9 gave a different {key!r}")

    def test_finished_env_repeats_its_last_observation(self, manager: ProcessEnvManager) -> None:
        """After truncation every later chunk repeats the last observation and flag, with reward 0."""
        horizon = 8  # max_episode_steps = 2 chunks of 4
        manager.reset_envs_to_state_ids(np.array([1, 2]))
        rng = np.random.default_rng(3)
        outs = [manager.chunk_step(rng.uniform(-1, 1, (2, 4, 2)).astype(np.float32)) for _ in range(horizon // 4 + 2)]
        last = outs[horizon // 4 - 1]
        assert last.truncations[:, -1].all()
        for later in outs[horizon // 4 :]:
            assert later.truncations.all() and not later.rewards.any()
            for key in last.obs:
                np.testing.assert_array_equal(later.obs[key], last.obs[key], err_msg=f"a finished env's {key!r} changed")
