"""PPO and SAC must learn a toy task within seconds, driven by minimal runner
loops that follow the on-/off-policy protocols of robolearn.interfaces."""

from __future__ import annotations

import numpy as np
import torch
from gymnasium import spaces

from policies import PPO, SAC, PPOConfig, SACConfig
from robolearn.interfaces import Controller, Obs, Step, VecEnv
from robolearn.storage import ReplayBuffer, RolloutStorage


class PointEnv(VecEnv):
    """A 1-D point that must move to a random target; reward = -|x - target|.

    Asymmetric action bounds exercise the agents' action scaling. With
    ``hide_target`` the target is observed only on an episode's first step, so
    only a policy with memory can solve it.
    """

    def __init__(self, num_envs: int, max_episode_steps: int = 16, hide_target: bool = False, seed: int = 0) -> None:
        self.num_envs, self.device, self.control_dt = num_envs, torch.device("cpu"), 0.1
        self.max_episode_steps, self.hide_target = max_episode_steps, hide_target
        self.observation_spec = {"policy": spaces.Box(-2.0, 2.0, (2,), np.float32)}
        self.action_spec = spaces.Box(-0.3, 0.5, (1,), np.float32)
        self.generator = torch.Generator().manual_seed(seed)
        self.reset()

    def _uniform(self, n: int) -> torch.Tensor:
        return torch.rand(n, generator=self.generator) * 2 - 1

    def _obs(self) -> Obs:
        target = torch.where(self.hide_target & (self.t > 0), torch.zeros_like(self.target), self.target)
        return {"policy": torch.stack([self.x, target], dim=-1)}

    def reset(self, seed: int | None = None) -> Obs:
        if seed is not None:
            self.generator.manual_seed(seed)
        self.x, self.target = self._uniform(self.num_envs), self._uniform(self.num_envs)
        self.t = torch.zeros(self.num_envs, dtype=torch.long)
        return self._obs()

    def step(self, action: torch.Tensor) -> Step:
        low, high = float(self.action_spec.low[0]), float(self.action_spec.high[0])
        self.x = (self.x + action[:, 0].clamp(low, high)).clamp(-2.0, 2.0)
        reward = -(self.x - self.target).abs()
        self.t += 1
        terminated = torch.zeros(self.num_envs, dtype=torch.bool)
        truncated = self.t >= self.max_episode_steps
        final_obs = self._obs()
        n = int(truncated.sum())
        if n:
            self.x[truncated], self.target[truncated], self.t[truncated] = self._uniform(n), self._uniform(n), 0
        return Step(self._obs(), reward, terminated, truncated, {"final_obs": final_obs, "log": {}})


def evaluate(controller: Controller, env: PointEnv) -> float:
    """Mean return of one deterministic episode per env."""
    obs, total = env.reset(seed=123), torch.zeros(env.num_envs)
    controller.reset()
    with torch.no_grad():
        for _ in range(env.max_episode_steps):
            step = env.step(controller.act(obs))
            obs, total = step.obs, total + step.reward
    return float(total.mean())


def train_on_policy(agent: PPO, env: PointEnv, iterations: int) -> None:
    storage, obs = RolloutStorage(agent.cfg.num_steps, env.device), env.reset(seed=0)
    for _ in range(iterations):
        while not storage.full:
            out = agent.act(obs, explore=True)
            step = env.step(out["action"])
            storage.add({"obs": obs, "next_obs": step.info["final_obs"], "reward": step.reward,
                         "terminated": step.terminated, "truncated": step.truncated, **out})
            agent.reset(step.terminated | step.truncated)
            obs = step.obs
        agent.update(storage.data)
        storage.clear()


def train_off_policy(agent: SAC, env: PointEnv, env_steps: int, random_steps: int, updates_per_step: int) -> None:
    buffer, obs = ReplayBuffer(agent.cfg.buffer_size, env.device), env.reset(seed=0)
    low, high = torch.as_tensor(env.action_spec.low), torch.as_tensor(env.action_spec.high)
    for i in range(env_steps):
        if i < random_steps:
            action = low + (high - low) * torch.rand(env.num_envs, *env.action_spec.shape)
        else:
            action = agent.act(obs, explore=True)["action"]
        step = env.step(action)
        buffer.add({"obs": obs, "next_obs": step.info["final_obs"], "reward": step.reward,
                    "terminated": step.terminated, "truncated": step.truncated, "action": action})
        obs = step.obs
        if i >= random_steps:
            for _ in range(updates_per_step):
                agent.update(buffer.sample(agent.cfg.batch_size))


def small_ppo(**overrides: object) -> PPOConfig:
    return PPOConfig(num_steps=16, actor_hidden=(64, 64), critic_hidden=(64, 64), **overrides)


def test_ppo_learns_point_target() -> None:
    torch.manual_seed(0)
    env = PointEnv(num_envs=64)
    agent = PPO(env.observation_spec, env.action_spec, small_ppo(), env.device)
    train_on_policy(agent, env, iterations=20)
    after = evaluate(agent.controller(), PointEnv(256, seed=1))
    # An untrained policy scores about -11; moving straight to the target about -1.
    assert after > -2.5, after


def test_recurrent_ppo_remembers_hidden_target() -> None:
    torch.manual_seed(0)
    env = PointEnv(num_envs=64, hide_target=True)
    agent = PPO(env.observation_spec, env.action_spec, small_ppo(recurrent=True, rnn_hidden=32), env.device)
    train_on_policy(agent, env, iterations=20)
    after = evaluate(agent.controller(), PointEnv(256, hide_target=True, seed=1))
    # A feedforward policy cannot beat about -8 here (measured); remembering the target scores about -2.
    assert after > -4.0, after


def test_sac_learns_point_target() -> None:
    torch.manual_seed(0)
    env = PointEnv(num_envs=4)
    agent = SAC(env.observation_spec, env.action_spec, SACConfig(hidden=(64, 64), batch_size=128, buffer_size=10_000), env.device)
    train_off_policy(agent, env, env_steps=600, random_steps=100, updates_per_step=2)
    after = evaluate(agent.controller(), PointEnv(256, seed=1))
    # An untrained policy scores about -11 (random about -13); SAC reaches about -2 here.
    assert after > -3.0, after
