"""Start the simulation runtime inside the shard process, chosen by the installed Isaac Lab version.

- Isaac Lab 3.x: :func:`isaaclab.app.launch_simulation`, a context manager that scans the
  env config and starts Isaac Sim's Kit only when something needs it (a PhysX physics
  config, an RTX camera, a Kit visualizer). A Newton task with the Newton Warp renderer
  runs kit-less: nothing starts, which is how the project's own task runs on a CPU.
- Isaac Lab 2.x: ``AppLauncher(headless=True, enable_cameras=True)``, which always
  starts Isaac Sim, and must do so before any ``isaaclab.envs`` / task module is imported.

The order of calls is therefore fixed: :meth:`SimulationRuntime.before_task_import`,
then import the task modules and build the env config, then
:meth:`SimulationRuntime.before_env_build` with that config, then build the env.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
from typing import Any, Literal

# Imports inside functions: Isaac Lab loads in the shard only, and which launcher it offers depends on its
# version (2.x AppLauncher, 3.x launch_simulation).

__all__ = ["LauncherKind", "isaaclab_version", "launcher_kind", "SimulationRuntime"]

LauncherKind = Literal["launch_simulation", "app_launcher"]


def isaaclab_version() -> str:
    """The installed ``isaaclab`` distribution's version (e.g. ``"3.0.0"``)."""
    try:
        return importlib.metadata.version("isaaclab")
    except importlib.metadata.PackageNotFoundError:
        raise RuntimeError(
            "the isaac backend needs Isaac Lab: pip install 'isaaclab>=2' (3.x runs kit-less, 2.x needs Isaac Sim)"
        ) from None


def launcher_kind(version: str) -> LauncherKind:
    """``"launch_simulation"`` for Isaac Lab 3 and later, ``"app_launcher"`` for 2.x."""
    try:
        major = int(version.split(".")[0])
    except ValueError:
        raise RuntimeError(f"cannot read the major version of isaaclab {version!r}") from None
    if major < 2:
        raise RuntimeError(f"isaaclab {version} is too old for the isaac backend: 2.x or later is needed")
    return "launch_simulation" if major >= 3 else "app_launcher"


class SimulationRuntime:
    """The runtime one shard process needs, started in two steps (see the module doc).

    :param device: the simulation device (``train.device``), e.g. ``"cpu"`` or ``"cuda:0"``.
    :param version: the Isaac Lab version; read from the installed distribution when omitted.
    """

    def __init__(self, device: str, version: str | None = None) -> None:
        self.device = device
        self.version = version or isaaclab_version()
        self.kind: LauncherKind = launcher_kind(self.version)
        self.app: Any = None  # Isaac Sim's SimulationApp (2.x only)
        self._stack = contextlib.ExitStack()

    def launcher_args(self) -> dict[str, Any]:
        """Arguments of either launcher: headless, cameras on, the device."""
        return {"headless": True, "enable_cameras": True, "device": self.device}

    def before_task_import(self) -> None:
        """2.x: start Isaac Sim now, before ``isaaclab.envs`` and task modules are imported."""
        if self.kind != "app_launcher" or self.app is not None:
            return
        # Needs Isaac Sim: this path is not exercised on machines without it.
        from isaaclab.app import AppLauncher

        launcher = AppLauncher(**self.launcher_args())
        self.app = launcher.app

    def before_env_build(self, env_cfg: Any) -> None:
        """3.x: enter ``launch_simulation(env_cfg)``, which is kit-less when the task allows."""
        if self.kind != "launch_simulation":
            return
        from isaaclab.app import launch_simulation

        args = self.launcher_args()
        self._stack.enter_context(launch_simulation(env_cfg, args))

    def close(self) -> None:
        """Leave the runtime (closes Kit if it was started). Safe to call twice."""
        self._stack.close()
        app, self.app = self.app, None
        if app is not None:
            app.close()
