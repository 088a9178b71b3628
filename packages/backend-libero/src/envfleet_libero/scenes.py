"""Scenes shared by the LIBERO envs of one process.

One job: one compiled model and render context per task and process, shared by the envs built on it.

Everything heavy in a LIBERO env belongs to its task, not to the env: the compiled
MuJoCo model (meshes and textures) and the render context those are uploaded into.
A :class:`SceneCache` holds them once per process: one GL context, and per compiled
model (keyed by the task and the XML robosuite generates) one ``MjrContext``. Each env
keeps what is its own: its ``MjData``, its robosuite and LIBERO Python objects
(controllers, gripper, observables and their clocks, counters, samplers) and its own
``MjvScene``, camera and options.

The envs are LIBERO's own task classes with three methods overridden
(:func:`dense_task_class`): ``_initialize_sim`` takes the model from the cache instead
of compiling it, ``_reset_internal`` attaches a :class:`SharedRenderView` where
robosuite would create a GL context of its own, and ``_destroy_sim`` hands the scene
back. Nothing of robosuite or LIBERO is patched for the process.

What a reset writes into a model is the same for every env of a scene: LIBERO places
the fixtures (drawers, microwaves, stoves) by writing ``body_pos``/``body_quat``,
drawing from the global NumPy RNG that envfleet seeds with ``train.seed`` before every
reset, and robosuite turns site visualisation off through ``site_rgba``. A scene keeps
pristine copies of those fields, so that building an env on a cached model starts from
what a fresh compile gives, and the fixture pose of its first reset, against which
every later reset is checked: a different pose would mean envs see each other.

A LIBERO-plus task is built on LIBERO's task class too, its perturbations mixed in: the
camera view (``_PerturbedCamera``), and :class:`PlusScene` for a task that takes something from
LIBERO-plus's assets folder (:class:`.plus.data.PlusAssets`):

- its arena is built from LIBERO-plus's scene XML, in the folder, instead of the class's own;
- the arena's floor and wall textures become those of LIBERO-plus's styles, in the folder of the scene's
  own textures. LIBERO's arenas know only LIBERO's style names, so the arena is built with LIBERO's
  default style and its two texture files are then set, before the model is compiled (the hook is
  ``_setup_camera``, which LIBERO's ``_load_model`` calls on the arena right after building it);
- its problem class places objects with the region samplers of the LIBERO class it derives from (so
  do LIBERO-plus's: its table registers each of its 2,218 scene classes so), looked up in LIBERO's
  table under the task's problem name, which is there only while the placement is set up;
- an object category LIBERO's library lacks is built as :func:`new_object` from its MJCF file in the
  folder, by LIBERO's own object loop: the categories are in LIBERO's object table only while that loop
  runs, so that the objects keep the BDDL's order, which the task's initial state was recorded in.

robosuite never makes a GL context current before rendering or freeing it; with
several scenes in one process that renders into, or frees from, the wrong context. The
view and the cache make the process's context current before every render and free.
Everything here runs in the thread that created the context (the shard's main thread).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import sys
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from .plus.data import NEW_OBJECT_ROTATION, PlusAssets

# Imports inside functions: robosuite, LIBERO and MuJoCo load in the shard only, where scenes are compiled and
# rendered.

__all__ = ["Scene", "SceneCache", "SharedRenderView", "PlusScene", "building_dense", "dense_task_class", "new_object", "scene_cache"]

#: Model fields a LIBERO reset writes (fixture placement, site visibility); restored on a cache hit.
WRITTEN_FIELDS = ("body_pos", "body_quat", "site_rgba", "geom_rgba")


class Scene:
    """One compiled task model and its ``MjrContext``, shared by the envs of a process.

    :param key: SHA-1 of the task's BDDL file name and the model's XML.
    :param model: the compiled ``mujoco.MjModel``.
    :param con: the ``mujoco.MjrContext`` (meshes and textures uploaded).
    """

    def __init__(self, key: str, model: Any, con: Any) -> None:
        self.key = key
        self.model = model
        self.con = con
        self.pristine = {name: getattr(model, name).copy() for name in WRITTEN_FIELDS}
        self.fixture_pose: tuple[np.ndarray, np.ndarray] | None = None
        self.users = 0

    def restore_pristine(self) -> None:
        """Put back what a fresh compile has in the fields resets write."""
        for name, value in self.pristine.items():
            getattr(self.model, name)[...] = value

    def pose(self) -> tuple[np.ndarray, np.ndarray]:
        """The model's current body poses (``body_pos``, ``body_quat``), copied."""
        return self.model.body_pos.copy(), self.model.body_quat.copy()

    def set_fixture_pose(self) -> None:
        """Write the pose of the scene's first seeded hard reset back into the model."""
        assert self.fixture_pose is not None
        self.model.body_pos[...] = self.fixture_pose[0]
        self.model.body_quat[...] = self.fixture_pose[1]

    def record_fixture_pose(self, task: str) -> None:
        """After a seeded hard reset: keep its fixture pose, or check it equals the one kept.

        Every env of a scene is reset with the same seed, so every hard reset places the
        fixtures alike. A different pose means an env would move another env's drawer.
        """
        pose = self.pose()
        if self.fixture_pose is None:
            self.fixture_pose = pose
            return
        if not (np.array_equal(pose[0], self.fixture_pose[0]) and np.array_equal(pose[1], self.fixture_pose[1])):
            self.set_fixture_pose()
            raise RuntimeError(
                f"task {task}: this reset placed the fixtures elsewhere than the first reset of the scene the "
                "process shares; envs of one scene must be reset with one seed (train.seed)"
            )


