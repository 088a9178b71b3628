"""``train.libero.plus``: which LIBERO-plus tasks a ``libero_plus_*`` suite runs, checked at config load.

A selection is the suite's tasks of the chosen dimensions (or the listed task ids), each with its
initial states (all of them, or the first ``trials``). A task that needs LIBERO-plus's assets
(:attr:`.data.PlusTask.needs_assets`) runs only with ``assets`` set to the unpacked ``assets.zip``; the
files each chosen task takes from it are checked here (:func:`.data.check_files`: a missing one is named). Without
it, asking for one is a :class:`~envfleet.errors.ConfigError` naming the dimension, how many of its
tasks need the folder and where LIBERO-plus publishes it (or, with ``missing_assets: skip``, those
tasks are left out and the fingerprint counts them).
"""

from __future__ import annotations

import difflib
import functools
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envfleet.errors import ConfigError
from envfleet.plugins import backend_section

from .data import ASSETS_URL, DIMENSIONS, PLUS_SUITES, PlusTask, check_files, plus_tasks

__all__ = ["MISSING_ASSETS", "PlusConfig", "PlusSelection", "plus_selection", "select"]

#: ``error``: asking for a task that needs the assets folder, without one, is a ConfigError; ``skip``: such tasks are left out.
MISSING_ASSETS: tuple[str, ...] = ("error", "skip")


@dataclass
class PlusConfig:
    """Options of the ``libero_plus_*`` suites, under ``train.libero.plus``."""

    dimensions: list[str] | None = None  # camera, robot, language, light, background, noise, layout; null: all seven
    tasks: list[int] | None = None  # LIBERO-plus task ids (positions in its list of the suite, from 0); null: every task of the dimensions
    trials: int | None = None  # initial states per task (the first ones); null: all the task's (LIBERO-plus's leaderboard: 1)
    assets: str | None = None  # the folder LIBERO-plus's assets.zip was unpacked into; null: LIBERO's assets only
    missing_assets: str = "error"  # error | skip: a task that needs the assets folder, without one


@dataclass(frozen=True)
class PlusSelection:
    """The tasks a ``libero_plus_*`` suite runs, and what was left out.

    :param suite: the envfleet suite name.
    :param tasks: the tasks, in LIBERO-plus's order.
    :param dimensions: the dimensions asked for.
    :param trials: initial states per task (``None``: all).
    :param assets: the assets folder, resolved (``None``: none).
    :param skipped: per dimension, tasks left out because they need the assets folder.
    """

    suite: str
    tasks: tuple[PlusTask, ...]
    dimensions: tuple[str, ...]
    trials: int | None
    assets: str | None
    skipped: dict[str, int] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """What the fingerprint keeps: the dimensions run, trials, whether the assets folder was there, what was skipped."""
        return {
            "dimensions": sorted({t.dimension for t in self.tasks}, key=DIMENSIONS.index),
            "asked": list(self.dimensions),
            "tasks": len(self.tasks),
            "trials": self.trials,
            "assets": self.assets is not None,
            "skipped": dict(self.skipped),
        }


def _as_list(value: Any, key: str, kind: type) -> list[Any] | None:
    if value is None:
        return None
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        value = [value]
    try:
        items = list(value)
    except TypeError:
        raise ConfigError(f"config key 'train.libero.plus.{key}' must be a list or null, got {value!r}") from None
    for item in items:
        if isinstance(item, bool) or not isinstance(item, kind):
            raise ConfigError(f"config key 'train.libero.plus.{key}' must list {kind.__name__} values, got {item!r}")
    return items


