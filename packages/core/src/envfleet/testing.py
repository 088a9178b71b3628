"""The backend conformance suite: pytest classes every backend runs against itself.

One job: checking a backend against the ``Env`` contract the way envfleet runs it, as pytest classes.

Subclass :class:`EnvConformance` in your backend's tests and say how to configure it::

    from envfleet.testing import EnvConformance

    class TestToyConformance(EnvConformance):
        config_data = {"train": {"simulator_type": "toy", "num_envs": 2}}
        config_overrides = ["actor.model.num_action_chunks=4"]

The suite runs your backend the way envfleet does (through
:class:`~envfleet.shards.manager.ProcessEnvManager`, in shard processes) with
``train.max_episode_steps`` set to two chunks, and checks:

- the observation spec matches what reset and chunk_step return (keys, shapes, dtypes);
- flags are bool ``[n, chunk]``, rewards float32 ``[n, chunk]``;
- determinism: the same state ids and actions give the same observations twice;
- reset to each of a sample of state ids (with their task ids);
- truncation at ``max_episode_steps``, and finished envs keep their flag;
- ``get_state``/``load_state`` round trip through offload, where supported;
- bad inputs are rejected with :class:`~envfleet.errors.InvalidInputError` and the env still works;
- a backend that renders through MuJoCo's GL or SAPIEN declares it in ``BackendSpec.renderer``
  (a warning for a plugin of API 1.0);
- images are rendered scenes (no env's image is one flat colour); an env whose own
  ``observation_spec()`` is not the one its backend registered fails to start (every test);
- every optional key the backend declares in ``BackendSpec.implements``, against a second
  manager with that key switched: ``render`` (``last`` is bit-identical to ``all`` with the
  scene moving), ``auto_reset`` (finished envs start the episode a plain reset to
  ``reset_state_id`` gives, and run again), ``ignore_terminations`` (only truncation finishes
  an env), ``flip_images`` (images rotated 180 degrees), ``settle_steps`` (not counted in the
  episode), ``action_transform`` (it changes what the actions do);
- where ``envfleet-ray`` is installed, the same backend through an in-process
  :class:`envfleet_ray.EnvWorker` (one stage, ``worker_num_envs`` envs): every key of the
  observation spec, whatever its name, reaches the worker's reset and step results and the
  result it reports after a restart, with its shape and dtype.

The base manager runs with ``train.auto_reset=false`` whatever your config says; the
``auto_reset`` test switches it on.
"""

from __future__ import annotations

import importlib
import importlib.util
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import numpy as np
import pytest

from .config import load_config
from .errors import InvalidInputError
from .plugins import get_backend
from .plugins.api import runs_unchecked
from .shards.manager import ProcessEnvManager

# Imports inside functions: DataProto needs the dataproto extra (torch), which a plugin's own tests of its env
# may lack; only the tests through an EnvWorker use it.

__all__ = ["EnvConformance"]


