"""Refusing, at config load, a task whose assets ManiSkill would download.

ManiSkill checks a task's assets when the env is made and, for one missing, asks on
stdin whether to download it (``input()``; with no terminal it dies with ``EOFError``,
and with ``MS_SKIP_ASSET_DOWNLOAD_PROMPT=1`` it downloads). envfleet never lets it get
there: :func:`refuse_downloads` runs when the config loads, and again in the shard
before the env is made, and raises naming the task and the asset ids.

The stock tasks of :data:`~envfleet_maniskill.tasks.TASKS` with the robots of
:data:`WHEEL_ROBOTS` use assets inside the ``mani-skill`` wheel and are accepted
without importing ManiSkill. Any other task or robot is looked up in ManiSkill's own
registry (its ``asset_download_ids``), which imports ManiSkill (a few CPU-seconds).
"""

from __future__ import annotations

from typing import Any

from envfleet.errors import ConfigError

from .tasks import TASKS

# Imports inside functions: ManiSkill loads only where its assets are checked (in the shard, before the env is
# made).

__all__ = ["WHEEL_ROBOTS", "missing_assets", "refuse_downloads"]

#: Robots whose assets ship in the wheel.
WHEEL_ROBOTS = frozenset({"panda", "panda_wristcam", "panda_stick", "so100", None})


def missing_assets(task: str, robot: str | None) -> list[str]:
    """The asset ids ``task`` with ``robot`` needs that are not on disk (ManiSkill's registry, imported here)."""
    if task in TASKS and robot in WHEEL_ROBOTS:
        return []
    try:
        import mani_skill.envs  # noqa: F401  (registers the tasks)
        from mani_skill.utils import assets
        from mani_skill.utils.registration import REGISTERED_ENVS
    except ImportError:
        return []  # the shard, which has ManiSkill, checks again before making the env
    if task not in REGISTERED_ENVS:
        raise ConfigError(
            f"config key 'train.task_name' is {task!r}, which is not a registered ManiSkill env id "
            f"(e.g. {', '.join(TASKS[:4])}; `python -m mani_skill.utils.download_asset --list` lists tasks and assets)"
        )
    wanted = list(REGISTERED_ENVS[task].asset_download_ids or [])
    if robot is not None and robot in assets.DATA_GROUPS:
        wanted += list(assets.DATA_GROUPS[robot])
    missing: list[str] = []
    for asset_id in wanted:
        sources = assets.expand_data_group_into_individual_data_source_ids(asset_id) if asset_id in assets.DATA_GROUPS else [asset_id]
        missing += [s for s in sources if s in assets.DATA_SOURCES and not assets.is_data_source_downloaded(s)]
    return sorted(set(missing))


def refuse_downloads(task: str, robot: Any) -> None:
    """Raise :class:`~envfleet.errors.ConfigError` when ManiSkill would download assets for ``task`` with ``robot``."""
    missing = missing_assets(task, None if robot is None else str(robot))
    if missing:
        shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
        raise ConfigError(
            f"ManiSkill task {task!r} (robot {robot!r}) needs assets that are not on this machine: {shown}. envfleet never downloads "
            f"at run time: fetch them beforehand (python -m mani_skill.utils.download_asset {task}) into MS_ASSET_DIR, "
            f"or pick a task whose assets ship in the wheel ({', '.join(TASKS)})"
        )
