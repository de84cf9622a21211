"""HRAC: the adjacency graph's k-step reachability, the contrastive adjacency network, the
subgoal held for c steps as an absolute target, the low level's reward, the adjacency
penalty pulling subgoals into reach, export, checkpoints, and one run on the point maze."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch
from gymnasium import spaces

from robolearn import load_config
from robolearn.checkpoint import CheckpointError, load_checkpoint
from robolearn.export import ExportedController, export_controller
from robolearn.runner import train
from policies.goal.adjacency import AdjacencyGraph, AdjacencyNetwork, sample_pairs
from policies.goal.hrac import HRAC, HRACConfig
from policies.td3_learner import TD3Learner, TD3Settings

OBS = {"policy": spaces.Box(-np.inf, np.inf, (4,), np.float32), "goal": spaces.Box(-np.inf, np.inf, (2,), np.float32)}
ACTIONS = spaces.Box(-1.0, 1.0, (2,), np.float32)
C = 3


def small(**changes) -> HRACConfig:
    base = dict(subgoal_period=C, subgoal_range=(1.0, 1.0), hidden=(32, 32), batch_size=16, buffer_size=600,
                adjacency_hidden=(32, 32), adjacency_embedding=8, adjacency_cell=0.25, adjacency_k=2)
    return HRACConfig(**{**base, **changes})


def obs(n: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"policy": torch.randn(n, 4, generator=g), "goal": torch.randn(n, 2, generator=g)}


def line_graph(cells: int, k: int) -> AdjacencyGraph:
    """A walk along x through ``cells`` cells of side 1 (a corridor), one cell per step."""
    graph = AdjacencyGraph(cell=1.0, k=k)
    x = torch.arange(cells, dtype=torch.float32) + 0.5
    positions = torch.stack([x, torch.full_like(x, 0.5)], dim=1)
    graph.add(positions[:-1], positions[1:])
    return graph


def test_reachability_counts_cell_crossings():
    graph = line_graph(8, k=3)
    reach = graph.reachable()
    hops = (torch.arange(8).unsqueeze(0) - torch.arange(8).unsqueeze(1)).abs()
    assert torch.equal(reach, hops <= 3)
    assert torch.allclose(graph.centers()[:, 0], torch.arange(8) + 0.5)
    # a step that stays in its cell adds no edge; a checkpoint round trip keeps the graph
    graph.add(torch.tensor([[0.2, 0.5]]), torch.tensor([[0.7, 0.5]]))
    copy = AdjacencyGraph(cell=1.0, k=3)
    copy.load_state_dict(graph.state_dict())
    assert torch.equal(copy.reachable(), reach) and copy.index == graph.index


def test_adjacency_network_separates_near_from_far_cells():
    torch.manual_seed(0)
    graph = line_graph(12, k=2)
    reach, centers = graph.reachable(), graph.centers()
    net = AdjacencyNetwork(2, (64, 64), 16, margin=1.0, delta=0.2)
    optimizer = torch.optim.Adam(net.parameters(), lr=3e-3)
    rng = np.random.default_rng(0)
    for _ in range(600):
        a, b = sample_pairs(reach, 256, rng)
        loss = net.loss(centers[a], centers[b], reach[a, b])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        d = net.distance(centers.unsqueeze(1).expand(-1, 12, -1), centers.unsqueeze(0).expand(12, -1, -1))
    assert (d[reach] <= 1.0 + 0.1).float().mean() > 0.95
    assert (d[~reach] >= 1.0).float().mean() > 0.95


def test_subgoal_is_an_absolute_target_held_for_c_steps():
    torch.manual_seed(0)
    agent = HRAC(OBS, ACTIONS, small(), torch.device("cpu"))
    outs, states = [], []
    for t in range(2 * C + 2):
        if t == C + 1:
            agent.reset(torch.tensor([False, True]))
        o = obs(2, seed=t)
        states.append(o["policy"])
        outs.append(agent.act(o))
    steps = torch.stack([out["skill_step"] for out in outs])
    assert steps[:, 0].tolist() == [0, 1, 2, 0, 1, 2, 0, 1] and steps[:, 1].tolist() == [0, 1, 2, 0, 0, 1, 2, 0]
    for t, out in enumerate(outs):  # T = phi(s) + range * d where the subgoal started, unchanged after
        for e in range(2):
            start = max(u for u in range(t + 1) if steps[u, e] == 0)
            expected = states[start][e, :2] + out["skill"][e]
            assert torch.allclose(out["target"][e], expected, atol=1e-6)
            assert torch.equal(out["target"][e], outs[start]["target"][e])
    assert (outs[0]["action"].abs() <= 1.0).all()
    assert len(agent.graph) == 0  # acting adds nothing: the runner's stored steps build it (observe, below)


def test_low_level_reward_is_minus_the_distance_to_the_target():
    agent = HRAC(OBS, ACTIONS, small(), torch.device("cpu"))
    seen = {}

    def spy(obs, action, reward, discount, next_obs, penalty=None):
        seen.update(reward=reward, discount=discount, obs=obs)
        return {}

    agent.low.update = spy
    agent.updates = 1  # not a high-level step
    o, n = obs(3, 1), obs(3, 2)
    target = torch.tensor([[1.0, 0.0], [0.0, 0.0], [3.0, 4.0]])
    n["policy"][:, :2] = 0.0
    batch = {"obs": o, "next_obs": n, "action": torch.zeros(3, 2), "target": target,
             "terminated": torch.tensor([False, False, True])}
    agent.update({"low": batch})
    assert torch.allclose(seen["reward"], torch.tensor([-1.0, 0.0, -5.0]))
    assert torch.allclose(seen["discount"], torch.tensor([0.99, 0.99, 0.0]))
    assert torch.allclose(seen["obs"][:, 4:], target - o["policy"][:, :2])  # the low level sees T - phi(s)


def test_adjacency_penalty_pulls_subgoals_into_reach():
    """With the high level's Q flat, only the penalty moves the actor: far offsets shrink below eps in psi."""
    torch.manual_seed(0)
    cfg = small(subgoal_range=(4.0, 4.0), adjacency_cell=0.5, adjacency_k=2, adjacency_updates=300, actor_lr=1e-3)
    agent = HRAC(OBS, ACTIONS, cfg, torch.device("cpu"))
    x = torch.linspace(0.25, 7.75, 16)
    walk = torch.stack([x, torch.full_like(x, 0.25)], dim=1)
    agent.graph.add(walk[:-1], walk[1:])
    agent.train_adjacency()
    with torch.no_grad():  # start the actor near its largest offset: tanh(1.5) x 4 m = 3.6 m, seven cells away
        agent.high.actor[-1].bias.fill_(1.5)
    high_obs = torch.cat([walk[4:12].repeat(4, 1), torch.zeros(32, 4)], dim=1)  # (x, y) on the walk, rest zero
    before = agent._adjacency_penalty(high_obs, agent.high.act(high_obs)).mean()
    with torch.no_grad():  # a zero critic stays zero (zero TD error, zero targets): Q is flat
        for p in [*agent.high.critic.parameters(), *agent.high.critic_target.parameters()]:
            p.zero_()
    for _ in range(400):
        agent.high.update(high_obs, torch.zeros(32, 2), torch.zeros(32), torch.zeros(32), high_obs,
                          agent._adjacency_penalty)
    after = agent._adjacency_penalty(high_obs, agent.high.act(high_obs)).mean()
    assert before > 1.0 and after < 0.2 * before
    assert agent.high.act(high_obs).abs().mean() < 0.5  # offsets now within ~2 m of the state


