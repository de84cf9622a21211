"""Goal-conditioned offline agents: hindsight relabeling draws goals from the right sources,
each agent trains on a tiny recorded maze dataset, its exported controller (module,
TorchScript, ONNX) acts as the agent's networks do, HIQL's goal representation has
length sqrt(10), OTA's option-aware target bootstraps from the state an option later with one
gamma, and ``robolearn train`` runs HIQL end to end with a success rate."""

from __future__ import annotations

import json
import math

import pytest
import torch

import sims
from policies import AGENTS
from policies.goal import GCBC, GCIQL, HIQL, OTA, GCBCConfig, GCIQLConfig, HIQLConfig, OTAConfig
from policies.goal.relabel import GoalSampler, RelabelConfig
from policies.offline.common import episode_ends
from robolearn import load_config
from robolearn.data import Dataset, DatasetWriter, record
from robolearn.export import ExportedController, export_controller
from robolearn.runner import train
from sims.tasks.maze_navigator import MazeNavigator

EPISODES, LENGTH = 10, 100


def synthetic(episodes: int = EPISODES, length: int = LENGTH) -> dict:
    """Transitions whose policy observation is (episode, t, 0, 0): a goal names its row."""
    ep = torch.arange(episodes).repeat_interleave(length).float()
    t = torch.arange(length).repeat(episodes).float()
    obs = torch.stack([ep, t, torch.zeros_like(t), torch.zeros_like(t)], 1)
    truncated = t == length - 1
    return {"obs": {"policy": obs}, "next_obs": {"policy": obs + torch.tensor([0.0, 1.0, 0.0, 0.0])},
            "action": torch.zeros(len(t), 2), "reward": -torch.ones(len(t)),
            "terminated": torch.zeros(len(t), dtype=torch.bool), "truncated": truncated}


def test_value_goals_come_from_the_right_sources_with_the_right_probabilities():
    torch.manual_seed(0)
    sampler = GoalSampler(synthetic(), episode_ends(synthetic()), 2, RelabelConfig())
    batch = sampler.sample(40_000)
    (ep, t), (gep, gt) = batch["obs"][:, :2].T, batch["value_goal"].T
    current = (ep == gep) & (t == gt)
    later = (ep == gep) & (gt > t)
    other = ep != gep
    earlier = (ep == gep) & (gt < t)  # only random goals (0.3) land there: 1/10 episodes, half of it earlier
    assert earlier.float().mean().item() == pytest.approx(0.3 / EPISODES * 0.5, abs=0.006)
    # current: 0.2, plus future capped at a last row (1/100 of rows, p 0.5) and random hits (0.3/1000)
    assert current.float().mean().item() == pytest.approx(0.2 + 0.5 / LENGTH, abs=0.012)
    assert other.float().mean().item() == pytest.approx(0.3 * (1 - 1 / EPISODES), abs=0.012)
    # future: 0.5 (minus capped last rows), plus random goals later in the same trajectory (~0.3 * 0.1 * 0.5)
    assert later.float().mean().item() == pytest.approx(0.5 * (1 - 1 / LENGTH) + 0.3 / EPISODES * 0.5, abs=0.015)
    # the reward is 0 and bootstrapping stops exactly where the goal is the current state
    assert torch.equal(batch["reward"] == 0, current) and torch.equal(batch["mask"] == 0, current)


def test_future_goals_follow_a_capped_geometric_offset():
    torch.manual_seed(0)
    sampler = GoalSampler(synthetic(length=1000, episodes=2), episode_ends(synthetic(length=1000, episodes=2)), 2,
                          RelabelConfig(p_current=0.0, p_future=1.0, p_random=0.0, gamma=0.9))
    idx = torch.zeros(20_000, dtype=torch.long)  # t = 0 of episode 0: no cap within reach
    offsets = sampler.value_goals(idx).float()
    assert offsets.min() >= 1 and offsets.mean().item() == pytest.approx(10.0, rel=0.05)  # geometric(0.1): mean 10
    late = torch.full((1000,), 995)  # 4 steps before the end: capped at the last row of episode 0
    assert sampler.value_goals(late).max() == 999 and sampler.value_goals(late).min() >= 996


