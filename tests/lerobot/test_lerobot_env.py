"""envfleet behind LeRobot 0.6.1, checked with LeRobot's own code, unmodified: its plugin discovery,
its env registry and factory, its CLI parser, and lerobot-eval's ``rollout`` / ``eval_policy_all``
driving the toy backend with a small real ``PreTrainedPolicy`` (tests/lerobot/policy.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import draccus
import gymnasium as gym
import numpy as np
import pytest
import torch
from lerobot.envs import close_envs, preprocess_observation
from lerobot.envs.configs import EnvConfig
from lerobot.envs.factory import make_env, make_env_config, make_env_pre_post_processors
from lerobot.processor import PolicyProcessorPipeline
from lerobot.processor.converters import policy_action_to_transition, transition_to_policy_action
from lerobot.scripts.lerobot_eval import eval_policy_all, rollout
from lerobot.utils.import_utils import register_third_party_plugins

from envfleet.errors import ConfigError, InvalidInputError
from envfleet.gym import EnvfleetVectorEnv

from ..conftest import own_segments, pid_alive
from .policy import Reacher, ReacherConfig

SIZE = 24
HORIZON = 60  # the reacher reaches every toy goal within it
TOY = [f"train.init_params.camera_heights={SIZE}", f"train.init_params.camera_widths={SIZE}", "train.toy.states_per_task=4"]


@pytest.fixture(autouse=True, scope="module")
def plugins():
    """What lerobot-eval does before it parses ``--env.*``."""
    register_third_party_plugins()


def toy_env_config(**fields: object) -> EnvConfig:
    fields = {"backend": "toy", "episode_length": HORIZON, "overrides": list(TOY), **fields}
    return make_env_config("envfleet", **fields)


def identity() -> PolicyProcessorPipeline:
    return PolicyProcessorPipeline(steps=[])


def action_identity() -> PolicyProcessorPipeline:
    """The policy postprocessor's shape (a tensor in and out), with no step."""
    return PolicyProcessorPipeline(steps=[], to_transition=policy_action_to_transition, to_output=transition_to_policy_action)


def test_lerobot_discovers_the_plugin_and_its_registry_builds_the_config():
    sys.modules.pop("lerobot_env_envfleet", None)
    register_third_party_plugins()  # LeRobot's own discovery: imports installed lerobot_env_* distributions
    assert "lerobot_env_envfleet" in sys.modules
    assert "envfleet" in EnvConfig.get_known_choices()
    cfg = toy_env_config()
    assert cfg.type == "envfleet"
    assert set(cfg.features) == {"action", "pixels/image", "pixels/image2", "agent_pos"}
    assert cfg.features["pixels/image"].shape == (SIZE, SIZE, 3)
    assert cfg.features["agent_pos"].shape == (8,)
    assert cfg.features_map == {
        "action": "action",
        "pixels/image": "observation.images.image",
        "pixels/image2": "observation.images.image2",
        "agent_pos": "observation.state",
    }
    # The processors lerobot-eval asks for: identity (envfleet's LIBERO images are already flipped).
    pre, post = make_env_pre_post_processors(cfg, None)
    assert pre.steps == [] and post.steps == []


def test_lerobot_cli_parses_env_type_envfleet():
    @dataclass
    class Cli:
        env: EnvConfig

    args = [
        "--env.type=envfleet",
        "--env.backend=toy",
        f"--env.episode_length={HORIZON}",
        "--env.n_action_steps=4",
        f"--env.overrides=[{','.join(TOY)}]",
        "--env.task_ids=[0,2]",
    ]
    cli = draccus.parse(config_class=Cli, args=args)
    assert cli.env.type == "envfleet"
    assert cli.env.n_action_steps == 4 and cli.env.task_ids == [0, 2] and cli.env.overrides == TOY


