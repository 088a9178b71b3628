"""Config: verl layout, backend sections, errors that name the key."""

from __future__ import annotations

import pytest

from envfleet.config import load_config
from envfleet.errors import ConfigError, UnknownBackendError

VERL_ENV_YAML = """
env:
  rollout:
    pipeline_stage_num: 2
  actor:
    model:
      num_action_chunks: 8
      action_dim: 7
  train:
    simulator_type: toy
    max_episode_steps: 512
    reward_coef: 1.0
    only_eval: False
    video_cfg:
      save_video: True
      video_base_dir: /tmp/videos
    num_envs: 16
    seed: 42
    task_suite_name: libero_10
    isaac_server_mode: False
    num_tasks: 10
    group_size: 16
    init_params:
      camera_depths: False
      camera_heights: 256
      camera_widths: 256
      camera_names:
        - agentview
        - robot0_eye_in_hand
    profiler:
      tool: ${oc.select:global_profiler.tool,null}
      enable: False
  disagg_sim:
    enable: False
    nnodes: 1
"""


def test_verl_style_yaml_loads(tmp_path) -> None:
    path = tmp_path / "verl.yaml"
    path.write_text(VERL_ENV_YAML)
    cfg = load_config(path)
    assert cfg.train.num_envs == 16
    assert cfg.rollout.pipeline_stage_num == 2
    assert cfg.actor.model.num_action_chunks == 8
    assert list(cfg.train.init_params.camera_names) == ["agentview", "robot0_eye_in_hand"]
    assert cfg.train.toy.num_tasks == 3  # the backend section gets its defaults
    assert cfg.val.num_envs == 16  # val defaults to train


