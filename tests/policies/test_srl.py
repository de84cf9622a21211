"""SRL: the sequence actor, the model, the update, the exported sequence controller, and learning."""

from __future__ import annotations

import numpy as np
import torch
from gymnasium import spaces

from policies.srl import SRL, SRLConfig
from robolearn.export import ExportedController, export_controller
from robolearn.interfaces import Step, VecEnv
from robolearn.storage import ReplayBuffer

CPU = torch.device("cpu")


def small(**overrides: object) -> SRLConfig:
    return SRLConfig(hidden=(32, 32), gru_hidden=16, model_hidden=(32, 32), **overrides)


def test_actor_unrolls_j_actions_and_its_first_is_a_plain_policy(obs_spec, action_spec) -> None:
    torch.manual_seed(0)
    agent = SRL(obs_spec, action_spec, small(sequence_length=5), CPU)
    x = torch.randn(7, 4)
    actions, log_probs = agent.actor(x, 5)
    assert actions.shape == (7, 5, 2) and log_probs.shape == (7, 5)
    assert bool((actions.abs() < 1).all()) and bool(torch.isfinite(log_probs).all())
    first, _ = agent.actor(x, 1, deterministic=True)
    sequence, _ = agent.actor(x, 5, deterministic=True)
    torch.testing.assert_close(first[:, 0], sequence[:, 0])  # a_0 does not depend on J
    assert not torch.allclose(sequence[:, 0], sequence[:, 1])  # later actions come from the GRU


def test_an_actor_batch_larger_than_the_minibatch_is_refused(obs_spec, action_spec) -> None:
    """agent.actor_batch_size=1000 beside batch_size=256 had used the whole minibatch without a word."""
    import pytest

    with pytest.raises(ValueError, match="agent.actor_batch_size=1000 is more than agent.batch_size=256"):
        SRL(obs_spec, action_spec, small(actor_batch_size=1000), CPU)
    SRL(obs_spec, action_spec, small(actor_batch_size=256), CPU)  # all of it, said as a number


def test_later_actions_losses_reach_a0_only_when_feedback_keeps_its_gradient(obs_spec, action_spec) -> None:
    """detach_feedback (the default) feeds a_i to the GRU as a value: a_0 answers to its own Q term alone."""
    for detach in (True, False):
        agent = SRL(obs_spec, action_spec, small(sequence_length=3, detach_feedback=detach), CPU)
        fed: list[bool] = []
        agent.actor.gru.register_forward_pre_hook(lambda module, args: fed.append(args[0].requires_grad))
        agent.actor(torch.randn(5, 4), 3)
        assert fed == [not detach] * 2


def test_update_trains_critic_model_and_actor_and_moves_targets(make_replay_batch, obs_spec, action_spec) -> None:
    torch.manual_seed(0)
    agent = SRL(obs_spec, action_spec, small(sequence_length=3, model_tau=0.5), CPU)
    model_target = [p.clone() for p in agent.model_target.parameters()]
    critic, actor = ([p.detach().clone() for p in net.parameters()] for net in (agent.critic, agent.actor))
    batch = make_replay_batch(32)
    first = agent.update(batch)
    for before, net in ((critic, agent.critic), (actor, agent.actor)):  # one step moved both, not the model alone
        assert any(not torch.equal(a, b) for a, b in zip(before, net.parameters()))
    assert set(first) >= {"critic_loss", "model_loss", "actor_loss", "alpha", "entropy"}
    assert all(bool(torch.isfinite(v)) for v in first.values())
    for before, target, online in zip(model_target, agent.model_target.parameters(), agent.model.parameters()):
        torch.testing.assert_close(target, 0.5 * before + 0.5 * online)
    for _ in range(30):
        last = agent.update(batch)
    assert last["model_loss"] < first["model_loss"]  # the model fits s' on a fixed batch
    assert last["critic_loss"] < first["critic_loss"]  # and the critics its returns


def test_acting_plays_one_sequence_per_j_steps(random_obs, obs_spec, action_spec) -> None:
    agent = SRL(obs_spec, action_spec, small(sequence_length=4), CPU)
    for _ in range(6):
        agent.act(random_obs(3))
    assert agent.queue.decisions == 2 * 3  # a second sequence per env at step 4
    agent.reset(torch.tensor([True, False, False]))
    agent.act(random_obs(3))
    assert agent.queue.decisions == 2 * 3 + 1  # only the reset env decides again


