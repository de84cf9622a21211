"""Skill agents (SPiRL, Skill-Critic): the skill model learns toy skills, the KL terms are exact,
high-level transitions are cut correctly from the replay, Skill-Critic starts its low level as the
decoder and trains in stages, the controller holds a skill for H steps per env and exports, and
one run pretrains on a dataset and then trains online."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch.distributions import Normal, TransformedDistribution, kl_divergence
from torch.distributions.transforms import TanhTransform

import sims
from robolearn import load_config
from robolearn.checkpoint import load_checkpoint
from robolearn.config import ConfigError
from robolearn.export import ExportedController, export_controller
from robolearn.interfaces import flatten_obs
from robolearn.runner import train
from robolearn.storage import ReplayBuffer
from policies.modules import gaussian_kl
from policies.skills import SkillCritic, SkillCriticConfig, SPiRL, SPiRLConfig
from policies.skills.skill_critic import one_hot_step
from policies.skills.windows import sample_skill_transitions

OBS = {"policy": spaces.Box(-np.inf, np.inf, (3,), np.float32)}
ACTIONS = spaces.Box(-2.0, 2.0, (2,), np.float32)
H = 4


def small(cls=SPiRLConfig, **changes):
    base = dict(horizon=H, latent_dim=2, encoder_hidden=32, decoder_hidden=(32, 32), prior_hidden=(32, 32),
                hidden=(32, 32), batch_size=16, pretrain_batch_size=32, buffer_size=64)
    return cls(**{**base, **changes})


def toy_data(episodes: int = 64, seed: int = 0) -> dict:
    """Episodes of exactly H steps, each one of four skills: a constant action (env units); the
    first state feature says which, so the prior can predict the skill from the first state."""
    g = torch.Generator().manual_seed(seed)
    skills = torch.tensor([[1.5, 1.5], [-1.5, 1.0], [0.5, -1.5], [-1.0, -1.0]])
    which = torch.randint(4, (episodes,), generator=g)
    obs = torch.randn(episodes, H + 1, 3, generator=g)
    obs[..., 0] = which.unsqueeze(1).float()
    action = skills[which].unsqueeze(1).expand(-1, H, -1)
    terminated = torch.zeros(episodes, H, dtype=torch.bool)
    truncated = terminated.clone()
    truncated[:, -1] = True
    return {"obs": {"policy": obs[:, :-1].reshape(-1, 3)}, "next_obs": {"policy": obs[:, 1:].reshape(-1, 3)},
            "action": action.reshape(-1, 2), "reward": torch.zeros(episodes * H),
            "terminated": terminated.flatten(), "truncated": truncated.flatten()}


def test_skill_model_learns_to_reconstruct_toy_skills():
    torch.manual_seed(0)
    agent = SPiRL(OBS, ACTIONS, small(pretrain_lr=3e-3), torch.device("cpu"))
    agent.prepare(toy_data())
    first = [agent.pretrain_update() for _ in range(10)]
    for _ in range(400):
        last = agent.pretrain_update()
    assert float(last["reconstruction"]) < 0.1 * float(np.mean([float(m["reconstruction"]) for m in first]))
    assert float(last["prior_nll"]) < float(first[0]["prior_nll"]) - 1.0
    # the decoder plays back an encoded window: constant actions of each skill, in [-1, 1] units
    obs, actions = agent.windows.sample(64)
    z = agent.skills.encoder(actions).mean
    decoded = torch.tanh(agent.skills.decoder(obs, z.unsqueeze(1).expand(-1, H, -1)))
    assert (decoded - actions).abs().max() < 0.2


def test_kl_terms_are_exact():
    torch.manual_seed(0)
    agent = SPiRL(OBS, ACTIONS, small(beta=0.0), torch.device("cpu"))
    agent.prepare(toy_data())
    torch.manual_seed(1)
    _, metrics = agent.skills.loss(*agent.windows.sample(32))
    torch.manual_seed(1)
    obs, actions = agent.windows.sample(32)
    q = agent.skills.encoder(actions)
    closed_form = 0.5 * (q.scale.square() + q.loc.square() - 1 - 2 * q.scale.log()).sum(-1).mean()
    assert torch.allclose(metrics["kl"], closed_form, rtol=1e-5)
    # high level: KL(pi || prior) as the diagonal-Gaussian formula of policies.modules
    pi, prior = agent.policy(obs[:, 0]), agent.skills.prior(obs[:, 0])
    assert torch.allclose(kl_divergence(pi, prior).sum(-1), gaussian_kl(pi.loc, pi.scale, prior.loc, prior.scale), rtol=1e-5)
    # low level: the KL of two tanh-squashed Gaussians equals that of the pre-tanh ones (Monte Carlo check)
    p, r = Normal(torch.tensor([0.3, -0.5]), torch.tensor([0.4, 0.3])), Normal(torch.tensor([0.0, 0.2]), torch.tensor([0.3, 0.3]))
    squashed_p, squashed_r = TransformedDistribution(p, [TanhTransform()]), TransformedDistribution(r, [TanhTransform()])
    a = squashed_p.sample((200_000,)).clamp(-1 + 1e-6, 1 - 1e-6)
    monte_carlo = (squashed_p.log_prob(a) - squashed_r.log_prob(a)).sum(-1).mean()
    assert abs(float(monte_carlo) - float(kl_divergence(p, r).sum())) < 0.02


def test_high_level_transitions_sum_the_skill_and_stop_at_episode_ends():
    """Two envs, H = 4, gamma 0.5: env 0 plays two full skills; env 1's first skill ends with its
    episode after two steps (terminated), then a new skill starts."""
    num_envs, steps, gamma = 2, 10, 0.5
    replay = ReplayBuffer(2 * steps, torch.device("cpu"))
    k = [[0, 1, 2, 3, 0, 1, 2, 3, 0, 1], [0, 1, 0, 1, 2, 3, 0, 1, 2, 3]]
    for t in range(steps):
        replay.add({"obs": {"policy": torch.tensor([[t, 0.0, 0.0], [t, 1.0, 0.0]])},
                    "next_obs": {"policy": torch.tensor([[t + 1, 0.0, 0.0], [t + 1, 1.0, 9.0 if t == 1 else 0.0]])},
                    "reward": torch.tensor([1.0, 10.0 * (t + 1)]), "action": torch.zeros(2, 2),
                    "terminated": torch.tensor([False, t == 1]), "truncated": torch.tensor([False, False]),
                    "skill": torch.tensor([[float(t // 4), 0.0], [100.0 + t, 0.0]]),
                    "skill_step": torch.tensor([k[0][t], k[1][t]])})
    torch.manual_seed(0)
    batch = sample_skill_transitions(replay, 256, num_envs, H, gamma, ("policy",))
    rows = {(float(o[0]), float(o[1])): i for i, o in enumerate(batch["obs"]["policy"])}
    # skills that started within the last H steps may still run: only t < 10 - 4 are sampled
    assert set(rows) == {(0.0, 0.0), (4.0, 0.0), (0.0, 1.0), (2.0, 1.0)}
    full = rows[(4.0, 0.0)]
    assert batch["reward"][full] == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert batch["discount"][full] == pytest.approx(gamma ** 4)
    assert batch["next_obs"]["policy"][full, 0] == 8.0 and batch["skill"][full, 0] == 1.0
    cut = rows[(0.0, 1.0)]  # rewards 10, 20, then the episode ended (terminated): no bootstrap
    assert batch["reward"][cut] == pytest.approx(10 + 0.5 * 20)
    assert batch["discount"][cut] == 0.0 and batch["next_obs"]["policy"][cut, 2] == 9.0
    second = rows[(2.0, 1.0)]  # the next episode's first skill: steps 2..5
    assert batch["reward"][second] == pytest.approx(30 + 0.5 * 40 + 0.25 * 50 + 0.125 * 60)
    assert batch["skill"][second, 0] == 102.0


def test_skill_critic_low_level_starts_as_the_decoder_and_the_policy_as_the_prior():
    torch.manual_seed(0)
    agent = SkillCritic(OBS, ACTIONS, small(SkillCriticConfig, decoder_std=0.25), torch.device("cpu"))
    agent.prepare(toy_data())
    for _ in range(20):
        agent.pretrain_update()
    agent.end_pretraining()
    s, z = torch.randn(50, 3), torch.randn(50, 2)
    step = one_hot_step(torch.randint(H, (50,)), H)
    pi = agent.low_policy.distribution(s, z, step)
    assert torch.allclose(pi.loc, agent.skills.decoder(s, z), atol=1e-6)
    assert torch.allclose(pi.scale, torch.full_like(pi.scale, 0.25))
    assert kl_divergence(pi, agent.decoder_distribution(s, z)).abs().max() < 1e-6
    high, prior = agent.policy(s), agent.skills.prior(s)
    assert torch.equal(high.loc, prior.loc) and torch.equal(high.scale, prior.scale)


def online_batch(agent: SPiRL, num_envs: int = 4, steps: int = 16) -> ReplayBuffer:
    """A replay filled by the agent's own act on random observations and rewards."""
    replay = ReplayBuffer(num_envs * steps, torch.device("cpu"))
    obs = {"policy": torch.randn(num_envs, 3)}
    for _ in range(steps):
        out = agent.act(obs)
        next_obs = {"policy": torch.randn(num_envs, 3)}
        replay.add({"obs": obs, "next_obs": next_obs, "reward": torch.rand(num_envs),
                    "terminated": torch.zeros(num_envs, dtype=torch.bool),
                    "truncated": torch.zeros(num_envs, dtype=torch.bool), **out})
        obs = next_obs
    return replay


