"""Chunked execution: open-loop chunks, holding past K, ACT ensembling, export, and the delay wrapper."""

import math
import re

import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch import nn

import sims
from robolearn.chunking import ActionQueue, ChunkedController
from robolearn.evaluate import evaluate
from robolearn.export import ExportedController, export_controller
from robolearn.interfaces import Controller, Step, VecEnv
from sims.delay import Delay, DelayedEnv


class Echo(Controller):
    """Flat: action = the observation (its first feature), counts calls."""

    obs_size = 1

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += x.shape[0]
        return x[:, :1].clone()


class Ramp(nn.Module):
    """A sequence source: chunk_length K, chunk = obs + [0, 1, ..., K-1] (or longer on request)."""

    obs_groups, obs_size, chunk_length = ("policy",), 1, 3

    def forward(self, x: torch.Tensor, length: int | None = None) -> torch.Tensor:
        steps = torch.arange(length or self.chunk_length, dtype=torch.float32)
        return (x[:, :1] + steps).unsqueeze(-1)


class Clock(VecEnv):
    """obs = steps since reset (per env); reward = action; episodes of ``horizon`` steps."""

    def __init__(self, num_envs: int = 2, horizon: int = 10) -> None:
        self.num_envs, self.device, self.control_dt, self.max_episode_steps = num_envs, torch.device("cpu"), 0.1, horizon
        self.observation_spec = {"policy": spaces.Box(-np.inf, np.inf, (1,), np.float32)}
        self.action_spec = spaces.Box(-100, 100, (1,), np.float32)
        self.t = torch.zeros(num_envs)
        self.applied: list[torch.Tensor] = []

    def reset(self, seed=None):
        self.t.zero_()
        return {"policy": self.t.clone().unsqueeze(1)}

    def step(self, action):
        self.applied.append(action.clone())
        self.t += 1
        final = {"policy": self.t.clone().unsqueeze(1)}
        truncated = self.t >= self.max_episode_steps
        self.t[truncated] = 0
        return Step({"policy": self.t.clone().unsqueeze(1)}, action[:, 0].float(), torch.zeros_like(truncated), truncated,
                    {"final_obs": final})


def _play(controller, env, steps):
    obs = env.reset()
    controller.reset()
    actions = []
    for _ in range(steps):
        a = controller.act(obs)
        actions.append(a[:, 0].tolist())
        obs, _, term, trunc, _ = env.step(a)
        controller.reset(term | trunc)
    return actions


def test_open_loop_holds_a_flat_action_for_length_steps():
    echo = Echo()
    chunked = ChunkedController(echo, length=4)
    assert chunked.decision_period == 4
    actions = _play(chunked, Clock(num_envs=1, horizon=10), 10)
    assert [a[0] for a in actions] == [0, 0, 0, 0, 4, 4, 4, 4, 8, 8]
    assert echo.calls == 3  # one decision per 4 steps


def test_a_sequence_plays_its_chunk_then_holds_or_extends():
    hold = _play(ChunkedController(Ramp(), length=5), Clock(num_envs=1, horizon=20), 6)
    assert [a[0] for a in hold] == [0, 1, 2, 2, 2, 5]
    extend = _play(ChunkedController(Ramp(), length=5, beyond="extend"), Clock(num_envs=1, horizon=20), 6)
    assert [a[0] for a in extend] == [0, 1, 2, 3, 4, 5]
    assert ChunkedController(Ramp()).decision_period == 3  # its own K by default


def test_episode_end_forces_a_new_decision_per_env():
    env = Clock(num_envs=2, horizon=10)
    chunked = ChunkedController(Echo(), length=4)
    obs = env.reset()
    env.t[1] = 7  # env 1 is three steps from its time limit
    obs = {"policy": env.t.clone().unsqueeze(1)}
    seen = []
    for _ in range(5):
        a = chunked.act(obs)
        seen.append(a[:, 0].tolist())
        obs, _, term, trunc, _ = env.step(a)
        chunked.reset(term | trunc)
    assert [s[0] for s in seen] == [0, 0, 0, 0, 4]
    assert [s[1] for s in seen] == [7, 7, 7, 0, 0]  # restarted at step 3, decided again from the new episode


def test_ensemble_weights_older_predictions_by_exp_m_age():
    queue = ActionQueue(3, mode="ensemble", decay=0.5)
    calls = iter([torch.tensor([[[0.0], [1.0], [2.0]]]), torch.tensor([[[10.0], [11.0], [12.0]]])])
    assert queue.next(1, lambda rows, n: next(calls)).item() == 0.0
    second = queue.next(1, lambda rows, n: next(calls)).item()
    w_old, w_new = math.exp(0.5), 1.0  # prediction from one step ago vs now
    assert second == pytest.approx((w_old * 1.0 + w_new * 10.0) / (w_old + w_new))
    queue.reset()
    assert queue.next(1, lambda rows, n: torch.tensor([[[5.0], [6.0], [7.0]]])).item() == 5.0  # the past is forgotten


