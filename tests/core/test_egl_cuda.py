"""The EGL/CUDA device mapping, on fake device lists (this machine has no NVIDIA GPU)."""

from __future__ import annotations

import pytest

from envfleet.diagnostics.egl_cuda import EglDevice, Gpu, chosen_egl_device, plan_rendering, visible_cuda_devices

# Four GPUs whose EGL order is not their CUDA order: EGL device i reports CUDA device SWAP[i].
GPUS = [Gpu(i, f"GPU-{i}{i}{i}{i}aaaa-0000-0000-0000-00000000000{i}", "fake A100") for i in range(4)]
SWAP = [1, 0, 3, 2]
EGL_SWAPPED = [EglDevice(i, cuda=SWAP[i], name="EGL_NV_device_cuda") for i in range(4)]
EGL_SAME = [EglDevice(i, cuda=i, name="EGL_NV_device_cuda") for i in range(4)]


@pytest.mark.parametrize(
    ("value", "devices", "ignored"),
    [
        (None, [0, 1, 2, 3], []),
        ("", [], []),
        ("2", [2], []),
        (" 3, 1 ", [3, 1], []),
        ("GPU-2222", [2], []),
        ("GPU-1111aaaa-0000-0000-0000-000000000001,0", [1, 0], []),
        ("1,9,2", [1], ["9", "2"]),
        ("1,1", [1], ["1"]),
        ("GPU-", [], ["GPU-"]),  # a prefix of every UUID names no single GPU
        ("foo,0", [], ["foo", "0"]),
    ],
    ids=["unset", "empty", "one", "two-spaces", "uuid-prefix", "uuid-then-index", "stops-at-invalid", "duplicate", "ambiguous", "junk"],
)
def test_visible_devices_read_as_cuda_reads_them_fake_gpus(value, devices, ignored) -> None:
    visible = visible_cuda_devices(value, GPUS)
    assert visible.devices == devices
    assert visible.ignored == ignored


def test_chosen_egl_device_follows_mujoco_egl_device_id_then_first_entry() -> None:
    assert chosen_egl_device(None, None) == 0
    assert chosen_egl_device("2,3", None) == 2
    assert chosen_egl_device("GPU-2222", None) == 0
    assert chosen_egl_device("2,3", "1") == 1
    assert chosen_egl_device("2", "x") == 2


def test_same_numbering_renders_where_it_computes_fake_gpus() -> None:
    plans = plan_rendering("2,3", None, GPUS, EGL_SAME)
    assert [p.cuda_visible_devices for p in plans] == ["2,3", "2", "3"]
    assert all(p.ok for p in plans)
    assert [(p.cuda_device, p.egl_device, p.egl_cuda) for p in plans] == [(2, 2, 2), (2, 2, 2), (3, 3, 3)]


def test_swapped_numbering_is_caught_and_the_right_device_named_fake_gpus() -> None:
    plans = plan_rendering("2,3", None, GPUS, EGL_SWAPPED)
    # A process pinned to CUDA 2 opens EGL 2, which is CUDA 3: wrong GPU; EGL 3 is CUDA 2.
    assert [p.ok for p in plans] == [False, False, False]
    assert [(p.cuda_device, p.egl_device, p.egl_cuda, p.right_egl_device) for p in plans] == [
        (2, 2, 3, 3),
        (2, 2, 3, 3),
        (3, 3, 2, 2),
    ]
    assert plans[1].describe() == "CUDA_VISIBLE_DEVICES='2': computes on CUDA device 2, renders on EGL device 2 = CUDA device 3"


def test_uuid_pinned_process_renders_on_egl_device_0_fake_gpus() -> None:
    (plan,) = plan_rendering("GPU-3333", None, GPUS, EGL_SWAPPED)
    assert (plan.cuda_device, plan.egl_device, plan.egl_cuda, plan.right_egl_device, plan.ok) == (3, 0, 1, 2, False)


def test_exported_mujoco_egl_device_id_pins_every_process_fake_gpus() -> None:
    plans = plan_rendering(None, "0", GPUS, EGL_SAME)
    assert [p.egl_device for p in plans] == [0, 0, 0, 0, 0]
    assert [p.ok for p in plans] == [True, True, False, False, False]


def test_missing_egl_device_is_not_ok_fake_gpus() -> None:
    (plan,) = plan_rendering("3", None, GPUS, EGL_SAME[:2])  # driver exposes two EGL devices only
    assert not plan.egl_exists and not plan.ok
    assert "which does not exist" in plan.describe()


def test_no_gpu_and_a_mesa_device_is_fine() -> None:
    (plan,) = plan_rendering(None, None, [], [EglDevice(0, None, "EGL_MESA_device_software")])
    assert plan.ok and plan.cuda_device is None
    assert plan.describe() == "CUDA_VISIBLE_DEVICES=unset: computes on no CUDA device, renders on EGL device 0 (not a CUDA device)"