def test_exported_controller_returns_the_chunk_and_plays_it(tmp_path, random_obs, obs_spec, action_spec) -> None:
    torch.manual_seed(0)
    agent = SRL(obs_spec, action_spec, small(sequence_length=4), CPU)
    controller = agent.controller()
    assert controller.decision_period == 4
    paths = export_controller(controller, tmp_path)
    x = torch.randn(3, 4)
    chunk = controller(x)
    assert chunk.shape == (3, 4, 2)
    low, high = torch.as_tensor(action_spec.low), torch.as_tensor(action_spec.high)
    assert bool(((chunk >= low) & (chunk <= high)).all())  # env units, inside the bounds
    for fmt in ("torchscript", "onnx"):
        exported = ExportedController(paths[fmt])
        torch.testing.assert_close(exported(x), chunk, atol=1e-5, rtol=1e-5)
        obs = {"policy": x, "critic": torch.zeros(3, 3)}
        played = torch.stack([exported.act(obs) for _ in range(4)], dim=1)
        torch.testing.assert_close(played, chunk, atol=1e-5, rtol=1e-5)  # the queue plays the chunk step by step
        assert exported.queue.decisions == 3  # one actor call per env for four steps


class Point(VecEnv):
    """1-D point to a random target in 16 steps; reward -|x - target|: a sequence can plan the whole move."""

    def __init__(self, num_envs: int, seed: int = 0) -> None:
        self.num_envs, self.device, self.control_dt, self.max_episode_steps = num_envs, CPU, 0.1, 16
        self.observation_spec = {"policy": spaces.Box(-2.0, 2.0, (2,), np.float32)}
        self.action_spec = spaces.Box(-0.3, 0.5, (1,), np.float32)
        self.generator = torch.Generator().manual_seed(seed)
        self.reset()

    def _uniform(self, n: int) -> torch.Tensor:
        return torch.rand(n, generator=self.generator) * 2 - 1

    def reset(self, seed: int | None = None):
        if seed is not None:
            self.generator.manual_seed(seed)
        self.x, self.target = self._uniform(self.num_envs), self._uniform(self.num_envs)
        self.t = torch.zeros(self.num_envs, dtype=torch.long)
        return {"policy": torch.stack([self.x, self.target], -1)}

    def step(self, action: torch.Tensor) -> Step:
        self.x = (self.x + action[:, 0].clamp(-0.3, 0.5)).clamp(-2.0, 2.0)
        reward = -(self.x - self.target).abs()
        self.t += 1
        final = {"policy": torch.stack([self.x, self.target], -1)}
        truncated = self.t >= self.max_episode_steps
        n = int(truncated.sum())
        if n:
            self.x[truncated], self.target[truncated], self.t[truncated] = self._uniform(n), self._uniform(n), 0
        obs = {"policy": torch.stack([self.x, self.target], -1)}
        return Step(obs, reward, torch.zeros_like(truncated), truncated, {"final_obs": final})


def test_srl_learns_point_target_deciding_every_4_steps() -> None:
    torch.manual_seed(0)
    env = Point(num_envs=4)
    agent = SRL(env.observation_spec, env.action_spec,
                SRLConfig(sequence_length=4, hidden=(64, 64), gru_hidden=32, model_hidden=(64, 64), batch_size=128,
                          buffer_size=10_000), CPU)
    buffer, obs = ReplayBuffer(10_000, CPU), env.reset(seed=0)
    low, high = torch.as_tensor(env.action_spec.low), torch.as_tensor(env.action_spec.high)
    for i in range(600):
        action = low + (high - low) * torch.rand(4, 1) if i < 100 else agent.act(obs)["action"]
        step = env.step(action)
        buffer.add({"obs": obs, "next_obs": step.info["final_obs"], "reward": step.reward,
                    "terminated": step.terminated, "truncated": step.truncated, "action": action})
        agent.reset(step.truncated)
        obs = step.obs
        if i >= 100:
            for _ in range(2):
                agent.update(buffer.sample(128))
    controller, eval_env = agent.controller(), Point(256, seed=1)
    obs, total = eval_env.reset(seed=123), torch.zeros(256)
    with torch.no_grad():
        for _ in range(16):
            step = eval_env.step(controller.act(obs))
            obs, total = step.obs, total + step.reward
    # Untrained about -11, random about -13; moving straight to the target about -1 (SAC, deciding every step: -2).
    assert float(total.mean()) > -3.0, float(total.mean())
    assert controller.queue.decisions == 256 * 4  # four decisions per 16-step episode