@functools.cache
def select(
    suite: str,
    dimensions: tuple[str, ...] | None,
    tasks: tuple[int, ...] | None,
    trials: int | None,
    assets: str | None,
    missing_assets: str,
) -> PlusSelection:
    """The selection for these values (cached: every ``check_suite`` of one config gets the same object).

    :raises ConfigError: an unknown dimension, a task id out of range, an assets folder that is not
        there or lacks a file a chosen task needs, or a task that needs the assets folder without one
        (with ``missing_assets: error``).
    """
    for dim in dimensions or ():
        if dim not in DIMENSIONS:
            close = difflib.get_close_matches(dim, DIMENSIONS, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ConfigError(
                f"config key 'train.libero.plus.dimensions' lists {dim!r}, which is not a LIBERO-plus dimension.{hint} "
                f"Use some of {', '.join(DIMENSIONS)} (or null for all)"
            )
    if missing_assets not in MISSING_ASSETS:
        raise ConfigError(f"config key 'train.libero.plus.missing_assets' must be one of {list(MISSING_ASSETS)}, got {missing_assets!r}")
    if trials is not None and trials < 1:
        raise ConfigError(f"config key 'train.libero.plus.trials' must be an integer >= 1 or null (all), got {trials!r}")
    folder = None
    if assets is not None:
        path = Path(assets).expanduser()
        if not path.is_dir():
            raise ConfigError(
                f"config key 'train.libero.plus.assets' is {assets!r}, which is not a folder: give the folder LIBERO-plus's "
                f"assets.zip was unpacked into (from {ASSETS_URL}), or null"
            )
        folder = str(path.resolve())
    every = plus_tasks(suite)
    asked = tuple(dimensions) if dimensions else DIMENSIONS
    if tasks is not None:
        bad = [t for t in tasks if not 0 <= t < len(every)]
        if bad:
            raise ConfigError(
                f"config key 'train.libero.plus.tasks' lists {bad[0]}, but {suite} has LIBERO-plus tasks 0 .. {len(every) - 1}"
            )
        chosen = [every[t] for t in sorted(set(tasks))]
        outside = [t for t in chosen if t.dimension not in asked]
        if outside:
            raise ConfigError(
                f"config key 'train.libero.plus.tasks' lists {outside[0].plus_id} ({outside[0].name}), a {outside[0].dimension} task, "
                f"but 'train.libero.plus.dimensions' is {list(asked)}"
            )
    else:
        chosen = [t for t in every if t.dimension in asked]
    skipped: dict[str, int] = {}
    if folder is None:
        need = Counter(t.dimension for t in chosen if t.needs_assets)
        if need and missing_assets == "error":
            total = Counter(t.dimension for t in chosen)
            what = "; ".join(f"{dim}: {need[dim]} of its {total[dim]} tasks" for dim in DIMENSIONS if need[dim])
            runnable = [d for d in DIMENSIONS if d in asked and total[d] and not need[d]]
            raise ConfigError(
                f"{suite}: tasks that need LIBERO-plus's assets (its scenes, lights, textures and new objects), which this "
                f"install lacks ({what}). Unpack assets.zip from {ASSETS_URL} and set 'train.libero.plus.assets' to that "
                f"folder; or set 'train.libero.plus.dimensions' to dimensions this install runs whole "
                f"({', '.join(runnable) or 'none of those asked'}); or set 'train.libero.plus.missing_assets: skip' to leave those tasks out"
            )
        skipped = {dim: need[dim] for dim in DIMENSIONS if need[dim]}
        chosen = [t for t in chosen if not t.needs_assets]
    else:
        # Every file the chosen tasks take from the folder is there, or the first one missing is named.
        check_files(chosen, folder)
    if not chosen:
        raise ConfigError(f"{suite}: the selection in 'train.libero.plus' leaves no task to run (dimensions {list(asked)})")
    return PlusSelection(suite, tuple(chosen), asked, trials, folder, skipped)


def plus_selection(cfg: Any) -> PlusSelection:
    """The selection of env section ``cfg`` (its ``task_suite_name`` a ``libero_plus_*`` suite)."""
    suite = str(cfg.task_suite_name)
    assert suite in PLUS_SUITES
    section = backend_section(backend_section(cfg, "libero"), "plus")
    dims = _as_list(section.get("dimensions"), "dimensions", str)
    tasks = _as_list(section.get("tasks"), "tasks", int)
    trials = section.get("trials")
    if trials is not None and (isinstance(trials, bool) or not isinstance(trials, int)):
        raise ConfigError(f"config key 'train.libero.plus.trials' must be an integer >= 1 or null (all), got {trials!r}")
    assets = section.get("assets")
    return select(
        suite,
        tuple(dims) if dims is not None else None,
        tuple(tasks) if tasks is not None else None,
        trials,
        None if assets is None else str(assets),
        str(section.get("missing_assets") or "error"),
    )