def online_skill_critic(**changes) -> SkillCritic:
    """A Skill-Critic past its pretraining on the toy skills; ``changes`` to its small config."""
    agent = SkillCritic(OBS, ACTIONS, small(SkillCriticConfig, **changes), torch.device("cpu"))
    agent.prepare(toy_data())
    agent.end_pretraining()
    return agent


def test_spirl_and_skill_critic_pretrain_the_same_skills_from_one_seed():
    models = []
    for cls, cfg in ((SPiRL, small()), (SkillCritic, small(SkillCriticConfig))):
        torch.manual_seed(3)
        agent = cls(OBS, ACTIONS, cfg, torch.device("cpu"))
        agent.prepare(toy_data())
        for _ in range(5):
            agent.pretrain_update()
        models.append(agent.skills.state_dict())
    assert all(torch.equal(models[0][key], models[1][key]) for key in models[0])


def test_skill_critic_trains_in_stages():
    torch.manual_seed(0)
    agent = online_skill_critic(critic_warmup_updates=3, low_start_updates=6)
    replay = online_batch(agent)
    snapshot = lambda module: [p.detach().clone() for p in module.parameters()]  # noqa: E731
    changed = lambda module, before: any(not torch.equal(a, b) for a, b in zip(module.parameters(), before))  # noqa: E731
    seen = []
    for stage in (1, 2, 3):
        modules = (agent.critic, agent.low_critic, agent.policy, agent.low_policy)
        before = [snapshot(m) for m in modules]
        assert agent.state_metrics() == {"stage": float(stage)}  # the stage the next updates train in
        for _ in range(3):
            metrics = agent.update(agent.sample(replay, 16, 4))
        assert "stage" not in metrics  # (averaged over an iteration's updates, it had read 2.5)
        seen.append([changed(m, b) for m, b in zip(modules, before)])
    # critics always; the high-level policy from stage 2; the low-level policy in stage 3 only
    assert seen == [[True, True, False, False], [True, True, True, False], [True, True, True, True]]
    assert all(math.isfinite(float(v)) for v in metrics.values())