def test_actor_goals_and_subgoals_are_later_in_the_same_trajectory():
    torch.manual_seed(0)
    data = synthetic()
    sampler = GoalSampler(data, episode_ends(data), 2, RelabelConfig())
    batch = sampler.sample(10_000, subgoal_steps=25)
    (ep, t), (gep, gt) = batch["obs"][:, :2].T, batch["actor_goal"].T
    assert torch.equal(ep, gep)
    assert ((gt > t) | (t == LENGTH - 1)).all() and (gt <= LENGTH - 1).all()
    first = sampler.actor_goals(torch.zeros(20_000, dtype=torch.long))  # from t = 0: uniform over 1..99
    assert first.min() == 1 and first.max() == LENGTH - 1
    assert first.float().mean().item() == pytest.approx(50.0, abs=1.0)
    assert torch.equal(batch["subgoal"][:, 1], torch.clamp(t + 25, max=LENGTH - 1))
    # the high level's target is the subgoal, but never past the actor goal (OGBench's high_actor_targets)
    target_ep, target_t = batch["high_target"].T
    assert torch.equal(target_ep, ep) and torch.equal(target_t, torch.minimum(batch["subgoal"][:, 1], gt))
    assert torch.equal(batch["high_target_obs"][:, :2], batch["high_target"])
    near = gt < t + 25
    assert near.any() and (~near).any()  # both cases are drawn


def test_options_end_n_steps_later_or_at_a_goal_reached_within_them():
    torch.manual_seed(0)
    data = synthetic()
    sampler = GoalSampler(data, episode_ends(data), 2, RelabelConfig())
    batch = sampler.sample(20_000, option_steps=5)
    (ep, t), (gep, gt), (oep, ot) = batch["obs"][:, :2].T, batch["value_goal"].T, batch["option_obs"][:, :2].T
    assert torch.equal(oep, ep)  # options stay in their trajectory
    end = torch.clamp(t + 5, max=LENGTH - 1)
    ahead = (gep == ep) & (gt >= t)
    assert torch.equal(ot, torch.where(ahead, torch.minimum(end, gt), end))
    within = ahead & (gt <= t + 5)  # the goal is reached within the option: reward 0, no bootstrap
    assert 0.1 < within.float().mean() < 0.6 and (ahead & (gt > t + 5)).any() and (~ahead).any()
    assert torch.equal(batch["option_reward"] == 0, within) and torch.equal(batch["option_mask"] == 0, within)
    assert torch.equal(batch["option_reward"], batch["option_mask"] * -1.0)
    # the one-step fields are untouched: reward 0 only at the current state
    assert torch.equal(batch["reward"] == 0, (gep == ep) & (gt == t))
    assert "option_obs" not in sampler.sample(8)


@pytest.fixture(scope="module")
def maze_root(tmp_path_factory):
    """8 navigator episodes of 300 steps on the medium maze, as make_maze_datasets records them."""
    root = tmp_path_factory.mktemp("datasets")
    kwargs = {"goals": "train", "terminate_at_goal": False, "max_episode_steps": 300}
    with sims.make_env("point_maze_medium", num_envs=8, seed=0, num_threads=1, **kwargs) as env:
        meta = {"task": "point_maze_medium", "task_kwargs": kwargs, "controller": "MazeNavigator"}
        with DatasetWriter("maze-tiny", env.observation_spec, env.action_spec, metadata=meta, root=root) as writer:
            record(MazeNavigator(env.task.grid, 8), env, writer, 8, noise=0.2, seed=0, progress=False)
    return root


def make_agent(name: str, root):
    dataset = Dataset.load("maze-tiny", root)
    small = {"hidden": (32, 32), "batch_size": 64}
    cls, cfg = {"gcbc": (GCBC, GCBCConfig(**small)), "gciql": (GCIQL, GCIQLConfig(**small)),
                "hiql": (HIQL, HIQLConfig(**small)), "ota": (OTA, OTAConfig(**small))}[name]
    agent = cls(dataset.observation_spec, dataset.action_spec, cfg, torch.device("cpu"))
    agent.prepare(dataset.transitions())
    return agent


