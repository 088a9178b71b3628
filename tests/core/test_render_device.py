"""``train.render_device``: the mapping from given device lists (this machine has no GPU, so the
lists of 1, 2 and 8 GPUs are given, not discovered), the variables a shard gets, and the real
discovery path against this machine's Mesa EGL."""

from __future__ import annotations

import pytest

from envfleet.config import load_config
from envfleet.errors import ConfigError
from envfleet.render_device import check_render_device, pick_render_device
from envfleet.shards.gpus import Devices, EglDevice, Gpu, list_devices, shard_render_environ, stage_devices
from envfleet.shards.manager import ProcessEnvManager

NV = "EGL_NV_device_cuda EGL_EXT_device_drm"
SOFT = "EGL_MESA_device_software"


def given(gpus: int, egl_cuda: list[int | None]) -> Devices:
    """A node's device lists as the listing would give them: ``egl_cuda[i]`` is EGL device i's CUDA ordinal."""
    return Devices(
        gpus=[Gpu(i, f"GPU-{i:04d}aaaa-given", f"given GPU {i}") for i in range(gpus)],
        egl_devices=[EglDevice(i, c, NV if c is not None else SOFT) for i, c in enumerate(egl_cuda)],
    )


def picks(setting, shards: int, worker: list[int], devices: Devices) -> list[int | None]:
    egl_of_cuda = {d.cuda: d.index for d in devices.egl_devices if d.cuda is not None}
    node = [g.index for g in devices.gpus]
    return [pick_render_device(setting, s, worker, node, egl_of_cuda).egl for s in range(shards)]


def test_one_gpu_given_worker_with_its_gpu() -> None:
    assert picks("auto", 3, [0], given(1, [0, None])) == [0, 0, 0]


def test_two_gpus_given_numbering_differs() -> None:
    devices = given(2, [1, 0])  # EGL 0 is CUDA 1, EGL 1 is CUDA 0
    assert picks("auto", 2, [1], devices) == [0, 0]  # the worker's GPU, CUDA 1, is EGL device 0
    assert picks("auto", 2, [0], devices) == [1, 1]


def test_eight_gpus_given_worker_with_gpus() -> None:
    devices = given(8, [7, 6, 5, 4, 3, 2, 1, 0])
    assert picks("auto", 2, [5], devices) == [2, 2]
    assert picks("auto", 4, [2, 3], devices) == [5, 4, 5, 4]  # a worker of two GPUs alternates its shards


def test_eight_gpus_given_worker_without_gpu_spreads_its_shards() -> None:
    devices = given(8, list(range(8)))
    assert picks("auto", 10, [], devices) == [0, 1, 2, 3, 4, 5, 6, 7, 0, 1]
    pick = pick_render_device("auto", 3, [], [0, 1], {0: 0, 1: 1})
    assert pick.cuda == 1 and "spread" in pick.why


def test_container_case_given_one_egl_device_for_eight_gpus() -> None:
    devices = given(8, [0])
    assert picks("auto", 3, [4], devices) == [0, 0, 0]
    pick = pick_render_device("auto", 0, [4], list(range(8)), {0: 0})
    assert pick.cuda == 0 and "container case" in pick.why and "CUDA 4 has no EGL device" in pick.why


def test_no_gpu_and_cpu_and_explicit_given() -> None:
    assert picks("auto", 2, [], given(0, [None])) == [None, None]
    assert pick_render_device("cpu", 0, [0], [0], {0: 0}).cpu
    devices = given(4, [3, 2, 1, 0])
    assert picks([1, 2], 3, [0], devices) == [2, 1, 2]  # CUDA ordinals, mapped
    assert picks("cuda:3", 1, [], devices) == [0]
    assert picks("egl:1,egl:3", 2, [], devices) == [1, 3]  # EGL indices, as given
    with pytest.raises(ConfigError, match="names CUDA device 9, but this node's GPUs are \\[0, 1, 2, 3\\]"):
        picks(9, 1, [], devices)


@pytest.mark.parametrize("value", ["gpu", "egl:x", [], ["auto"], True, -1, "cuda:-1"])
def test_bad_settings_are_config_errors(value) -> None:
    with pytest.raises(ConfigError, match="must be auto, cpu, a CUDA ordinal"):
        check_render_device(value)
    with pytest.raises(ConfigError, match="'train.render_device' must be auto, cpu"):
        load_config(data={"train": {"simulator_type": "toy", "render_device": value}})


def test_shard_variables_given_nvidia() -> None:
    devices = given(2, [1, 0])
    env, pick = shard_render_environ("auto", "mujoco", 0, {"CUDA_VISIBLE_DEVICES": "1"}, devices)
    assert env == {"MUJOCO_EGL_DEVICE_ID": "0", "__GL_YIELD": "USLEEP"} and pick is not None and pick.cuda == 1
    env, _ = shard_render_environ("auto", "mujoco", 0, {"CUDA_VISIBLE_DEVICES": "1", "__GL_YIELD": "NOTHING"}, devices)
    assert env == {"MUJOCO_EGL_DEVICE_ID": "0"}  # the user's own __GL_YIELD stands
    env, _ = shard_render_environ("auto", "vulkan", 0, {"CUDA_VISIBLE_DEVICES": "1"}, devices)
    assert env == {"ENVFLEET_RENDER_DEVICE": "cuda:0"}  # SAPIEN counts within the process's visible GPUs
    env, _ = shard_render_environ("cpu", "mujoco", 0, {}, given(2, [0, 1, None]))
    assert env == {"MUJOCO_EGL_DEVICE_ID": "2"}  # Mesa's software EGL device
    env, _ = shard_render_environ("cpu", "mujoco", 0, {}, given(2, [0, 1]))
    assert env == {"MUJOCO_GL": "osmesa", "PYOPENGL_PLATFORM": "osmesa"}


def test_real_discovery_on_mesa() -> None:
    assert stage_devices("auto", {}) is None  # no NVIDIA driver here: nothing to pick, no child started
    devices = stage_devices("egl:0", {})
    assert devices is not None and devices == list_devices() and devices.egl_devices[0].software
    env, pick = shard_render_environ("egl:0", "mujoco", 0, {}, devices)
    assert env == {"MUJOCO_EGL_DEVICE_ID": "0"} and pick is not None and pick.cuda is None  # Mesa: no __GL_YIELD
    assert shard_render_environ("cpu", "mujoco", 0, {}, devices)[0] == {"MUJOCO_EGL_DEVICE_ID": "0"}
    with pytest.raises(ConfigError, match="names CUDA device 0, but this node's GPUs are none"):
        shard_render_environ(0, "mujoco", 0, {}, devices)


def test_a_shard_process_gets_the_render_device() -> None:
    cfg = load_config(
        data={"train": {"simulator_type": "toy", "num_envs": 2, "render_device": "cpu"}},
        overrides=["actor.model.num_action_chunks=2", "train.toy.envs_per_process=1"],
    )
    with ProcessEnvManager(cfg) as mgr:
        mgr.start_simulator()
        mgr.reset_envs_to_state_ids(mgr.get_all_state_ids()[:2])
        pids = mgr.shard_pids()
        assert len(pids) == 2
        for pid in pids:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                variables = dict(v.split(b"=", 1) for v in fh.read().split(b"\0") if b"=" in v)
            assert variables[b"MUJOCO_EGL_DEVICE_ID"] == b"0"  # Mesa's software device, listed for real
