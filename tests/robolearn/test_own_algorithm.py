"""An algorithm of the user's own, outside the package: ``algo: module:Class`` trains, resumes, evaluates
and exports from the command line; what it forgot to declare is said by name."""

from __future__ import annotations

import sys

import pytest

from robolearn import load_config
from robolearn.cli import main
from robolearn.config import ConfigError
from robolearn.runner import Runner

REINFORCE = '''
from dataclasses import dataclass

import torch

from robolearn.interfaces import Agent, Controller


@dataclass
class ReinforceConfig:
    num_steps: int = 32
    lr: float = 1e-2


class Linear(Controller):
    def __init__(self, obs_size, act_size):
        super().__init__()
        self.obs_size = obs_size
        self.net = torch.nn.Linear(obs_size, act_size)

    def forward(self, obs):
        return 2 * torch.tanh(self.net(obs))


class Reinforce(Agent):
    """A Gaussian linear policy, the return-to-go as its score."""
    on_policy = True
    config_class = ReinforceConfig

    def __init__(self, observation_spec, action_spec, config, device):
        self.policy = Linear(observation_spec["policy"].shape[0], action_spec.shape[0]).to(device)
        self.log_std = torch.zeros(action_spec.shape[0], device=device, requires_grad=True)
        self.optimizer = torch.optim.Adam([*self.policy.parameters(), self.log_std], lr=config.lr)

    def act(self, obs, explore=True):
        with torch.no_grad():
            mean = self.policy(obs["policy"])
            return {"action": mean + self.log_std.exp() * torch.randn_like(mean) if explore else mean}

    def update(self, batch):
        mean = self.policy(batch["obs"]["policy"])
        logp = torch.distributions.Normal(mean, self.log_std.exp()).log_prob(batch["action"]).sum(-1)
        to_go = batch["reward"].flip(0).cumsum(0).flip(0)
        loss = -(logp * (to_go - to_go.mean())).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return {"loss": float(loss.detach())}

    def controller(self):
        copy = Linear(self.policy.obs_size, self.log_std.shape[0])
        copy.load_state_dict(self.policy.state_dict())
        return copy

    def state_dict(self):
        return {"policy": self.policy.state_dict(), "log_std": self.log_std.detach().clone(),
                "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state):
        self.policy.load_state_dict(state["policy"])
        with torch.no_grad():
            self.log_std.copy_(state["log_std"])
        self.optimizer.load_state_dict(state["optimizer"])


class Unnamed(Reinforce):
    config_class = None


@dataclass
class PlanningConfig(ReinforceConfig):
    horizon: int = 100_000  # how far it plans ahead, not how often it decides


class Planning(Reinforce):
    config_class = PlanningConfig


@dataclass
class WarmingConfig(ReinforceConfig):
    init_updates: int = 0  # updates it skips at the start of each iteration: read as it trains


class Warming(Reinforce):
    config_class = WarmingConfig


@dataclass
class NoRollout:
    lr: float = 1e-2


class Stepless(Reinforce):
    config_class = NoRollout


class BareAction(Reinforce):
    def act(self, obs, explore=True):
        return super().act(obs, explore)["action"]


class NumpyAction(Reinforce):
    def act(self, obs, explore=True):
        return {"action": super().act(obs, explore)["action"].numpy()}


class VectorMetric(Reinforce):
    def update(self, batch):
        super().update(batch)
        return {"loss": torch.ones(3)}


class Unfinished(Agent):
    config_class = ReinforceConfig
    on_policy = True
'''


@pytest.fixture
def algo_module(tmp_path, monkeypatch, request):
    """``<unique>.py`` in the current folder, not on sys.path, and a YAML config of its own."""
    name = f"user_algo_{request.node.name[:16]}_{len(sys.modules)}"
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / f"{name}.py").write_text(REINFORCE)
    monkeypatch.chdir(folder)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(folder))])
    yield name
    sys.modules.pop(name, None)


def config_text(algo: str, runs) -> str:
    return (f"algo: {algo}\nrun_dir: {runs}\nenv: {{task: pendulum, num_envs: 4, num_threads: 1}}\n"
            "runner: {total_steps: 256, eval_episodes: 2, video_seconds: 0}\nagent: {num_steps: 32}\n"
            "logging: {wandb: disabled, progress: false}\n")


