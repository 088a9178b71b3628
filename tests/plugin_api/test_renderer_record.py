"""What rendered a run's images, recorded by a real MuJoCo shard (envfleet-reacher on Mesa's EGL
and OSMesa): the record, the conformance check of ``BackendSpec.renderer``, and ``envfleet compare``
refusing runs rendered differently (the NVIDIA record is given: this machine has no GPU)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from envfleet.config import load_config
from envfleet.fingerprint import fingerprint, protocol
from envfleet.plugins import get_backend
from envfleet.shards.manager import ProcessEnvManager
from envfleet.testing import EnvConformance
from envfleet_ray.commands.compare import compare

OVERRIDES = ["actor.model.num_action_chunks=2", "actor.model.action_dim=2"]
GIVEN_NVIDIA = {
    "mujoco_gl": "egl",
    "pyopengl_platform": "egl",
    "gl_vendor": "NVIDIA Corporation",
    "gl_renderer": "NVIDIA H200/PCIe/SSE2",
    "gl_version": "4.6.0 NVIDIA 580.159.04",
    "rasterizer": "GPU",
    "render_stack": "mujoco",
}


def _manager(monkeypatch, platform: str, **spec_changes: object) -> ProcessEnvManager:
    monkeypatch.setenv("MUJOCO_GL", platform)
    monkeypatch.setenv("PYOPENGL_PLATFORM", platform)
    cfg = load_config(data={"train": {"simulator_type": "reacher", "num_envs": 2}}, overrides=OVERRIDES)
    spec = dataclasses.replace(get_backend("reacher"), **spec_changes) if spec_changes else None
    return ProcessEnvManager(cfg, backend=spec)


@pytest.mark.parametrize("platform", ["egl", "osmesa"])
def test_a_mujoco_shard_records_its_rasterizer(monkeypatch, platform) -> None:
    with _manager(monkeypatch, platform) as mgr:
        mgr.start_simulator()
        mgr.reset_envs_to_state_ids(np.array([0, 1]))
        info = mgr.renderer_info()
    assert info["mujoco_gl"] == platform and info["render_stack"] == "mujoco"
    assert "llvmpipe" in info["gl_renderer"] and info["rasterizer"] == "CPU rasterizer"


def test_compare_refuses_runs_rendered_differently_naming_the_renderer(monkeypatch) -> None:
    with _manager(monkeypatch, "egl") as mgr:
        mgr.start_simulator()
        mgr.reset_envs_to_state_ids(np.array([0, 1]))
        here = mgr.renderer_info()
    cfg = load_config(data={"train": {"simulator_type": "reacher", "num_envs": 2}}, overrides=OVERRIDES)
    spec = get_backend("reacher")
    rows = {"0": {"episodes": 10, "successes": 6, "successes_at_end": 5, "description": "reach"}}
    a = {"policy": "p", "per_task": rows, "fingerprint": fingerprint(protocol(cfg.train, spec, here), [0, 1])}
    b = {"policy": "p", "per_task": rows, "fingerprint": fingerprint(protocol(cfg.train, spec, GIVEN_NVIDIA), [0, 1])}
    code, lines = compare(a, b)
    assert code == 1
    named = [line for line in lines if "rendered differently" in line]
    assert named and "A CPU rasterizer (Mesa" in named[0] and "B GPU (NVIDIA Corporation, NVIDIA H200/PCIe/SSE2)" in named[0]
    assert "  differs: renderer.rasterizer: A CPU rasterizer | B GPU" in lines
    assert compare(a, a)[0] == 0


def test_conformance_fails_a_plugin_of_api_2_rendering_without_declaring_it(monkeypatch) -> None:
    with _manager(monkeypatch, "egl", api_version="2.0", implements=frozenset({"render"})) as mgr:
        mgr.start_simulator()
        with pytest.raises(pytest.fail.Exception, match="renders through mujoco on llvmpipe.*register it with renderer='mujoco'"):
            EnvConformance().test_declares_its_renderer(mgr)
    with _manager(monkeypatch, "egl", api_version="2.0", implements=frozenset({"render"}), renderer="mujoco") as mgr:
        mgr.start_simulator()
        EnvConformance().test_declares_its_renderer(mgr)  # declared: nothing to say
