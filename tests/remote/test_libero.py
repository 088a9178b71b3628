"""One real LIBERO case over ``envfleet serve``: bit-identical to an in-process ``ProcessEnvManager`` over the same config."""

from __future__ import annotations

import numpy as np

from envfleet import ProcessEnvManager
from envfleet.config import load_config
from envfleet.remote import RemoteEnvManager

from .servetools import TOKEN, serve

LIBERO = (
    "train.simulator_type=libero",
    "train.task_suite_name=libero_spatial",
    "train.num_envs=1",
    "train.render=last",
    "train.init_params.camera_heights=64",
    "train.init_params.camera_widths=64",
    "actor.model.num_action_chunks=4",
)


def _run(mgr) -> list:
    out = [mgr.reset_envs_to_state_ids(np.array([3]))]
    rng = np.random.default_rng(5)
    for _ in range(2):  # the arm moves: the images differ from step to step
        out.append(mgr.chunk_step(rng.uniform(-0.5, 0.5, (1, 4, 7)).astype(np.float32)))
    return out


def test_libero_over_serve_is_bit_identical(tmp_path, no_leaks) -> None:
    with ProcessEnvManager(load_config(overrides=[*LIBERO, "rollout.pipeline_stage_num=1"])) as ref:
        want = _run(ref)
    served = serve(tmp_path, base=LIBERO)
    try:
        with RemoteEnvManager(served.address, token=TOKEN) as mgr:
            assert mgr.spec.name == "libero" and mgr.obs_spec["full_image"].shape == (64, 64, 3)
            got = _run(mgr)
        for i, (g, w) in enumerate(zip(got, want)):
            assert set(g.obs) == set(w.obs)
            for key in w.obs:
                np.testing.assert_array_equal(g.obs[key], w.obs[key], err_msg=f"call {i}: {key}")
            for key in w.infos:
                np.testing.assert_array_equal(g.infos[key], w.infos[key], err_msg=f"call {i}: info {key}")
            if i:
                np.testing.assert_array_equal(g.rewards, w.rewards)
                np.testing.assert_array_equal(g.truncations, w.truncations)
        assert not np.array_equal(got[1].obs["full_image"], got[2].obs["full_image"]), "the scene moved"
    finally:
        served.stop()