def test_ensemble_reset_forgets_only_the_envs_whose_episode_ended():
    """An episode's end drops that env's past predictions; the other envs keep blending theirs."""
    queue = ActionQueue(3, mode="ensemble", decay=0.5)
    first, second = torch.tensor([[0.0], [1.0], [2.0]]), torch.tensor([[10.0], [11.0], [12.0]])
    assert queue.next(2, lambda rows, n: first.expand(len(rows), 3, 1)).tolist() == [[0.0], [0.0]]
    queue.reset(torch.tensor([True, False]))
    action = queue.next(2, lambda rows, n: second.expand(len(rows), 3, 1))[:, 0].tolist()
    w_old = math.exp(0.5)
    assert action == [10.0, pytest.approx((w_old * 1.0 + 10.0) / (w_old + 1.0))]


def test_ensemble_weights_stay_finite_where_exp_m_age_overflows_float32():
    """exp(4 * 29) overflows float32: a decay of 4 over 30-step chunks had blended into NaN actions."""
    queue = ActionQueue(30, mode="ensemble", decay=4.0)
    for _ in range(31):
        action = queue.next(2, lambda rows, n: torch.full((len(rows), n, 2), 3.0))
    torch.testing.assert_close(action, torch.full((2, 2), 3.0))


def test_ensemble_of_a_flat_controller_is_the_controller():
    env = Clock(num_envs=2, horizon=6)
    chunked = ChunkedController(Echo(), mode="ensemble")
    assert chunked.decision_period == 1
    assert _play(chunked, env, 6) == _play(Echo(), Clock(num_envs=2, horizon=6), 6)


def test_evaluate_and_export_play_the_same_chunks(tmp_path):
    chunked = ChunkedController(Ramp(), length=4)
    paths = export_controller(chunked, tmp_path)
    exported = ExportedController(paths["torchscript"])
    assert exported.meta["outputs"] == ["actions"] and exported.meta["decision_period"] == 4
    assert exported.meta["inputs"] == {"obs": [1]}
    ours = evaluate(chunked, Clock(num_envs=2, horizon=9), 2)
    theirs = evaluate(exported, Clock(num_envs=2, horizon=9), 2)
    assert ours == theirs
    assert _play(ExportedController(paths["onnx"]), Clock(1, 9), 9) == _play(chunked, Clock(1, 9), 9)


def test_delayed_env_lags_actions_and_observations():
    inner = Clock(num_envs=1, horizon=100)
    env = DelayedEnv(inner, Delay(obs_delay_steps=2, action_latency_steps=1))
    obs = env.reset()
    seen = [obs["policy"].item()]
    for i in range(1, 6):
        obs = env.step(torch.tensor([[float(i)]])).obs
        seen.append(obs["policy"].item())
    assert [a.item() for a in inner.applied] == [1, 1, 2, 3, 4]  # the first action fills the queue
    assert seen == [0, 0, 0, 1, 2, 3]  # two steps late; the first observation stands in for the past


def test_delay_is_config_data_for_any_task():
    env = sims.make_env("gym:Pendulum-v1", 2, seed=0, delay={"obs_delay_steps": 1})
    assert isinstance(env, DelayedEnv)
    first = env.reset(seed=0)["policy"]
    step = env.step(torch.zeros(2, 1))
    torch.testing.assert_close(step.obs["policy"], first)  # one step late
    env.close()


def test_a_sequence_of_one_action_plays_like_a_flat_controller():
    one = Ramp()
    one.chunk_length = 1  # forward returns (B, 1, A), not (B, A)
    chunked = ChunkedController(one)
    assert chunked.decision_period == 1
    for value in (1.0, 5.0):  # every step decides anew: the action is this observation's, not a held one
        obs = torch.tensor([[value], [-value]])
        torch.testing.assert_close(chunked.act({"policy": obs}), obs)  # Ramp with K = 1: obs + 0


class HeldSkill:
    """Like an exported skill controller (ExportedController): stateful, with ``reset``, no Controller subclass."""

    obs_groups, obs_size = ("policy",), 1

    def __init__(self) -> None:
        self.resets: list = []

    def export_inputs(self) -> dict:
        return {"obs": [1], "skill_step": [1]}

    def act(self, obs):
        return obs["policy"].clone()

    def reset(self, mask=None) -> None:
        self.resets.append(mask)


