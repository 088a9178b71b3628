"""SB3 on a gymnasium env's own spaces through envfleet, code unchanged from DummyVecEnv's: PPO's ``MlpPolicy``
learns CartPole-v1 with rl-zoo's hyperparameters, DQN runs, and a Discrete observation (FrozenLake) is one-hot
encoded by SB3 itself."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import pytest
import torch
from stable_baselines3 import DQN, PPO
from stable_baselines3.common.callbacks import EvalCallback, StopTrainingOnRewardThreshold
from stable_baselines3.common.evaluation import evaluate_policy

from envfleet.sb3 import make_vec_env

SEED = 0


def _cfg(env_id: str, num_envs: int, seed: int = SEED) -> dict[str, Any]:
    return {"train": {"simulator_type": "gymnasium", "num_envs": num_envs, "seed": seed, "gymnasium": {"id": env_id}}}


def _linear(value: float) -> Any:
    """rl-zoo's ``lin_<value>``: the value times the progress remaining."""
    return lambda progress_remaining: progress_remaining * value


@pytest.fixture
def one_thread():
    """SB3's small MLPs are fastest on one thread on a 2-core machine (and leave the other core to the envs)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_ppo_mlp_policy_learns_cartpole(one_thread: None, no_leaks: None) -> None:
    """rl-zoo's CartPole-v1 PPO (hyperparams/ppo.yml: n_envs 8, n_timesteps 1e5, n_steps 32, batch_size 256,
    gae_lambda 0.8, gamma 0.98, n_epochs 20, ent_coef 0.0, learning_rate lin_1e-3, clip_range lin_0.2), on envs
    stepped one action at a time. Training stops early, as SB3's own ``StopTrainingOnRewardThreshold`` does, once a
    deterministic evaluation of 8 episodes averages 495 (CI's time); the last check is a fresh evaluation."""
    venv = make_vec_env(_cfg("CartPole-v1", 8), step="action")
    eval_env = make_vec_env(_cfg("CartPole-v1", 4, seed=SEED + 1), step="action")
    try:
        assert venv.observation_space == gymnasium.make("CartPole-v1").observation_space
        assert venv.action_space == gymnasium.spaces.Discrete(2)
        model = PPO(
            "MlpPolicy",
            venv,
            n_steps=32,
            batch_size=256,
            gae_lambda=0.8,
            gamma=0.98,
            n_epochs=20,
            ent_coef=0.0,
            learning_rate=_linear(1e-3),
            clip_range=_linear(0.2),
            seed=SEED,
            device="cpu",
        )
        stop = StopTrainingOnRewardThreshold(reward_threshold=495, verbose=0)
        evaluation = EvalCallback(eval_env, callback_on_new_best=stop, eval_freq=625, n_eval_episodes=8, warn=False, verbose=0)
        model.learn(total_timesteps=100_000, callback=evaluation)
        mean, std = evaluate_policy(model, eval_env, n_eval_episodes=8, deterministic=True, warn=False)
        assert mean >= 400, f"PPO reached a mean return of {mean} (std {std}) after {model.num_timesteps} steps"
    finally:
        venv.close()
        eval_env.close()


def test_dqn_runs_on_cartpole(one_thread: None, no_leaks: None) -> None:
    venv = make_vec_env(_cfg("CartPole-v1", 2), step="action")
    try:
        model = DQN(
            "MlpPolicy", venv, learning_starts=200, buffer_size=2_000, train_freq=4, target_update_interval=250, seed=SEED, device="cpu"
        )
        model.learn(total_timesteps=1_200)
        buffer = model.replay_buffer
        assert buffer is not None and buffer.size() >= 590
        actions = buffer.actions[: buffer.size()].reshape(-1)
        assert set(np.unique(actions).tolist()) == {0, 1}, "DQN's actions are the env's own Discrete(2)"
        assert buffer.dones[: buffer.size()].any(), "episodes ended and were reset within the step, as SB3 expects"
        observed = buffer.observations[: buffer.size()].reshape(-1, 4)
        assert np.all(np.abs(observed[:, 2]) <= 0.2095 * 1.01), "the pole's angle stays within CartPole's own termination bound"
        action, _ = model.predict(venv.reset(), deterministic=True)
        assert action.shape == (2,) and action.dtype.kind == "i"
    finally:
        venv.close()


def test_ppo_takes_a_discrete_observation(one_thread: None, no_leaks: None) -> None:
    venv = make_vec_env(_cfg("FrozenLake-v1", 2), step="action")
    try:
        assert venv.observation_space == gymnasium.spaces.Discrete(16)
        model = PPO("MlpPolicy", venv, n_steps=16, batch_size=32, n_epochs=1, seed=SEED, device="cpu")
        model.learn(total_timesteps=64)
        obs = model.rollout_buffer.observations
        assert obs.shape == (32, 1) and set(np.unique(obs).tolist()) <= set(range(16)), "the env's own cell numbers"
        assert model.policy.features_extractor.features_dim == 16, "SB3 one-hot encodes the Discrete(16) itself"
    finally:
        venv.close()
