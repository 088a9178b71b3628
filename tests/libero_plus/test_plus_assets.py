"""LIBERO-plus's light, background and ``_add_`` layout tasks from an assets folder the test writes itself.

LIBERO-plus's ``assets.zip`` (6.4 GB) is not here, so the folder holds what three tasks of
libero_plus_spatial take from it, small, in the layout LIBERO-plus's code reads: a light task's
scene (``scenes/lights/...``, LIBERO's table scene with a red light), a background task's scene and
its style textures (solid colours), and an ``_add_`` task's two new objects (MJCF boxes with the
``object`` body right under the worldbody). The three tasks build and step in real LIBERO, and
what each took from the folder is in its compiled model; a file the folder lacks is a ConfigError
naming it, before any scene is built.
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from envfleet.config import load_config
from envfleet.env import EnvContext
from envfleet.errors import ConfigError
from envfleet_libero.plus.data import plan, plus_tasks

SUITE = "libero_plus_spatial"
RED_LIGHT = (0.9, 0.1, 0.1)
FLOOR = (255, 0, 255)  # magenta
WALL = (0, 200, 0)  # green


def _png(path: Path, rgb: tuple[int, int, int], size: int = 4) -> None:
    """A solid ``size`` x ``size`` RGB PNG."""
    raw = b"".join(b"\x00" + bytes(rgb) * size for _ in range(size))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    head = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", head) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def _scene(path: Path, textures: str, light: tuple[float, float, float] | None = None) -> None:
    """LIBERO's table scene, its textures taken from ``textures`` (relative to the scene), its lights optionally coloured."""
    from libero.libero import get_libero_path

    text = (Path(get_libero_path("assets")) / "scenes" / "libero_tabletop_base_style.xml").read_text()
    text = text.replace('file="../textures/', f'file="{textures}/')
    if light is not None:
        text = re.sub(r'diffuse="[^"]*"', 'diffuse="{} {} {}"'.format(*light), text)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


_OBJECT = """<mujoco model="{name}">
  <asset><texture name="tex" type="2d" file="../texture.png"/><material name="mat" texture="tex"/></asset>
  <worldbody>
    <body name="object">
      <geom name="collision" type="box" size="0.02 0.02 0.03" group="0" density="500"/>
      <geom name="visual" type="box" size="0.02 0.02 0.03" group="1" material="mat" contype="0" conaffinity="0"/>
      <site name="bottom_site" pos="0 0 -0.03" size="0.002" rgba="0 0 0 0"/>
      <site name="top_site" pos="0 0 0.03" size="0.002" rgba="0 0 0 0"/>
      <site name="horizontal_radius_site" pos="0.03 0 0" size="0.002" rgba="0 0 0 0"/>
    </body>
  </worldbody>
</mujoco>
"""


def _tasks() -> dict[str, Any]:
    tasks = plus_tasks(SUITE)
    return {
        "light": next(t for t in tasks if t.dimension == "light"),
        "background": next(t for t in tasks if t.dimension == "background" and "_table_" in t.name),
        "layout": next(t for t in tasks if "_add_" in t.name and len(t.new_objects) == 2),
    }


def _write_folder(root: Path) -> dict[str, Any]:
    """The files the three tasks take from LIBERO-plus's assets, at the paths LIBERO-plus's code names."""
    tasks = _tasks()
    folder = str(root)
    light, background = plan(tasks["light"], folder), plan(tasks["background"], folder)
    for assets, red in ((light, RED_LIGHT), (background, None)):
        scene = Path(assets.scene_xml)
        textures = root / "textures"
        _scene(scene, "/".join([".."] * len(scene.parent.relative_to(root).parts) + ["textures"]), red)
        for name in ("tile_grigia_caldera_porcelain_floor.png", "martin_novak_wood_table.png", "smooth_light_gray_plaster.png"):
            _png(textures / name, (128, 128, 128))
        _png(textures / assets.floor_texture, FLOOR)
        _png(textures / assets.wall_texture, WALL)
    for category, xml in plan(tasks["layout"], folder).objects:
        Path(xml).parent.mkdir(parents=True, exist_ok=True)
        Path(xml).write_text(_OBJECT.format(name=category))
        _png(Path(xml).parent.parent / "texture.png", (200, 150, 0))
    return tasks


def _cfg(folder: Path, tasks: dict[str, Any]) -> Any:
    train = {
        "simulator_type": "libero",
        "task_suite_name": SUITE,
        "num_envs": 3,
        "seed": 3,
        "settle_steps": 0,
        "init_params": {"camera_heights": 64, "camera_widths": 64, "camera_names": ["agentview", "robot0_eye_in_hand"]},
        "libero": {"plus": {"tasks": sorted(t.plus_id for t in tasks.values()), "trials": 1, "assets": str(folder)}},
    }
    return load_config(data={"train": train, "actor": {"model": {"num_action_chunks": 2, "action_dim": 7}}})


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Any]]]:
    root = tmp_path_factory.mktemp("liberoplus-assets")
    yield root, _write_folder(root)


