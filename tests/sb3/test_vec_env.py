"""The SB3 VecEnv shim on the toy: SB3's DummyVecEnv step by step, SB3's wrappers, PPO, restarts, bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, VecCheckNan, VecEnv, VecMonitor, VecTransposeImage

from envfleet.errors import ClosedEnvironmentError, InvalidInputError, LifecycleError
from envfleet.sb3 import make_vec_env

from ..conftest import own_segments, pid_alive
from ..gym.common import CHUNK, steer, toy_cfg
from ..gym.reference import StateWalk, ToyChunkEnv

SEED = 7
STEPS = 14


@pytest.fixture
def venv(no_leaks):
    env = make_vec_env(toy_cfg(), render_mode="rgb_array")
    yield env
    env.close()


def _same_obs(a: dict, b: dict, what: str) -> None:
    assert set(a) == set(b), what
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=f"{what}: {key}")


def test_steps_match_sb3s_dummy_vec_env(no_leaks) -> None:
    # SB3's own DummyVecEnv over single toy envs drawing from the same walk of initial states: SB3's
    # autoreset, terminal_observation and TimeLimit.truncated are its, and the shim must match them.
    cfg = toy_cfg()
    venv = make_vec_env(cfg)
    walk = StateWalk(np.arange(30), SEED)
    ref = DummyVecEnv([lambda: ToyChunkEnv(cfg.train, CHUNK, walk) for _ in range(3)])
    try:
        assert isinstance(venv, VecEnv) and venv.num_envs == 3
        assert venv.observation_space == ref.observation_space and venv.action_space == ref.action_space
        venv.seed(SEED)
        ref.seed(SEED)
        obs, ref_obs = venv.reset(), ref.reset()
        _same_obs(obs, ref_obs, "reset")
        assert [i["state_id"] for i in venv.reset_infos] == [i["state_id"] for i in ref.reset_infos]
        kinds = set()
        for t in range(STEPS):
            actions = steer(obs)
            obs, rew, dones, infos = venv.step(actions)
            ref_obs, ref_rew, ref_dones, ref_infos = ref.step(actions)
            _same_obs(obs, ref_obs, f"step {t}")
            np.testing.assert_array_equal(rew, ref_rew, err_msg=f"rewards at step {t}")
            assert rew.dtype == ref_rew.dtype and dones.dtype == ref_dones.dtype
            np.testing.assert_array_equal(dones, ref_dones, err_msg=f"dones at step {t}")
            for i in range(3):
                assert infos[i]["TimeLimit.truncated"] == ref_infos[i]["TimeLimit.truncated"], (t, i)
                assert ("terminal_observation" in infos[i]) == ("terminal_observation" in ref_infos[i]), (t, i)
                if ref_dones[i]:
                    _same_obs(infos[i]["terminal_observation"], ref_infos[i]["terminal_observation"], f"terminal obs {t}/{i}")
                    assert infos[i]["episode_length"] == ref_infos[i]["episode_length"]
                    assert venv.reset_infos[i]["state_id"] == ref.reset_infos[i]["state_id"]
                    kinds.add("trunc" if infos[i]["TimeLimit.truncated"] else "term")
        assert kinds == {"term", "trunc"}, "the walk should end episodes both ways"
    finally:
        venv.close()
        ref.close()


def test_ppo_drives_it_through_sb3s_wrappers(no_leaks, tmp_path, monkeypatch) -> None:
    # SB3's logger makes a folder for every learn(), in the system's temp directory unless told.
    monkeypatch.setenv("SB3_LOGDIR", str(tmp_path / "sb3"))
    # NatureCNN (MultiInputPolicy's image extractor) needs images of 36 pixels or more.
    cfg = toy_cfg(num_envs=2, max_steps=4 * CHUNK, **{"init_params.camera_heights": 36, "init_params.camera_widths": 36})
    venv = make_vec_env(cfg)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # on a loaded 2-core machine torch's threads make PPO's small updates ten times slower
    try:
        wrapped = VecMonitor(VecCheckNan(venv, raise_exception=True))
        model = PPO("MultiInputPolicy", wrapped, n_steps=32, batch_size=32, n_epochs=1, seed=0, device="cpu")
        assert isinstance(model.get_env(), VecTransposeImage)  # SB3 saw the uint8 HWC boxes as images
        model.learn(total_timesteps=128)
        assert model.num_timesteps >= 128 and model._n_updates == 2  # PPO's own counter
        # VecMonitor's episodes: 4 chunks each, as train.max_episode_steps makes them.
        assert len(model.ep_info_buffer) >= 14 and all(ep["l"] <= 4 for ep in model.ep_info_buffer)
        mean, _ = evaluate_policy(model, wrapped, n_eval_episodes=2, warn=False)
        assert np.isfinite(mean)
        assert (tmp_path / "sb3").is_dir()  # the folder went where the test said
    finally:
        torch.set_num_threads(threads)
        venv.close()


def test_seed_and_options_are_used_once(venv) -> None:
    venv.seed(3)
    venv.reset()
    first = [i["state_id"] for i in venv.reset_infos]
    venv.seed(3)
    venv.reset()
    assert [i["state_id"] for i in venv.reset_infos] == first
    venv.set_options([{"state_id": 5}, {"state_id": 6}, {"state_id": 7}])
    venv.reset()
    assert [int(i["state_id"]) for i in venv.reset_infos] == [5, 6, 7]
    venv.reset()  # the options went with the reset that used them
    assert [int(i["state_id"]) for i in venv.reset_infos] != [5, 6, 7]
    venv.set_options([{"state_id": 5}, {}, {}])
    with pytest.raises(InvalidInputError, match=r"'state_id' is set for some envs but not for envs \[1, 2\]"):
        venv.reset()
    venv.set_options({"difficulty": 2})
    with pytest.raises(InvalidInputError, match=r"unknown option\(s\) \['difficulty'\]"):
        venv.reset()


def test_attributes_methods_and_render(venv) -> None:
    assert venv.render_mode == "rgb_array" and venv.get_attr("render_mode") == ["rgb_array"] * 3
    assert venv.get_attr("num_envs", indices=[0, 2]) == [3, 3]
    assert not venv.has_attr("no_such_attribute")
    assert venv.env_is_wrapped(Monitor) == [False] * 3
    with pytest.raises(ValueError, match="all of them at once: leave indices out"):
        venv.set_attr("ignore_terminations", True, indices=[1])
    venv.set_attr("ignore_terminations", False)
    # The face's own methods: keep every new episode on states 0-2 (task 0).
    venv.env_method("set_walk", [0, 1, 2])
    venv.seed(0)
    venv.reset()
    assert sorted(int(i["state_id"]) for i in venv.reset_infos) == [0, 1, 2]
    frame = venv.render()
    image = venv.get_images()[0]
    assert frame is not None and frame.shape == (2 * image.shape[0], 2 * image.shape[1], 3)  # SB3 tiles 3 envs 2x2


def test_bad_calls_are_clear_and_leave_it_usable(venv) -> None:
    with pytest.raises(LifecycleError, match="reset"):
        venv.step(np.zeros((3, CHUNK, 7), np.float32))
    venv.reset()
    with pytest.raises(InvalidInputError, match=r"shape \[3, 3, 7\].*got \[3, 7\]"):
        venv.step(np.zeros((3, 7), np.float32))
    with pytest.raises(InvalidInputError, match="finite"):
        venv.step(np.full((3, CHUNK, 7), np.nan, np.float32))
    with pytest.raises(LifecycleError, match="step_async"):
        venv.step_wait()
    obs, _, _, infos = venv.step(np.zeros((3, CHUNK, 7), np.float32))
    assert obs["full_image"].shape == (3, 16, 16, 3) and len(infos) == 3


def test_options_go_to_the_gymnasium_face_and_autoreset_mode_is_refused(no_leaks) -> None:
    with pytest.raises(ValueError, match=r"autoreset_mode='next_step'.*SAME_STEP.*leave autoreset_mode out"):
        make_vec_env(toy_cfg(), autoreset_mode="next_step")
    with pytest.raises(ValueError, match="step must be one of"):
        make_vec_env(toy_cfg(), step="every")
    env = make_vec_env(toy_cfg(), step="action")
    try:
        assert env.action_space.shape == (7,) and env.vector_env.metadata["autoreset_mode"].name == "SAME_STEP"
    finally:
        env.close()


def test_a_crash_ends_the_episode_as_truncated_and_close_frees_everything(no_leaks) -> None:
    # exit_on_step=1: every shard process exits inside its second chunk, as a crashing simulator does.
    venv = make_vec_env(toy_cfg(envs_per_process=1, max_restarts=5, **{"toy.exit_on_step": 1}))
    obs = venv.reset()
    old = venv.vector_env.manager.shard_pids()
    venv.step(steer(obs))
    obs, _, dones, infos = venv.step(steer(obs))
    assert dones.all() and all(i["TimeLimit.truncated"] and i["sim_restarted"] for i in infos)
    assert all("terminal_observation" in i for i in infos)
    assert all(not pid_alive(p) for p in old)
    _, _, dones, _ = venv.step(steer(obs))  # the new episodes run on
    assert not dones.any()
    pids = venv.vector_env.manager.shard_pids()
    venv.close()
    venv.close()
    assert not any(pid_alive(p) for p in pids) and not own_segments()
    with pytest.raises(ClosedEnvironmentError):
        venv.reset()


def test_importing_the_shim_without_sb3_names_the_extra() -> None:
    import subprocess
    import sys

    code = "import sys; sys.modules['stable_baselines3'] = None\ntry:\n    import envfleet.sb3\nexcept ImportError as e:\n    print(type(e).__name__, e)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("MissingExtraError") and "pip install 'envfleet[sb3]'" in out
