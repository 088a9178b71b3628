"""Several LIBERO envs in one process: scenes built once per task, shared, checked, freed.

Images against LIBERO's own env are in ``test_libero_fidelity.py``; memory, first-reset
time and speed are measured by ``nox -s bench`` (section ``libero_dense``).
"""

from __future__ import annotations

import os
import signal
import time
from types import SimpleNamespace

import numpy as np
import pytest

from envfleet import ProcessEnvManager
from envfleet.config import load_config
from envfleet.env import EnvContext
from envfleet.errors import ConfigError

SIZE = 64


def _cfg(num_envs: int, stages: int = 1, **libero: object) -> object:
    return load_config(
        data={
            "train": {
                "simulator_type": "libero",
                "task_suite_name": "libero_spatial",
                "num_envs": num_envs,
                "settle_steps": 2,
                "init_params": {"camera_heights": SIZE, "camera_widths": SIZE},
                "libero": dict(libero),
            },
            "rollout": {"pipeline_stage_num": stages},
            "actor": {"model": {"num_action_chunks": 2, "action_dim": 7}},
        }
    )


def test_a_task_is_compiled_once_per_process_and_freed_with_the_last_env() -> None:
    from envfleet_libero.env import LiberoEnv
    from envfleet_libero.scenes import scene_cache

    cfg = _cfg(3)
    ctx = EnvContext(num_envs=3, action_dim=7, num_action_chunks=2, rank=0, stage_id=0, shard_id=0, env_offset=0, mode="train")
    env = LiberoEnv(cfg.train, ctx)  # type: ignore[attr-defined]
    cache = scene_cache()
    before = cache.compiles  # the cache is the process's: other tests may have used it
    try:
        env.reset_envs_to_state_ids(np.array([0, 1, 50]))  # task 0 twice, task 1 once
        assert (cache.compiles - before, len(cache), cache.in_use()) == (2, 2, 2)
        env.chunk_step(np.zeros((3, 2, 7), dtype=np.float32))
        # Every env changes task or trial; both tasks are held, so nothing is compiled.
        env.reset_envs_to_state_ids(np.array([50, 0, 2]))
        assert (cache.compiles - before, len(cache)) == (2, 2)
        assert [sim.scene for sim in env.sims][1] is env.sims[2].scene  # type: ignore[union-attr]
        assert env.sims[0].scene is not env.sims[1].scene  # type: ignore[union-attr]
    finally:
        env.close()
    assert len(cache) == 0 and cache._gl is None


def test_a_lost_process_restarts_all_its_envs(no_leaks: None) -> None:
    with ProcessEnvManager(_cfg(3, envs_per_process=2)) as mgr:  # type: ignore[arg-type]
        assert [s.num_envs for s in mgr.shards] == [2, 1]
        ids = np.array([0, 51, 2])
        first = mgr.reset_envs_to_state_ids(ids)
        mgr.chunk_step(np.full((3, 2, 7), 0.3, dtype=np.float32))
        victim = mgr.shard_pids()[0]
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        time.sleep(0.2)
        out = mgr.chunk_step(np.zeros((3, 2, 7), dtype=np.float32))
        assert out.infos["sim_restarted"].tolist() == [True, True, False]
        # A restarted env hands out a fresh reset to its state id.
        for i in (0, 1):
            np.testing.assert_array_equal(out.obs["full_image"][i], first.obs["full_image"][i])
        assert not np.array_equal(out.obs["full_image"][2], first.obs["full_image"][2])
        assert mgr.stats.restarts == 1
        assert not mgr.chunk_step(np.zeros((3, 2, 7), dtype=np.float32)).infos["sim_restarted"].any()


@pytest.mark.parametrize("value", [0, -2])
def test_envs_per_process_must_be_a_positive_integer(value: object) -> None:
    with pytest.raises(ConfigError, match=r"train\.libero\.envs_per_process.*integer >= 1, got -?\d"):
        ProcessEnvManager(_cfg(2, envs_per_process=value))  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["four", 2.5, True])
def test_envs_per_process_must_be_an_integer(value: object) -> None:
    with pytest.raises(ConfigError, match=r"train\.libero\.envs_per_process.*expected int"):
        _cfg(2, envs_per_process=value)


def test_envs_per_process_sets_the_layout() -> None:
    for per, shards in ((1, [1, 1, 1, 1, 1]), (2, [2, 2, 1]), (4, [4, 1]), (8, [5])):
        mgr = ProcessEnvManager(_cfg(5, envs_per_process=per))  # type: ignore[arg-type]
        try:
            assert [s.num_envs for s in mgr.shards] == shards
        finally:
            mgr.close()
    from envfleet.diagnostics.measure import machine
    from envfleet_libero.layout import default_envs_per_process

    # Unset: the default layout's rule (tests/libero/test_libero_layout.py) on this process's cores and memory.
    per = default_envs_per_process(5, len(os.sched_getaffinity(0)), machine().mem_available, 1)
    mgr = ProcessEnvManager(_cfg(5))  # type: ignore[arg-type]
    try:
        assert [s.num_envs for s in mgr.shards] == [min(per, 5 - k) for k in range(0, 5, per)]
    finally:
        mgr.close()


def test_a_reset_that_places_fixtures_elsewhere_is_refused() -> None:
    from envfleet_libero.scenes import Scene

    model = SimpleNamespace(
        body_pos=np.zeros((3, 3)), body_quat=np.tile([1.0, 0, 0, 0], (3, 1)), site_rgba=np.zeros((2, 4)), geom_rgba=np.zeros((2, 4))
    )
    scene = Scene("key", model, con=None)
    model.body_pos[1] = [0.1, 0.2, 0.3]  # the first seeded reset places a fixture
    scene.record_fixture_pose("task")
    model.body_pos[1] = [0.1, 0.2, 0.35]  # a later reset places it elsewhere
    with pytest.raises(RuntimeError, match="placed the fixtures elsewhere.*one seed"):
        scene.record_fixture_pose("task")
    np.testing.assert_array_equal(model.body_pos[1], [0.1, 0.2, 0.3])  # the other envs' pose is back
    scene.restore_pristine()
    assert not model.body_pos.any()
