"""ManiSkill's CUDA path, checked on the CPU: the batched reset's seeding (against a recording env
that seeds as ManiSkill 3.0.1 does, named as such: there is no CUDA sim here), and SAPIEN's PhysX
GPU library looked for in a SAPIEN cache that is an empty folder (real SAPIEN, asked its version)."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from envfleet.diagnostics.physx_library import LIBRARY, find_physx_library
from envfleet.errors import ConfigError
from envfleet_maniskill import device
from envfleet_maniskill.device import Placement, SimBatch

CUDA = Placement("physx_cuda", "gpu")


class RecordingManiSkillEnv:
    """Records what each reset was given, and seeds as ManiSkill 3.0.1's ``BaseEnv.reset`` does with
    ``seed=list`` and ``env_idx``: the list replaces the episode-seed array (entry k seeds env k's
    batched RNG), and one torch-like stream seeded with the list's first entry draws a value for
    each env of ``env_idx`` in turn. An env's first state is its two draws."""

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs
        self.device = "cpu"
        self.state = np.zeros((num_envs, 2))
        self.given: list[tuple[list[int], list[int]]] = []

    def reset(self, seed: list[int], options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        env_idx = [int(i) for i in options["env_idx"]]
        self.given.append((list(seed), env_idx))
        episode_seed = np.asarray(seed, dtype=np.int64)  # _set_episode_rng: the whole array replaced
        stream = np.random.RandomState(int(episode_seed[0]))  # torch.manual_seed(self._episode_seed[0])
        draws = stream.uniform(size=len(env_idx))
        for k, env in enumerate(env_idx):
            batched = np.random.RandomState(int(episode_seed[env]))  # _batched_episode_rng[env_idx]
            self.state[env] = (draws[k], batched.uniform())
        return {"state": self.state.copy()}, {}


def batch(num_envs: int) -> tuple[SimBatch, RecordingManiSkillEnv]:
    env = RecordingManiSkillEnv(num_envs)
    return SimBatch(SimpleNamespace(unwrapped=env), range(num_envs), CUDA), env


def test_an_envs_first_state_depends_on_its_own_seed_only_recording_env() -> None:
    seeds = {0: 11, 1: 22, 2: 33, 3: 44}
    alone, _ = batch(4)
    alone.reset(np.array([2]), np.array([seeds[2]]))
    expected = alone.u.state[2].copy()
    for local in ([0, 2], [2, 0], [3, 1, 2, 0]):
        sim, recorder = batch(4)
        sim.reset(np.array(local), np.array([seeds[i] for i in local]))
        np.testing.assert_array_equal(sim.u.state[2], expected, err_msg=f"env 2 reset with {local}")
        # Each env reset alone, its own seed in every entry of the list.
        assert recorder.given == [([seeds[i]] * 4, [i]) for i in local]


def test_the_recording_env_shows_the_batched_call_would_mix_seeds_recording_env() -> None:
    # What SimBatch.reset used to do (one call, one seed per env of env_idx): env 2's state moves with the order.
    first, second = RecordingManiSkillEnv(4), RecordingManiSkillEnv(4)
    first.reset(seed=[11, 33, 0, 0], options={"env_idx": [0, 2]})
    second.reset(seed=[33, 11, 0, 0], options={"env_idx": [2, 0]})
    assert not np.array_equal(first.state[2], second.state[2])


@pytest.fixture
def empty_sapien_cache(tmp_path, monkeypatch) -> str:
    """HOME at an empty folder: SAPIEN's cache (~/.sapien/physx/<version>/) holds nothing."""
    monkeypatch.setenv("HOME", str(tmp_path))
    return str(tmp_path)


def test_the_library_is_looked_for_where_sapien_loads_it(empty_sapien_cache) -> None:
    library = find_physx_library()
    assert library.version and not library.error, library
    assert library.path == f"{empty_sapien_cache}/.sapien/physx/{library.version}/{LIBRARY}" and not library.present
    assert "physx-precompiled/releases/download" in library.placement()


def test_explicit_physx_cuda_without_the_library_is_a_config_error_within_30_s(empty_sapien_cache) -> None:
    start = time.monotonic()
    with pytest.raises(
        ConfigError,
        match=rf"sim_backend' is 'physx_cuda', but SAPIEN's PhysX GPU library {empty_sapien_cache}/\.sapien/physx/.*/{LIBRARY} is absent.*unzip",
    ):
        device.resolve(SimpleNamespace(sim_backend="physx_cuda", render_backend="cpu"))
    assert time.monotonic() - start < 30


def test_auto_falls_back_to_the_cpu_sim_with_a_warning_fake_gpu(empty_sapien_cache, monkeypatch) -> None:
    monkeypatch.setattr(device, "cuda_gpu_present", lambda: True)  # no GPU here: auto is told there is one
    with pytest.warns(UserWarning, match=rf"{LIBRARY} is absent, so ManiSkill simulates on physx_cpu"):
        placement = device.resolve(SimpleNamespace(sim_backend="auto", render_backend="cpu"))
    assert placement.sim_backend == "physx_cpu"


def test_the_library_in_place_keeps_the_cuda_sim(empty_sapien_cache) -> None:
    library = find_physx_library()
    path = library.path
    import os

    os.makedirs(os.path.dirname(path))
    open(path, "wb").close()  # a file where SAPIEN loads it: nothing to download, so nothing refused
    assert device.resolve(SimpleNamespace(sim_backend="physx_cuda", render_backend="cpu")).sim_backend == "physx_cuda"


def test_the_render_device_reaches_maniskills_render_backend(monkeypatch) -> None:
    monkeypatch.setenv("ENVFLEET_RENDER_DEVICE", "cuda:1")
    assert device.render_backend_arg(Placement("physx_cpu", "gpu")) == "cuda:1"
    assert device.render_backend_arg(Placement("physx_cpu", "cpu")) == "cpu"