def test_skill_critics_low_level_kl_is_to_the_frozen_decoder():
    """Stage 3's low-level policy pays alpha * KL(pi_low || decoder): the metric is that KL, exactly."""
    torch.manual_seed(0)
    agent = online_skill_critic(critic_warmup_updates=0, low_start_updates=0)
    with torch.no_grad():  # moved off the decoder it starts as (KL 0 there)
        for p in agent.low_policy.parameters():
            p.add_(0.3 * torch.randn_like(p))
    batch = agent.sample(online_batch(agent), 16, 4)
    low = batch["low"]
    s = agent.normalizer(flatten_obs(low["obs"], agent.groups))
    z, k = low["skill"], one_hot_step(low["skill_step"].long(), H)
    with torch.no_grad():
        expected = kl_divergence(agent.low_policy.distribution(s, z, k), agent.decoder_distribution(s, z)).sum(-1).mean()
    assert expected > 0.05
    torch.testing.assert_close(agent.update(batch)["low_kl"], expected)


def test_spirl_update_pulls_the_policy_toward_the_target_kl():
    torch.manual_seed(0)
    agent = SPiRL(OBS, ACTIONS, small(target_kl=1.0, alpha_lr=0.1), torch.device("cpu"))
    agent.prepare(toy_data())
    agent.end_pretraining()
    replay = online_batch(agent)
    alpha0 = float(agent.log_alpha.detach().exp())
    for _ in range(5):
        metrics = agent.update(agent.sample(replay, 16, 4))
    assert float(metrics["kl"]) < 1.0 and float(agent.log_alpha.detach().exp()) < alpha0  # KL below target: alpha falls


def test_a_reset_mask_of_numbers_or_numpy_is_read_as_flags_and_anything_else_is_refused():
    """A 0/1 integer mask used as an index had reset worlds 0 and 1 instead of the world that ended."""
    agent = SPiRL(OBS, ACTIONS, small(), torch.device("cpu"))
    agent.end_pretraining()
    controller = agent.controller()
    for mask in (torch.tensor([0, 0, 1, 0]), np.array([False, False, True, False]), [0.0, 0.0, 1.0, 0.0]):
        controller.reset()
        for _ in range(3):
            controller.act({"policy": torch.randn(4, 3)})
        controller.reset(mask)
        assert controller.step.tolist() == [3, 3, 0, 3]
    with pytest.raises(ValueError, match=r"reset\(mask\): flags, True where a world's episode ended \(or 0/1\); "
                                         r"got values \[0, 2\]"):
        controller.reset(torch.tensor([0, 2, 0, 0]))
    # a mask of the wrong length once it had acted had been said with a bare 'reset(mask)', naming no controller
    with pytest.raises(ValueError, match=r"^SkillController\.reset\(mask\): one flag per world, shape \(4,\); "
                                         r"got \(3,\)"):
        controller.reset(torch.tensor([True, False, False]))
    # indices of the worlds to reset (not as many as the worlds) had been said as a mask of the wrong length
    with pytest.raises(ValueError, match=r"^SkillController\.reset\(mask\): flags, .* got values \[0, 2\]: to reset "
                                         r"worlds by index, pass a bool mask of them"):
        controller.reset(torch.tensor([0, 2]))


def test_a_wrong_reset_mask_is_refused_before_the_first_act_too():
    """Every Controller checks its reset mask at once (a stateless one too); the skill controller had accepted
    values of 2, strings and 2-D masks silently until it had acted once, then refused the same mask."""
    agent = SPiRL(OBS, ACTIONS, small(), torch.device("cpu"))
    agent.end_pretraining()
    controller = agent.controller()
    controller.reset(torch.tensor([False, True]))  # a right one is fine: nothing to clear yet
    for bad in (torch.tensor([0, 2, 0, 0]), "abc", torch.tensor([[True]])):
        with pytest.raises(ValueError, match=r"SkillController\.reset\(mask\)"):
            controller.reset(bad)
    assert controller.step is None


@pytest.mark.parametrize("cls", [SPiRL, SkillCritic])
def test_controller_holds_the_skill_for_h_steps_and_resets_per_env(cls):
    torch.manual_seed(0)
    cfg = small(SkillCriticConfig) if cls is SkillCritic else small()
    agent = cls(OBS, ACTIONS, cfg, torch.device("cpu"))
    agent.end_pretraining()
    controller = agent.controller()
    assert controller.decision_period == H
    skills = []
    for t in range(2 * H + 3):
        if t == H + 1:
            controller.reset(torch.tensor([False, True]))  # env 1's episode ended after step H
        action = controller.act({"policy": torch.randn(2, 3)})
        assert action.shape == (2, 2) and (action.abs() <= 2.0).all()
        skills.append(controller.skill.clone())
    skills = torch.stack(skills)  # (T, env, Z)
    new = [[t for t in range(1, len(skills)) if not torch.equal(skills[t, e], skills[t - 1, e])] for e in range(2)]
    assert new == [[H, 2 * H], [H, H + 1, 2 * H + 1]]
    # the agent's own acting state does the same, and goes into the replay with each step
    steps = []
    for t in range(H + 2):
        if t == 2:
            agent.reset(torch.tensor([True, False]))
        steps.append(agent.act({"policy": torch.randn(2, 3)})["skill_step"].tolist())
    assert [s[0] for s in steps] == [0, 1, 0, 1, 2, 3] and [s[1] for s in steps] == [0, 1, 2, 3, 0, 1]