def _texture(model: Any, name: str) -> np.ndarray:
    """The RGB pixels of texture ``name`` of a compiled model, ``[n, 3]``."""
    import mujoco

    i = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_TEXTURE, name)
    adr, n, c = model.tex_adr[i], model.tex_height[i] * model.tex_width[i], model.tex_nchannel[i]
    return np.asarray(model.tex_data[adr : adr + n * c]).reshape(n, c)[:, :3]


def test_light_background_and_add_tasks_build_and_step_from_the_folder(folder: tuple[Path, dict[str, Any]]) -> None:
    from envfleet_libero.env import LiberoEnv

    root, tasks = folder
    cfg = _cfg(root, tasks)
    env = LiberoEnv(cfg.train, EnvContext(num_envs=3, action_dim=7, num_action_chunks=2))
    try:
        order = {t.plus.name: t.index for t in env.suite.tasks}
        ids = [int(env.suite.first_id[order[tasks[d].name]]) for d in ("light", "background", "layout")]
        first = env.reset_envs_to_state_ids(np.array(ids))
        actions = np.zeros((3, 2, 7), dtype=np.float32)
        actions[..., -1] = -1.0
        out = env.chunk_step(actions)
        assert out.obs["full_image"].shape == (3, 64, 64, 3) and out.rewards.shape == (3, 2)
        # The BDDL's instruction, never the file name ("..._light_1").
        assert first.task_descriptions == [env.suite.tasks[order[tasks[d].name]].bddl_language for d in ("light", "background", "layout")]
        assert first.task_descriptions[0] == "pick the akita black bowl between the plate and the ramekin and place it on the plate"
        models = [sim.renv.sim.model for sim in env.sims]
        # The light task's scene is the folder's: its lights are red; the unperturbed scene's are white.
        import mujoco

        light_model = models[0]._model
        for name in ("light1", "light2"):
            np.testing.assert_allclose(
                light_model.light_diffuse[mujoco.mj_name2id(light_model, mujoco.mjtObj.mjOBJ_LIGHT, name)], RED_LIGHT
            )
        # Under it the grey scene looks red; the background task's, under LIBERO's white lights, does not.
        red, blue = (first.obs["full_image"][:2, ..., c].reshape(2, -1).mean(axis=1) for c in (0, 2))
        assert red[0] > 1.4 * blue[0] and red[1] < 1.2 * blue[1], (red, blue)
        # The background task's floor and wall are its styles' textures, from the folder.
        bg = models[1]._model
        assert (_texture(bg, "texplane") == FLOOR).all() and (_texture(bg, "tex-wall") == WALL).all()
        # The _add_ task: LIBERO-plus's two new objects, built from the folder, where its initial state puts them.
        layout = env.sims[2]
        for category, _ in plan(tasks["layout"], str(root)).objects:
            name = next(n for n in layout.renv.parsed_problem["objects"][category])
            body = layout.renv.objects_dict[name]
            assert body.category_name == category
            joint = layout.renv.sim.model.get_joint_qpos_addr(body.joints[-1])
            qpos = env.suite.tasks[order[tasks["layout"].name]].init_states[0][1 + joint[0] : 1 + joint[1]]
            assert np.abs(qpos[:3]).max() > 0.01  # a placed object, not the origin
        state = layout.renv.sim.get_state().flatten()
        assert state.shape == env.suite.tasks[order[tasks["layout"].name]].init_states[0].shape
    finally:
        env.close()


def test_a_file_the_folder_lacks_is_named(tmp_path: Path) -> None:
    root = tmp_path / "assets"
    tasks = _write_folder(root)
    # Complete, the folder is named in the fingerprint and by the doctor.
    from envfleet_libero.plugin import config_findings, protocol_parts

    train = _cfg(root, tasks).train
    assert protocol_parts(train)["plus"]["assets"] is True
    light = next(what for _, what, _ in config_findings(train) if what.startswith(f"{SUITE} light:"))
    assert light == f"{SUITE} light: 292 tasks run, 292 of them with LIBERO-plus's assets from {root}", light
    # A folder holding the zip's top folder, assets/, is taken as that folder.
    assert plan(tasks["light"], str(tmp_path)).scene_xml == plan(tasks["light"], str(root)).scene_xml
    # Another folder, one file short (a selection is checked once per process and folder).
    root = tmp_path / "short"
    _write_folder(root)
    texture = root / "textures" / plan(tasks["background"], str(root)).floor_texture
    texture.unlink()
    with pytest.raises(ConfigError, match=f"'train.libero.plus.assets' lacks {re.escape(str(texture))}, which LIBERO-plus task "):
        _cfg(root, tasks)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(
        ConfigError, match=r"lacks .*/scenes/lights/.*\.xml, which LIBERO-plus task \d+ \(.*_light_\d+, a light task\) needs"
    ):
        _cfg(empty, {"light": tasks["light"]})