def test_bad_fields_are_clear_errors_before_any_process():
    with pytest.raises(ConfigError, match="train.toy.no_such_key"):
        toy_env_config(overrides=["train.toy.no_such_key=1"])
    with pytest.raises(ValueError, match="n_action_steps"):
        toy_env_config(n_action_steps=0)
    with pytest.raises(ValueError, match="max_parallel_tasks"):
        toy_env_config(max_parallel_tasks=2)
    with pytest.raises(ValueError, match="autoreset_mode"):
        toy_env_config(autoreset_mode="Disabled")


def test_make_env_gives_envfleet_vector_envs_per_task(no_leaks):
    envs = make_env(toy_env_config(), n_envs=2)
    try:
        assert list(envs) == ["toy"] and sorted(envs["toy"]) == [0, 1, 2]  # every task of the suite
        env = envs["toy"][1]
        assert isinstance(env, gym.vector.VectorEnv) and env.num_envs == 2
        assert env.single_action_space.shape == (7,)
        obs, infos = env.reset(seed=[0, 1], options={"lerobot_new_rollout": True})
        assert isinstance(env._fleet, EnvfleetVectorEnv)
        assert obs["pixels"]["image"].shape == (2, SIZE, SIZE, 3) and obs["pixels"]["image"].dtype == np.uint8
        assert obs["pixels"]["image2"].shape == (2, SIZE, SIZE, 3)
        assert obs["agent_pos"].shape == (2, 8) and obs["agent_pos"].dtype == np.float32
        assert env.observation_space.contains(obs)
        # The task's fixed initial states, in LeRobot's LIBERO order: env i's k-th episode is trial i + k*n.
        assert infos["state_id"].tolist() == [4, 5]  # task 1 holds state ids 4..7
        assert env.reset()[1]["state_id"].tolist() == [6, 7]
        assert env.reset()[1]["state_id"].tolist() == [4, 5]  # 4 trials: the order wraps
        assert env.call("task_description") == ("reach the green goal (task 1)",) * 2
        assert env.call("_max_episode_steps") == (HORIZON, HORIZON)
        assert [f.shape for f in env.call("render")] == [(SIZE, SIZE, 3)] * 2
        lerobot_obs = preprocess_observation(obs)  # LeRobot's own key mapping
        assert set(lerobot_obs) == {"observation.images.image", "observation.images.image2", "observation.state"}
        assert lerobot_obs["observation.images.image"].shape == (2, 3, SIZE, SIZE)
        assert lerobot_obs["observation.state"].dtype == torch.float32
        with pytest.raises(InvalidInputError, match=r"\[2, 7\]"):
            env.step(np.zeros((2, 8), np.float32))
        _, reward, terminated, truncated, _ = env.step(np.zeros((2, 7), np.float32))  # the env stays usable
        assert reward.shape == (2,) and not terminated.any() and not truncated.any()
    finally:
        close_envs(envs)
    assert all(e.closed for e in envs["toy"].values())


def test_unknown_task_id_is_a_clear_error(no_leaks):
    envs = make_env(toy_env_config(task_ids=[7]), n_envs=1)
    with pytest.raises(InvalidInputError, match=r"task 7 is not one of the suite's tasks \[0, 1, 2\]"):
        envs["toy"][7].reset()
    close_envs(envs)


@pytest.mark.parametrize("autoreset_mode", ["NextStep", "SameStep"])
def test_lerobot_eval_reports_per_episode_success_and_per_task_aggregates(no_leaks, autoreset_mode):
    """lerobot-eval's eval_policy_all over two toy tasks: the reacher succeeds everywhere, a still policy nowhere."""
    results = {}
    for gain in (1.0, 0.0) if autoreset_mode == "NextStep" else (1.0,):
        envs = make_env(toy_env_config(task_ids=[0, 2], autoreset_mode=autoreset_mode), n_envs=2)
        policy = Reacher(ReacherConfig(gain=gain, device="cpu"))
        results[gain] = eval_policy_all(envs, policy, identity(), identity(), identity(), action_identity(), n_episodes=3, start_seed=0)
        close_envs(envs)
    good = results[1.0]
    assert [(t["task_group"], t["task_id"]) for t in good["per_task"]] == [("toy", 0), ("toy", 2)]
    for task in good["per_task"]:
        assert task["metrics"]["successes"] == [True, True, True]  # 3 episodes of 2 envs: 2 batches, the 4th dropped
        assert all(r > 0 for r in task["metrics"]["sum_rewards"])
    assert good["overall"]["pc_success"] == 100.0 and good["overall"]["n_episodes"] == 6
    assert good["per_group"]["toy"]["pc_success"] == 100.0 and good["per_group"]["toy"]["n_episodes"] == 6
    if 0.0 in results:  # success is measured, not assumed: a policy that stands still never succeeds
        assert results[0.0]["overall"]["pc_success"] == 0.0
        assert all(t["metrics"]["successes"] == [False] * 3 for t in results[0.0]["per_task"])