@pytest.mark.parametrize("move", [torch.float64, "meta"])
def test_a_skill_controller_moved_after_acting_picks_new_skills_where_it_was_moved(move):
    """A move (``.to()``, ``.cuda()``, ``.double()``...) that would take its held skills and steps elsewhere lets
    them go: every env picks a new skill at the next act, where the controller now is. The meta device is the CPU's
    stand-in for a move to a GPU: the skills had stayed on the CPU, and the next act raised 'Tensor on device meta is
    not on the expected device cpu' (on a GPU, torch.where of CUDA and CPU tensors raises alike), reset() or not.
    (Moved to float64 it had acted on, the held skill promoted.) A move that changes nothing keeps them."""
    torch.manual_seed(0)
    agent = SPiRL(OBS, ACTIONS, small(), torch.device("cpu"))
    agent.end_pretraining()
    controller = agent.controller()
    obs = {"policy": torch.randn(2, 3)}
    controller.act(obs)
    held = controller.skill.clone()
    controller.cpu().float().act(obs)  # nothing moved: the skill is held on
    assert torch.equal(controller.skill, held) and controller.step.tolist() == [2.0, 2.0]
    controller.to(move)
    controller.reset()  # as evaluate() starts
    action = controller.act(obs)
    expected = torch.device(move) if move == "meta" else torch.device("cpu")
    assert action.shape == (2, 2) and action.device == expected
    assert controller.skill.device == controller.step.device == expected
    if move != "meta":
        assert action.dtype == torch.float64 and controller.step.tolist() == [1.0, 1.0]


@pytest.mark.parametrize("cls", [SPiRL, SkillCritic])
def test_exported_controller_matches_the_module(cls, tmp_path):
    import onnxruntime

    torch.manual_seed(0)
    cfg = small(SkillCriticConfig) if cls is SkillCritic else small()
    agent = cls(OBS, ACTIONS, cfg, torch.device("cpu"))
    agent.prepare(toy_data())
    agent.end_pretraining()
    controller = agent.controller()
    paths = export_controller(controller, tmp_path)
    meta = json.loads(paths["meta"].read_text())
    assert meta["decision_period"] == H and list(meta["inputs"]) == ["obs", "skill", "step"]
    scripted = torch.jit.load(str(paths["torchscript"]))
    session = onnxruntime.InferenceSession(str(paths["onnx"]), providers=["CPUExecutionProvider"])
    skill, step = torch.zeros(3, 2), torch.zeros(3)
    onnx_skill, onnx_step = skill.numpy(), step.numpy()
    for _ in range(2 * H + 1):
        obs = torch.randn(3, 3)
        expected = controller.act({"policy": obs})
        action, skill, step = scripted(obs, skill, step)
        onnx_action, onnx_skill, onnx_step = session.run(None, {"obs": obs.numpy(), "skill": onnx_skill, "step": onnx_step})
        assert torch.allclose(action, expected, atol=1e-5)
        assert np.allclose(onnx_action, expected.numpy(), atol=1e-4)
        assert torch.equal(skill, controller.skill)
    # robolearn eval --exported / deploy: ExportedController holds the state itself, reset per env
    drivers = [ExportedController(paths["torchscript"]), ExportedController(paths["onnx"])]
    controller.reset()
    for t in range(2 * H + 2):
        if t == 3:
            for driver in (controller, *drivers):
                driver.reset(torch.tensor([False, True, False]))
        obs = {"policy": torch.randn(3, 3)}
        expected = controller.act(obs)
        for driver in drivers:
            assert torch.allclose(driver.act(obs), expected, atol=1e-4)


def test_config_errors_name_the_key():
    with pytest.raises(ValueError, match="agent.horizon must be >= 1"):
        SPiRL(OBS, ACTIONS, small(horizon=0), torch.device("cpu"))
    with pytest.raises(ValueError, match="agent.critic_warmup_updates"):
        SkillCritic(OBS, ACTIONS, small(SkillCriticConfig, critic_warmup_updates=5, low_start_updates=2),
                    torch.device("cpu"))
    with pytest.raises(ConfigError, match="unknown key 'agent.horizn'"):
        load_config("spirl_point_maze_medium", ["agent.horizn=5"])


