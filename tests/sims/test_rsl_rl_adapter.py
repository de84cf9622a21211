"""Our VecEnv as an RSL-RL VecEnv: the contract, and rsl-rl-lib's own runner training on it."""

import pytest
import torch

import rsl_rl  # noqa: F401  (a declared dependency: missing, a failure)
from rsl_rl.runners import OnPolicyRunner  # noqa: E402

from sims import make_env  # noqa: E402
from sims.adapters.rsl_rl import VecEnvAsRslRl  # noqa: E402


def test_step_follows_the_rsl_rl_contract() -> None:
    env = VecEnvAsRslRl(make_env("pendulum", num_envs=3, seed=0, max_episode_steps=4))
    assert (env.num_envs, env.num_actions, env.max_episode_length) == (3, 1, 4)
    obs = env.get_observations()
    assert obs.batch_size == torch.Size([3]) and obs["policy"].shape == (3, 3)
    for t in range(4):
        obs, reward, dones, extras = env.step(torch.zeros(3, 1))
        assert reward.shape == (3,) and dones.dtype == torch.long
        assert torch.equal(env.episode_length_buf, torch.full((3,), (t + 1) % 4))
    assert dones.all() and extras["time_outs"].all()
    assert set(extras["log"]) and all(key.startswith(("reward/", "sim/")) for key in extras["log"])
    torch.testing.assert_close(env.get_observations()["policy"], obs["policy"])
    env.close()


def test_init_at_random_ep_len_staggers_our_time_limits() -> None:
    """RSL-RL's learn(init_at_random_ep_len=True), legged_gym's default, had been refused: its random lengths
    now set our task env's episode clocks (through its randomization wrapper), so the worlds truncate apart."""
    env = VecEnvAsRslRl(make_env("pendulum", num_envs=3, seed=0, max_episode_steps=4,
                                 randomization={"mass_scale": [0.9, 1.1]}))
    env.episode_length_buf = torch.tensor([0, 1, 3])
    _, _, dones, extras = env.step(torch.zeros(3, 1))
    assert dones.tolist() == [0, 0, 1] and extras["time_outs"].tolist() == [False, False, True]
    assert env.episode_length_buf.tolist() == [1, 2, 0]
    with pytest.raises(ValueError, match=r"episode_step: each in \[0, max_episode_steps=4\); got 0 to 4"):
        env.episode_length_buf = torch.tensor([0, 1, 4])
    env.close()


def test_init_at_random_ep_len_is_refused_for_an_env_with_its_own_time_limit() -> None:
    import gymnasium  # noqa: F401  (a declared dependency: missing, a failure)
    env = VecEnvAsRslRl(make_env("gym:Pendulum-v1", num_envs=2, seed=0))
    with pytest.raises(NotImplementedError, match=r"GymVecEnv keeps its own episode time limit.*"
                                                   r"learn\(init_at_random_ep_len=False\)"):
        env.episode_length_buf = torch.zeros(2, dtype=torch.long)
    env.close()


def test_rsl_rl_runner_trains_on_our_task(tmp_path) -> None:
    """rsl-rl-lib's OnPolicyRunner, unmodified, runs two iterations on pendulum."""
    torch.manual_seed(0)
    env = VecEnvAsRslRl(make_env("pendulum", num_envs=8, seed=0))
    model = {"class_name": "MLPModel", "hidden_dims": [32, 32], "activation": "elu", "obs_normalization": True}
    cfg = {
        "num_steps_per_env": 16,
        "save_interval": 50,
        "obs_groups": {"actor": ["policy"], "critic": ["policy"]},
        "actor": {**model, "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0}},
        "critic": model,
        "algorithm": {"class_name": "PPO", "num_learning_epochs": 2, "num_mini_batches": 2},
        "logger": "tensorboard",
    }
    runner = OnPolicyRunner(env, cfg, log_dir=str(tmp_path), device="cpu")
    before = [p.clone() for p in runner.alg.actor.parameters()]
    runner.learn(num_learning_iterations=2, init_at_random_ep_len=True)  # legged_gym's default
    assert runner.current_learning_iteration == 1
    assert any(not torch.equal(a, b) for a, b in zip(before, runner.alg.actor.parameters()))
    assert list(tmp_path.glob("model_*.pt"))
    policy = runner.get_inference_policy()
    with torch.inference_mode():
        assert policy(env.get_observations()).shape == (8, 1)