class SceneCache:
    """The scenes of this process: one GL context, one model and ``MjrContext`` per task.

    :param keep_idle: how many scenes no env uses are kept (most recent first), so that
        an env going back to a task does not build it again.
    """

    def __init__(self, keep_idle: int = 1) -> None:
        self.keep_idle = int(keep_idle)
        self._gl: Any = None
        self._scenes: dict[str, Scene] = {}
        self._idle: OrderedDict[str, None] = OrderedDict()
        self.quiet = False  # renders are skipped (and read back as zeros) while set
        self.compiles = 0

    # ------------------------------------------------------------------ scenes
    @property
    def gl(self) -> Any:
        """The process's GL context (created on first use), made current."""
        if self._gl is None:
            from robosuite.utils.binding_utils import GLContext

            # The size of the default framebuffer only: MuJoCo renders into its own offscreen one.
            self._gl = GLContext(max_width=640, max_height=480, device_id=-1)
        self._gl.make_current()
        return self._gl

    def acquire(self, task: str, xml: str, width: int, height: int) -> Scene:
        """The scene of ``task`` built from ``xml``, compiled and uploaded on the first call; one more user.

        Keyed by both: tasks of one suite often compile the same XML but place the
        fixtures differently, and a model holds one placement.
        """
        key = hashlib.sha1(f"{task}\0{xml}".encode()).hexdigest()
        scene = self._scenes.get(key)
        if scene is None:
            scene = self._build(key, xml, width, height)
            self._scenes[key] = scene
        else:
            self._idle.pop(key, None)
            scene.restore_pristine()
        scene.users += 1
        return scene

    def release(self, scene: Scene) -> None:
        """One user less; a scene nobody uses is kept idle, the oldest idle ones are freed."""
        scene.users -= 1
        if scene.users > 0:
            return
        self._idle[scene.key] = None
        while len(self._idle) > self.keep_idle:
            key, _ = self._idle.popitem(last=False)
            self._free(self._scenes.pop(key))

    def in_use(self) -> int:
        """How many scenes envs use."""
        return len(self._scenes) - len(self._idle)

    def __len__(self) -> int:
        return len(self._scenes)

    def close(self) -> None:
        """Free every scene and the GL context (envs must be closed first). The cache can be used again."""
        for scene in list(self._scenes.values()):
            self._free(scene)
        self._scenes.clear()
        self._idle.clear()
        if self._gl is not None:
            gl, self._gl = self._gl, None
            gl.free()

    @contextmanager
    def quiet_renders(self) -> Iterator[None]:
        """Skip renders inside: for robosuite's shape checks and forced observations while an env is built."""
        before, self.quiet = self.quiet, True
        try:
            yield
        finally:
            self.quiet = before

    # ------------------------------------------------------------------ internals
    def _build(self, key: str, xml: str, width: int, height: int) -> Scene:
        import mujoco

        model = mujoco.MjModel.from_xml_string(xml)
        self.compiles += 1
        # MuJoCo keeps the decoded assets of every compile in a process-wide cache; a
        # scene is compiled once per process, so they would only hold memory.
        mujoco.mj_clearCache(mujoco.mj_getCache())
        # robosuite grows the offscreen buffer on the first render of a larger camera by
        # freeing and re-making the context; a shared one is made large enough up front.
        model.vis.global_.offwidth = max(int(model.vis.global_.offwidth), int(width))
        model.vis.global_.offheight = max(int(model.vis.global_.offheight), int(height))
        self.gl  # noqa: B018 - made current for the upload
        con = mujoco.MjrContext(model, mujoco.mjtFontScale.mjFONTSCALE_150)
        mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN, con)
        _trim_heap()
        return Scene(key, model, con)

    def _free(self, scene: Scene) -> None:
        if self._gl is not None:
            self._gl.make_current()
            scene.con.free()
        scene.con = scene.model = None
        _trim_heap()