def test_each_pretraining_line_is_a_wandb_step_of_its_own(maze_datasets, tmp_path, monkeypatch):
    """Pretraining lines were sent to W&B at step 0 (their env step), where W&B merges a step's rows into one: of a
    pretraining's hundreds of lines W&B kept the last, and its curve was a point. W&B steps now count the
    pretraining updates, then the online env steps after them (as a fine-tuning run's phases do)."""
    import wandb

    logged: list[tuple[int, dict]] = []

    class Recorder:
        def log(self, data, step):
            logged.append((step, dict(data)))

        def finish(self, exit_code=0): ...

    monkeypatch.setattr(wandb, "init", lambda **kwargs: Recorder())
    monkeypatch.setenv("ROBOLEARN_DATASETS", str(maze_datasets))
    overrides = [f"run_dir={tmp_path}", "dataset=maze-tiny", "logging.wandb=offline", "logging.progress=false",
                 "env.num_envs=2", "env.kwargs.max_episode_steps=60", "runner.total_steps=600",
                 "runner.random_steps=100", "runner.utd_ratio=0.05", "runner.eval_episodes=0",
                 "runner.checkpoint_every=5", "agent.pretrain_updates=1100", "agent.pretrain_batch_size=4",
                 "agent.batch_size=8", "agent.buffer_size=600", "agent.hidden=[8,8]", "agent.prior_hidden=[8,8]",
                 "agent.decoder_hidden=[8,8]", "agent.encoder_hidden=8", "runner.video_seconds=0"]
    result = train(load_config("spirl_point_maze_medium", overrides))
    steps = [step for step, _ in logged]
    assert [data.get("pretrain_updates") for _, data in logged[:2]] == [1000, 1100]
    assert steps == sorted(set(steps)), steps  # a step each, in order
    assert steps[:2] == [1000, 1100] and steps[2] == 1100 + logged[2][1]["env_steps"]
    # a resume past the pretraining reads no dataset; its online lines still come after the pretraining's steps
    # (W&B drops a step below one it has), at the same offset
    logged.clear()
    train(load_config("spirl_point_maze_medium", [*overrides, "runner.total_steps=1200"]), resume=result.run_dir)
    assert logged and all(step == 1100 + data["env_steps"] for step, data in logged)
    assert min(step for step, _ in logged) > steps[-1]


@pytest.mark.parametrize("algo", ["spirl", "skill_critic"])
def test_one_run_pretrains_on_the_dataset_then_trains_online(algo, maze_datasets, tmp_path, monkeypatch):
    monkeypatch.setenv("ROBOLEARN_DATASETS", str(maze_datasets))
    overrides = [f"run_dir={tmp_path}", "dataset=maze-tiny", "logging.wandb=disabled", "logging.progress=false",
                 "env.num_envs=2", "env.kwargs.max_episode_steps=60", "runner.total_steps=600",
                 "runner.random_steps=100", "runner.utd_ratio=0.05", "runner.eval_episodes=2",
                 "runner.checkpoint_every=1", "agent.pretrain_updates=300", "agent.pretrain_batch_size=16",
                 "agent.batch_size=16", "agent.buffer_size=600", "agent.hidden=[16,16]",
                 "agent.prior_hidden=[16,16]", "agent.decoder_hidden=[16,16]", "agent.encoder_hidden=16"]
    if algo == "skill_critic":
        overrides += ["agent.critic_warmup_updates=5", "agent.low_start_updates=10"]
    result = train(load_config(f"{algo}_point_maze_medium", overrides))
    lines = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    pretrain = [line for line in lines if line.get("phase") == "pretrain"]
    online = [line for line in lines if "phase" not in line]
    assert [line["pretrain_updates"] for line in pretrain] == [300] and pretrain[0]["env_steps"] == 0
    assert [line["env_steps"] for line in online] == [1000]  # one iteration: 500 steps of 2 envs
    assert "critic_loss" in online[0] and (result.run_dir / "pretrained" / "controller.pt").is_file()
    meta = json.loads((result.run_dir / "pretrained" / "controller.json").read_text())
    assert meta["trained"] == {"pretrain_updates": 300} and meta["run"] == str(result.run_dir.resolve())
    if algo == "skill_critic":  # stage 3 at the iteration's end, not the mean over its updates (1, 2, then 3)
        assert online[0]["stage"] == 3.0
    assert result.evaluation["episodes"] == 2 and "success_rate" in result.evaluation
    payload = load_checkpoint(result.run_dir / "checkpoints" / "latest.pt")
    assert payload["progress"]["pretrained"] and payload["progress"]["pretrain_updates"] == 300
    replay = torch.load(result.run_dir / "checkpoints" / "replay.pt", weights_only=True)
    assert set(replay["data"]["skill_step"].tolist()) == set(range(10))


def test_no_pretraining_is_said_to_leave_the_skill_model_untrained(maze_datasets, tmp_path, monkeypatch):
    from robolearn.runner import Runner

    monkeypatch.setenv("ROBOLEARN_DATASETS", str(maze_datasets))
    runner = Runner(load_config("spirl_point_maze_medium", [
        f"run_dir={tmp_path}", "dataset=maze-tiny", "logging.wandb=disabled", "env.num_envs=2",
        "env.kwargs.max_episode_steps=60", "agent.pretrain_updates=0", "agent.hidden=[16,16]"]))
    try:
        with pytest.warns(UserWarning, match=r"agent.pretrain_updates=0: SPiRL learns nothing from dataset 'maze-tiny' "
                                             r"before the online phase, which then acts through an untrained skill"):
            runner._pretrain(None)
    finally:
        runner.close()


def test_a_horizon_longer_than_every_episode_names_the_longest():
    from policies.skills.windows import DatasetWindows

    ends = torch.tensor([0, 0, 1, 0, 0, 0, 1], dtype=torch.bool)  # episodes of 3 and 4 steps
    with pytest.raises(ValueError, match=r"no episode of at least agent.horizon = 5 steps \(its longest has 4\)"):
        DatasetWindows(torch.zeros(7, 2), torch.zeros(7, 1), ends, 5)
    assert len(DatasetWindows(torch.zeros(7, 2), torch.zeros(7, 1), ends, 4).starts) == 1


