"""SAPIEN's BRDF lookup table computed once and shared, instead of once per process.

SAPIEN's renderer (svulkan2) computes a 512x512 BRDF lookup table (``R16G16Sfloat``)
in a compute shader before a process's first picture: about 11 CPU-seconds on Mesa's
lavapipe, most of what a ManiSkill process costs to start. It takes a texture named
``BRDFLUT`` in its place when a camera is given one. A table made any other way than
by that shader on that driver would give other pixels, so this module reads SAPIEN's
own table back: :func:`compute` renders one 512x512 picture whose every pixel is
the texel under it (``texelFetch``, no filtering) into a float32 target, in a fresh
process, and saves it as float16, bit for bit. With ``ENVFLEET_MANISKILL_BRDF_LUT``
naming that file, a shard hands it to every camera ManiSkill builds
(:func:`use_from_env`), and its first picture skips the computation.

The table belongs to the SAPIEN version and the Vulkan driver that computed it: share
it between processes of one machine and one install only. The ManiSkill tests compute
it once per test run and check that the images are bit-identical to ManiSkill run
alone without it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from typing import Any

import numpy as np

# Imports inside functions: SAPIEN and ManiSkill load in the process that renders (the shard, the doctor's
# child) only.

__all__ = ["LUT_ENV", "SIZE", "compute", "load", "use_from_env"]

#: The environment variable that names a table file for the shards of this machine.
LUT_ENV = "ENVFLEET_MANISKILL_BRDF_LUT"
#: svulkan2's table size (SVResourceManager::getDefaultBRDFLUT).
SIZE = 512

# A composite pass that writes the table, one texel per pixel. The declarations are the
# interface SAPIEN's "minimal" shader pack gives a composite pass (its scene set holds
# the BRDFLUT sampler at binding 8); only the main function is ours.
_READBACK = """#version 450
layout (constant_id = 0) const int NUM_DIRECTIONAL_LIGHTS = 3;
layout (constant_id = 1) const int NUM_POINT_LIGHTS = 3;
layout (constant_id = 2) const int NUM_DIRECTIONAL_LIGHT_SHADOWS = 1;
layout (constant_id = 3) const int NUM_POINT_LIGHT_SHADOWS = 1;
layout (constant_id = 4) const int NUM_TEXTURED_LIGHT_SHADOWS = 1;
layout (constant_id = 5) const int NUM_SPOT_LIGHT_SHADOWS = 1;
layout (constant_id = 6) const int NUM_SPOT_LIGHTS = 1;
#include "../common/lights.glsl"
layout(set = 0, binding = 0) uniform sampler2D samplerColorRaw;
layout(set = 0, binding = 1) uniform sampler2D samplerGbufferDepth;
layout(set = 1, binding = 0) uniform CameraBuffer {
  mat4 viewMatrix; mat4 projectionMatrix; mat4 viewMatrixInverse; mat4 projectionMatrixInverse;
  float width; float height;
} cameraBuffer;
layout(set = 2, binding = 0) uniform SceneBuffer {
  vec4 ambientLight; PointLight pointLights[10]; DirectionalLight directionalLights[3];
  SpotLight spotLights[10]; SpotLight texturedLights[1];
} sceneBuffer;
struct LightBuffer {
  mat4 viewMatrix; mat4 viewMatrixInverse; mat4 projectionMatrix; mat4 projectionMatrixInverse;
  int width; int height;
};
layout(set = 2, binding = 1) uniform ShadowBuffer {
  LightBuffer pointLightBuffers[60]; LightBuffer directionalLightBuffers[3];
  LightBuffer spotLightBuffers[10]; LightBuffer texturedLightBuffers[1];
} shadowBuffer;
layout(set = 2, binding = 2) uniform samplerCube samplerPointLightDepths[10];
layout(set = 2, binding = 3) uniform sampler2D samplerDirectionalLightDepths[3];
layout(set = 2, binding = 4) uniform sampler2D samplerSpotLightDepths[10];
layout(set = 2, binding = 5) uniform sampler2D samplerTexturedLightDepths[1];
layout(set = 2, binding = 6) uniform sampler2D samplerTexturedLightTextures[1];
layout(set = 2, binding = 7) uniform samplerCube samplerEnvironment;
layout(set = 2, binding = 8) uniform sampler2D samplerBRDFLUT;
layout(location = 0) in vec2 inUV;
layout(location = 0) out vec4 outColor;
void main() {
  outColor = vec4(texelFetch(samplerBRDFLUT, ivec2(gl_FragCoord.xy), 0).rg, 0.0, 1.0);
}
"""


def _read_back() -> np.ndarray:
    """SAPIEN's own table, computed in this process (which must not have rendered yet): float16 ``[512, 512, 2]``."""
    import sapien

    shaders = os.path.join(os.path.dirname(sapien.__file__), "vulkan_shader")
    # The pack is needed only until the picture is taken; the folder goes with the block.
    with tempfile.TemporaryDirectory(prefix="envfleet_brdf_", ignore_cleanup_errors=True) as root:
        pack = os.path.join(root, "readback")
        os.mkdir(pack)
        os.symlink(os.path.join(shaders, "common"), os.path.join(root, "common"))
        # The minimal pack's own geometry passes, unmodified; our composite pass reads the table.
        for name in ("gbuffer.vert", "gbuffer.frag", "composite.vert", "shadow.vert"):
            os.symlink(os.path.join(shaders, "minimal", name), os.path.join(pack, name))
        with open(os.path.join(pack, "composite0.frag"), "w") as fh:
            fh.write(_READBACK)
        scene = sapien.Scene()
        camera = sapien.render.RenderCameraComponent(SIZE, SIZE, pack)
        entity = sapien.Entity()
        entity.add_component(camera)
        scene.add_entity(entity)
        scene.update_render()
        camera.take_picture()
        picture = np.asarray(camera.get_picture("Color"))[..., :2]
    table = picture.astype(np.float16)
    if picture.dtype != np.float32 or not np.array_equal(table.astype(np.float32), picture):
        raise RuntimeError(f"SAPIEN's BRDF table did not read back as float16 values (picture dtype {picture.dtype})")
    return np.ascontiguousarray(table)


