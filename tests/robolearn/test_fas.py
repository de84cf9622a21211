"""FAS: the score, R(L) for flat and sequence controllers, and `robolearn eval RUN --fas`."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch import nn

from robolearn import fas
from robolearn.cli import main
from robolearn.interfaces import Controller, Step, VecEnv


class Clock(VecEnv):
    """obs = steps since reset; reward = the action; 10-step episodes."""

    def __init__(self, num_envs: int) -> None:
        self.num_envs, self.device, self.control_dt, self.max_episode_steps = num_envs, torch.device("cpu"), 0.1, 10
        self.observation_spec = {"policy": spaces.Box(-np.inf, np.inf, (1,), np.float32)}
        self.action_spec = spaces.Box(-100, 100, (1,), np.float32)
        self.t = torch.zeros(num_envs)

    def reset(self, seed=None):
        self.t.zero_()
        return {"policy": self.t.clone().unsqueeze(1)}

    def step(self, action):
        self.t += 1
        final = {"policy": self.t.clone().unsqueeze(1)}
        truncated = self.t >= self.max_episode_steps
        self.t[truncated] = 0
        return Step({"policy": self.t.clone().unsqueeze(1)}, action[:, 0].float(), torch.zeros_like(truncated),
                    truncated, {"final_obs": final})


class Echo(Controller):
    obs_size = 1

    def forward(self, x):
        return x.clone()


class Ahead(nn.Module):
    """A sequence of 4: predicts the clock for the next 4 steps (perfect open loop up to its length)."""

    obs_groups, obs_size, chunk_length = ("policy",), 1, 4

    def forward(self, x, length=None):
        return (x + torch.arange(length or 4, dtype=torch.float32)).unsqueeze(-1)


def test_score_is_the_normalized_area_under_r_of_l():
    ref = fas.Reference(r_max=1350.0, shift=1550.0)
    lengths = list(fas.LENGTHS)
    assert fas.score(lengths, [-200.0] * 16, ref) == pytest.approx(1350 * 29 / (1350 * 30))
    assert fas.score([1, 2], [0.0, 10.0], fas.Reference(10.0)) == pytest.approx(5 / 300)
    assert fas.LENGTHS == (1, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30)


def test_a_flat_controller_holds_and_a_sequence_plays_its_own():
    flat = fas.curve(Echo(), Clock, episodes=2, lengths=(1, 2, 4))
    # reward at step t is the clock at the last decision: L * floor(t / L)
    assert flat == {1: 45.0, 2: 40.0, 4: 32.0}
    sequence = fas.curve(Ahead(), Clock, episodes=2, lengths=(1, 4, 8))
    assert sequence[1] == 45.0 and sequence[4] == 45.0  # open loop within its length costs nothing here
    assert sequence[8] == 0 + 1 + 2 + 3 + 3 + 3 + 3 + 3 + 8 + 9  # past 4 it holds its last action
    extended = fas.curve(Ahead(), Clock, episodes=2, lengths=(8,), beyond="extend")
    assert extended[8] == 45.0


def test_a_blending_controller_is_said_to_be_scored_open_loop():
    """An execution=ensemble controller blends every step, which no decision interval is: its R(1) had passed
    for the controller eval scores."""
    from robolearn.chunking import ChunkedController

    with pytest.warns(UserWarning, match=r"blends its chunks every step \(execution=ensemble\).*not the blend"):
        result = fas.fas(ChunkedController(Ahead(), mode="ensemble"), Clock, "my_task", episodes=1, r_max=45.0)
    assert result["played"] == "open-loop chunks of a blending controller" and result["returns"][0] == 45.0
    assert fas.fas(Ahead(), Clock, "my_task", episodes=1, r_max=45.0)["played"] == "open-loop chunks"


def test_unknown_task_needs_r_max():
    with pytest.raises(ValueError, match="R_MAX"):
        fas.reference("my_task")
    assert fas.reference("my_task", 100.0) == fas.Reference(100.0)
    assert fas.reference("gym:Pendulum-v1") == fas.Reference(1350.0, 1550.0)


def test_a_shift_can_be_given_for_negative_returns():
    """arm_reach's returns are negative: without a shift its FAS is a negative number."""
    assert fas.reference("arm_reach", 50.0, 200.0) == fas.Reference(50.0, 200.0)
    assert fas.reference("gym:Pendulum-v1", shift=1600.0) == fas.Reference(1350.0, 1600.0)
    assert fas.reference("gym:Pendulum-v1", 1000.0) == fas.Reference(1000.0)  # a user's R_max: shift 0 unless given
    with pytest.raises(ValueError, match=r"R_max must be positive, got 0: it is the best return plus the shift"):
        fas.reference("arm_reach", 0.0, 200.0)  # (a best return of 0, the shift not added: 200 is meant)
    assert fas.score([1, 30], [-150.0, -150.0], fas.reference("arm_reach", 50.0, 200.0)) == pytest.approx(29 / 30)