class EnvConformance:
    """Subclass with ``config_data`` (and optionally ``config_overrides``, ``sample_size``, ``worker_num_envs``)."""

    config_data: ClassVar[dict[str, Any]] = {}
    config_overrides: ClassVar[list[str]] = []
    sample_size: ClassVar[int] = 4
    action_scale: ClassVar[float] = 0.5
    #: Envs of the EnvWorker checks (at most the config's): each costs a simulator start.
    worker_num_envs: ClassVar[int] = 1

    # ------------------------------------------------------------------ fixtures
    @pytest.fixture(scope="class")
    @classmethod
    def conformance_cfg(cls) -> Any:
        """The config under test: yours, with max_episode_steps = 2 chunks."""
        return load_config(data=cls.config_data, overrides=cls._overrides())

    @classmethod
    def _overrides(cls, *extra: str) -> list[str]:
        probe = load_config(data=cls.config_data, overrides=cls.config_overrides)
        chunk = int(probe.actor.model.num_action_chunks)
        return [*cls.config_overrides, f"train.max_episode_steps={2 * chunk}", "train.auto_reset=false", *extra]

    @contextmanager
    def _variant(self, *overrides: str) -> Iterator[ProcessEnvManager]:
        """A second started manager: the config under test with ``overrides`` applied last."""
        mgr = ProcessEnvManager(load_config(data=self.config_data, overrides=self._overrides(*overrides)), stage_id=0)
        mgr.start_simulator()
        try:
            yield mgr
        finally:
            mgr.close()

    def _require(self, cfg: Any, key: str) -> None:
        spec = get_backend(str(cfg.train.simulator_type))
        if runs_unchecked(spec):  # plugin API 1: it declares nothing, so nothing is known to be honoured
            pytest.skip(f"the backend is written for plugin API 1 and declares no BackendSpec.implements: declare {key!r} there to test it")
        if key not in spec.implements:
            pytest.skip(f"the backend does not declare {key!r} in BackendSpec.implements (a config asking for it is rejected)")

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

    @pytest.fixture(scope="class")
    @classmethod
    def env_worker(cls) -> Iterator[Any]:
        """An in-process ``envfleet_ray.EnvWorker`` over the config under test: one stage, ``worker_num_envs`` envs, started."""
        if importlib.util.find_spec("envfleet_ray") is None:
            pytest.skip("envfleet-ray is not installed here: the EnvWorker checks run where it is (pip install envfleet-ray)")
        # Imported by name at run time: core does not depend on the Ray worker (import-linter checks it).
        worker_module = importlib.import_module("envfleet_ray.runtime.worker")
        probe = load_config(data=cls.config_data, overrides=cls._overrides())
        n = max(1, min(int(probe.train.num_envs), cls.worker_num_envs))
        cfg = load_config(data=cls.config_data, overrides=cls._overrides("rollout.pipeline_stage_num=1", f"train.num_envs={n}"))
        worker = worker_module.EnvWorker(cfg)
        try:
            worker.init_worker()
            worker.init_simulator()
            yield worker
        finally:
            worker.close()

    # ------------------------------------------------------------------ helpers
    def _ids(self, mgr: ProcessEnvManager, offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
        ids = mgr.get_all_state_ids()
        tasks = mgr.get_state_task_ids()
        pick = (np.arange(mgr.num_envs) * 7 + offset) % len(ids)
        return ids[pick], tasks[pick]

    def _actions(self, mgr: ProcessEnvManager, seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        shape = (mgr.num_envs, mgr.chunk, mgr.action_dim)
        return (rng.uniform(-1, 1, size=shape) * self.action_scale).astype(np.float32)

    def _check_obs(self, mgr: ProcessEnvManager, obs: dict[str, np.ndarray]) -> None:
        assert set(obs) == set(mgr.obs_spec), f"observation keys {sorted(obs)} != spec {sorted(mgr.obs_spec)}"
        for key, spec in mgr.obs_spec.items():
            assert obs[key].shape == (mgr.num_envs, *spec.shape), f"{key}: shape {obs[key].shape}"
            assert obs[key].dtype == np.dtype(spec.dtype), f"{key}: dtype {obs[key].dtype} != {spec.dtype}"
        for key in ("full_image", "wrist_image"):
            if key in obs:
                assert obs[key].dtype == np.uint8 and obs[key].shape[-1] == 3

    @staticmethod
    def _check_worker_batch(worker: Any, out: Any, when: str) -> None:
        """Every key of the worker's observation spec is a column of ``out`` with ``[n, *shape]`` and its dtype."""
        spec = worker.observation_spec()
        keys = sorted(str(k) for k in out.batch.keys())
        for key, arr in spec.items():
            assert key in keys, f"{when}: observation {key!r} of the spec is not in the EnvWorker's result (it has {keys})"
            value = out.batch[key].cpu().numpy()
            assert value.shape == (worker.num_envs, *arr.shape), f"{when}: {key!r} has shape {value.shape}"
            assert value.dtype == np.dtype(arr.dtype), f"{when}: {key!r} has dtype {value.dtype}, the spec says {arr.dtype}"

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
        chunk = manager.chunk
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
        n, c, d = manager.num_envs, manager.chunk, manager.action_dim
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

    def test_env_worker_results_have_every_observation(self, manager: ProcessEnvManager, env_worker: Any) -> None:
        """Through an EnvWorker, reset and step results carry every observation of the spec, with its shape and dtype."""
        from .dataproto import DataProto

        n = env_worker.num_envs
        ids = np.resize(env_worker.get_all_state_ids()[:1], n)
        reset = env_worker.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": ids}))
        self._check_worker_batch(env_worker, reset, "reset_envs_to_state_ids")
        rng = np.random.default_rng(13)
        actions = (rng.uniform(-1, 1, size=(n, manager.chunk, manager.action_dim)) * self.action_scale).astype(np.float32)
        step = env_worker.env_interact_step(DataProto.from_dict(non_tensors={"actions": actions}, meta_info={"stage_id": 0}))
        self._check_worker_batch(env_worker, step, "env_interact_step")
        assert step.batch["rews"].shape == (n, actions.shape[1]), "the step's rewards are not [n, chunk]"

    def test_env_worker_restart_result_has_every_observation(self, manager: ProcessEnvManager, env_worker: Any) -> None:
        """What a rebuilt EnvWorker reports for a step: the last reset's observations, every key of the spec."""
        from .dataproto import DataProto

        ids = np.resize(env_worker.get_all_state_ids()[:1], env_worker.num_envs)
        reset = env_worker.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": ids}))
        out = env_worker.restart_step_result(0, manager.chunk)
        self._check_worker_batch(env_worker, out, "restart_step_result")
        for key in env_worker.observation_spec():
            np.testing.assert_array_equal(out.batch[key].numpy(), reset.batch[key].numpy(), err_msg=f"{key!r} is not the last reset's")
        assert out.batch["truncations"][:, -1].all() and out.batch["sim_restarted"].all()

    def test_images_are_rendered_scenes(self, manager: ProcessEnvManager) -> None:
        """No env's image is one flat colour (an all-black buffer is a renderer that drew nothing)."""
        state_ids, task_ids = self._ids(manager)
        first = manager.reset_envs_to_state_ids(state_ids, task_ids)
        step = manager.chunk_step(self._actions(manager, 6))
        # Every camera image of the spec (uint8 [H, W, 3]), whatever its name.
        keys = [k for k, s in manager.obs_spec.items() if np.dtype(s.dtype) == np.uint8 and len(s.shape) == 3 and s.shape[-1] == 3]
        for when, obs in (("reset", first.obs), ("chunk_step", step.obs)):
            for key in keys:
                for i in range(manager.num_envs):
                    image = obs[key][i]
                    assert image.min() != image.max(), f"{when}: env {i}'s {key!r} is one flat colour ({int(image.min())})"

    def test_declares_its_renderer(self, manager: ProcessEnvManager) -> None:
        """A shard that loaded MuJoCo's GL renderer or SAPIEN runs a backend declaring ``renderer`` (``mujoco`` / ``vulkan``)."""
        manager.reset_envs_to_state_ids(*self._ids(manager))
        info = manager.renderer_info()
        stack = info.get("render_stack")
        expected = {"mujoco": "mujoco", "sapien": "vulkan"}.get(str(stack))
        if expected == "mujoco" and not info.get("gl_renderer"):
            expected = None  # MuJoCo's GL module loaded (by a physics library), but no GL context rendered
        spec = manager.spec
        if expected is None or spec.renderer == expected:
            return
        seen = f" on {info.get('gl_renderer')}" if info.get("gl_renderer") else ""
        message = (
            f"backend {spec.name!r} renders through {stack}{seen} but its BackendSpec has renderer={spec.renderer!r}: "
            f"register it with renderer={expected!r}, so that `envfleet doctor` checks its rendering (docs: Writing a simulator plugin)"
        )
        if spec.api_version is None:  # written for plugin API 1.0: told, not failed
            warnings.warn(message, stacklevel=1)
        else:
            pytest.fail(message)

    def test_render_last_equals_render_all(self, manager: ProcessEnvManager, conformance_cfg: Any) -> None:
        """``render: last`` gives, bit for bit, the images ``render: all`` gives, with the scene moving."""
        self._require(conformance_cfg, "render")
        other = "all" if str(conformance_cfg.train.render) == "last" else "last"
        state_ids, task_ids = self._ids(manager, offset=5)
        with self._variant(f"train.render={other}") as variant:
            mine = [manager.reset_envs_to_state_ids(state_ids, task_ids).obs]
            theirs = [variant.reset_envs_to_state_ids(state_ids, task_ids).obs]
            for seed in (7, 8):
                mine.append(manager.chunk_step(self._actions(manager, seed)).obs)
                theirs.append(variant.chunk_step(self._actions(variant, seed)).obs)
        assert not np.array_equal(mine[0]["state"], mine[-1]["state"]), "the scene did not move: nothing to compare"
        for when, (a, b) in enumerate(zip(mine, theirs)):
            for key in a:
                np.testing.assert_array_equal(a[key], b[key], err_msg=f"{key!r} after {when} chunk(s): render last != render all")

    def test_auto_reset(self, manager: ProcessEnvManager, conformance_cfg: Any) -> None:
        """With ``auto_reset``, an env that finishes starts the episode a plain reset to ``reset_state_id`` gives, and runs again."""
        self._require(conformance_cfg, "auto_reset")
        chunk = manager.num_action_chunks
        state_ids, task_ids = self._ids(manager, offset=6)
        with self._variant("train.auto_reset=true", f"train.max_episode_steps={chunk}") as auto:
            auto.reset_envs_to_state_ids(state_ids, task_ids)
            first = auto.chunk_step(self._actions(auto, 9))
            assert np.asarray(first.infos["episode_ended"]).all(), "every episode ends at max_episode_steps = one chunk"
            went = np.asarray(first.infos["reset_state_id"])
            assert np.isin(went, manager.get_all_state_ids()).all(), f"reset_state_id {went} are not all state ids"
            second = auto.chunk_step(self._actions(auto, 10))
        plain = manager.reset_envs_to_state_ids(went)
        for key in plain.obs:
            np.testing.assert_array_equal(first.obs[key], plain.obs[key], err_msg=f"{key!r}: auto-reset start != a plain reset to it")
        assert list(first.task_descriptions) == list(plain.task_descriptions), "descriptions after auto-reset are not the new episodes'"
        done = second.terminations | second.truncations
        assert not done[:, 0].any() or not done.all(), "after an auto-reset the envs did not run again"
        np.testing.assert_array_equal(np.asarray(second.infos["episode_length"]), np.full(manager.num_envs, chunk))

    def test_ignore_terminations(self, manager: ProcessEnvManager, conformance_cfg: Any) -> None:
        """With ``ignore_terminations``, only truncation finishes an env."""
        self._require(conformance_cfg, "ignore_terminations")
        horizon = int(conformance_cfg.train.max_episode_steps)
        with self._variant("train.ignore_terminations=true") as variant:
            variant.reset_envs_to_state_ids(*self._ids(variant, offset=7))
            for seed in range(horizon // variant.chunk):
                out = variant.chunk_step(self._actions(variant, 20 + seed))
                done = np.asarray(out.infos["episode_done"], dtype=bool)
                assert (out.truncations[:, -1] | ~done).all(), "an env finished without truncation under ignore_terminations"

    def test_flip_images(self, manager: ProcessEnvManager, conformance_cfg: Any) -> None:
        """``flip_images`` rotates every image 180 degrees and changes nothing else."""
        self._require(conformance_cfg, "flip_images")
        state_ids, task_ids = self._ids(manager, offset=8)
        flip = bool(conformance_cfg.train.flip_images)
        mine = manager.reset_envs_to_state_ids(state_ids, task_ids).obs
        with self._variant(f"train.flip_images={str(not flip).lower()}") as variant:
            theirs = variant.reset_envs_to_state_ids(state_ids, task_ids).obs
        for key in mine:
            expected = theirs[key][:, ::-1, ::-1] if key in ("full_image", "wrist_image") else theirs[key]
            np.testing.assert_array_equal(mine[key], expected, err_msg=f"{key!r}: flip_images is not a 180-degree rotation")

    def test_settle_steps_are_not_part_of_the_episode(self, manager: ProcessEnvManager, conformance_cfg: Any) -> None:
        """Settle steps run before the first observation and do not count towards the episode."""
        self._require(conformance_cfg, "settle_steps")
        with self._variant(f"train.settle_steps={int(conformance_cfg.train.settle_steps) + 2}") as variant:
            variant.reset_envs_to_state_ids(*self._ids(variant, offset=9))
            out = variant.chunk_step(self._actions(variant, 11))
        np.testing.assert_array_equal(np.asarray(out.infos["episode_length"]), np.full(variant.num_envs, variant.num_action_chunks))

    def test_action_transform_changes_what_actions_do(self, manager: ProcessEnvManager, conformance_cfg: Any) -> None:
        """Each ``action_transform`` the backend takes changes the outcome of the same actions."""
        self._require(conformance_cfg, "action_transform")
        state_ids, task_ids = self._ids(manager, offset=10)
        actions = self._actions(manager, 12)
        actions[..., -1] = 0.9  # a gripper command in [0, 1], which openvla maps to the other sign
        mine = manager.reset_envs_to_state_ids(state_ids, task_ids)
        mine_step = manager.chunk_step(actions)
        other = "openvla" if str(conformance_cfg.train.action_transform) == "none" else "none"
        with self._variant(f"train.action_transform={other}") as variant:
            variant.reset_envs_to_state_ids(state_ids, task_ids)
            theirs_step = variant.chunk_step(actions)
        assert mine.obs["state"].shape == theirs_step.obs["state"].shape
        assert not np.array_equal(mine_step.obs["state"], theirs_step.obs["state"]), "action_transform made no difference"