def _trim_heap() -> None:
    """Give freed heap back to the system (glibc keeps what a compile or an upload freed)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):  # not glibc
            pass


_CACHE: SceneCache | None = None


def scene_cache() -> SceneCache:
    """This process's scene cache."""
    global _CACHE
    if _CACHE is None:
        _CACHE = SceneCache()
    return _CACHE


def _render_context_class() -> type:
    from robosuite.utils.binding_utils import MjRenderContext

    return MjRenderContext  # type: ignore[no-any-return]


class SharedRenderView:
    """robosuite's render context for one env, drawing with a scene's shared GL and ``MjrContext``.

    Built as a subclass of robosuite's ``MjRenderContext`` (see :func:`_view_class`): the
    env's own ``MjvScene``, camera, options and perturbation, robosuite's ``render`` and
    ``read_pixels`` unchanged, with the process's context made current first. It never
    resizes or frees what it shares.
    """

    def __init__(self, sim: Any, scene: Scene, cache: SceneCache) -> None:
        import mujoco

        self.sim, self.offscreen, self.device_id = sim, True, -1
        self._cache = cache
        self.gl_ctx = cache.gl
        self.con = scene.con
        # As robosuite's own context does on creation: bring the data up to date, attach.
        sim.forward()
        sim.add_render_context(self)
        self.model, self.data = sim.model, sim.data
        self.scn = mujoco.MjvScene(sim.model._model, maxgeom=1000)
        self.cam = mujoco.MjvCamera()
        self.cam.fixedcamid = 0
        self.cam.type = mujoco.mjtCamera.mjCAMERA_FIXED
        self.vopt = mujoco.MjvOption()
        self.pert = mujoco.MjvPerturb()
        self.pert.active = 0
        self.pert.select = 0
        self.pert.skinselect = -1

    def _current(self) -> None:
        import mujoco

        self.gl_ctx.make_current()
        mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN, self.con)

    def render(self, width: int, height: int, camera_id: int | None = None, segmentation: bool = False) -> None:
        """robosuite's render of this env's data, in the process's context and the scene's buffer."""
        if self._cache.quiet:
            return
        if width > self.con.offWidth or height > self.con.offHeight:
            raise RuntimeError(f"a {width}x{height} render does not fit the shared {self.con.offWidth}x{self.con.offHeight} buffer")
        self._current()
        super().render(width, height, camera_id, segmentation)  # type: ignore[misc]

    def read_pixels(self, width: int, height: int, depth: bool = False, segmentation: bool = False) -> Any:
        """robosuite's read-back of the last render (zeros while renders are skipped)."""
        if self._cache.quiet:
            rgb = np.zeros((height, width, 3), dtype=np.uint8)
            return (rgb, np.zeros((height, width), dtype=np.float32)) if depth else rgb
        self._current()
        return super().read_pixels(width, height, depth=depth, segmentation=segmentation)  # type: ignore[misc]

    def upload_texture(self, tex_id: int) -> None:
        """Refused: the textures are the scene's."""
        raise RuntimeError("a shared scene's textures cannot be changed by one env")

    def update_offscreen_size(self, width: int, height: int) -> None:
        """Refused: the buffer is the scene's (made large enough when the scene is built)."""
        raise RuntimeError("a shared scene's offscreen buffer cannot be resized by one env")

    def __del__(self) -> None:
        pass  # the GL context and the MjrContext belong to the scene cache


_VIEW_CLASS: type | None = None


def _view_class() -> type:
    """:class:`SharedRenderView` on top of robosuite's ``MjRenderContext`` (imported in the shard only)."""
    global _VIEW_CLASS
    if _VIEW_CLASS is None:
        _VIEW_CLASS = type("SharedRenderView", (SharedRenderView, _render_context_class()), {})
    return _VIEW_CLASS


