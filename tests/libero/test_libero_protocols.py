"""The LIBERO backend's named protocols: each key each sets, against its source's values.

The values below were read from the cited evaluation code (repository, commit and file in
each protocol's yaml, and in docs/protocols.md) and are written here by hand, so that a
protocol file that drifts from its source fails here. Also: the protocol's keys reach the
loaded config, a key set twice is refused unless overridden on purpose, and the
protocol's name and version reach the fingerprint.
"""

from __future__ import annotations

from typing import Any

import pytest

from envfleet.config import load_config
from envfleet.errors import ConfigError
from envfleet.fingerprint import protocol
from envfleet.named_protocols import leaves
from envfleet.plugins import get_backend
from envfleet_libero.protocols import load_protocols

BOTH = ["agentview", "robot0_eye_in_hand"]
OPENVLA_STEPS = {"libero_spatial": 220, "libero_object": 280, "libero_goal": 300, "libero_10": 520, "libero_90": 400}

# name -> (source repo, commit, success metric, {dotted key: value}, {suite: horizon} or None)
EXPECTED: dict[str, tuple[str, str, str, dict[str, Any], dict[str, int] | None]] = {
    # openvla/openvla experiments/robot/libero/run_libero_eval.py + libero_utils.py
    "openvla": (
        "openvla/openvla",
        "c8f03f48af692657d3060c19588038c7220e9af9",
        "success_once",
        {
            "init_params.camera_heights": 256,  # get_libero_env(..., resolution=256)
            "init_params.camera_widths": 256,
            "init_params.camera_names": BOTH,  # OffScreenRenderEnv's default cameras
            "flip_images": True,  # img[::-1, ::-1]
            "settle_steps": 10,  # num_steps_wait = 10
            "seed": 0,  # env.seed(0)
            "action_transform": "openvla",  # normalize_gripper_action + invert_gripper_action
            "ignore_terminations": False,  # break on done
            "libero.instruction_source": "task_language",  # task.language
        },
        OPENVLA_STEPS,
    ),
    # moojink/openvla-oft experiments/robot/libero/run_libero_eval.py + libero_utils.py
    "openvla-oft": (
        "moojink/openvla-oft",
        "213c5ff8d6e9673885d7e4dd6f2ce73b5d8a45db",
        "success_once",
        {
            "init_params.camera_heights": 256,  # env_img_res = 256
            "init_params.camera_widths": 256,
            "init_params.camera_names": BOTH,  # num_images_in_input = 2
            "flip_images": True,
            "settle_steps": 10,
            "seed": 0,  # env.seed(0) in get_libero_env
            "action_transform": "openvla",  # process_action
            "ignore_terminations": False,
            "libero.instruction_source": "task_language",
        },
        OPENVLA_STEPS,  # TASK_MAX_STEPS
    ),
    # Physical-Intelligence/openpi examples/libero/main.py
    "openpi": (
        "Physical-Intelligence/openpi",
        "04a8d0c9e0efb3d3e047f585822a21df06b1d2d5",
        "success_once",
        {
            "init_params.camera_heights": 256,  # LIBERO_ENV_RESOLUTION
            "init_params.camera_widths": 256,
            "init_params.camera_names": BOTH,
            "flip_images": True,
            "settle_steps": 10,  # num_steps_wait
            "seed": 7,  # Args.seed, env.seed(args.seed)
            "action_transform": "none",
            "ignore_terminations": False,
            "libero.instruction_source": "task_language",
        },
        OPENVLA_STEPS,  # the same max_steps table
    ),
    # huggingface/lerobot src/lerobot/envs/libero.py, envs/configs.py, configs/eval.py
    "lerobot": (
        "huggingface/lerobot",
        "7427f31801f944f5ec9ce53cda02862ce7d1638b",
        "success_once",
        {
            "init_params.camera_heights": 360,  # LiberoEnv.observation_height
            "init_params.camera_widths": 360,
            "init_params.camera_names": BOTH,
            "flip_images": True,  # LiberoProcessorStep
            "settle_steps": 10,  # num_steps_wait
            "seed": 1000,  # EvalPipelineConfig.seed
            "action_transform": "none",
            "ignore_terminations": False,
            "libero.instruction_source": "task_language",
        },
        {**OPENVLA_STEPS, "libero_spatial": 280},  # TASK_SUITE_MAX_STEPS
    ),
    # RLinf/RLinf rlinf/envs/libero/libero_env.py + examples/embodiment/config/env/libero_*.yaml
    "rlinf": (
        "RLinf/RLinf",
        "a3816b596478dcd8a5c69a6ec1468c9519f77b5b",
        "success_once",
        {
            "init_params.camera_heights": 256,
            "init_params.camera_widths": 256,
            "init_params.camera_names": BOTH,
            "flip_images": True,
            "settle_steps": 15,  # for _ in range(15)
            "seed": 0,
            "ignore_terminations": False,
        },
        {"libero_spatial": 240, "libero_object": 240, "libero_goal": 320, "libero_10": 512, "libero_90": 512},
    ),
    # Zxy-MLlab/LIBERO-PRO libero/evaluation/runner.py + configs/eval.yaml
    "libero-pro": (
        "Zxy-MLlab/LIBERO-PRO",
        "8af465d0484b527efc320e4cdeb57890742394be",
        "success_once",
        {
            "init_params.camera_heights": 256,
            "init_params.camera_widths": 256,
            "init_params.camera_names": BOTH,
            "flip_images": True,  # the clients' [::-1, ::-1]
            "settle_steps": 10,  # warmup_steps
            "seed": 7,  # benchmark.seed
            "max_episode_steps": 300,  # rollout.max_steps
            "ignore_terminations": False,
            "libero.instruction_source": "bddl_language",  # env.language_instruction
        },
        None,
    ),
    # Lifelong-Robot-Learning/LIBERO libero/lifelong/metric.py + libero/configs
    "libero": (
        "Lifelong-Robot-Learning/LIBERO",
        "8f1084e3132a39270c3a13ebe37270a43ece2a01",
        "success_once",
        {
            "init_params.camera_heights": 128,  # data.img_h
            "init_params.camera_widths": 128,
            "init_params.camera_names": BOTH,
            "flip_images": False,
            "settle_steps": 5,  # for _ in range(5)
            "seed": 10000,
            "max_episode_steps": 600,  # eval.max_steps
            "action_transform": "none",
            "ignore_terminations": False,
            "libero.instruction_source": "task_language",
        },
        None,
    ),
}