@pytest.fixture(scope="module")
def srl_run(tmp_path_factory):
    """A tiny SRL (J = 2) run on Gymnasium's Pendulum: exported, ready to evaluate."""
    run_dir = tmp_path_factory.mktemp("runs")
    args = ["train", "srl_gym_pendulum_j2", "--no-wandb", f"run_dir={run_dir}", "runner.total_steps=300",
            "runner.random_steps=200", "runner.eval_episodes=0", "runner.video_seconds=0", "logging.progress=false",
            "agent.hidden=[16,16]", "agent.gru_hidden=8", "agent.model_hidden=[16,16]", "agent.batch_size=32"]
    assert main(args) == 0
    return next(run_dir.glob("*/*/config.yaml")).parent


@pytest.mark.parametrize("exported", [None, "torchscript"])
def test_eval_fas_prints_r_of_l_writes_a_plot_and_a_json_line(srl_run, capsys, exported):
    def fas_eval(*extra: str) -> dict:
        capsys.readouterr()
        assert main(["eval", str(srl_run), "--fas", "--episodes", "2", "--json", *extra]) == 0
        return json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    checkpoints = fas_eval() if exported else None  # (fas.json is rewritten by each evaluation)
    result = fas_eval("--exported", exported) if exported else fas_eval()
    assert result["lengths"] == list(fas.LENGTHS) and len(result["returns"]) == 16
    assert result["controller"] == (exported or "checkpoint")  # which one fas.json scored
    assert result["r_max"] == 1350.0 and result["shift"] == 1550.0 and result["decision_period"] == 2
    assert result["fas"] == pytest.approx(fas.score(result["lengths"], result["returns"], fas.Reference(1350.0, 1550.0)))
    assert (srl_run / "fas.png").stat().st_size > 0 and json.loads((srl_run / "fas.json").read_text())["fas"] == result["fas"]
    if exported:  # the file's queue plays the same chunks as the checkpoint's controller
        assert result["returns"] == pytest.approx(checkpoints["returns"])
    assert main(["eval", str(srl_run), "--fas", "--episodes", "2"]) == 0
    out = capsys.readouterr().out
    assert "L = 30" in out and "FAS " in out


@pytest.mark.parametrize("r_max, shift", [(float("inf"), None), (100.0, float("inf")), (100.0, float("nan")),
                                          (100.0, float("-inf"))])
def test_a_reference_that_is_not_a_finite_number_is_refused(r_max, shift):
    # `eval --fas --fas-shift inf` had scored "FAS inf" and written it into fas.json as Infinity (not JSON); an
    # R_max of inf had scored every controller 0
    with pytest.raises(ValueError, match="finite"):
        fas.reference("cartpole", r_max, shift)


def test_a_plot_cut_short_leaves_the_one_before_whole(tmp_path, monkeypatch):
    """fas.png is written aside and renamed, as curves.png: matplotlib writing it in place had left half a PNG
    where a kill or a full disk stopped it, the earlier plot gone."""
    from matplotlib.figure import Figure

    from robolearn.fas import plot

    result = {"lengths": [1, 2], "returns": [1.0, 0.5], "fas": 0.7}
    out = plot({"run": result}, tmp_path / "fas.png")
    before = out.read_bytes()
    assert before.startswith(b"\x89PNG")

    def cut_short(self, target, **kwargs):
        (open(target, "wb") if isinstance(target, (str, Path)) else target).write(b"\x89PNG half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", cut_short)
    with pytest.raises(OSError):
        plot({"run": result}, out)
    assert out.read_bytes() == before
