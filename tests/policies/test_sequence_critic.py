"""Action-sequence critic: windows of one env cut from the ring, n-step returns stopped at episode ends."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from policies.sequence_critic import SequenceCriticConfig, SequenceCriticSAC
from robolearn.storage import ReplayBuffer

pytestmark = pytest.mark.filterwarnings("ignore:agent.nstep")  # n < K, open loop: said, tested below
CPU = torch.device("cpu")
OBS = {"policy": spaces.Box(-np.inf, np.inf, (1,), np.float32)}
ACT = spaces.Box(-10.0, 10.0, (1,), np.float32)


def _agent(k: int, n: int, **kw) -> SequenceCriticSAC:
    return SequenceCriticSAC(OBS, ACT, SequenceCriticConfig(sequence_length=k, nstep=n, hidden=(16, 16), gru_hidden=8,
                                                            gamma=0.5, **kw), CPU)


def _replay(steps: int, num_envs: int, done_at: dict[int, str]) -> ReplayBuffer:
    """Env e at step t: obs 100 e + t, action = reward = the same; ``done_at[t]`` ends env 0's episode at t."""
    replay = ReplayBuffer(steps * num_envs, CPU)
    for t in range(steps):
        value = torch.tensor([100.0 * e + t for e in range(num_envs)])
        ended = torch.zeros(num_envs, dtype=torch.bool)
        terminated, truncated = ended.clone(), ended.clone()
        if t in done_at:
            (terminated if done_at[t] == "terminated" else truncated)[0] = True
        replay.add({"obs": {"policy": value.unsqueeze(1)}, "next_obs": {"policy": value.unsqueeze(1) + 0.5},
                    "action": (value / 100).unsqueeze(1), "reward": value, "terminated": terminated,
                    "truncated": truncated})
    return replay


def test_windows_follow_one_env_and_bootstrap_after_n_steps():
    agent = _agent(k=3, n=2)
    batch = agent.sample(_replay(10, num_envs=2, done_at={}), 64, num_envs=2)
    start = batch["obs"]["policy"][:, 0]
    offset = torch.arange(3, dtype=torch.float32)
    torch.testing.assert_close(batch["actions"][:, :, 0], (start.unsqueeze(1) + offset) / 100)  # same env, consecutive
    torch.testing.assert_close(batch["reward"], start + 0.5 * (start + 1))  # r_t + gamma r_{t+1}
    torch.testing.assert_close(batch["next_obs"]["policy"][:, 0], start + 1.5)  # s_{t+2} = final_obs of step t+1
    torch.testing.assert_close(batch["discount"], torch.full_like(start, 0.25))  # gamma^n
    assert float(start.remainder(100).max()) <= 7  # no window runs past the newest step


@pytest.mark.parametrize("how", ["terminated", "truncated"])
def test_an_episode_end_stops_the_return_and_holds_the_last_action(how):
    agent = _agent(k=4, n=3)
    batch = agent.sample(_replay(8, num_envs=1, done_at={3: how}), 256, num_envs=1)
    rows = batch["obs"]["policy"][:, 0] == 2  # windows starting at t = 2: the episode ends at t = 3
    assert bool(rows.any())
    torch.testing.assert_close(batch["actions"][rows][0, :, 0], torch.tensor([0.02, 0.03, 0.03, 0.03]))
    torch.testing.assert_close(batch["reward"][rows][0], torch.tensor(2 + 0.5 * 3))
    torch.testing.assert_close(batch["next_obs"]["policy"][rows][0, 0], torch.tensor(3.5))
    expected = 0.0 if how == "terminated" else 0.25  # truncation bootstraps from the true last state
    torch.testing.assert_close(batch["discount"][rows][0], torch.tensor(expected))


def test_update_learns_from_windows_and_controller_decides_every_k():
    torch.manual_seed(0)
    agent = _agent(k=4, n=2, batch_size=32)
    replay = _replay(40, num_envs=2, done_at={7: "terminated"})
    batch = agent.sample(replay, 32, num_envs=2)
    actor, critic, target = ([p.detach().clone() for p in net.parameters()]
                             for net in (agent.actor, agent.critic, agent.critic_target))
    metrics = agent.update(batch)
    assert all(bool(torch.isfinite(v)) for v in metrics.values())
    for before, net in ((actor, agent.actor), (critic, agent.critic)):  # one step moved both
        assert any(not torch.equal(a, b) for a, b in zip(before, net.parameters()))
    for before, moved, online in zip(target, agent.critic_target.parameters(), agent.critic.parameters()):
        torch.testing.assert_close(moved, torch.lerp(before, online, agent.cfg.tau))  # Polyak, by tau
    for _ in range(30):
        last = agent.update(batch)
    assert last["critic_loss"] < metrics["critic_loss"]  # the critics fit the windows' returns on a fixed batch
    controller = agent.controller()
    assert controller.decision_period == 4 and controller(torch.zeros(3, 1)).shape == (3, 4, 1)
    with pytest.raises(ValueError, match="multiple"):
        agent.sample(_replay(5, num_envs=3, done_at={}), 8, num_envs=2)


