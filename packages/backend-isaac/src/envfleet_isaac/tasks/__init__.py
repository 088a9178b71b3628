"""The project's own Isaac Lab tasks, registered with gymnasium on import.

Registration names the env and its config by ``"module:attr"`` strings, so importing
this package imports gymnasium only; Isaac Lab is imported when a task is built
(after the 2.x launcher has started, where that applies).

- ``Envfleet-Pusher-v0``: a blue cylinder pushes a red cube onto a green goal disc;
  a fixed table camera and a camera riding on the pusher. Primitive shapes only, so it
  needs no asset download; Newton physics and the Newton Warp renderer, so it runs
  kit-less (Isaac Lab 3.x), on a CPU too.
"""

from __future__ import annotations

import gymnasium as gym

from ..plugin import PUSHER_TASK

__all__ = ["PUSHER_TASK", "register"]


def register() -> None:
    """Register the project's tasks with gymnasium (idempotent)."""
    if PUSHER_TASK not in gym.registry:
        gym.register(
            id=PUSHER_TASK,
            entry_point="envfleet_isaac.tasks.pusher:PusherEnv",
            disable_env_checker=True,
            kwargs={"env_cfg_entry_point": "envfleet_isaac.tasks.pusher:PusherEnvCfg"},
        )


register()
