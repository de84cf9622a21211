"""Our VecEnv under Stable-Baselines3's VecEnv API."""

import numpy as np
from stable_baselines3 import PPO  # a test dependency (pyproject's [test] extra): this runs in CI, never skips

from sims import make_env
from sims.adapters.stable_baselines3 import VecEnvAsSB3


def test_terminal_observations_and_time_limits() -> None:
    vec = VecEnvAsSB3(make_env("pendulum", num_envs=3, max_episode_steps=4))
    vec.seed(0)
    obs = vec.reset()
    assert obs.shape == (3, 3)
    for _ in range(4):
        obs, rewards, dones, infos = vec.step(np.zeros((3, 1), dtype=np.float32))
    assert dones.all() and rewards.shape == (3,)
    assert all(info["TimeLimit.truncated"] and info["terminal_observation"].shape == (3,) for info in infos)
    assert not np.allclose(np.stack([info["terminal_observation"] for info in infos]), obs)
    assert all("is_success" in info for info in infos)
    vec.close()


def test_sb3_ppo_trains_on_our_env(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SB3_LOGDIR", str(tmp_path))  # else SB3 leaves an empty SB3-<time> folder in /tmp per run
    vec = VecEnvAsSB3(make_env("cartpole", num_envs=4, seed=0))
    model = PPO("MlpPolicy", vec, n_steps=32, batch_size=64, n_epochs=1, seed=0, device="cpu")
    before = [p.detach().clone() for p in model.policy.parameters()]
    model.learn(256)
    assert model.num_timesteps == 256  # two rollouts of 32 steps on 4 envs, counted as SB3 counts them
    assert any(not np.array_equal(a.numpy(), b.detach().numpy()) for a, b in zip(before, model.policy.parameters()))
    rewards = model.rollout_buffer.rewards  # what our env returned, as SB3 stored it: cartpole's upright reward
    assert rewards.shape == (32, 4) and np.isfinite(rewards).all() and rewards.std() > 0
    action, _ = model.predict(vec.reset(), deterministic=True)
    assert action.shape == (4, 1)
    vec.close()


def test_an_observation_group_the_env_lacks_is_named_with_its_groups() -> None:
    """VecEnvAsSB3(env, group="critic") on an env without one had been a bare KeyError: 'critic'."""
    import pytest

    from sims.adapters.gymnasium import VecEnvAsGymVector

    env = make_env("pendulum", num_envs=2, seed=0)
    for adapter in (VecEnvAsSB3, VecEnvAsGymVector):
        with pytest.raises(ValueError, match=rf"{adapter.__name__}\(group='critic'\): TaskEnv has no observation "
                                             r"group 'critic'; its groups: \['policy'\]"):
            adapter(env, group="critic")
    env.close()