def _load(**train: Any) -> Any:
    return load_config(data={"train": {"simulator_type": "libero", "task_suite_name": "libero_goal", **train}})


def test_every_shipped_protocol_is_tested() -> None:
    # libero-plus covers the libero_plus_* suites only: tests/libero_plus/test_plus_data.py checks it.
    assert set(load_protocols()) == set(EXPECTED) | {"libero-plus"}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_protocol_sets_its_sources_values(name: str) -> None:
    repo, commit, metric, keys, horizons = EXPECTED[name]
    proto = load_protocols()[name]
    assert proto["version"] == 1 and proto["success_metric"] == metric
    assert proto["sources"][0]["repo"] == repo and proto["sources"][0]["commit"] == commit
    assert leaves(proto["sets"]) == keys, f"{name}: the keys it sets differ from its source's"
    base = {s: e["max_episode_steps"] for s, e in (proto.get("by_suite") or {}).items() if s in OPENVLA_STEPS}
    assert (base or None) == horizons
    for suite in ("libero_goal", "libero_10_task", "libero_spatial_with_mug"):
        cfg = _load(task_suite_name=suite, protocol=name).train
        for key, value in keys.items():
            got = cfg
            for part in key.split("."):
                got = got[part]
            got = list(got) if isinstance(value, list) else got
            assert (str(got) if isinstance(value, str) else got) == value, f"{name} {suite}: train.{key}"
        want = horizons[suite.split("_with_")[0].removesuffix("_task")] if horizons else keys["max_episode_steps"]
        assert cfg.max_episode_steps == want, f"{name} {suite}: max_episode_steps"


def test_a_key_set_twice_is_refused_unless_overridden_on_purpose() -> None:
    with pytest.raises(
        ConfigError, match=r"'train.settle_steps' is 15, but protocol 'openvla' \(version 1\) sets 'train.settle_steps' to 10"
    ):
        _load(protocol="openvla", settle_steps=15)
    with pytest.raises(ConfigError, match="'train.init_params.camera_heights' is 128, but protocol 'openvla'"):
        _load(protocol="openvla", init_params={"camera_heights": 128})
    with pytest.raises(ConfigError, match="'train.libero.instruction_source' is 'bddl_language', but protocol 'openvla'"):
        _load(protocol="openvla", libero={"instruction_source": "bddl_language"})
    cfg = _load(protocol="openvla", settle_steps=15, protocol_overrides=["settle_steps"]).train
    assert cfg.settle_steps == 15 and cfg.seed == 0
    with pytest.raises(ConfigError, match="'train.protocol_overrides' lists 'render', which protocol 'openvla' does not set"):
        _load(protocol="openvla", render="all", protocol_overrides=["render"])
    with pytest.raises(ConfigError, match="'train.protocol' is 'openvla_oft', which is not a protocol of backend 'libero'.*openvla-oft"):
        _load(protocol="openvla_oft")
    with pytest.raises(ConfigError, match="'train.protocol_overrides' is set, but 'train.protocol' is not"):
        _load(protocol_overrides=["seed"])


def test_protocol_name_version_and_overrides_are_in_the_fingerprint() -> None:
    spec = get_backend("libero")
    plain = protocol(_load(protocol="openvla").train, spec, {})
    assert plain["named_protocol"] == {"name": "openvla", "version": 1, "success_metric": "success_once", "overrides": []}
    overridden = protocol(_load(protocol="openvla", seed=3, protocol_overrides=["seed"]).train, spec, {})
    assert overridden["named_protocol"]["overrides"] == ["seed"] and overridden["seed"] == 3
    assert "named_protocol" not in protocol(_load().train, spec, {})