def compute(path: str, python: str = sys.executable, timeout: float = 600.0) -> str:
    """Compute SAPIEN's table in a fresh process (``python``) and save it to ``path`` (``.npy``); returns ``path``."""
    tmp = f"{path}.{os.getpid()}.npy"
    proc = subprocess.run(
        [python, "-m", "envfleet_maniskill.brdf_lut", tmp], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    if proc.returncode != 0:
        raise RuntimeError(f"computing SAPIEN's BRDF table failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    os.replace(tmp, path)
    return path


def load(path: str) -> np.ndarray:
    """The table saved in ``path``; a clear error when it is not one."""
    table = np.load(path)
    if table.shape != (SIZE, SIZE, 2) or table.dtype != np.float16:
        raise ValueError(
            f"{LUT_ENV}={path} holds a {table.dtype} array of shape {table.shape}, not SAPIEN's BRDF table "
            f"(float16 [{SIZE}, {SIZE}, 2]): make it with `python -m envfleet_maniskill.brdf_lut {path}`, or unset {LUT_ENV}"
        )
    return np.ascontiguousarray(table)


def use_from_env() -> str:
    """Give every camera ManiSkill builds in this process the table ``$ENVFLEET_MANISKILL_BRDF_LUT`` names; returns the path ('' if unset).

    Call after ``import mani_skill.envs`` and before any env is made. Cameras get the
    texture when ManiSkill builds them (``BaseEnv._reconfigure``), before their first picture.
    """
    path = os.environ.get(LUT_ENV, "")
    if not path:
        return ""
    import sapien
    from mani_skill.envs.sapien_env import BaseEnv

    table = load(path)
    if getattr(BaseEnv._reconfigure, "_envfleet_lut", None) == path:
        return path
    original = getattr(BaseEnv._reconfigure, "_envfleet_original", BaseEnv._reconfigure)
    texture: list[Any] = []  # made after ManiSkill has chosen the render device

    def _reconfigure(self: Any, options: Any = None) -> None:
        original(self, {} if options is None else options)
        if not texture:
            texture.append(sapien.render.RenderTexture(table, 2, "R16G16Sfloat", 1, "linear", "edge"))
        cameras = [getattr(s, "camera", None) for s in self._sensors.values()]
        cameras += [getattr(c, "camera", None) for c in self._human_render_cameras.values()]
        for camera in cameras:
            for component in getattr(camera, "_render_cameras", []):
                component.set_texture("BRDFLUT", texture[0])

    _reconfigure._envfleet_lut = path  # type: ignore[attr-defined]
    _reconfigure._envfleet_original = original  # type: ignore[attr-defined]
    BaseEnv._reconfigure = _reconfigure  # type: ignore[method-assign]
    return path


if __name__ == "__main__":
    from .device import default_icd

    os.environ.setdefault("VK_ICD_FILENAMES", default_icd())  # before sapien is imported
    np.save(sys.argv[1], _read_back())