def test_chunking_passes_resets_on_rewraps_its_source_and_takes_whole_lengths_only():
    skill = HeldSkill()
    mask = torch.tensor([True, False])
    ChunkedController(skill, length=2).reset(mask)
    assert skill.resets == [mask]  # an exported skill forgot nothing at episode ends
    hold = ChunkedController(Ramp(), length=5)  # what load_controller returns for a sequence run
    extend = _play(ChunkedController(hold, length=5, beyond="extend"), Clock(num_envs=1, horizon=20), 5)
    assert [a[0] for a in extend] == [0, 1, 2, 3, 4]  # extended, not held by the wrapper inside
    assert ChunkedController(hold, beyond="extend").length == 5  # the wrapper's length, not the source's K = 3
    with pytest.raises(ValueError, match="chunk length must be >= 1, got 0"):
        ChunkedController(Echo(), length=0)  # not "the source's own length"
    with pytest.raises(TypeError, match="whole number of steps, got 2.5"):
        ChunkedController(Echo(), length=2.5)
    assert ChunkedController(Echo(), length=np.int64(3)).length == 3


def test_a_chunked_stateful_controller_is_refused_at_export_by_name(tmp_path):
    """It had failed deep in tracing: forward() missing arguments 'skill' and 'step'."""
    with pytest.raises(ValueError, match=r"a ChunkedController around HeldSkill, which holds state across steps .* "
                                         r"does not export in chunks: export the controller itself"):
        export_controller(ChunkedController(HeldSkill(), length=2), tmp_path)
    assert not list(tmp_path.iterdir())


def test_an_exported_chunk_is_checked_against_its_controller_json(tmp_path):
    """A controller.json's chunk had been read unchecked: a K of 8 beside a file of 4 played 4 actions and then
    the 4th again four times; a missing or misspelled mode was a KeyError or named no file."""
    import json

    from robolearn.checkpoint import CheckpointError

    paths = export_controller(ChunkedController(Ramp(), length=4), tmp_path)
    meta_path = tmp_path / "controller.json"
    meta = json.loads(meta_path.read_text())
    for chunk, period in [({**meta["chunk"], "length": 8}, 8), ({**meta["chunk"], "mode": "ensembel"}, 4),
                          ({k: v for k, v in meta["chunk"].items() if k != "mode"}, 4), ([4], 4),
                          ({**meta["chunk"], "length": 8}, 4), ({**meta["chunk"], "mode": "ensemble"}, 4)]:
        meta_path.write_text(json.dumps({**meta, "chunk": chunk, "decision_period": period}))
        for path in paths["torchscript"], paths["onnx"]:
            said = "makes chunks of shape (4, 1), but" if period == 8 else "'chunk' "
            with pytest.raises(CheckpointError, match=rf"^{path if period == 8 else meta_path}: .*{re.escape(said)}"):
                ExportedController(path)
    meta_path.write_text(json.dumps({**meta, "chunk": {**meta["chunk"], "mode": "ensemble"}, "decision_period": 1}))
    assert ExportedController(paths["onnx"]).decision_period == 1  # what an ensemble export writes


def test_an_exported_controller_is_refused_what_it_cannot_do_in_one_line(tmp_path):
    """Its function fed a wrong width had been 100 lines of TorchScript trace (or ONNX Runtime's INVALID_ARGUMENT);
    extending its chunk had failed at the first act with a TypeError about positional arguments."""
    exported = ExportedController(export_controller(ChunkedController(Ramp(), length=3), tmp_path)["torchscript"])
    assert exported(torch.ones(2, 1)).shape == (2, 3, 1)
    for wrong in torch.zeros(1, 5), torch.zeros(1):
        with pytest.raises(ValueError, match=rf"takes observations \(num_envs, 1\), got {re.escape(str(tuple(wrong.shape)))};"):
            exported(wrong)
    with pytest.raises(ValueError, match=r"an exported controller \(ExportedController\) plays only its own 3: use beyond='hold'"):
        ChunkedController(exported, length=8, beyond="extend")
    held = ChunkedController(exported, length=5, beyond="hold")
    assert _play(held, Clock(1, 10), 5) == [[0.0], [1.0], [2.0], [2.0], [2.0]]


def test_fas_of_a_stateful_controller_says_its_memory_sees_every_step():
    from robolearn.fas import curve

    with pytest.warns(UserWarning, match="HeldSkill holds state across steps: it is asked every step"):
        curve(HeldSkill(), lambda n: Clock(n, 6), episodes=1, lengths=(1, 2))


def test_a_module_that_is_no_controller_is_refused_by_name():
    with pytest.raises(TypeError, match=r"ChunkedController wraps a Controller \(obs_groups, obs_size, act\), or an "
                                        r"exported one; got Linear"):
        ChunkedController(torch.nn.Linear(4, 2), 2)