def test_skills_pretrain_on_another_mazes_play_data_with_a_word(maze_datasets, tmp_path, monkeypatch):
    """SPiRL's premise, skills from one environment's play data used in another: it had been refused."""
    from robolearn.runner import Runner

    monkeypatch.setenv("ROBOLEARN_DATASETS", str(maze_datasets))
    with pytest.warns(UserWarning, match=r"dataset 'maze-tiny-v0' was recorded on task 'point_maze_medium', and its "
                                         r"skills are used on 'point_maze_large'"):
        Runner(load_config("spirl_point_maze_large", [
            f"run_dir={tmp_path}", "dataset=maze-tiny", "logging.wandb=disabled", "env.num_envs=2",
            "agent.pretrain_updates=10", "agent.hidden=[16,16]"])).close()


def test_a_skill_agent_without_a_dataset_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="pretrains on a dataset"):
        train(load_config("spirl_point_maze_medium", [f"run_dir={tmp_path}", 'dataset=""', "logging.wandb=disabled"]))


def tiny_spirl(run_dir, *settings: str) -> list[str]:
    """Overrides of a SPiRL run on maze-tiny in seconds (8-unit networks, 600 env steps) under ``run_dir``, with
    ``settings`` (its pretraining length, evaluation, ...) after them."""
    return [f"run_dir={run_dir}", "dataset=maze-tiny", "logging.wandb=disabled", "logging.progress=false",
            "env.num_envs=2", "env.kwargs.max_episode_steps=60", "runner.total_steps=600", "runner.random_steps=100",
            "runner.utd_ratio=0.02", "agent.pretrain_batch_size=8", "agent.batch_size=8", "agent.buffer_size=600",
            "agent.hidden=[8]", "agent.prior_hidden=[8]", "agent.decoder_hidden=[8]", "agent.encoder_hidden=8",
            *settings]


def interrupted_in_pretraining(cfg, at: int):
    """A Runner of ``cfg`` trained until a Ctrl+C during its ``at``-th pretraining update (taken after it, between
    updates), then closed."""
    from robolearn.runner import Runner

    runner = Runner(cfg)
    update, calls = runner.agent.pretrain_update, []

    def interrupting() -> dict:
        calls.append(1)
        if len(calls) == at:
            runner.ctrl_c.pending = True
        return update()

    runner.agent.pretrain_update = interrupting
    try:
        assert runner.train().interrupted
    finally:
        runner.close()
    return runner


def test_sums_a_ctrl_c_left_of_pretraining_stay_out_of_the_online_lines(maze_datasets, tmp_path, monkeypatch):
    """A resume with agent.pretrain_updates at or under the updates done runs no pretraining iteration: the sums a
    Ctrl+C had left of one were carried into the first online line (loss, reconstruction, prior_nll unprefixed)."""
    from robolearn.runner import Runner

    monkeypatch.setenv("ROBOLEARN_DATASETS", str(maze_datasets))
    runner = interrupted_in_pretraining(load_config("spirl_point_maze_medium", tiny_spirl(
        tmp_path, "runner.eval_episodes=0", "agent.pretrain_updates=60")), at=30)
    assert load_checkpoint(runner.checkpoint_path)["progress"]["update_sums"]
    resumed = Runner(load_config(runner.run_dir / "config.yaml", ["agent.pretrain_updates=30"]), resume=runner.run_dir)
    try:
        resumed.train()
    finally:
        resumed.close()
    online = [json.loads(line) for line in (runner.run_dir / "metrics.jsonl").read_text().splitlines()
              if json.loads(line).get("phase") != "pretrain"]
    assert online and not [key for line in online for key in line if key in ("loss", "reconstruction", "prior_nll")]


