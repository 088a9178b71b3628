"""A realtime stage through the EnvWorker (in process): the caller's delays from a DataProto column,
and what ran in the DataProto it returns."""

from __future__ import annotations

import numpy as np
import pytest

from envfleet.dataproto import DataProto
from envfleet.errors import InvalidInputError
from envfleet.execution import ActionSource
from envfleet_ray.runtime.worker import EnvWorker

from ..conftest import toy_cfg

N, S, CHUNK = 2, 2, 4


def test_delays_in_the_dataproto_schedule_each_stage_and_what_ran_comes_back_as_tensors() -> None:
    cfg = toy_cfg(N, CHUNK, S, "train.execution.mode=realtime", "train.execution.delay=caller")
    worker = EnvWorker(cfg, rank=0)
    try:
        worker.init_worker()
        worker.init_simulator()
        worker.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": np.arange(N * S)}))
        rng = np.random.default_rng(0)
        chunks = [rng.uniform(-1, 1, (N, CHUNK, 7)).astype(np.float32) for _ in range(2)]

        def step(chunk: np.ndarray, delays: list[int], stage: int = 1) -> DataProto:
            data = {"actions": chunk, "delays": np.array(delays)}
            return worker.env_interact_step(DataProto.from_dict(non_tensors=data, meta_info={"stage_id": stage}))

        step(chunks[0], [3, 3])  # the first chunk after a reset: no delay
        out = step(chunks[1], [1, 3])
        assert out.batch["action_delay"].tolist() == [1, 3]
        assert out.batch["applied_action"].shape == (N, CHUNK, 7)
        sources = out.batch["action_source"].numpy()
        assert sources[0].tolist() == [ActionSource.hold] + [ActionSource.current] * 3
        assert sources[1].tolist() == [ActionSource.hold] * 3 + [ActionSource.current]
        np.testing.assert_array_equal(out.batch["applied_action"][0, 1:].numpy(), chunks[1][0, 1:])
        np.testing.assert_array_equal(out.batch["applied_action"][1, :3].numpy(), np.repeat(chunks[0][1, -1:], 3, axis=0))
        with pytest.raises(InvalidInputError, match="between 0 and the horizon"):
            step(chunks[1], [0, 5])
        step(chunks[1], [0, 4])  # still usable
    finally:
        worker.close()