def test_ensemble_execution_queries_the_actor_every_step_in_rollouts_and_controller():
    torch.manual_seed(0)
    agent = _agent(k=4, n=1, execution="ensemble")
    controller = agent.controller()
    assert controller.decision_period == 1 and controller.export_meta()["chunk"]["mode"] == "ensemble"
    calls = []
    forward = agent.actor.forward
    agent.actor.forward = lambda *a, **kw: calls.append(1) or forward(*a, **kw)
    for _ in range(3):
        agent.act({"policy": torch.zeros(2, 1)}, explore=False)
    assert len(calls) == 3  # open loop would have called once for the first 4 steps


def test_ensemble_blends_every_prediction_for_a_step_in_rollouts_and_the_controller():
    """m = 0 weighs alike every prediction made for the current step: the second step plays the mean of
    the first chunk's second action and the second chunk's first, in rollouts and in the exported controller."""
    torch.manual_seed(0)
    agent = _agent(k=4, n=4, execution="ensemble", ensemble_decay=0.0)
    first, second = torch.zeros(1, 1), torch.full((1, 1), 3.0)
    with torch.no_grad():
        chunk = lambda obs, i: agent.scaler(agent.actor(obs, 4, deterministic=True)[0][:, i])  # noqa: E731
        expected = (chunk(first, 1) + chunk(second, 0)) / 2
    controller = agent.controller()
    for player in (lambda obs: agent.act({"policy": obs}, explore=False)["action"],
                   lambda obs: controller.act({"policy": obs})):
        player(first)
        torch.testing.assert_close(player(second), expected)


def test_ensemble_decay_reaches_rollouts_and_controller():
    """m << 0 puts all the weight on the newest chunk: each step then plays that chunk's first action."""
    torch.manual_seed(0)
    agent = _agent(k=4, n=4, execution="ensemble", ensemble_decay=-50.0)
    assert agent.controller().export_meta()["chunk"]["decay"] == -50.0
    first, second = torch.zeros(1, 1), torch.full((1, 1), 3.0)
    agent.act({"policy": first}, explore=False)
    played = agent.act({"policy": second}, explore=False)["action"]
    newest = agent.scaler(agent.actor(second, 4, deterministic=True)[0][:, 0])
    torch.testing.assert_close(played, newest)


def test_settings_that_cannot_work_are_named():
    with pytest.raises(ValueError, match="agent.sequence_length must be >= 1, got 0"):
        _agent(k=0, n=1)
    with pytest.warns(UserWarning, match=r"agent.nstep = 2 < agent.sequence_length = 4 with open-loop execution.*"
                                         r"set agent.nstep=4, or agent.execution=ensemble"):
        _agent(k=4, n=2)
    assert _agent(k=8, n=None).nstep == 8  # unset: n = K, what open-loop play wants
    with pytest.raises(ValueError, match=r"need more than 6 transitions .* set runner.random_steps above 6 "
                                         r"\(3 steps x env.num_envs\)"):
        _agent(k=4, n=4).sample(_replay(3, num_envs=2, done_at={}), 8, num_envs=2)  # a one-line CLI error


@pytest.mark.parametrize("config, window", [("sac_as_gym_pendulum", 4), ("spirl_point_maze_medium", 11),
                                            ("hrac_point_maze_medium", 11)])
def test_a_warm_up_shorter_than_a_window_is_refused_at_build(tmp_path, config, window):
    """The first update needs a whole window of each env in the replay: said by key when the run is built, not
    at that update (after the warm-up, and for skills after pretraining)."""
    from robolearn import load_config
    from robolearn.config import ConfigError
    from robolearn.preflight import check_replay_windows
    from robolearn.runner import Runner

    cfg = load_config(config, [f"run_dir={tmp_path}", "env.num_envs=2", "logging.wandb=disabled", "runner.utd_ratio=1",
                               f"runner.random_steps={2 * (window - 1)}"])
    needed = 2 * (window - 1) + 1
    with pytest.raises(ConfigError, match=rf"runner.random_steps = {needed - 1} leaves {window - 1} step\(s\) of each "
                                          rf"env .* windows of {window}: set runner.random_steps to at least {needed} "
                                          rf"\({window} steps x 2 envs\)"):
        Runner(cfg)
    assert not any(tmp_path.iterdir())  # no run directory left behind
    agent = type("Windowed", (), {"replay_window": window})()
    cfg.runner.random_steps = needed
    check_replay_windows(cfg, agent, num_envs=2, world_size=1)  # enough: no error
    with pytest.raises(ConfigError, match=rf"at least {2 * needed - 1} \({window} steps x 4 envs over all ranks\)"):
        check_replay_windows(cfg, agent, num_envs=2, world_size=2)
    cfg.runner.utd_ratio, cfg.runner.random_steps = 0.25, 0  # one update every 4 steps of one env:
    check_replay_windows(cfg, type("Windowed", (), {"replay_window": 4})(), num_envs=1, world_size=1)  # at step 4
    with pytest.raises(ConfigError, match=r"leaves 4 step\(s\) .* at least 2 \(2 steps x 1 envs, and 3 more build"):
        check_replay_windows(cfg, type("Windowed", (), {"replay_window": 5})(), num_envs=1, world_size=1)
