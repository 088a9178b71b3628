"""An Isaac Lab task's env config, read from its gymnasium registration."""

from __future__ import annotations

from typing import Any

from envfleet.plugins.spec import import_factory

# Imports inside functions: Isaac Lab's modules import only after its app is launched (launch.py), in the
# shard.

__all__ = ["load_env_cfg"]


def load_env_cfg(task: str) -> Any:
    """A fresh env config instance for a registered task id.

    Reads the ``env_cfg_entry_point`` the task registered (``"module:Class"``, a class,
    a callable or an instance). Anything else (a YAML path) goes through
    ``isaaclab_tasks.utils.parse_env_cfg``, which imports every stock task (seconds).
    """
    import copy

    import gymnasium as gym

    entry = gym.spec(task).kwargs.get("env_cfg_entry_point")
    if entry is None:
        raise RuntimeError(f"task {task!r} registers no 'env_cfg_entry_point' in its gymnasium kwargs; Isaac Lab tasks do")
    if isinstance(entry, str) and ":" in entry and not entry.endswith((".yaml", ".yml")):
        entry = import_factory(entry)
    if isinstance(entry, type) or callable(entry):
        return entry()
    if not isinstance(entry, str):
        return copy.deepcopy(entry)
    from isaaclab_tasks.utils import parse_env_cfg

    return parse_env_cfg(task)