class _DenseTask:
    """What a LIBERO task class needs to share its scene; mixed in by :func:`dense_task_class`."""

    _envfleet_cache: SceneCache
    _envfleet_scene: Scene | None = None

    def _initialize_sim(self, xml_string: str | None = None) -> None:
        from robosuite.utils.binding_utils import MjSim

        env: Any = self
        xml = xml_string if xml_string else env.model.get_xml()
        if env._xml_processor is not None:
            xml = env._xml_processor(xml)
        sizes = list(zip(env.camera_widths, env.camera_heights)) or [(0, 0)]
        scene = self._envfleet_cache.acquire(env.bddl_file_name, xml, max(w for w, _ in sizes), max(h for _, h in sizes))
        self._envfleet_scene = scene
        env.sim = MjSim(scene.model)
        # As robosuite's own _initialize_sim continues.
        env.sim.forward()
        env.initialize_time(env.control_freq)

    def _reset_internal(self) -> None:
        env: Any = self
        # Where robosuite's base class would create a GL context and an MjrContext for this sim.
        if env.has_offscreen_renderer and env.sim._render_context_offscreen is None:
            assert self._envfleet_scene is not None
            _view_class()(env.sim, self._envfleet_scene, self._envfleet_cache)
        super()._reset_internal()  # type: ignore[misc]

    def _destroy_sim(self) -> None:
        env: Any = self
        if env.sim is not None:
            env.sim._render_context_offscreen = None
            env.sim = None
        if self._envfleet_scene is not None:
            scene, self._envfleet_scene = self._envfleet_scene, None
            self._envfleet_cache.release(scene)


class _PerturbedCamera:
    """LIBERO-plus's camera perturbation (:mod:`.plus.camera`), mixed in where a task has a view."""

    _envfleet_view: tuple[int, int, int, int, int]

    def _setup_camera(self, mujoco_arena: Any) -> None:
        from robosuite.utils.mjcf_utils import find_elements, string_to_array

        from .plus.camera import perturbed_pose

        super()._setup_camera(mujoco_arena)  # type: ignore[misc]
        # The task's own agentview pose, as its problem class set it, moved as LIBERO-plus moves it.
        cam = find_elements(root=mujoco_arena.worldbody, tags="camera", attribs={"name": "agentview"}, return_first=True)
        pos, quat = perturbed_pose(string_to_array(cam.get("pos")), string_to_array(cam.get("quat")), self._envfleet_view)
        mujoco_arena.set_camera(camera_name="agentview", pos=pos.tolist(), quat=quat.tolist())


class PlusScene:
    """What a LIBERO problem class needs to build a task from LIBERO-plus's assets (a mixin)."""

    _envfleet_assets: PlusAssets

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        assets = self._envfleet_assets
        if assets.scene_xml is not None:
            # LIBERO joins scene_xml onto its own assets folder; os.path.join keeps an absolute path as it is.
            kwargs["scene_xml"] = assets.scene_xml
            # The arena gets LIBERO's default styles; LIBERO-plus's are set on it in _setup_camera.
            kwargs["scene_properties"] = {}
        super().__init__(*args, **kwargs)

    def _setup_camera(self, mujoco_arena: Any) -> None:
        assets = self._envfleet_assets
        for name, texture in (("texplane", assets.floor_texture), ("tex-wall", assets.wall_texture)):
            node = mujoco_arena.asset.find(f"./texture[@name='{name}']")
            if texture is not None and node is not None:
                # As LIBERO's arenas place a style's texture: beside the scene's own (robosuite made the path absolute).
                node.set("file", os.path.join(os.path.dirname(node.get("file")), texture))
        super()._setup_camera(mujoco_arena)  # type: ignore[misc]

    def _add_placement_initializer(self) -> None:
        from libero.libero.envs.regions import REGION_SAMPLERS

        assets = self._envfleet_assets
        added = assets.problem not in REGION_SAMPLERS
        if added:
            REGION_SAMPLERS[assets.problem] = REGION_SAMPLERS[assets.libero_problem]
        try:
            super()._add_placement_initializer()  # type: ignore[misc]
        finally:
            if added:
                REGION_SAMPLERS.pop(assets.problem, None)

    def _load_objects_in_arena(self, mujoco_arena: Any) -> None:
        from libero.libero.envs.base_object import OBJECTS_DICT

        added = {c: functools.partial(new_object, xml, c) for c, xml in self._envfleet_assets.objects if c not in OBJECTS_DICT}
        OBJECTS_DICT.update(added)
        try:
            super()._load_objects_in_arena(mujoco_arena)  # type: ignore[misc]
        finally:
            for category in added:
                OBJECTS_DICT.pop(category, None)


_OBJECT_CLASS: type | None = None