def test_adjacency_pairs_follow_the_runs_seed():
    """The pairs come from torch's stream (seeded by the run, restored by a resume), not a fixed seed."""
    def trained(seed: int) -> torch.Tensor:
        torch.manual_seed(0)
        agent = HRAC(OBS, ACTIONS, small(adjacency_cell=0.5, adjacency_updates=5), torch.device("cpu"))
        x = torch.linspace(0.25, 3.75, 8)
        walk = torch.stack([x, torch.full_like(x, 0.25)], dim=1)
        agent.graph.add(walk[:-1], walk[1:])
        torch.manual_seed(seed)
        agent.train_adjacency()
        return torch.cat([p.flatten() for p in agent.adjacency.parameters()])

    assert torch.equal(trained(1), trained(1)) and not torch.equal(trained(1), trained(2))


def test_a_levels_round_trip_between_its_delayed_actor_steps_reports_what_the_run_would_have():
    """An update between two delayed actor steps reports the last one's losses (the iteration's logged mean holds
    them): a resume there had reported none, so the first logged line after it differed from the run's."""
    def learner() -> TD3Learner:
        return TD3Learner(4, 2, TD3Settings(hidden=(16, 16)), torch.device("cpu"))

    def batch(seed: int) -> tuple[torch.Tensor, ...]:
        g = torch.Generator().manual_seed(seed)
        return (torch.randn(8, 4, generator=g), torch.rand(8, 2, generator=g) * 2 - 1, torch.randn(8, generator=g),
                torch.full((8,), 0.9), torch.randn(8, 4, generator=g))

    torch.manual_seed(0)
    trained = learner()
    for seed in range(2):  # the second is an actor step (policy_delay 2)
        trained.update(*batch(seed))
    buffer = io.BytesIO()
    torch.save(trained.state_dict(), buffer)
    buffer.seek(0)
    resumed = learner()
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    reported = []
    for level in (trained, resumed):
        torch.manual_seed(1)
        reported.append({key: float(value) for key, value in level.update(*batch(2)).items()})
    assert "actor_loss" in reported[0] and reported[1] == reported[0]