def test_overrides_apply_last(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("train: {simulator_type: toy, num_envs: 4}\n")
    cfg = load_config(path, ["train.num_envs=2", "train.toy.step_cost_s=0.01", "val.num_envs=1"])
    assert cfg.train.num_envs == 2 and cfg.train.toy.step_cost_s == 0.01
    assert cfg.val.num_envs == 1 and cfg.val.simulator_type == "toy"


def test_backend_defaults_apply_under_user_values() -> None:
    cfg = load_config(data={"train": {"simulator_type": "toy"}})
    assert cfg.train.init_params.camera_heights == 64
    cfg = load_config(data={"train": {"simulator_type": "toy", "init_params": {"camera_heights": 32}}})
    assert cfg.train.init_params.camera_heights == 32


def test_misspelt_key_names_it_and_suggests() -> None:
    with pytest.raises(ConfigError, match=r"unknown config key 'train.num_env'.*Did you mean 'train.num_envs'\?"):
        load_config(data={"train": {"simulator_type": "toy", "num_env": 4}})


def test_misspelt_nested_key() -> None:
    with pytest.raises(ConfigError, match=r"'train.video_cfg.save_vdieo'.*'train.video_cfg.save_video'"):
        load_config(overrides=["train.simulator_type=toy", "train.video_cfg.save_vdieo=true"])


def test_misspelt_backend_key() -> None:
    with pytest.raises(ConfigError, match=r"'train.toy.num_task'.*'train.toy.num_tasks'"):
        load_config(overrides=["train.simulator_type=toy", "train.toy.num_task=3"])


def test_wrong_type_names_key_and_type() -> None:
    with pytest.raises(ConfigError, match=r"'train.num_envs'.*four.*expected int"):
        load_config(overrides=["train.simulator_type=toy", "train.num_envs=four"])


def test_bad_value_of_switch() -> None:
    with pytest.raises(ConfigError, match=r"'train.render' must be one of \['last', 'all'\], got 'sometimes'"):
        load_config(overrides=["train.simulator_type=toy", "train.render=sometimes"])
    with pytest.raises(ConfigError, match=r"'train.action_transform' must be one of \['none', 'openvla'\], got 'OpenVLA'"):
        load_config(overrides=["train.simulator_type=toy", "train.action_transform=OpenVLA"])


def test_switches_are_enums_that_compare_as_their_strings() -> None:
    from envfleet.config import ActionTransform, RenderMode

    cfg = load_config(overrides=["train.simulator_type=toy", "train.render=all"])
    assert cfg.train.render is RenderMode.all and cfg.train.render == "all" and str(cfg.train.render) == "all"
    assert cfg.train.action_transform is ActionTransform.none and f"{cfg.train.action_transform}" == "none"


def test_section_for_another_backend() -> None:
    # 'libero' may not be installed where this runs, so the list of known backends is given.
    from envfleet import config as config_mod
    from envfleet.plugins import get_backend

    with pytest.raises(ConfigError, match=r"'train.libero' is for backend 'libero'.*simulator_type is 'toy'"):
        config_mod._load_section("train", {"simulator_type": "toy", "libero": {}}, get_backend, ["toy", "libero"])


def test_unknown_backend() -> None:
    with pytest.raises(UnknownBackendError, match="Did you mean 'toy'"):
        load_config(overrides=["train.simulator_type=toyy"])


def test_missing_file() -> None:
    with pytest.raises(ConfigError, match="config file not found: 'nope.yaml'"):
        load_config("nope.yaml")


def test_override_without_equals() -> None:
    with pytest.raises(ConfigError, match="key=value"):
        load_config(overrides=["train.simulator_type"])


def test_simulator_type_required() -> None:
    with pytest.raises(ConfigError, match="simulator_type' is required"):
        load_config(overrides=["train.num_envs=2"])


def test_action_dim_must_match_backend() -> None:
    with pytest.raises(ConfigError, match="action_dim.*6.*7"):
        load_config(overrides=["train.simulator_type=toy", "actor.model.action_dim=6"])


def test_action_dim_defaults_to_the_backends() -> None:
    from envfleet.env import ArraySpec
    from envfleet.plugins import BackendSpec

    spec = BackendSpec(
        name="arm4",
        env_factory="x:y",
        observation_spec=lambda cfg, n: {"state": ArraySpec((4,), "float32")},
        action_dim=4,
        api_version="2.0",
    )
    lookup = {"arm4": spec}.__getitem__
    assert load_config(overrides=["train.simulator_type=arm4"], backend_lookup=lookup).actor.model.action_dim == 4
    with pytest.raises(ConfigError, match="'actor.model.action_dim' is 7, but backend 'arm4' takes actions of size 4"):
        load_config(overrides=["train.simulator_type=arm4", "actor.model.action_dim=7"], backend_lookup=lookup)


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("train.flip_images=true", "'train.flip_images' is True, but backend 'toy' (package envfleet-toy) does not implement it"),
        ("train.settle_steps=3", "'train.settle_steps' is 3, but backend 'toy' (package envfleet-toy) does not implement it"),
        (
            "train.action_transform=openvla",
            "'train.action_transform' is 'openvla', but backend 'toy' (package envfleet-toy) does not implement it",
        ),
    ],
    ids=["flip", "settle", "action-transform"],
)
def test_an_optional_key_the_backend_does_not_implement_is_an_error(override, fragment) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(overrides=["train.simulator_type=toy", override])
    assert fragment in str(info.value) and "it implements auto_reset, ignore_terminations, render" in str(info.value)


def test_optional_keys_at_their_neutral_value_need_nothing() -> None:
    from envfleet.env import ArraySpec
    from envfleet.plugins import BackendSpec

    bare = BackendSpec(
        name="bare", env_factory="x:y", observation_spec=lambda cfg, n: {"state": ArraySpec((2,), "float32")}, api_version="2.0"
    )
    lookup = {"bare": bare}.__getitem__
    cfg = load_config(overrides=["train.simulator_type=bare", "train.auto_reset=false", "train.render=last"], backend_lookup=lookup)
    assert cfg.train.auto_reset is False and cfg.train.flip_images is False and cfg.train.settle_steps == 0
    for override in ("train.auto_reset=true", "train.render=all", "train.ignore_terminations=true"):
        with pytest.raises(ConfigError, match="does not implement it .*it implements none of them"):
            load_config(overrides=["train.simulator_type=bare", override], backend_lookup=lookup)
    with pytest.raises(ValueError, match=r"implements \['fly'\], which are not optional keys"):
        BackendSpec(name="bad", env_factory="x:y", observation_spec=lambda cfg, n: {}, implements={"fly"})


def test_values_are_never_evaluated_as_code(tmp_path) -> None:
    marker = tmp_path / "pwned"
    cfg = load_config(overrides=["train.simulator_type=toy", f"train.task_name=__import__('os').system('touch {marker}')"])
    assert cfg.train.task_name.startswith("__import__")
    assert not marker.exists()