def test_resume_continues_pretraining_then_the_online_phase(maze_datasets, tmp_path, monkeypatch):
    """Ctrl+C in the middle of pretraining keeps the updates done (it had discarded up to 999 of them);
    --resume finishes that iteration, then pretraining, once (not again), and trains online. The iteration's
    line averages all its updates, as a run trained in one go logs it (it had averaged those after the resume)."""
    from robolearn.runner import Runner

    monkeypatch.setenv("ROBOLEARN_DATASETS", str(maze_datasets))
    overrides = tiny_spirl(tmp_path, "runner.eval_episodes=0", "runner.checkpoint_every=1", "agent.pretrain_updates=1100")
    straight = Runner(load_config("spirl_point_maze_medium", overrides))
    try:
        straight.train()
    finally:
        straight.close()
    runner = interrupted_in_pretraining(load_config("spirl_point_maze_medium", overrides), at=1050)
    progress = load_checkpoint(runner.checkpoint_path)["progress"]
    assert progress["pretrain_updates"] == 1050 and not progress["pretrained"]
    with (runner.run_dir / "metrics.jsonl").open("a") as f:  # as if killed after logging an iteration it did not save
        f.write(json.dumps({"env_steps": 0, "phase": "pretrain", "pretrain_updates": 1100, "killed": True}) + "\n")
    resumed = Runner(load_config(runner.run_dir / "config.yaml", []), resume=runner.run_dir)
    try:
        resumed.train()
    finally:
        resumed.close()
    lines = [json.loads(line) for line in (runner.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["pretrain_updates"] for line in lines if line.get("phase") == "pretrain"] == [1000, 1100]
    one_go = [json.loads(line) for line in (straight.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [{k: v for k, v in line.items() if k not in ("time", "iteration_time")} for line in lines
            if line.get("phase") == "pretrain"] == \
        [{k: v for k, v in line.items() if k not in ("time", "iteration_time")} for line in one_go
         if line.get("phase") == "pretrain"]
    assert not any("killed" in line for line in lines)  # set aside, redone once
    assert "killed" in (runner.run_dir / "metrics.superseded.jsonl").read_text()
    assert [line["env_steps"] for line in lines if "phase" not in line] == [1000]
    assert (runner.run_dir / "pretrained" / "controller.pt").is_file()


def checkpoint_obs_shape(run_dir) -> tuple[int, ...]:
    with sims.make_env("point_maze_medium", num_envs=1, seed=0) as env:
        return tuple(env.observation_spec["policy"].shape)


def test_max_minutes_ends_a_run_in_its_pretraining_and_the_resume_finishes_it(maze_datasets, tmp_path, monkeypatch,
                                                                                capsys):
    """runner.max_minutes was not looked at until the online phase: a run given minutes pretrained for hours.
    It now ends there, exporting and evaluating the skills so far; the checkpoint resumes the pretraining."""
    from robolearn import runner as runner_module
    from robolearn.export import ExportedController
    from robolearn.runs import load_controller, run_status

    monkeypatch.setenv("ROBOLEARN_DATASETS", str(maze_datasets))
    monkeypatch.setattr(runner_module, "out_of_time", lambda deadline, lap: lap > 0)  # after one iteration
    overrides = tiny_spirl(tmp_path, "runner.eval_episodes=1", "runner.max_minutes=1", "runner.video_seconds=0",
                                     "agent.pretrain_updates=1100")
    result = train(load_config("spirl_point_maze_medium", overrides))
    progress = load_checkpoint(result.run_dir / "checkpoints" / "latest.pt")["progress"]
    assert progress["pretrain_updates"] == 1000 and not progress["pretrained"] and progress["env_steps"] == 0
    assert "ended early: 1,000 of agent.pretrain_updates=1,100 pretraining updates (runner.max_minutes)" in \
        capsys.readouterr().out
    assert result.evaluation["episodes"] == 1 and result.trained == {"pretrain_updates": 1000}
    assert run_status(result.run_dir).startswith("ended early at pretrain 1,000 of 1,100 pretrain_updates")
    # eval, play and dataset record of the checkpoint act as its export does (an untrained policy had acted)
    checkpoint, exported = load_controller(result.run_dir), ExportedController(result.exported["torchscript"])
    obs = {"policy": torch.randn(3, *checkpoint_obs_shape(result.run_dir))}
    torch.testing.assert_close(checkpoint.act(obs), exported.act(obs), atol=1e-5, rtol=1e-5)
    monkeypatch.setattr(runner_module, "out_of_time", lambda deadline, lap: False)
    # a count below the updates done had gone online past it, config.yaml then recording the count (a fine-tune's
    # resume refuses it alike); refused before the dataset is read (it had been read, and prepared, first)
    monkeypatch.setenv("ROBOLEARN_DATASETS", str(tmp_path / "none"))
    with pytest.raises(ConfigError, match=r"pretrain_updates=500: .* has pretrained 1,000 updates and a resume does "
                                          r"not undo updates; resume with agent.pretrain_updates=1000 or more"):
        train(load_config(result.run_dir / "config.yaml", ["agent.pretrain_updates=500"]), resume=result.run_dir)
    monkeypatch.setenv("ROBOLEARN_DATASETS", str(maze_datasets))
    resumed = train(load_config(result.run_dir / "config.yaml", []), resume=result.run_dir)
    lines = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["pretrain_updates"] for line in lines if line.get("phase") == "pretrain"] == [1000, 1100]
    assert [line["env_steps"] for line in lines if "phase" not in line] == [1000]
    assert resumed.trained["pretrain_updates"] == 1100 and resumed.trained["env_steps"] == 1000
    assert run_status(result.run_dir) == "done" and (result.run_dir / "eval.superseded.json").is_file()
    monkeypatch.setenv("ROBOLEARN_DATASETS", str(tmp_path / "none"))  # past pretraining, its dataset is not read
    # another count past the pretraining is refused (its online lines' W&B steps start after the count, and
    # config.yaml had recorded 3000 never trained), as a fine-tune's; other pretraining settings change nothing
    with pytest.raises(ConfigError, match=r"pretrain_updates=3000: .* has pretrained 1,100 updates and is past its "
                                          r"pretraining, which a resume does not go back to; resume with "
                                          r"agent.pretrain_updates=1100 \(or without the override\)"):
        train(load_config(result.run_dir / "config.yaml", ["agent.pretrain_updates=3000"]), resume=result.run_dir)
    with pytest.warns(UserWarning, match=r"agent.pretrain_lr: .* is past its pretraining.* change nothing"):
        again = train(load_config(result.run_dir / "config.yaml", ["runner.total_steps=1600",
                                                                   "agent.pretrain_lr=0.01"]), resume=result.run_dir)
    assert again.trained == {"env_steps": 2000, "pretrain_updates": 1100}


def test_stop_is_asked_in_the_pretraining_and_ends_the_run_there(maze_datasets, tmp_path, monkeypatch, capsys):
    """train(stop=...) was first asked once the online phase began: a skill run's pretraining lines, in
    metrics.jsonl as any, were never shown to it, so no stop could end an hours-long pretraining (a fine-tune's
    offline phase asks it). It now sees each pretraining iteration and ends the run there, as max_minutes does."""
    monkeypatch.setenv("ROBOLEARN_DATASETS", str(maze_datasets))
    overrides = tiny_spirl(tmp_path, "runner.eval_episodes=1", "runner.video_seconds=0", "agent.pretrain_updates=1100")
    seen: list[dict] = []
    result = train(load_config("spirl_point_maze_medium", overrides), stop=lambda m: seen.append(m) or True)
    assert [(m["phase"], m["pretrain_updates"], m["iteration"], m["env_steps"]) for m in seen] == \
        [("pretrain", 1000, 1, 0)] and "pretrain/loss" in seen[0] and seen[0]["iteration_time"] > 0  # (README: as
    # the metrics.jsonl line, durations kept)
    progress = load_checkpoint(result.run_dir / "checkpoints" / "latest.pt")["progress"]
    assert progress["pretrain_updates"] == 1000 and not progress["pretrained"] and progress["env_steps"] == 0
    assert "ended early: 1,000 of agent.pretrain_updates=1,100 pretraining updates (train()'s stop)" in \
        capsys.readouterr().out
    assert result.trained == {"pretrain_updates": 1000} and result.evaluation["episodes"] == 1
    resumed = train(load_config(result.run_dir / "config.yaml", []), resume=result.run_dir)
    assert resumed.trained == {"env_steps": 1000, "pretrain_updates": 1100}


def test_a_run_takes_another_runs_pretrained_skills_instead_of_pretraining(maze_datasets, tmp_path, monkeypatch):
    """Each seed or online sweep had pretrained the skill model again: agent.skills_from takes a finished
    pretraining's skills (a skill_critic run takes a spirl run's: one skill model); no dataset is read."""
    from robolearn.runner import Runner

    monkeypatch.setenv("ROBOLEARN_DATASETS", str(maze_datasets))
    small = ["logging.wandb=disabled", "logging.progress=false", "env.num_envs=2", "env.kwargs.max_episode_steps=60",
             "runner.total_steps=200", "runner.random_steps=100", "runner.utd_ratio=0.02", "runner.eval_episodes=0",
             "runner.video_seconds=0", "agent.pretrain_batch_size=8", "agent.batch_size=8", "agent.buffer_size=200",
             "agent.hidden=[8]", "agent.prior_hidden=[8]", "agent.decoder_hidden=[8]", "agent.encoder_hidden=8"]
    source = train(load_config("spirl_point_maze_medium", [f"run_dir={tmp_path / 'a'}", "dataset=maze-tiny",
                                                           "agent.pretrain_updates=100", *small])).run_dir
    taker = Runner(load_config("skill_critic_point_maze_medium", [f"run_dir={tmp_path / 'b'}", 'dataset=""',
                                                                  f"agent.skills_from={source}", *small]))
    try:
        theirs = load_checkpoint(source / "checkpoints" / "latest.pt")["agent"]["skills"]
        assert all(torch.equal(v, theirs[k]) for k, v in taker.agent.skills.state_dict().items())
        assert taker.progress.pretrained and taker.dataset is None
        taker.train()
        lines = [json.loads(line) for line in (taker.run_dir / "metrics.jsonl").read_text().splitlines()]
        assert not any(line.get("phase") == "pretrain" for line in lines)  # no pretraining phase at all
    finally:
        taker.close()
    with pytest.raises(ConfigError, match=rf"agent.skills_from: {taker.run_dir} was trained with {source}; a resume"):
        Runner(load_config(taker.run_dir / "config.yaml", ['agent.skills_from=""']), resume=taker.run_dir)
    # another agent.pretrain_updates sets nothing in a run that pretrained none: said to change nothing, as the other
    # pretraining settings (it had been refused as a count the run was past, naming updates it never made)
    with pytest.warns(UserWarning, match=r"agent.pretrain_updates: .* is past its pretraining.* change nothing"):
        Runner(load_config(taker.run_dir / "config.yaml", ["agent.pretrain_updates=5", "runner.total_steps=2000"]),
               resume=taker.run_dir).close()
    with pytest.raises(ConfigError, match=r"its skills are 10 steps long, this run's agent.horizon is 5"):
        Runner(load_config("spirl_point_maze_medium", [f"run_dir={tmp_path / 'c'}", f"agent.skills_from={source}",
                                                       "agent.horizon=5", *small]))
    with pytest.raises(ConfigError, match=r"its skills were learnt with agent.activation 'relu', this run's is 'elu'.*"
                                          r"set agent.activation=relu"):  # (an activation has no weights: it had loaded)
        Runner(load_config("spirl_point_maze_medium", [f"run_dir={tmp_path / 'c'}", f"agent.skills_from={source}",
                                                       "agent.activation=elu", *small]))
    payload = load_checkpoint(source / "checkpoints" / "latest.pt")
    payload["progress"]["pretrained"] = False  # as a run stopped inside its pretraining
    torch.save(payload, source / "checkpoints" / "latest.pt")
    with pytest.raises(ConfigError, match=r"that run has not finished pretraining its skills \(100 updates so far\)"):
        Runner(load_config("spirl_point_maze_medium", [f"run_dir={tmp_path / 'c'}", f"agent.skills_from={source}",
                                                       *small]))


def test_a_buffer_that_cannot_hold_whole_env_windows_is_refused_at_build(tmp_path):
    """It had been said after pretraining and the random steps: 10+ minutes into a run at the defaults."""
    from robolearn import load_config
    from robolearn.config import ConfigError
    from robolearn.runner import Runner

    cfg = load_config("spirl_point_maze_medium", [f"run_dir={tmp_path}", "env.num_envs=7", "logging.wandb=disabled"])
    with pytest.raises(ConfigError, match=r"agent.buffer_size \(\d+\) must be a multiple of env.num_envs \(7\)"):
        Runner(cfg)
    assert not any(tmp_path.iterdir())  # no run directory left behind