def test_controller_exports_and_matches_the_agent(tmp_path):
    """TorchScript and ONNX (run by onnxruntime) act as the agent, across skill switches."""
    torch.manual_seed(0)
    agent = HRAC(OBS, ACTIONS, small(), torch.device("cpu"))
    controller = agent.controller()
    assert controller.decision_period == C
    paths = export_controller(controller, tmp_path)
    meta = json.loads(paths["meta"].read_text())
    assert list(meta["inputs"]) == ["obs", "skill", "step"]
    drivers = [ExportedController(paths["torchscript"]), ExportedController(paths["onnx"])]
    for t in range(2 * C + 1):
        o = obs(3, seed=t)
        expected = agent.act(o, explore=False)["action"]
        assert torch.allclose(controller.act(o), expected, atol=1e-5)
        for driver in drivers:
            assert torch.allclose(driver.act(o), expected, atol=1e-4)


def test_config_errors_name_the_key():
    with pytest.raises(ValueError, match="agent.subgoal_range"):
        HRAC(OBS, ACTIONS, small(subgoal_range=(1.0,)), torch.device("cpu"))
    with pytest.raises(ValueError, match="agent.subgoal_period must be >= 1"):
        HRAC(OBS, ACTIONS, small(subgoal_period=0), torch.device("cpu"))
    with pytest.raises(ValueError, match="no \\['goal'\\]"):
        HRAC({"policy": OBS["policy"]}, ACTIONS, small(), torch.device("cpu"))
    # subgoals of (x, y, vx) for a 2-D goal had trained and exported, silently
    with pytest.raises(ValueError, match=r"agent.goal_dim = 3, but the task's goal \(goal\) has 2 features: .* set "
                                         r"agent.goal_dim=2"):
        HRAC(OBS, ACTIONS, small(goal_dim=3, subgoal_range=(1.0, 1.0, 1.0)), torch.device("cpu"))


def test_one_run_on_the_point_maze_trains_checkpoints_and_resumes(tmp_path, monkeypatch):
    stored: list[dict] = []  # what the runner stores, as HRAC.observe sees it
    observe = HRAC.observe
    monkeypatch.setattr(HRAC, "observe", lambda self, transition: (stored.append(transition), observe(self, transition)))
    overrides = [f"run_dir={tmp_path}", "logging.wandb=disabled", "logging.progress=false", "env.num_envs=2",
                 "env.kwargs.max_episode_steps=50", "runner.total_steps=400", "runner.random_steps=100",
                 "runner.eval_episodes=2", "runner.checkpoint_every=1", "agent.batch_size=16", "agent.buffer_size=400",
                 "agent.hidden=[16,16]", "agent.adjacency_every=50", "agent.adjacency_updates=5"]
    result = train(load_config("hrac_point_maze_medium", overrides))
    checkpoint = load_checkpoint(result.run_dir / "checkpoints" / "latest.pt")
    state = checkpoint["agent"]
    assert state["adjacency_trained"] and len(state["graph"]["keys"]) > 1
    # the graph holds every step taken: the step into an ended episode's last observation too (acting sees the next
    # episode's first there), where a goal reached as the episode terminates is
    expected = AdjacencyGraph(cell := load_config("hrac_point_maze_medium").agent.adjacency_cell, 1)
    for transition in stored:
        expected.add(transition["obs"]["policy"][:, :2], transition["next_obs"]["policy"][:, :2])
    assert state["graph"] == expected.state_dict()
    done = [t["terminated"] | t["truncated"] for t in stored]
    ends = [t["next_obs"]["policy"][w, :2] for t, d in zip(stored, done) for w in d.nonzero()[:, 0]]
    assert len(stored) == checkpoint["progress"]["env_steps"] // 2 and len(ends) >= 2  # steps of both worlds
    assert all(tuple(torch.floor(end / cell).long().tolist()) in map(tuple, state["graph"]["keys"]) for end in ends)
    assert state["low"]["updates"] > 100 and state["high"]["updates"] > 10
    evaluation = json.loads((result.run_dir / "eval.json").read_text())
    assert "success_rate" in evaluation and np.isfinite(evaluation["return_mean"])
    resumed = train(load_config("hrac_point_maze_medium", [*overrides, "runner.total_steps=2000"]),
                    resume=result.run_dir)
    again = load_checkpoint(resumed.run_dir / "checkpoints" / "latest.pt")["agent"]
    assert again["low"]["updates"] > state["low"]["updates"]
    assert len(again["graph"]["keys"]) >= len(state["graph"]["keys"])
    # the high level learnt offsets in units of subgoal_range (its replay holds them so): a resume may not rescale them
    with pytest.raises(CheckpointError, match=r"agent.subgoal_range \[2.0, 2.0\] -> \[4.0, 4.0\]: HRAC learnt"):
        train(load_config("hrac_point_maze_medium", [*overrides, "runner.total_steps=2400", "agent.subgoal_range=[4,4]"]),
              resume=result.run_dir)

