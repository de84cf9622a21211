"""PPO: GAE with truncation vs termination, the adaptive-KL learning rate, the
std floor, recurrent state handling and asymmetric observation groups."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from gymnasium import spaces

from policies.ppo import PPO, PPOConfig, adaptive_lr, gae

CPU = torch.device("cpu")


def small(**overrides: object) -> PPOConfig:
    return PPOConfig(actor_hidden=(16, 16), critic_hidden=(16, 16), rnn_hidden=8, **overrides)


def test_gae_bootstraps_truncation_and_cuts_at_termination() -> None:
    gamma, lam = 0.9, 0.8
    # env 0 is truncated (time limit) at t=1; env 1 terminates at t=2
    r = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    v = [[0.5, 1.5], [2.5, 3.5], [4.5, 5.5]]
    nv = [[0.7, 1.7], [9.0, 2.7], [3.7, 8.0]]  # V(true next obs); nv[1][0] is V(final obs of env 0)
    terminated = torch.tensor([[False, False], [False, False], [False, True]])
    truncated = torch.tensor([[False, False], [True, False], [False, False]])

    # hand-written reference, one env at a time
    d = lambda t, e, boot: r[t][e] + (gamma * nv[t][e] if boot else 0.0) - v[t][e]  # noqa: E731
    a0_2 = d(2, 0, True)
    a0_1 = d(1, 0, True)  # truncated: bootstrap from V(final obs), but do not continue into the next episode
    a0_0 = d(0, 0, True) + gamma * lam * a0_1
    a1_2 = d(2, 1, False)  # terminated: no bootstrap
    a1_1 = d(1, 1, True) + gamma * lam * a1_2
    a1_0 = d(0, 1, True) + gamma * lam * a1_1
    expected = torch.tensor([[a0_0, a1_0], [a0_1, a1_1], [a0_2, a1_2]])

    advantages, returns = gae(torch.tensor(r), terminated, truncated, torch.tensor(v), torch.tensor(nv), gamma, lam)
    torch.testing.assert_close(advantages, expected)
    torch.testing.assert_close(returns, expected + torch.tensor(v))


def test_adaptive_lr_rule() -> None:
    """RSL-RL's rule, on the device's tensors; in float64 (a CPU run's) exactly the Python floats it was."""
    cfg = PPOConfig(desired_kl=0.01, min_lr=1e-5, max_lr=1e-2)

    def lr(current: float, kl: float) -> float:
        return adaptive_lr(torch.tensor(current, dtype=torch.float64), torch.tensor(kl), cfg).item()

    assert lr(1e-3, 0.05) == 1e-3 / 1.5  # KL > 2x target: smaller steps
    assert lr(1e-3, 0.001) == 1e-3 * 1.5  # KL < target / 2: larger steps
    assert lr(1e-3, 0.01) == 1e-3
    assert lr(1e-3, 0.0) == 1e-3  # no information (first minibatch)
    assert lr(1.2e-5, 1.0) == 1e-5
    assert lr(9e-3, 1e-6) == 1e-2


@pytest.mark.parametrize("desired_kl, moves", [(1e-9, "down"), (1e3, "up")])
def test_update_adapts_learning_rate(make_rollout, obs_spec, action_spec, desired_kl: float, moves: str) -> None:
    torch.manual_seed(0)
    agent = PPO(obs_spec, action_spec, small(desired_kl=desired_kl), CPU)
    metrics = agent.update(make_rollout(agent, 8, 6))
    assert metrics["kl"] > 0
    changed = metrics["learning_rate"] < 1e-3 if moves == "down" else metrics["learning_rate"] > 1e-3
    assert changed and metrics["learning_rate"] == pytest.approx(agent.learning_rate)
    assert all(g["lr"] is agent.lr for g in agent.optimizer.param_groups)  # the optimizer steps with the schedule's


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
def test_update_reads_the_host_once_for_its_metrics(make_rollout, obs_spec, action_spec, device: str) -> None:
    """The adaptive schedule stays on the device: on a GPU, a host read per minibatch (RSL-RL's KL
    ``.item()``) would stall the queue twenty times an update. On CUDA this also runs fused Adam with the
    schedule's tensor learning rate."""
    from torch.utils._pytree import tree_map

    from robolearn.host_reads import HostReads

    torch.manual_seed(0)
    batch = make_rollout(PPO(obs_spec, action_spec, small(), CPU), 8, 6)
    batch = tree_map(lambda leaf: leaf.to(device) if isinstance(leaf, torch.Tensor) else leaf, batch)
    agent = PPO(obs_spec, action_spec, small(desired_kl=1e-9), torch.device(device))
    with HostReads(stand_in=device == "cpu") as reads:
        metrics = agent.update(batch)
    assert metrics["learning_rate"] < 1e-3  # the schedule ran
    assert [(name, path) for name, path, _ in reads.sites] == [("tolist", "policies/ppo.py")], dict(reads.sites)
    assert sum(reads.sites.values()) == 1


@pytest.mark.parametrize("saved_lr", ["tensor", "float"])
def test_loaded_learning_rate_is_the_one_the_optimizer_steps_with(make_rollout, obs_spec, action_spec,
                                                                  saved_lr: str) -> None:
    """Loading puts the checkpoint's lr (a float in older checkpoints) into the tensor the schedule
    updates in place, and the optimizer keeps stepping with that tensor."""
    torch.manual_seed(0)
    agent = PPO(obs_spec, action_spec, small(desired_kl=1e-9), CPU)
    agent.update(make_rollout(agent, 8, 6))
    state = agent.state_dict()
    if saved_lr == "float":
        state["learning_rate"] = float(state["learning_rate"])
    other = PPO(obs_spec, action_spec, small(desired_kl=1e-9), CPU)
    other.load_state_dict(state)
    assert other.learning_rate == agent.learning_rate < 1e-3
    assert all(g["lr"] is other.lr for g in other.optimizer.param_groups)
    other.lr.fill_(0.0)  # a zero step leaves the weights where they are: the optimizer reads other.lr
    before = [p.detach().clone() for p in other.params]
    other.optimizer.zero_grad()
    sum(p.sum() for p in other.params).backward()
    other.optimizer.step()
    assert all(torch.equal(a, b) for a, b in zip(before, other.params))


def test_std_is_clamped_to_min_std_and_stays_finite(make_rollout, random_obs, obs_spec, action_spec) -> None:
    torch.manual_seed(0)
    # a negative entropy bonus and a large fixed lr drive the std towards zero
    agent = PPO(obs_spec, action_spec, small(entropy_coef=-100.0, schedule="fixed", learning_rate=0.05, min_std=0.5), CPU)
    for _ in range(5):
        agent.update(make_rollout(agent, 8, 6))
    assert torch.isfinite(agent.std).all()
    torch.testing.assert_close(agent.std, torch.full((2,), 0.5))
    action = agent.act(random_obs(8))["action"]
    low, high = torch.as_tensor(action_spec.low), torch.as_tensor(action_spec.high)
    assert torch.isfinite(action).all() and (action >= low).all() and (action <= high).all()


def test_actions_in_env_units_are_sampled_there_and_clipped_to_the_box(make_rollout, random_obs, obs_spec) -> None:
    """normalize_actions=False (RSL-RL's units): std 1 is one env unit, whatever the box's width."""
    torch.manual_seed(0)
    box = spaces.Box(np.array([-4.0, -4.0], np.float32), np.array([4.0, 2.0], np.float32))
    agent = PPO(obs_spec, box, small(normalize_actions=False, init_std=1.0), CPU)
    out = agent.act(random_obs(20000))
    inside = (out["sample"] > -4.0) & (out["sample"] < box.high[1])
    torch.testing.assert_close(out["action"][:, 1][inside[:, 1]], out["sample"][:, 1][inside[:, 1]])  # no scaling
    assert 0.95 < float(out["sample"].std(0)[0]) < 1.05  # normalized, it would be 4
    assert float(out["action"][:, 1].max()) == 2.0 and float(out["action"].min()) >= -4.0
    with torch.no_grad():
        agent.actor[-1].bias.fill_(10.0)  # a mean far outside the box: the controller clips it to the bounds
    torch.testing.assert_close(agent.controller().act(random_obs(3)), torch.tensor([[4.0, 2.0]] * 3))
    metrics = agent.update(make_rollout(agent, 8, 6))  # learns from samples far outside the box as from others
    assert all(torch.isfinite(torch.as_tensor(v)).all() for v in metrics.values()), metrics


def test_std_is_clamped_to_max_std_and_bad_bounds_raise(make_rollout, obs_spec, action_spec) -> None:
    torch.manual_seed(0)
    # a large entropy bonus and a large fixed lr drive the std up
    agent = PPO(obs_spec, action_spec, small(entropy_coef=100.0, schedule="fixed", learning_rate=0.05, max_std=1.5), CPU)
    for _ in range(5):
        agent.update(make_rollout(agent, 8, 6))
    torch.testing.assert_close(agent.std, torch.full((2,), 1.5))
    with pytest.raises(ValueError, match="agent.min_std <= agent.max_std"):
        PPO(obs_spec, action_spec, small(min_std=1.0, max_std=0.5), CPU)
    # a start outside the bounds (a resume's, after a raised min_std: the checkpoint's std replaces it) at the bound
    torch.testing.assert_close(PPO(obs_spec, action_spec, small(init_std=1.0, max_std=0.5), CPU).std,
                               torch.full((2,), 0.5))


def test_old_policy_is_recomputed_exactly_and_normalizer_updated_after(make_rollout, obs_spec, action_spec) -> None:
    torch.manual_seed(0)
    cfg = small(num_epochs=1, num_minibatches=1, critic_obs_groups=("policy", "critic"))
    agent = PPO(obs_spec, action_spec, cfg, CPU)
    for _ in range(2):
        rollout = make_rollout(agent, 8, 6)
        count = int(agent.actor_normalizer.count)
        metrics = agent.update(rollout)
        # the single minibatch is evaluated before its step: same parameters as when acting, so KL = 0, ratio = 1
        assert metrics["kl"] == 0.0 and metrics["clip_fraction"] == 0.0
        assert int(agent.actor_normalizer.count) == count + 48
    assert agent.critic_normalizer.mean.shape == (7,)  # asymmetric: critic reads policy + critic groups


def test_recurrent_unroll_reproduces_acting_with_resets(random_obs, obs_spec, action_spec) -> None:
    torch.manual_seed(0)
    agent = PPO(obs_spec, action_spec, small(recurrent=True), CPU)
    obs_seq = [random_obs(4) for _ in range(6)]
    done_seq = [torch.tensor([False, True, False, False]), torch.tensor([True, False, False, False])] * 3
    samples, hiddens = [], []
    for obs, done in zip(obs_seq, done_seq):
        out = agent.act(obs, explore=False)
        samples.append(out["sample"])
        hiddens.append(out["hidden"])
        agent.reset(done)
        assert agent.hidden[done].eq(0).all()
    actor_obs = agent.actor_normalizer(torch.stack([o["policy"] for o in obs_seq]))
    reset = torch.stack([torch.zeros(4, dtype=torch.bool), *done_seq[:-1]])
    torch.testing.assert_close(agent.actor.unroll(actor_obs, hiddens[0], reset), torch.stack(samples))

    # the deployed controller keeps and resets its own state the same way
    controller = agent.controller()
    for obs, done, sample in zip(obs_seq, done_seq, samples):
        expected = agent.scaler(sample.clamp(-1, 1))
        torch.testing.assert_close(controller.act(obs), expected)
        controller.reset(done)


def test_a_recurrent_controller_moved_after_acting_starts_its_memory_where_it_was_moved(random_obs, obs_spec,
                                                                                        action_spec) -> None:
    """A move (``.to()``, ``.cuda()``...) that would take its hidden state elsewhere lets it go: every env's memory
    starts from zeros at the next act, where the controller now is. The meta device is the CPU's stand-in for a move
    to a GPU (a dtype move is none: act feeds float32, which a float64 GRU refuses): the hidden state had stayed on
    the CPU, and the next act raised 'Tensor on device meta is not on the expected device cpu', reset() or not (on a
    GPU, the GRU given a CPU hidden state raises alike). A move that changes nothing keeps it."""
    torch.manual_seed(0)
    controller = PPO(obs_spec, action_spec, small(recurrent=True), CPU).controller()
    obs = random_obs(3)
    controller.act(obs)
    held = controller.hidden
    controller.cpu().float().act(obs)
    assert controller.hidden.shape == (3, 8) and not torch.equal(controller.hidden, held)  # went on from it
    controller.to("meta")
    controller.reset()  # as evaluate() starts
    action = controller.act(obs)
    assert action.device.type == controller.hidden.device.type == "meta" and action.shape == (3, 2)


def test_a_recurrent_controller_on_another_device_resets_by_a_cpu_mask(random_obs, obs_spec, action_spec) -> None:
    """A controller moved to a GPU acting on a CPU env (a robot's is always one) gets its done flags on the CPU:
    reset(mask) had raised 'Tensor on device cpu is not on the expected device' at the first step runtime.run
    made. The meta device stands in for the GPU, as above."""
    torch.manual_seed(0)
    controller = PPO(obs_spec, action_spec, small(recurrent=True), CPU).controller().to("meta")
    controller.act(random_obs(3))
    controller.reset(torch.tensor([True, False, False]))
    assert controller.hidden.device.type == "meta" and controller.hidden.shape == (3, 8)


def test_a_recurrent_update_recomputes_the_means_the_rollout_acted_with(random_obs, obs_spec, action_spec) -> None:
    """The old policy is the GRU unrolled over the rollout with its state zeroed at the step *after* each episode's
    end, as ``act`` then ``reset`` did, so the recomputation is exact (the module docstring). Acted on its means
    (explore=False), every sample is then its own old mean: a zero policy gradient, and one minibatch leaves the
    actor's weights as they were. Zeroing the state at the ending step itself had recomputed other means and moved
    every weight by the learning rate."""
    from robolearn.storage import RolloutStorage

    torch.manual_seed(0)
    agent = PPO(obs_spec, action_spec, small(recurrent=True, num_epochs=1, num_minibatches=1), CPU)
    storage = RolloutStorage(6, CPU)
    ends = [torch.tensor([False, True, False, False]), torch.tensor([True, False, False, True])] * 3
    for done in ends:
        obs = random_obs(4)
        out = agent.act(obs, explore=False)
        storage.add({"obs": obs, "next_obs": random_obs(4), "reward": torch.randn(4),
                     "terminated": torch.zeros(4, dtype=torch.bool), "truncated": done, **out})
        agent.reset(done)
    before = [p.detach().clone() for p in agent.actor.parameters()]
    agent.update(storage.data)
    assert all(torch.equal(a, b) for a, b in zip(before, agent.actor.parameters()))


def test_value_loss_is_clipped_around_the_old_values(obs_spec, action_spec) -> None:
    """PPO2's value loss ``max((V - R)^2, (V_old + clip(V - V_old, -eps, eps) - R)^2)``: with returns far above
    the values and a large step, the second epoch's critic has moved past ``V_old + eps`` towards them, so its loss
    is that of ``V_old + eps``, the larger of the two (gamma = 0: the returns are the rewards)."""
    cfg = small(num_epochs=2, num_minibatches=1, gamma=0.0, normalize_obs=False, schedule="fixed", learning_rate=0.5)
    storage_obs = {"policy": torch.randn(6, 8, 4), "critic": torch.randn(6, 8, 3)}
    batch = {"obs": storage_obs, "next_obs": storage_obs, "reward": torch.full((6, 8), 1000.0),
             "terminated": torch.zeros(6, 8, dtype=torch.bool), "truncated": torch.zeros(6, 8, dtype=torch.bool),
             "sample": torch.zeros(6, 8, 2)}

    def agent(epochs: int) -> PPO:
        torch.manual_seed(0)
        return PPO(obs_spec, action_spec, dataclasses.replace(cfg, num_epochs=epochs), CPU)

    value = lambda ppo: ppo.critic(storage_obs["policy"]).squeeze(-1).detach()  # noqa: E731
    old, one_step = value(agent(2)), agent(1)
    one_step.update(batch)
    assert (value(one_step) > old + cfg.clip_ratio).all()  # the first step moved every value past the clip
    metrics = agent(2).update(batch)
    first, second = (old - 1000.0).square().mean(), (old + cfg.clip_ratio - 1000.0).square().mean()
    assert metrics["value_loss"] == pytest.approx(float(first + second) / 2, rel=1e-5)


def test_recurrent_update_runs_and_reports_metrics(make_rollout, obs_spec, action_spec) -> None:
    torch.manual_seed(0)
    agent = PPO(obs_spec, action_spec, small(recurrent=True, critic_obs_groups=("policy", "critic")), CPU)
    metrics = agent.update(make_rollout(agent, 8, 5))
    assert all(math.isfinite(v) for v in metrics.values())


def test_missing_observation_group_is_named(obs_spec, action_spec) -> None:
    with pytest.raises(ValueError, match=r"observation groups \['privileged'\] not provided.*\*_obs_groups"):
        PPO(obs_spec, action_spec, small(critic_obs_groups=("policy", "privileged")), CPU)
    with pytest.raises(ValueError, match=r"no observation groups to read \(an agent's obs_groups, actor_obs_groups or "
                                         r"critic_obs_groups is empty\)"):
        PPO(obs_spec, action_spec, small(actor_obs_groups=()), CPU)  # had been torch.cat's words at the first step


def test_reward_normalization_divides_by_running_std_of_discounted_return(obs_spec, action_spec) -> None:
    agent = PPO(obs_spec, action_spec, small(normalize_rewards=True, gamma=0.5), CPU)
    reward = torch.tensor([[1.0, 2.0], [1.0, 2.0], [1.0, 2.0]])
    done = torch.tensor([[False, False], [True, False], [False, False]])
    batch = {"reward": reward, "terminated": torch.zeros_like(done), "truncated": done}
    scaled = agent._scale_rewards(batch)
    # env 0's return restarts after its episode ends at t=1; env 1's keeps accumulating
    returns = torch.tensor([[1.0, 2.0], [1.5, 3.0], [1.0, 3.5]])
    std = returns.flatten().var(unbiased=False).sqrt()
    torch.testing.assert_close(scaled, reward / std)
    torch.testing.assert_close(agent.running_return, torch.tensor([1.0, 3.5]))  # carried into the next rollout

    # the statistics are part of the state (resume), the per-env returns are not (envs restart their episodes)
    other = PPO(obs_spec, action_spec, small(normalize_rewards=True, gamma=0.5), CPU)
    other.load_state_dict(agent.state_dict())
    torch.testing.assert_close(other.return_normalizer.var, agent.return_normalizer.var)
    assert "return_normalizer" not in PPO(obs_spec, action_spec, small(), CPU).state_dict()



def test_surrogate_takes_the_smaller_of_the_raw_and_clipped_objectives(obs_spec, action_spec) -> None:
    """``L = -E[min(rho A, clip(rho, 1 - eps, 1 + eps) A)]``: the first step is at rho = 1; after a large one the
    second epoch's ratios have left ``[1 - eps, 1 + eps]`` on both sides, and the loss it reports is the mean of
    the two, worked out here from the moved policy (gamma = 0 and no normalization: A = r - V_old)."""
    from policies.modules import gaussian_log_prob

    cfg = small(num_epochs=2, num_minibatches=1, gamma=0.0, normalize_obs=False, normalize_advantages=False,
                schedule="fixed", learning_rate=0.05, entropy_coef=0.0, clip_value_loss=False)
    torch.manual_seed(1)
    storage_obs = {"policy": torch.randn(6, 8, 4), "critic": torch.randn(6, 8, 3)}
    batch = {"obs": storage_obs, "next_obs": storage_obs, "reward": torch.randn(6, 8),
             "terminated": torch.zeros(6, 8, dtype=torch.bool), "truncated": torch.zeros(6, 8, dtype=torch.bool),
             "sample": torch.randn(6, 8, 2)}

    def agent(epochs: int) -> PPO:
        torch.manual_seed(0)
        return PPO(obs_spec, action_spec, dataclasses.replace(cfg, num_epochs=epochs), CPU)

    def log_prob(ppo: PPO) -> torch.Tensor:
        with torch.no_grad():
            return gaussian_log_prob(batch["sample"], ppo.actor(storage_obs["policy"]), ppo.std)

    old = agent(2)
    with torch.no_grad():
        advantages = batch["reward"] - old.critic(storage_obs["policy"]).squeeze(-1)
    one_step = agent(1)
    one_step.update(batch)
    ratio = torch.exp(log_prob(one_step) - log_prob(old))
    eps = cfg.clip_ratio
    assert (ratio > 1 + eps).any() and (ratio < 1 - eps).any()  # both clips are met
    second = -torch.min(ratio * advantages, ratio.clamp(1 - eps, 1 + eps) * advantages).mean()
    assert not torch.isclose(second, -(ratio * advantages).mean(), rtol=1e-3)  # the clip changes the loss
    metrics = old.update(batch)
    assert metrics["policy_loss"] == pytest.approx(float(-advantages.mean() + second) / 2, rel=1e-4)