def _object_class() -> type:
    """The class of LIBERO-plus's new objects, on robosuite's ``MujocoXMLObject`` (made in the shard only)."""
    global _OBJECT_CLASS
    if _OBJECT_CLASS is not None:
        return _OBJECT_CLASS
    import xml.etree.ElementTree as ET

    from robosuite.models.objects import MujocoXMLObject

    class PlusObject(MujocoXMLObject):  # type: ignore[misc]
        """One of LIBERO-plus's new objects: its MJCF file, a free joint, LIBERO's object attributes."""

        def __init__(self, xml: str, category: str, name: str) -> None:
            # The arguments LIBERO gives its scanned objects (google_scanned_objects.py) and LIBERO-plus its new ones.
            super().__init__(xml, name=name, joints=[dict(type="free", damping="0.0005")], obj_type="all", duplicate_collision_geoms=False)
            self.category_name = category
            self.rotation = dict(NEW_OBJECT_ROTATION)
            self.rotation_axis = None
            self.object_properties: dict[str, Any] = {"vis_site_names": {}}

        def _get_object_subtree(self) -> Any:
            # robosuite looks for the body named "object" one level down (./body/body); files converted the way
            # LIBERO-plus's are may have it right under the worldbody. Seen through a wrapper then, the file's tree unchanged.
            original: Any = self.worldbody  # type: ignore[has-type]
            if original.find("./body/body[@name='object']") is not None:
                return super()._get_object_subtree()
            body = original.find("./body[@name='object']")
            if body is None:
                raise ValueError(f"{self.file}: no body named 'object' under the worldbody or one level down")
            wrapper = ET.Element("worldbody")
            ET.SubElement(wrapper, "body").append(body)
            self.worldbody = wrapper
            try:
                return super()._get_object_subtree()
            finally:
                self.worldbody = original

    _OBJECT_CLASS = PlusObject
    return PlusObject


def new_object(xml: str, category: str, name: str) -> Any:
    """LIBERO-plus's new object ``category`` from its MJCF file ``xml``, named ``name`` (LIBERO's object loop calls it)."""
    return _object_class()(xml, category, name)


_DENSE_CLASSES: dict[tuple[type, int, tuple[int, ...] | None, Any], type] = {}


def dense_task_class(
    task_class: type, cache: SceneCache, view: tuple[int, int, int, int, int] | None = None, assets: PlusAssets | None = None
) -> type:
    """``task_class`` (one of LIBERO's ``TASK_MAPPING``) with its scene taken from ``cache``.

    :param view: a LIBERO-plus camera view ``(H, V, S, R, E)``: the agentview camera is moved so
        (the model's XML differs, so the task compiles a scene of its own).
    :param assets: what a LIBERO-plus task takes from its assets folder (:class:`.plus.data.PlusAssets`):
        the class is then named after the task's problem class (LIBERO checks the BDDL's problem name
        against it) and builds LIBERO-plus's scene and objects (:class:`PlusScene`).
    """
    key = (task_class, id(cache), view, assets)
    cls = _DENSE_CLASSES.get(key)
    if cls is None:
        # The same name: LIBERO checks the BDDL problem name against the class name.
        name = task_class.__name__ if assets is None else assets.problem
        attrs: dict[str, Any] = {"_envfleet_cache": cache, "__module__": __name__}
        bases: tuple[type, ...] = (_DenseTask,)
        if view is not None:
            bases, attrs["_envfleet_view"] = (*bases, _PerturbedCamera), tuple(view)
        if assets is not None:
            bases, attrs["_envfleet_assets"] = (*bases, PlusScene), assets
        cls = type(name, (*bases, task_class), attrs)
        _DENSE_CLASSES[key] = cls
    return cls


@contextmanager
def building_dense(
    problem_name: str, cache: SceneCache, view: tuple[int, int, int, int, int] | None = None, assets: PlusAssets | None = None
) -> Iterator[None]:
    """While inside, LIBERO's env wrapper builds ``problem_name`` as its dense class.

    LIBERO's ``ControlEnv`` looks its task class up in ``TASK_MAPPING`` and passes it the
    arguments LIBERO evaluations use; swapping the entry for the construction keeps those
    arguments LIBERO's own. A LIBERO-plus scene's problem class, which LIBERO lacks, has an
    entry only meanwhile: the dense variant of the LIBERO class it derives from, with ``assets``.
    Renders are skipped meanwhile: robosuite's shape checks and the constructor's observations
    are never handed out.
    """
    from libero.libero.envs import env_wrapper

    mapping = env_wrapper.TASK_MAPPING
    had = problem_name in mapping
    original = mapping.get(problem_name)
    base = mapping[problem_name if assets is None else assets.libero_problem]
    mapping[problem_name] = dense_task_class(base, cache, view, assets)
    try:
        with cache.quiet_renders():
            yield
    finally:
        if had:
            mapping[problem_name] = original
        else:
            mapping.pop(problem_name, None)
