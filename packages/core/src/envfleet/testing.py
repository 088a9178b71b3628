"""The backend conformance suite: pytest classes every backend runs against itself.

Subclass :class:`EnvConformance` in your backend's tests and say how to configure it::

    from envfleet.testing import EnvConformance

    class TestToyConformance(EnvConformance):
        config_data = {"train": {"simulator_type": "toy", "num_envs": 2}}
        config_overrides = ["actor.model.num_action_chunks=4"]

The suite runs your backend the way envfleet does (through
:class:`~envfleet.manager.ProcessEnvManager`, in shard processes) with
``train.max_episode_steps`` set to two chunks, and checks:

- the observation spec matches what reset and chunk_step return (keys, shapes, dtypes);
- flags are bool ``[n, chunk]``, rewards float32 ``[n, chunk]``;
- determinism: the same state ids and actions give the same observations twice;
- reset to each of a sample of state ids (with their task ids);
- truncation at ``max_episode_steps``, and finished envs keep their flag;
- ``get_state``/``load_state`` round trip through offload, where supported;
- bad inputs are rejected with :class:`~envfleet.errors.InvalidInputError` and the env still works.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np
import pytest

from .config import load_config
from .errors import InvalidInputError
from .manager import ProcessEnvManager

__all__ = ["EnvConformance"]


class EnvConformance:
    """Subclass with ``config_data`` (and optionally ``config_overrides``, ``sample_size``)."""

    config_data: ClassVar[dict[str, Any]] = {}
    config_overrides: ClassVar[list[str]] = []
    sample_size: ClassVar[int] = 4
    action_scale: ClassVar[float] = 0.5

    # ------------------------------------------------------------------ fixtures
    @pytest.fixture(scope="class")
    @classmethod
    def conformance_cfg(cls) -> Any:
        """The config under test: yours, with max_episode_steps = 2 chunks."""
        probe = load_config(data=cls.config_data, overrides=cls.config_overrides)
        chunk = int(probe.actor.model.num_action_chunks)
        return load_config(data=cls.config_data, overrides=[*cls.config_overrides, f"train.max_episode_steps={2 * chunk}"])

    @pytest.fixture(scope="class")
    @classmethod
    def manager(cls, conformance_cfg: Any) -> Iterator[ProcessEnvManager]:
        """A started manager for stage 0."""
        mgr = ProcessEnvManager(conformance_cfg, stage_id=0)
        mgr.start_simulator()
        try:
            yield mgr
        finally:
            mgr.close()

    # ------------------------------------------------------------------ helpers
    def _ids(self, mgr: ProcessEnvManager, offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
        ids = mgr.get_all_state_ids()
        tasks = mgr.get_state_task_ids()
        pick = (np.arange(mgr.num_envs) * 7 + offset) % len(ids)
        return ids[pick], tasks[pick]

    def _actions(self, mgr: ProcessEnvManager, seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        shape = (mgr.num_envs, mgr.num_action_chunks, mgr.action_dim)
        return (rng.uniform(-1, 1, size=shape) * self.action_scale).astype(np.float32)

    def _check_obs(self, mgr: ProcessEnvManager, obs: dict[str, np.ndarray]) -> None:
        assert set(obs) == set(mgr.obs_spec), f"observation keys {sorted(obs)} != spec {sorted(mgr.obs_spec)}"
        for key, spec in mgr.obs_spec.items():
            assert obs[key].shape == (mgr.num_envs, *spec.shape), f"{key}: shape {obs[key].shape}"
            assert obs[key].dtype == np.dtype(spec.dtype), f"{key}: dtype {obs[key].dtype} != {spec.dtype}"
        for key in ("full_image", "wrist_image"):
            if key in obs:
                assert obs[key].dtype == np.uint8 and obs[key].shape[-1] == 3

    # ------------------------------------------------------------------ tests
    def test_state_ids_are_int64_and_unique(self, manager: ProcessEnvManager) -> None:
        """State ids are unique int64, with a task id each."""
        ids = manager.get_all_state_ids()
        assert ids.dtype == np.int64 and ids.ndim == 1 and len(ids) > 0
        assert len(np.unique(ids)) == len(ids)
        assert manager.get_state_task_ids().shape == ids.shape

    def test_reset_matches_spec(self, manager: ProcessEnvManager) -> None:
        """Reset returns every observation of the spec, with its shape and dtype, and task descriptions."""
        state_ids, task_ids = self._ids(manager)
        out = manager.reset_envs_to_state_ids(state_ids, task_ids)
        self._check_obs(manager, out.obs)
        assert len(out.task_descriptions) == manager.num_envs
        assert all(isinstance(t, str) and t for t in out.task_descriptions)

    def test_chunk_step_matches_spec(self, manager: ProcessEnvManager) -> None:
        """A chunk step returns the spec's observations, float32 rewards and bool flags ``[n, chunk]``."""
        state_ids, task_ids = self._ids(manager)
        manager.reset_envs_to_state_ids(state_ids, task_ids)
        out = manager.chunk_step(self._actions(manager, 0))
        self._check_obs(manager, out.obs)
        n, c = manager.num_envs, manager.num_action_chunks
        assert out.rewards.shape == (n, c) and out.rewards.dtype == np.float32
        for flags in (out.terminations, out.truncations):
            assert flags.shape == (n, c) and flags.dtype == bool
        for key, value in out.infos.items():
            assert len(value) == n, f"infos[{key!r}] has {len(value)} rows, expected {n}"

    def test_deterministic(self, manager: ProcessEnvManager) -> None:
        """The same state ids and actions give the same observations and rewards twice."""
        state_ids, task_ids = self._ids(manager, offset=1)
        runs = []
        for _ in range(2):
            first = manager.reset_envs_to_state_ids(state_ids, task_ids)
            step = manager.chunk_step(self._actions(manager, 1))
            runs.append((first.obs, step.obs, step.rewards))
        for key in runs[0][0]:
            np.testing.assert_array_equal(runs[0][0][key], runs[1][0][key], err_msg=f"reset obs {key!r} differs")
            np.testing.assert_array_equal(runs[0][1][key], runs[1][1][key], err_msg=f"step obs {key!r} differs")
        np.testing.assert_array_equal(runs[0][2], runs[1][2])

    def test_actions_change_the_scene(self, manager: ProcessEnvManager) -> None:
        """Random actions change the state (the actions reach the simulator)."""
        state_ids, task_ids = self._ids(manager, offset=2)
        first = manager.reset_envs_to_state_ids(state_ids, task_ids)
        step = manager.chunk_step(self._actions(manager, 2))
        assert not np.array_equal(first.obs["state"], step.obs["state"]), "random actions left the state unchanged"

    def test_reset_to_sample_of_state_ids(self, manager: ProcessEnvManager) -> None:
        """Every env reset to the same state id observes the same thing, for a sample of ids."""
        ids = manager.get_all_state_ids()
        tasks = manager.get_state_task_ids()
        rng = np.random.default_rng(0)
        sample = rng.choice(len(ids), size=min(self.sample_size, len(ids)), replace=False)
        for j in sample:
            state_ids = np.full(manager.num_envs, ids[j], dtype=np.int64)
            out = manager.reset_envs_to_state_ids(state_ids, np.full(manager.num_envs, tasks[j]))
            self._check_obs(manager, out.obs)
            for key, value in out.obs.items():
                for i in range(1, manager.num_envs):
                    np.testing.assert_array_equal(value[0], value[i], err_msg=f"same state id, different {key!r}")

    def test_truncation_at_max_episode_steps(self, manager: ProcessEnvManager, conformance_cfg: Any) -> None:
        """Episodes end by ``max_episode_steps`` and a finished env's flag stays True."""
        horizon = int(conformance_cfg.train.max_episode_steps)
        chunk = manager.num_action_chunks
        state_ids, task_ids = self._ids(manager, offset=3)
        manager.reset_envs_to_state_ids(state_ids, task_ids)
        zero = np.zeros((manager.num_envs, chunk, manager.action_dim), dtype=np.float32)
        flags = []
        for _ in range(horizon // chunk + 1):
            out = manager.chunk_step(zero)
            flags.append(out.terminations | out.truncations)
        done = np.concatenate(flags, axis=1)
        ended_by = np.argmax(done, axis=1)
        assert done[:, horizon - 1].all(), f"envs not finished at sub-step {horizon} (max_episode_steps)"
        for i in range(manager.num_envs):
            assert done[i, ended_by[i] :].all(), f"env {i}: a finished env's flag went back to False"

    def test_state_round_trip(self, manager: ProcessEnvManager) -> None:
        """Offload (get_state) and onload (load_state) continue the same episodes exactly."""
        if not manager.supports_state:
            pytest.skip("backend does not support get_state/load_state")
        state_ids, task_ids = self._ids(manager, offset=4)
        manager.reset_envs_to_state_ids(state_ids, task_ids)
        manager.chunk_step(self._actions(manager, 4))
        manager.stop_simulator()
        manager.start_simulator()
        offloaded = manager.chunk_step(self._actions(manager, 5))
        manager.reset_envs_to_state_ids(state_ids, task_ids)
        manager.chunk_step(self._actions(manager, 4))
        control = manager.chunk_step(self._actions(manager, 5))
        for key in control.obs:
            np.testing.assert_array_equal(offloaded.obs[key], control.obs[key], err_msg=f"{key!r} differs after offload")
        np.testing.assert_array_equal(offloaded.rewards, control.rewards)

    @pytest.mark.parametrize(
        "bad",
        ["wrong_shape", "wrong_dtype", "nan", "inf", "state_id_out_of_range", "task_id_mismatch", "ids_wrong_length"],
    )
    def test_bad_input_rejected_then_usable(self, manager: ProcessEnvManager, bad: str) -> None:
        """Bad actions and ids raise InvalidInputError and the env still steps."""
        n, c, d = manager.num_envs, manager.num_action_chunks, manager.action_dim
        state_ids, task_ids = self._ids(manager)
        manager.reset_envs_to_state_ids(state_ids, task_ids)
        good = np.zeros((n, c, d), dtype=np.float32)
        with pytest.raises(InvalidInputError):
            if bad == "wrong_shape":
                manager.chunk_step(np.zeros((n, c, d + 1), dtype=np.float32))
            elif bad == "wrong_dtype":
                manager.chunk_step(good.astype(np.int64))
            elif bad == "nan":
                act = good.copy()
                act[0, 0, 0] = np.nan
                manager.chunk_step(act)
            elif bad == "inf":
                act = good.copy()
                act[-1, -1, -1] = np.inf
                manager.chunk_step(act)
            elif bad == "state_id_out_of_range":
                manager.reset_envs_to_state_ids(np.full(n, int(manager.get_all_state_ids().max()) + 1000))
            elif bad == "task_id_mismatch":
                manager.reset_envs_to_state_ids(state_ids, task_ids + 1000)
            elif bad == "ids_wrong_length":
                manager.reset_envs_to_state_ids(np.concatenate([state_ids, state_ids]))
        out = manager.chunk_step(good)
        self._check_obs(manager, out.obs)
