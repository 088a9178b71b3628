"""The launcher choice (Isaac Lab 2.x vs 3.x), the plugin's config checks, and start-up errors.

None of these imports Isaac Lab in the test process; the 2.x path itself needs Isaac Sim.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import types

import pytest

from envfleet import ProcessEnvManager
from envfleet.config import load_config
from envfleet.env import ArraySpec
from envfleet.errors import ConfigError, EnvFleetSimulatorError
from envfleet.plugins import get_backend
from envfleet_isaac import launch

from .common import assert_no_segments_left, pusher_train

HAS_ISAAC_SIM = importlib.util.find_spec("isaacsim") is not None


def test_launcher_kind_follows_the_major_version() -> None:
    assert launch.launcher_kind("3.0.0") == "launch_simulation"
    assert launch.launcher_kind("4.1.0rc1") == "launch_simulation"
    assert launch.launcher_kind("2.3.2") == "app_launcher"
    with pytest.raises(RuntimeError, match="too old"):
        launch.launcher_kind("1.4.0")


def test_installed_isaac_lab_runs_through_launch_simulation() -> None:
    runtime = launch.SimulationRuntime("cpu")
    assert runtime.version.startswith("3.")
    assert runtime.kind == "launch_simulation"
    runtime.before_task_import()  # nothing to start before the task modules on 3.x
    assert runtime.app is None


def test_app_launcher_path_starts_isaac_sim_headless_with_cameras(monkeypatch: pytest.MonkeyPatch) -> None:
    """The 2.x path, against a stand-in for isaaclab.app (the real one needs Isaac Sim)."""
    calls: list[dict[str, object]] = []

    class FakeApp:
        closed = False

        def close(self) -> None:
            FakeApp.closed = True

    class FakeAppLauncher:
        def __init__(self, **kwargs: object) -> None:
            calls.append(kwargs)
            self.app = FakeApp()

    fake_pkg = types.ModuleType("isaaclab")
    fake_app = types.ModuleType("isaaclab.app")
    fake_app.AppLauncher = FakeAppLauncher  # type: ignore[attr-defined]
    fake_pkg.app = fake_app  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "isaaclab", fake_pkg)
    monkeypatch.setitem(sys.modules, "isaaclab.app", fake_app)
    runtime = launch.SimulationRuntime("cuda:0", version="2.3.2")
    assert runtime.kind == "app_launcher"
    runtime.before_task_import()
    runtime.before_task_import()  # once only
    runtime.before_env_build(object())  # nothing to do on 2.x
    assert calls == [{"headless": True, "enable_cameras": True, "device": "cuda:0"}]
    runtime.close()
    runtime.close()
    assert FakeApp.closed


@pytest.mark.skipif(not HAS_ISAAC_SIM or launch.launcher_kind(launch.isaaclab_version()) != "app_launcher", reason="needs Isaac Sim")
def test_app_launcher_with_isaac_sim() -> None:  # pragma: no cover - needs Isaac Sim (Isaac Lab 2.x)
    code = (
        "from envfleet_isaac.launch import SimulationRuntime\n"
        "r = SimulationRuntime('cpu'); r.before_task_import()\n"
        "assert r.app is not None and r.app.is_running()\n"
        "import isaaclab.envs\n"
        "r.close()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=600)


def test_observation_spec_in_the_parent_imports_no_simulator() -> None:
    code = (
        "import sys\n"
        "from envfleet.config import load_config\n"
        "from envfleet.plugins import get_backend\n"
        "cfg = load_config(data={'train': {'simulator_type': 'isaac', 'task_name': 'Envfleet-Pusher-v0', 'num_envs': 4}})\n"
        "spec = get_backend('isaac').checked_observation_spec(cfg.train, 4)\n"
        "print({k: (v.shape, v.dtype) for k, v in spec.items()})\n"
        "heavy = [m for m in ('isaaclab', 'warp', 'gymnasium', 'newton') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120).stdout
    assert "'full_image': ((64, 64, 3), 'uint8')" in out
    assert "'wrist_image': ((64, 64, 3), 'uint8')" in out
    assert "'state': ((8,), 'float32')" in out


def _spec(train: dict[str, object]) -> dict[str, ArraySpec]:
    cfg = load_config(data={"train": train})
    return get_backend("isaac").checked_observation_spec(cfg.train, 2)


def test_config_checks() -> None:
    spec = _spec({"simulator_type": "isaac", "env_id": "Envfleet-Pusher-v0", "init_params": {"camera_heights": 32, "camera_widths": 48}})
    assert spec["full_image"].shape == (32, 48, 3)
    swapped = _spec(
        {
            "simulator_type": "isaac",
            "task_name": "Envfleet-Pusher-v0",
            "isaac": {"full_image_camera": "pusher_cam", "wrist_image_camera": "table_cam"},
        }
    )
    assert set(swapped) == {"full_image", "wrist_image", "state"}
    with pytest.raises(ConfigError, match="same camera 'pusher_cam'"):
        _spec({"simulator_type": "isaac", "task_name": "Envfleet-Pusher-v0", "isaac": {"full_image_camera": "pusher_cam"}})
    no_wrist = _spec({"simulator_type": "isaac", "task_name": "Envfleet-Pusher-v0", "init_params": {"camera_names": ["table_cam"]}})
    assert set(no_wrist) == {"full_image", "state"}
    with pytest.raises(ConfigError, match="train.task_name"):
        _spec({"simulator_type": "isaac"})
    with pytest.raises(ConfigError, match="state_dim"):
        _spec({"simulator_type": "isaac", "task_name": "Isaac-Lift-Cube-Franka-v0"})
    with pytest.raises(ConfigError, match="state_bank_size"):
        _spec({"simulator_type": "isaac", "task_name": "Envfleet-Pusher-v0", "isaac": {"state_bank_size": 0}})
    with pytest.raises(ConfigError, match="train.isaac.state_bank_size"):
        load_config(data={"train": {"simulator_type": "isaac", "task_name": "Envfleet-Pusher-v0", "isaac": {"state_bank_sise": 3}}})


@pytest.mark.parametrize(
    ("extra", "overrides", "message"),
    [
        ({}, [], "set actor.model.action_dim=2"),
        ({"isaac": {"resize_cameras": False}, "init_params": {"camera_heights": 32}}, ["actor.model.action_dim=2"], "renders 64x64 images"),
        ({"task_name": "Nope-v0", "isaac": {"state_dim": 3}}, ["actor.model.action_dim=2"], "not a registered gymnasium id"),
    ],
    ids=["action_dim", "camera_size", "unknown_task"],
)
def test_start_up_errors_are_clear(extra: dict[str, object], overrides: list[str], message: str) -> None:
    cfg = load_config(data={"train": {**pusher_train(num_envs=2), **extra}}, overrides=overrides)
    mgr = ProcessEnvManager(cfg)
    try:
        with pytest.raises(EnvFleetSimulatorError, match=message):
            mgr.start_simulator()
    finally:
        mgr.close()
    assert_no_segments_left(os.getpid())