@pytest.mark.parametrize("name", ["gcbc", "gciql", "hiql", "ota"])
def test_agent_trains_and_exports_a_controller_that_acts_like_it(name, maze_root, tmp_path):
    torch.manual_seed(0)
    agent = make_agent(name, maze_root)
    loss_key = {"gcbc": "actor_loss", "gciql": "actor_loss", "hiql": "low_actor_loss", "ota": "low_actor_loss"}[name]
    losses = []
    for _ in range(300):
        metrics = agent.update(agent.sample(64))
        assert all(math.isfinite(float(v)) for v in metrics.values()), metrics
        losses.append(float(metrics[loss_key]))
    assert sum(losses[-50:]) < sum(losses[:50])  # it learned something

    obs = {"policy": torch.randn(16, 4) + 3.0, "goal": torch.rand(16, 2) * 6 + 1}
    s, g = agent.normalizer(obs["policy"], obs["goal"])
    with torch.no_grad():
        if name in ("hiql", "ota"):
            z = agent.high(torch.cat([s, g], -1))
            z = z / z.norm(dim=-1, keepdim=True) * math.sqrt(10)
            expected = agent.scaler(torch.tanh(agent.low(torch.cat([s, z], -1))))
        else:
            expected = agent.scaler(torch.tanh(agent.actor(torch.cat([s, g], -1))))
    controller = agent.controller().eval()
    assert controller.obs_groups == ("policy", "goal")
    torch.testing.assert_close(controller.act(obs), expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(agent.act(obs)["action"], expected, atol=1e-4, rtol=1e-4)
    paths = export_controller(controller, tmp_path / "export")
    for fmt in ("torchscript", "onnx"):
        torch.testing.assert_close(ExportedController(paths[fmt]).act(obs), expected, atol=1e-4, rtol=1e-4)


def test_hiql_goal_representation_has_length_sqrt_10(maze_root):
    agent = make_agent("hiql", maze_root)
    batch = agent.sample(256)
    s, g = agent.normalizer(batch["obs"], batch["value_goal"])
    with torch.no_grad():
        lengths = agent.value.phi(s, g).norm(dim=-1)
    torch.testing.assert_close(lengths, torch.full_like(lengths, math.sqrt(10)), atol=1e-4, rtol=1e-4)
    assert agent.value(s, g).shape == (2, 256)  # the 2-ensemble


def test_hiql_high_level_regresses_onto_the_target_capped_at_its_goal(maze_root):
    torch.manual_seed(0)
    agent = make_agent("hiql", maze_root)
    batch = agent.sample(512)
    assert not torch.equal(batch["high_target"], batch["subgoal"])  # some actor goals are closer than k = 25 steps
    s, g_actor = agent.normalizer(batch["obs"], batch["actor_goal"])
    s_h, w_h = agent.normalizer(batch["high_target_obs"], batch["high_target"])
    _, w = agent.normalizer(batch["obs"], batch["subgoal"])
    with torch.no_grad():
        weight = torch.exp(agent.cfg.high_beta * agent.high_advantage(s, s_h, g_actor)).clamp(max=100.0)
        mean = agent.high(torch.cat([s, g_actor], dim=-1))
        capped, uncapped = ((weight * 0.5 * (mean - agent.value.phi(s, x)).square().sum(-1)).mean() for x in (w_h, w))
    reported = agent.update(batch)["high_actor_loss"]  # computed before the step, with the same parameters
    torch.testing.assert_close(reported, capped, rtol=1e-5, atol=1e-6)
    assert (reported - uncapped).abs() > 1e-3  # not the subgoal k steps on past the goal


class StateValue(torch.nn.Module):
    """A stand-in 2-ensemble value: ``(s_0 + 2 s_1, 3 s_0 - s_1)`` of the (normalized) state, whatever the goal."""

    def forward(self, state: torch.Tensor, goal: torch.Tensor) -> torch.Tensor:
        return torch.stack([state[:, 0] + 2 * state[:, 1], 3 * state[:, 0] - state[:, 1]])


def test_ota_option_target_bootstraps_from_the_state_an_option_later_with_one_gamma(maze_root):
    torch.manual_seed(0)
    agent = make_agent("ota", maze_root)
    agent.high_value_target = StateValue()
    batch = agent.sample(512)
    assert agent.option_steps == 5 and {"option_obs", "option_reward", "option_mask"} <= set(batch)
    reached = batch["option_mask"] == 0
    assert reached.any() and (~reached).any()
    s_option, _ = agent.normalizer(batch["option_obs"], batch["value_goal"])
    expected = batch["option_reward"] + 0.99 * batch["option_mask"] * StateValue()(s_option, None)
    targets = agent.option_targets(batch)
    torch.testing.assert_close(targets, expected)
    # not the one-step target, and one gamma per option, not gamma^n
    s_next, _ = agent.normalizer(batch["next_obs"], batch["value_goal"])
    one_step = batch["option_reward"] + 0.99 * batch["option_mask"] * StateValue()(s_next, None)
    assert (targets - one_step).abs().max() > 0.1
    gamma_n = batch["option_reward"] + 0.99**5 * batch["option_mask"] * StateValue()(s_option, None)
    assert (targets - gamma_n).abs().max() > 1e-3
    # the option's state is the one 5 steps later along the recorded trajectory, unless the goal came first
    rows = (agent.sampler.obs[:, None] == batch["obs"][None]).all(-1).float().argmax(0)
    later = agent.sampler.obs[torch.minimum(rows + 5, agent.sampler.final[rows])]
    assert torch.equal(batch["option_obs"][~reached], later[~reached])


def test_ota_high_level_advantage_uses_the_option_value_and_the_low_level_keeps_hiqls(maze_root):
    torch.manual_seed(0)
    agent = make_agent("ota", maze_root)
    batch = agent.sample(64)
    s, g = agent.normalizer(batch["obs"], batch["actor_goal"])
    s_k, _ = agent.normalizer(batch["high_target_obs"], batch["actor_goal"])
    with torch.no_grad():
        expected = agent.high_value(s_k, g).mean(0) - agent.high_value(s, g).mean(0)
        hiql = agent.value(s_k, g).mean(0) - agent.value(s, g).mean(0)
        torch.testing.assert_close(agent.high_advantage(s, s_k, g), expected)
    assert not torch.allclose(expected, hiql)
    before = {name: [p.clone() for p in getattr(agent, name).parameters()] for name in ("value", "high_value")}
    metrics = agent.update(batch)
    assert {"high_value_loss", "v_high", "value_loss"} <= set(metrics)
    for name, params in before.items():  # both values train, each with its target network following
        assert any(not torch.equal(p, q) for p, q in zip(params, getattr(agent, name).parameters())), name
    state = agent.state_dict()
    assert {"high_value", "high_value_target", "value", "low", "high"} <= set(state)
    fresh = make_agent("ota", maze_root)
    fresh.load_state_dict(state)
    with torch.no_grad():
        torch.testing.assert_close(fresh.high_value(s, g), agent.high_value(s, g))


class MazeCellsValue(torch.nn.Module):
    """An oracle 2-ensemble value: minus the maze cells from the state to the goal (times ``sign``), read
    through the agent's normalizer."""

    def __init__(self, agent, grid, sign: float = 1.0) -> None:
        super().__init__()
        self.stats, self.grid, self.sign = agent.normalizer.state, grid, sign
        self.dist = torch.as_tensor(grid.hop_distances()).float()

    def forward(self, state: torch.Tensor, goal: torch.Tensor) -> torch.Tensor:
        std, mean = self.stats.var[:2].sqrt() + self.stats.eps, self.stats.mean[:2]
        cells = [self.grid.cells_of(x[:, :2] * std + mean) for x in (state, goal)]
        return (-self.sign * self.dist[cells[1], cells[0]]).expand(2, -1)


def test_advantage_sign_diagnostic_scores_an_oracle_value_right_and_its_negation_wrong(maze_root):
    from benchmarks.ota_advantage_sign import BINS, sign_agreement
    from sims.tasks.point_maze import MazeGrid

    grid, agent = MazeGrid("medium"), make_agent("ota", maze_root)
    agent.value, agent.high_value = MazeCellsValue(agent, grid), MazeCellsValue(agent, grid, sign=-1.0)
    rng = torch.get_rng_state()
    result = sign_agreement(agent, grid, batches=2)
    pairs, counted = result["pairs"], [n > 0 for n in result["pairs"]]
    assert len(pairs) == len(BINS) and sum(pairs[:-1]) == pairs[-1] < 2048  # pairs without progress are left out
    assert counted[:3] == [True, True, True]  # the medium maze's goals reach 8+ cells
    assert all(r == 1.0 for r, c in zip(result["value"], counted) if c)
    assert all(r == 0.0 for r, c in zip(result["high_value"], counted) if c)
    assert torch.equal(torch.get_rng_state(), rng)  # training's random stream is untouched
    untrained = sign_agreement(make_agent("hiql", maze_root), grid, batches=2)
    assert "high_value" not in untrained and 0.0 < untrained["value"][-1] < 1.0
    assert sign_agreement(make_agent("gciql", maze_root), grid) == {}  # no high level


def test_ota_is_registered_with_configs_for_both_mazes():
    assert AGENTS["ota"] == (OTAConfig, OTA)
    for layout in ("medium", "large"):
        cfg = load_config(f"ota_point_maze_{layout}")
        hiql = load_config(f"hiql_point_maze_{layout}")
        assert cfg.algo == "ota" and cfg.dataset == hiql.dataset and cfg.agent.option_steps == 5
        assert cfg.agent.hidden == hiql.agent.hidden and cfg.agent.batch_size == hiql.agent.batch_size


def test_robolearn_train_runs_hiql_on_a_maze_dataset_with_a_success_rate(maze_root, monkeypatch, tmp_path):
    monkeypatch.setenv("ROBOLEARN_DATASETS", str(maze_root))
    cfg = load_config("hiql_point_maze_medium", [
        "dataset=maze-tiny", f"run_dir={tmp_path}", "runner.total_steps=1000", "runner.checkpoint_every=1",
        "runner.eval_episodes=5", "env.num_envs=5", "agent.hidden=[32,32]", "agent.batch_size=64",
        "logging.wandb=disabled", "logging.progress=false"])
    result = train(cfg)
    rate = result.evaluation["success_rate"]  # of 5 episodes, each a success or not: a fifth counts
    assert 0.0 <= rate <= 1.0 and rate * 5 == pytest.approx(round(rate * 5)) and result.evaluation["updates"] == 1000
    line = json.loads((result.run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    assert "eval/success_rate" in line and "high_actor_loss" in line
    assert {"torchscript", "onnx"} <= set(result.exported)


@pytest.mark.parametrize("name", ["gcbc", "gciql", "hiql", "ota"])
def test_a_task_without_goals_is_refused_naming_the_groups(name):
    config_cls, agent_cls = AGENTS[name]
    with sims.make_env("pendulum", num_envs=1) as env:
        with pytest.raises(ValueError, match=r"needs observation groups \['policy', 'goal'\]; the task has no \['goal'\]"):
            agent_cls(env.observation_spec, env.action_spec, config_cls(), torch.device("cpu"))


def test_ota_names_its_option_steps_key():
    config_cls, agent_cls = AGENTS["ota"]
    with sims.make_env("point_maze_medium", num_envs=1) as env:
        with pytest.raises(ValueError, match="agent.option_steps: must be at least 1, got 0"):
            agent_cls(env.observation_spec, env.action_spec, config_cls(option_steps=0), torch.device("cpu"))


def test_relabel_probabilities_that_are_not_a_distribution_name_the_keys():
    with pytest.raises(ValueError, match=r"agent.relabel.p_current \+ p_future \+ p_random .* got 0.2 \+ 0.5 \+ 0.5 = 1.2"):
        GoalSampler({}, torch.zeros(0), 2, RelabelConfig(p_random=0.5))