def test_an_own_algorithm_trains_resumes_evaluates_and_exports(algo_module, tmp_path, capfd):
    config = tmp_path / "reinforce_pendulum.yaml"
    config.write_text(config_text(f"{algo_module}:Reinforce", tmp_path / "runs"))
    assert main(["train", str(config)]) == 0
    run = next((tmp_path / "runs").glob("*/*/config.yaml")).parent
    assert (run / "export" / "controller.onnx").is_file() and (run / "eval.json").is_file()
    capfd.readouterr()
    sys.modules.pop(algo_module)  # later commands import it again by its name
    assert main(["train", "--resume", str(run), "runner.total_steps=384"]) == 0
    assert main(["eval", str(run), "--episodes", "2", "--exported", "onnx", "--json"]) == 0
    assert '"episodes": 2' in capfd.readouterr().out


def test_an_own_algorithms_horizon_is_not_taken_for_its_decision_period(algo_module, tmp_path):
    """The check before the agent is built read agent.horizon (SPiRL's skill length) of any algorithm: an own
    algorithm's planning horizon beyond an episode had been refused as 'decides every 100000 steps'. One's own
    is checked by its controller's decision_period once built (Reinforce's: 1)."""
    config = tmp_path / "planning_pendulum.yaml"
    config.write_text(config_text(f"{algo_module}:Planning", tmp_path / "runs"))
    runner = Runner(load_config(config))
    assert runner.cfg.agent.horizon > runner.env.max_episode_steps
    runner.close()


def test_an_own_algorithms_init_setting_may_change_on_a_resume(algo_module, tmp_path, capfd):
    """Our agents' init_* settings set a learnt value's start, which a resume loads over, and a resume refuses a
    change of them; an own algorithm's init_* may be anything (init_updates, read as it trains) and had been
    refused alike ('a starting value ... it would change nothing')."""
    config = tmp_path / "warming_pendulum.yaml"
    config.write_text(config_text(f"{algo_module}:Warming", tmp_path / "runs"))
    assert main(["train", str(config)]) == 0
    run = next((tmp_path / "runs").glob("*/*/config.yaml")).parent
    capfd.readouterr()
    assert main(["train", "--resume", str(run), "runner.total_steps=384", "agent.init_updates=1"]) == 0
    assert "starting value" not in capfd.readouterr().err
    assert load_config(run / "config.yaml").agent.init_updates == 1


def test_what_an_own_algorithm_forgot_is_said_by_name(algo_module, tmp_path):
    runs = tmp_path / "runs"
    with pytest.raises(ConfigError, match=rf"algo={algo_module}:Unnamed: set Unnamed.config_class to the dataclass"):
        load_config(None, {"algo": f"{algo_module}:Unnamed"})
    with pytest.raises(ConfigError, match=rf"algo={algo_module}:ReinforceConfig: not a robolearn.interfaces.Agent"):
        load_config(None, {"algo": f"{algo_module}:ReinforceConfig", "agent": {}})
    config = tmp_path / "stepless.yaml"
    config.write_text(config_text(f"{algo_module}:Stepless", runs).replace("{num_steps: 32}", "{}"))
    with pytest.raises(ConfigError, match=r"NoRollout needs num_steps \(steps per env in each rollout\)"):
        Runner(load_config(config))
    assert not runs.exists()  # refused before a run directory was made
    with pytest.raises(ConfigError, match=r"algo: 'reinforce' is not known; choose one of .*or module:Class"):
        load_config(None, {"algo": "reinforce"})
    for algo, said in (("BareAction", r"BareAction.act returns \{'action': tensor, ...\}, got Tensor"),
                       ("NumpyAction", r"NumpyAction.act returns \{'action': tensor, ...\}, got 'action': ndarray"),
                       ("VectorMetric", r"update metric 'loss': one number per metric, got 3 values")):
        config.write_text(config_text(f"{algo_module}:{algo}", runs))
        runner = Runner(load_config(config))
        try:
            with pytest.raises(TypeError, match=said):
                runner.train()
        finally:
            runner.close()
    config.write_text(config_text(f"{algo_module}:Unfinished", runs))
    with pytest.raises(TypeError, match=rf"algo={algo_module}:Unfinished: Unfinished does not implement act, controller, "
                                        r"load_state_dict, state_dict, update, which a robolearn Agent must"):
        Runner(load_config(config))


def test_an_own_algorithms_broken_contract_is_one_line_on_the_command_line(algo_module, tmp_path, capsys):
    config = tmp_path / "bare.yaml"
    config.write_text(config_text(f"{algo_module}:BareAction", tmp_path / "runs"))
    assert main(["train", str(config)]) == 2  # a ContractError: its message, not a traceback
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "BareAction.act returns {'action': tensor, ...}, got Tensor" in err
    assert "Traceback" not in err