class Gain(Controller):
    """Flat: action = 2 * the observation, through a weight, so that a moved controller computes on its new device
    and dtype."""

    obs_size = 1

    def __init__(self) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.full((1,), 2.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, :1] * self.gain


@pytest.mark.parametrize("mode", ["open_loop", "ensemble"])
@pytest.mark.parametrize("move", [torch.float64, "meta"])
def test_a_chunked_controller_moved_after_acting_acts_where_it_was_moved(mode, move):
    """A move (``.to()``, ``.cuda()``, ``.double()``...) that would take its queued chunks elsewhere lets them go:
    the next act decides anew for every env (a new episode) where the controller now is. A dtype move is the CPU's
    stand-in for a move to a GPU, and so is the meta device. The chunks had stayed where they were made: moved to
    float64, an open-loop controller played its float32 chunk on, then raised 'Index put requires the source and
    destination dtypes match' at its next decision, and an ensemble one blended its old predictions into float32
    actions; moved to meta, one returned CPU actions, the other raised 'Cannot copy out of meta tensor'. (On a GPU, CPU chunks indexed with the CUDA rows raise.) A move that changes nothing keeps them."""
    chunked = ChunkedController(Gain(), length=3, mode=mode)
    chunked.act({"policy": torch.tensor([[1.0], [2.0]])})
    later = {"policy": torch.tensor([[5.0], [6.0]])}
    if mode == "open_loop":  # nothing moved: the chunk decided a step ago plays on
        assert chunked.cpu().float().act(later)[:, 0].tolist() == [2.0, 4.0]
    chunked.to(move)
    for _ in range(2):
        action = chunked.act(later)
        if move == "meta":
            assert action.device.type == "meta" and action.shape == (2, 1)
        else:
            assert action.dtype == torch.float64 and action[:, 0].tolist() == pytest.approx([10.0, 12.0])  # decided now


def test_an_exported_chunk_is_cut_where_the_episode_ends(tmp_path):
    """ExportedController.reset(mask) drops the rest of a chunk, as ChunkedController does: an episode of 5 steps
    plays chunk [0, 1, 2], then [3, 4] of the next one, and the new episode starts on a fresh decision [0, 1, 2],
    not on the old chunk's leftover 5."""
    chunked = ChunkedController(Ramp())  # chunks of Ramp's 3
    exported = ExportedController(export_controller(chunked, tmp_path, formats=("torchscript",))["torchscript"])
    expected = [[0.0], [1.0], [2.0], [3.0], [4.0], [0.0], [1.0], [2.0]]
    assert _play(chunked, Clock(num_envs=1, horizon=5), 8) == expected
    assert _play(exported, Clock(num_envs=1, horizon=5), 8) == expected


def test_an_exported_controller_is_refused_at_export_as_one(tmp_path):
    """Exporting an exported file again had said its class skipped super().__init__(), and a ChunkedController
    around one (another chunk length for a robot) that forward must use torch operations only."""
    exported = ExportedController(export_controller(ChunkedController(Ramp(), length=3), tmp_path / "a")["onnx"])
    with pytest.raises(ValueError, match=r"^an exported controller \(ExportedController\) does not export again: "
                                         r"export the run's own controller, robolearn export RUN"):
        export_controller(exported, tmp_path / "b")
    with pytest.raises(ValueError, match=r"^a ChunkedController around an exported controller .* does not export "
                                         r"again: .*ChunkedController\(robolearn.load_controller\(run\), length\)"):
        export_controller(ChunkedController(exported, length=5), tmp_path / "b")
    assert not (tmp_path / "b").exists()


def test_a_chunked_controller_says_indices_given_to_reset_are_no_mask():
    """reset(tensor([0, 2])) on 4 envs had been said by a bare 'reset(mask)' whose queue was of another length."""
    chunked = ChunkedController(Ramp(), length=3)
    chunked.act({"policy": torch.zeros(4, 1)})
    with pytest.raises(ValueError, match=r"^ChunkedController\.reset\(mask\): flags, .* got values \[0, 2\]: to reset "
                                         r"worlds by index, pass a bool mask of them"):
        chunked.reset(torch.tensor([0, 2]))


def test_a_reset_mask_of_the_wrong_length_names_the_chunked_controller():
    """Once it had acted, a mask of another length than its worlds was said with a bare 'reset(mask)' (the queue's
    check), naming no controller; the other reset errors name the controller's class."""
    chunked = ChunkedController(Ramp(), length=3)
    chunked.act({"policy": torch.zeros(2, 1)})
    with pytest.raises(ValueError, match=r"^ChunkedController\.reset\(mask\): one flag per world, shape \(2,\); "
                                         r"got \(3,\)"):
        chunked.reset(torch.tensor([True, False, False]))