def test_n_action_steps_runs_chunks_with_the_same_episodes(no_leaks):
    """A chunking policy read every 4 steps gives the same episodes with n_action_steps=4 (one envfleet
    chunk of 4, rendered once) as stepping one action at a time (every step rendered)."""
    out = {}
    for n in (1, 4):
        envs = make_env(toy_env_config(task_ids=[1], n_action_steps=n), n_envs=2)
        env = envs["toy"][1]
        policy = Reacher(ReacherConfig(n_action_steps=4, device="cpu"))
        data = rollout(env, policy, identity(), identity(), identity(), action_identity(), seeds=[0, 1], return_observations=True)
        out[n] = (data, policy.observations_read, env._fleet.manager.stats.calls)
        close_envs(envs)
    (one, read_one, calls_one), (four, read_four, calls_four) = out[1], out[4]
    assert 2 * calls_four < calls_one  # a chunk of 4 per simulator call, rendered once, instead of 4 calls
    ends_one = one["done"].int().argmax(dim=1)  # the step each episode ended at
    ends_four = four["done"].int().argmax(dim=1)
    # With n=4 the end is reported at the last step of the chunk that holds it.
    assert torch.equal((ends_one // 4) * 4 + 3, ends_four)
    for b in range(2):  # until its episode ends, each env sees and does the same
        end = int(ends_one[b]) + 1
        assert torch.equal(one["action"][b, :end], four["action"][b, :end])
        for key in ("observation.images.image", "observation.state"):  # the observations the policy read
            assert torch.equal(one["observation"][key][b, :end:4], four["observation"][key][b, :end:4])
        assert torch.equal(one["reward"][b, :end].sum(), four["reward"][b, : int(ends_four[b]) + 1].sum())
    assert torch.equal(one["success"].any(dim=1), four["success"].any(dim=1)) and four["success"].any(dim=1).all()
    assert read_four <= read_one


def test_nothing_leaks_after_an_eval(no_leaks):
    before = own_segments()
    envs = make_env(toy_env_config(task_ids=[0]), n_envs=2)
    env = envs["toy"][0]
    env.reset()
    pids = set(env._fleet.manager.shard_pids())
    close_envs(envs)
    env.close()  # twice is safe

    assert pids and not any(pid_alive(p) for p in pids)
    assert own_segments() <= before


def test_autoresets_stay_on_the_task(no_leaks):
    envs = make_env(toy_env_config(task_ids=[2], episode_length=2), n_envs=2)
    env = envs["toy"][2]
    try:
        env.reset(seed=[3, 4])
        for _ in range(2):
            _, _, terminated, truncated, _ = env.step(np.zeros((2, 7), np.float32))
        assert (terminated | truncated).all()
        for _ in range(3):  # NextStep: the next step resets them, to initial states of task 2 (ids 8..11)
            _, _, _, _, infos = env.step(np.zeros((2, 7), np.float32))
            if "state_id" in infos and infos["_state_id"].any():
                assert set(infos["state_id"][infos["_state_id"]].tolist()) <= {8, 9, 10, 11}
        with pytest.raises(InvalidInputError, match=r"state ids \[99\]"):
            env._fleet.set_walk([8, 99])
        env.step(np.zeros((2, 7), np.float32))  # still usable
    finally:
        close_envs(envs)


def test_lerobot_eval_command_line_with_a_local_act_checkpoint(tmp_path):
    """docs/faces/lerobot.md's command, run as a user runs it, with a real LeRobot policy (ACT, initialised
    here and saved as a local checkpoint: no hub weights can be fetched here, so it is untrained)."""
    from lerobot.policies import make_policy, make_pre_post_processors
    from lerobot.policies.act.configuration_act import ACTConfig

    size = 32
    overrides = [f"train.init_params.camera_heights={size}", f"train.init_params.camera_widths={size}"]
    env_cfg = toy_env_config(episode_length=8, overrides=overrides)
    act = ACTConfig(
        pretrained_backbone_weights=None,  # torchvision's ImageNet weights would be a download
        device="cpu",
        chunk_size=4,
        n_action_steps=4,
        dim_model=32,
        dim_feedforward=64,
        n_encoder_layers=1,
        n_decoder_layers=1,
        n_heads=2,
        use_vae=False,
    )
    checkpoint = tmp_path / "act"
    make_policy(act, env_cfg=env_cfg).save_pretrained(checkpoint)
    for pipeline in make_pre_post_processors(act, dataset_stats=None):
        pipeline.save_pretrained(checkpoint)
    out = tmp_path / "eval"
    command = [
        str(Path(sys.executable).with_name("lerobot-eval")),
        f"--policy.path={checkpoint}",
        "--policy.device=cpu",
        "--env.type=envfleet",
        "--env.backend=toy",
        "--env.task_ids=[1]",
        "--env.episode_length=8",
        "--env.n_action_steps=4",
        f"--env.overrides=[{','.join(overrides)}]",
        "--eval.batch_size=2",
        "--eval.n_episodes=2",
        f"--output_dir={out}",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    info = json.loads((out / "eval_info.json").read_text())
    assert [(t["task_group"], t["task_id"]) for t in info["per_task"]] == [("toy", 1)]
    assert info["overall"]["n_episodes"] == 2 and len(info["per_task"][0]["metrics"]["successes"]) == 2
    videos = info["overall"]["video_paths"]  # lerobot-eval's videos, from env.call("render")
    assert len(videos) == 2 and all(Path(v).stat().st_size > 0 for v in videos)


def test_the_episode_horizon_comes_from_the_config_else_the_backends_spec() -> None:
    from lerobot_env_envfleet.vector_env import episode_bound

    from envfleet.config import load_config
    from envfleet_toy.plugin import DEFAULT_MAX_EPISODE_STEPS

    assert episode_bound(load_config(overrides=["train.simulator_type=toy", "train.max_episode_steps=7"])) == 7
    assert episode_bound(load_config(overrides=["train.simulator_type=toy"])) == DEFAULT_MAX_EPISODE_STEPS


def test_a_realtime_config_runs_behind_lerobot_and_its_infos_say_what_ran(no_leaks):
    realtime = ["train.execution.mode=realtime", "train.execution.delay=1"]
    envs = make_env(toy_env_config(n_action_steps=4, overrides=[*TOY, *realtime]), n_envs=2)
    try:
        env = envs["toy"][0]
        env.reset(seed=[0, 1], options={"lerobot_new_rollout": True})
        delays, applied = [], []
        for chunk in range(3):
            for k in range(4):
                action = np.full((2, 7), 0.1 * (4 * chunk + k), np.float32)
                _, _, _, _, infos = env.step(action)
            delays.append(infos["action_delay"].tolist())
            applied.append(infos["applied_action"])
        assert delays == [[0, 0], [1, 1], [1, 1]]  # the first chunk after the reset arrives at once
        # The second chunk (actions 0.4..0.7) arrived a sub-step late: the first chunk's last action (0.3) held.
        np.testing.assert_allclose(applied[1][:, :, 0], [[0.3, 0.5, 0.6, 0.7]] * 2, rtol=1e-6)
    finally:
        close_envs(envs)
