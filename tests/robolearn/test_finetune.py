"""Offline-to-online runs (WSRL, Cal-QL fine-tuning, JSRL) on tiny budgets: the phase switch and
both phases' metrics, WSRL's frozen warmup and dropped dataset, Cal-QL's offline share, JSRL's
guide and horizon schedule, and resume across the phase boundary."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

import sims
from robolearn import load_config
from robolearn.checkpoint import load_checkpoint
from robolearn.data import DatasetError, DatasetWriter, record
from robolearn.data.record import RandomController
from robolearn.config import ConfigError
from robolearn.export import ExportedController, export_controller
from robolearn.interfaces import Controller
from robolearn.finetune_runner import FinetuneRunner
from robolearn.jsrl_curriculum import HorizonCurriculum

EPISODE = 500  # pendulum's episode length


@pytest.fixture(scope="module")
def datasets_root(tmp_path_factory, swing_up):
    """A pendulum dataset of the scripted controller: 4 episodes, 2000 steps, action noise 0.2."""
    root = tmp_path_factory.mktemp("datasets")
    with sims.make_env("pendulum", num_envs=4, seed=0, num_threads=1) as env:
        meta = {"task": "pendulum", "task_kwargs": {}, "ref_min_score": 0.0, "ref_max_score": 400.0}
        with DatasetWriter("pendulum-tiny", env.observation_spec, env.action_spec, metadata=meta, root=root) as writer:
            record(swing_up, env, writer, 4, noise=0.2, seed=0, progress=False)
    return root


@pytest.fixture(autouse=True)
def root(datasets_root, monkeypatch):
    monkeypatch.setenv("ROBOLEARN_DATASETS", str(datasets_root))
    return datasets_root


def tiny(tmp_path, config: str = "wsrl_hopper", *extra: str):
    return load_config(config, [f"run_dir={tmp_path / 'runs'}", "dataset=pendulum-tiny", "env.task=pendulum", "env.num_envs=1",
                                "logging.wandb=disabled", "logging.progress=false", "runner.video_seconds=0",
                                "runner.eval_episodes=0", "runner.checkpoint_every=1", "runner.total_steps=1000",
                                "runner.utd_ratio=0.125", "agent.pretrain_updates=20", "agent.hidden=[16,16]",
                                "agent.num_critics=4", "agent.n_actions=2", "agent.batch_size=32",
                                "agent.online_batch_size=32", *extra])


def run(cfg, resume=None, stop=None, spy=None, fresh_replay=False) -> FinetuneRunner:
    runner = FinetuneRunner(cfg, resume=resume, fresh_replay=fresh_replay)
    if spy is not None:
        update = runner.agent.update
        runner.agent.update = lambda batch: (spy(runner, batch), update(batch))[1]
    try:
        runner.train(stop=stop)
    finally:
        runner.close()
    return runner


@pytest.fixture
def offline_iterations_of_100(monkeypatch) -> None:
    """Offline iterations of 100 updates, not 1000: for tests of what an offline iteration's end does (an evaluation,
    a stop, a resume), not of what its updates learn."""
    from robolearn import offline_runner

    monkeypatch.setattr(offline_runner, "UPDATES_PER_ITERATION", 100)


def lines(runner: FinetuneRunner) -> list[dict]:
    return [json.loads(line) for line in (runner.run_dir / "metrics.jsonl").read_text().splitlines()]


def test_wsrl_pretrains_then_warms_up_frozen_and_fine_tunes_without_the_dataset(tmp_path):
    calls: list[tuple[str, int]] = []
    runner = run(tiny(tmp_path, "wsrl_hopper", "agent.warmup_steps=600", "runner.eval_episodes=2"),
                 spy=lambda r, batch: calls.append((r.progress.phase, r.progress.env_steps)))
    offline = [c for c in calls if c[0] == "offline"]
    online = [c for c in calls if c[0] == "online"]
    assert len(offline) == 20
    assert len(online) == 50 and min(step for _, step in online) > 600  # UTD 1/8 over the 400 steps after warmup
    records = lines(runner)
    assert [(r["phase"], r.get("updates") or r.get("online_updates"), r.get("env_steps")) for r in records] == [
        ("offline", 20, None), ("online", 50, 1000)]
    assert all("eval/return" in r for r in records)
    assert runner.replay is None and runner.online.size == 1000  # only online transitions, the dataset dropped
    # SAC online; the config keeps the pretraining's target entropy (-|A|, pendulum has one action): WSRL's effective one
    assert runner.agent.cql_alpha == 0 and runner.agent.target_entropy == -1.0
    assert (runner.run_dir / "pretrained" / "controller.pt").is_file() and (runner.run_dir / "export" / "controller.onnx").is_file()
    trained = json.loads((runner.run_dir / "export" / "controller.json").read_text())["trained"]
    assert trained == {"env_steps": 1000, "updates": 20, "online_updates": 50}  # each phase's count, as list says
    pretrained = json.loads((runner.run_dir / "pretrained" / "controller.json").read_text())["trained"]
    assert pretrained == {"updates": 20}  # the offline phase's, as its export records it
    evaluation = json.loads((runner.run_dir / "eval.json").read_text())
    assert evaluation["pretrain_updates"] == 20 and evaluation["online_steps"] == 1000


def test_warmup_actions_come_from_the_frozen_pretrained_policy(tmp_path):
    """A run that is all warmup makes no update: the final controller is the pretrained one."""
    with pytest.warns(UserWarning, match="will update nothing"):
        runner = run(tiny(tmp_path, "wsrl_hopper", "agent.warmup_steps=1000", "runner.utd_ratio=1.0"))
    assert runner.progress.online_updates == 0
    pretrained = ExportedController(runner.run_dir / "pretrained" / "controller.onnx")
    final = ExportedController(runner.run_dir / "export" / "controller.onnx")
    obs = {"policy": torch.randn(64, 3)}
    torch.testing.assert_close(final.act(obs), pretrained.act(obs))  # nothing moved during warmup


def test_online_target_entropy_switches_when_set(tmp_path):
    """A literal online target of 0 (which WSRL's code, reading 0 as -|A|, never runs) is one override away."""
    runner = run(tiny(tmp_path, "wsrl_hopper", "agent.warmup_steps=600", "agent.online_target_entropy=0.0"))
    assert runner.agent.target_entropy == 0.0


def test_calql_finetuning_draws_its_offline_share_from_the_dataset(tmp_path):
    shares: list[int] = []
    # the batch's last rows are the dataset's (FinetuneRunner._batch), each with its Monte-Carlo return
    run(tiny(tmp_path, "calql_finetune_hopper", "agent.offline_ratio=0.25", "agent.online_cql_alpha=1.0"),
        spy=lambda r, batch: r.progress.phase == "online" and shares.append(int(torch.isfinite(batch["mc_return"][-8:]).sum())))
    # 25% of 32 rows; UTD 1/8 from step 24 on, when the buffer holds the batch's 24 online rows
    assert len(shares) == 122 and set(shares) == {8}


def test_calql_finetuning_bounds_online_rows_by_their_episodes_monte_carlo_return(tmp_path):
    """Cal-QL's code gives every finished online trajectory its return-to-go before it is trained on; the rows
    had stayed -inf (plain CQL) for the whole online phase."""
    from policies.offline.common import discounted_returns

    runner = run(tiny(tmp_path, "calql_finetune_hopper", "agent.online_cql_alpha=1.0", "agent.gamma=0.9",
                      "runner.total_steps=1200"))
    data = runner.online.data
    assert runner.online.size == 1200
    ends = data["terminated"][:1200] | data["truncated"][:1200]
    assert ends[:1000].sum() == 2 and not ends[1000:].any()  # two whole 500-step episodes, the third unfinished
    expected = discounted_returns(data["reward"][:1000], ends[:1000], 0.9)
    torch.testing.assert_close(data["mc_return"][:1000], expected, rtol=1e-5, atol=1e-4)
    assert torch.isinf(data["mc_return"][1000:]).all()  # not ended: no bound yet


def test_a_resume_bounds_the_rows_of_episodes_a_ctrl_c_left_unsettled_and_of_the_one_it_cut(tmp_path):
    """Online rows get their episode's return-to-go at each iteration's end: a Ctrl+C mid-iteration saved the rows
    of the episodes that had ended in it still at -inf, and those of the episode the resume cut (its env restarts:
    the seam ends it) too, and both stayed plain CQL rows for the rest of the run."""
    from policies.offline.common import discounted_returns

    cfg = tiny(tmp_path, "calql_finetune_hopper", "agent.online_cql_alpha=1.0", "agent.gamma=0.9",
               "env.kwargs.max_episode_steps=300", "runner.total_steps=2000")

    def spy(runner, batch):
        if runner.progress.phase == "online" and runner.progress.env_steps == 1703:  # an update every 8 steps from step 16 (half a batch)
            runner.ctrl_c.pending = True

    interrupted = run(cfg, spy=spy)
    assert load_checkpoint(interrupted.checkpoint_path)["progress"]["env_steps"] == 1703
    data = run(cfg, resume=interrupted.run_dir).online.data
    ends = data["terminated"][:1703] | data["truncated"][:1703]
    # episodes ended at steps 300-1500 (1200 and 1500 in the iteration the Ctrl+C cut), the seam at 1703
    assert ends.nonzero().flatten().tolist() == [299, 599, 899, 1199, 1499, 1702]
    torch.testing.assert_close(data["mc_return"][:1703], discounted_returns(data["reward"][:1703], ends, 0.9),
                               rtol=1e-5, atol=1e-4)


def test_wsrl_online_rows_are_left_without_a_bound(tmp_path):
    runner = run(tiny(tmp_path, "wsrl_hopper", "agent.warmup_steps=100"))  # SAC online: the column is never read
    assert torch.isinf(runner.online.data["mc_return"][: runner.online.size]).all()


def test_jsrl_guide_acts_for_the_first_h_steps_and_h_shrinks(tmp_path):
    cfg = tiny(tmp_path, "jsrl_hopper", "agent.jsrl_window=1", "agent.jsrl_step=150", "agent.jsrl_threshold=-1e9",
               "runner.total_steps=1500")
    runner = run(cfg)
    assert [r["jsrl/h"] for r in lines(runner) if r["phase"] == "online"] == [EPISODE - 2 * 150, EPISODE - 3 * 150]
    data = runner.online.data  # the first episode is all guide (h = 500); the second only its first 350 steps
    guide = runner.guide.act({"policy": data["obs"]["policy"][:1000]})
    torch.testing.assert_close(data["action"][:EPISODE + 350], guide[:EPISODE + 350])
    assert not torch.allclose(data["action"][EPISODE + 350:1000], guide[EPISODE + 350:1000])


def test_jsrl_judges_h_only_by_episodes_begun_at_it(tmp_path):
    """Four envs end their guide-only episodes (h = 500) in one step: the first two shrank h to 400 and the
    other two, also run at 500, were counted at 400 and shrank it to 300 with no episode ever run at 400."""
    cfg = tiny(tmp_path, "jsrl_hopper", "agent.jsrl_window=2", "agent.jsrl_step=100", "agent.jsrl_threshold=-1e9",
               "runner.total_steps=2000", "env.num_envs=4")
    runner = run(cfg)
    assert runner.curriculum.h == EPISODE - 100 and runner.curriculum.returns == []
    curriculum = HorizonCurriculum(horizon=300, step=100, window=1, threshold=0.0)
    assert curriculum.episode_done(1.0, 300) and curriculum.h == 200
    assert not curriculum.episode_done(1.0, 300) and curriculum.h == 200  # begun at 300: not this h's


def test_horizon_curriculum_shrinks_when_returns_hold_up():
    curriculum = HorizonCurriculum(horizon=300, step=100, window=2, tolerance=0.1)
    assert curriculum.guided(torch.tensor([0, 299, 300])).tolist() == [True, True, False]
    assert [curriculum.episode_done(r) for r in (10.0, 12.0)] == [False, True]  # the first window sets the best
    assert curriculum.h == 200
    assert [curriculum.episode_done(r) for r in (5.0, 5.0)] == [False, False]  # worse than 0.9 x best: h holds
    assert [curriculum.episode_done(r) for r in (10.0, 10.0)] == [False, True] and curriculum.h == 100
    fixed = HorizonCurriculum(horizon=100, step=100, window=1, threshold=50.0)
    assert not fixed.episode_done(49.0) and fixed.episode_done(51.0) and fixed.h == 0
    assert not fixed.episode_done(1e9) and fixed.h == 0  # never below zero
    uneven = HorizonCurriculum(horizon=150, step=100, window=1, threshold=0.0)
    assert uneven.episode_done(1.0) and uneven.h == 50
    assert uneven.episode_done(1.0) and uneven.h == 0  # the last step is cut to what is left: h is never negative
    assert uneven.state_dict()["h"] == 0 and not uneven.guided(torch.tensor([0])).any()
    restored = HorizonCurriculum(1, 1, 1)
    restored.load_state_dict(curriculum.state_dict())
    assert restored.state_dict() == curriculum.state_dict()


def test_resume_across_the_phase_boundary(tmp_path):
    cfg = tiny(tmp_path, "wsrl_hopper", "agent.warmup_steps=600", "runner.total_steps=0")
    first = run(cfg)  # pretraining only: the checkpoint sits at the boundary
    assert load_checkpoint(first.checkpoint_path)["progress"]["phase"] == "online"
    cfg.runner.total_steps = 2000
    interrupted = run(cfg, resume=first.run_dir, stop=lambda m: m["phase"] == "online")  # stops after 1000 steps
    assert interrupted.progress.env_steps == 1000
    calls: list[int] = []
    resumed = run(cfg, resume=first.run_dir, spy=lambda r, batch: calls.append(r.progress.phase == "offline"))
    assert not any(calls)  # no pretraining again
    assert resumed.online.size == 2000 and resumed.progress.online_updates == 175  # 50 + 125 (UTD 1/8, 600 warmup)
    records = lines(resumed)
    assert [(r["phase"], r.get("updates"), r.get("online_updates"), r.get("env_steps")) for r in records] == [
        ("offline", 20, None, None), ("online", None, 50, 1000), ("online", None, 175, 2000)]


def test_a_resume_past_the_pretraining_with_another_pretraining_count_is_refused(tmp_path):
    """It went online as pretrained (20 updates) and wrote agent.pretrain_updates=40 into the run's config.yaml."""
    cfg = tiny(tmp_path, "wsrl_hopper", "runner.total_steps=0")
    first = run(cfg)
    cfg.runner.total_steps, cfg.agent.pretrain_updates = 1000, 40
    with pytest.raises(ConfigError, match="agent.pretrain_updates=40: .* has pretrained 20 updates and is past its "
                                          "offline phase, which a resume does not go back to; resume with "
                                          "agent.pretrain_updates=20"):
        FinetuneRunner(cfg, resume=first.run_dir)
    assert "pretrain_updates: 20\n" in (first.run_dir / "config.yaml").read_text()
    cfg.agent.pretrain_updates = 20
    assert run(cfg, resume=first.run_dir).progress.env_steps == 1000  # the same count goes on


def test_ctrl_c_mid_pretraining_resumes_to_the_line_of_a_run_trained_in_one_go(tmp_path):
    """Ctrl+C in the offline phase keeps the updates done, and the resume finishes the iteration; its line had
    averaged the losses of the updates after the resume alone (the sums before were not saved)."""
    cfg = tiny(tmp_path, "wsrl_hopper", "runner.total_steps=0")  # pretraining only: 20 updates, one iteration
    straight = run(cfg)

    def press_at_8(runner, batch):
        if runner.progress.updates == 7:  # the 8th update: a Ctrl+C taken after it, between updates
            runner.ctrl_c.pending = True

    interrupted = run(cfg, spy=press_at_8)
    assert load_checkpoint(interrupted.checkpoint_path)["progress"]["updates"] == 8
    run(cfg, resume=interrupted.run_dir)
    clock = ("time", "updates_per_s", "iteration_time")
    assert [{k: v for k, v in r.items() if k not in clock} for r in lines(interrupted)] == \
        [{k: v for k, v in r.items() if k not in clock} for r in lines(straight)]


def test_sums_a_ctrl_c_left_of_the_offline_phase_stay_out_of_the_online_lines(tmp_path):
    """A resume with fewer agent.pretrain_updates than were done runs no offline iteration: the sums a Ctrl+C had
    left of one were carried into the first online line (critic_loss, q... where the online phase logs none yet)."""
    def press_at_8(runner, batch):
        if runner.progress.phase == "offline" and runner.progress.updates == 7:
            runner.ctrl_c.pending = True

    interrupted = run(tiny(tmp_path, "wsrl_hopper", "runner.total_steps=1000"), spy=press_at_8)
    assert load_checkpoint(interrupted.checkpoint_path)["progress"]["update_sums"]  # (the offline iteration's)
    with pytest.raises(ConfigError, match=r"agent.pretrain_updates=5: .* has pretrained 8 updates and a resume does "
                                          r"not undo updates; resume with agent.pretrain_updates=8 or more"):
        FinetuneRunner(tiny(tmp_path, "wsrl_hopper", "agent.pretrain_updates=5"), resume=interrupted.run_dir)
    run(tiny(tmp_path, "wsrl_hopper", "runner.total_steps=1000", "agent.pretrain_updates=8"), resume=interrupted.run_dir)
    online = [r for r in lines(interrupted) if r.get("phase") == "online"]
    straight = [r for r in lines(run(tiny(tmp_path / "straight", "wsrl_hopper", "runner.total_steps=1000")))
                if r.get("phase") == "online"]
    assert online and [sorted(r) for r in online] == [sorted(r) for r in straight]
    assert load_checkpoint(interrupted.checkpoint_path)["progress"]["update_sums"] == {}


def test_a_fine_tune_given_no_online_steps_is_listed_done_when_pretrained(tmp_path):
    """runner.total_steps=0 (pretraining only) had `list` call the finished run 'ended early at offline 20 of 20
    updates' and offer a resume, which refuses it as finished."""
    from robolearn.runs import run_status

    first = run(tiny(tmp_path, "wsrl_hopper", "runner.total_steps=0", "runner.eval_episodes=1"))
    assert run_status(first.run_dir) == "done"
    with pytest.raises(ConfigError, match="already finished"):
        FinetuneRunner(tiny(tmp_path, "wsrl_hopper", "runner.total_steps=0", "runner.eval_episodes=1"),
                       resume=first.run_dir)


def test_an_online_resume_without_its_replay_refills_it_before_updating(tmp_path):
    """--fresh-replay: a fine-tune whose replay.pt is lost goes on, its online updates waiting for the refill."""
    cfg = tiny(tmp_path, "wsrl_hopper", "agent.warmup_steps=600", "runner.total_steps=1000")
    first = run(cfg)
    first.checkpoint_path.with_name("replay.pt").unlink()
    cfg.runner.total_steps = 2000
    steps: list[int] = []
    with pytest.warns(UserWarning, match="the agent's own actions refill it for 600 env steps"):  # its warmup's
        resumed = run(cfg, resume=first.run_dir, fresh_replay=True,
                      spy=lambda r, batch: steps.append(r.progress.env_steps) if r.progress.phase == "online" else None)
    # owed from step 1600 on, at UTD 1/8 the first at its eighth step; 50 before the resume, 50 after
    assert resumed.online.size == 1000 and min(steps) == 1607 and resumed.progress.online_updates == 50 + 50


def test_a_fresh_replay_refill_is_sized_by_the_online_batch(tmp_path):
    """Without a warmup, the refill holds one online batch (agent.online_batch_size): it had been sized by the
    offline phase's agent.batch_size, so online batches of 512 were drawn from 32 refilled rows."""
    cfg = tiny(tmp_path, "wsrl_hopper", "agent.warmup_steps=0", "agent.online_batch_size=512", "runner.total_steps=1000")
    first = run(cfg)
    first.checkpoint_path.with_name("replay.pt").unlink()
    cfg.runner.total_steps = 2000
    with pytest.warns(UserWarning, match="refill it for 512 env steps"):
        resumed = run(cfg, resume=first.run_dir, fresh_replay=True)
    assert resumed.progress.refill_until == 1512


def test_random_episode_start_staggers_the_online_episodes(tmp_path):
    """env.random_episode_start applies to a fine-tune's online env, as to an online run's."""
    cfg = tiny(tmp_path, "wsrl_hopper", "env.num_envs=4", "agent.warmup_steps=0", "runner.total_steps=1600",
               "env.random_episode_start=true")
    runner = FinetuneRunner(cfg)
    step, ends = runner.train_env.step, []
    runner.train_env.step = lambda action: (out := step(action), ends.append(bool(out[3].any())))[0]
    try:
        runner.train()
    finally:
        runner.close()
    assert sum(ends) > 1  # first episodes cut short at random steps: without, none ends in 400 steps of 500


def test_ctrl_c_online_keeps_steps_and_updates_in_step(tmp_path, capsys):
    """Ctrl+C in the online phase stops between updates: the checkpoint counts every update the agent
    holds, and the resume ends on the same step grid and update count as an uninterrupted run."""
    cfg = tiny(tmp_path, "wsrl_hopper", "agent.warmup_steps=600", "runner.total_steps=2000")
    online_calls: list[int] = []

    def spy(runner, batch):
        if runner.progress.phase == "online":
            online_calls.append(1)
            if len(online_calls) == 60:  # in the second iteration
                runner.ctrl_c.pending = True

    interrupted = run(cfg, spy=spy)
    saved = load_checkpoint(interrupted.checkpoint_path)["progress"]
    assert saved["online_updates"] == len(online_calls) == 60 and 1000 < saved["env_steps"] < 2000
    assert saved["seconds"] > lines(interrupted)[-1]["time"]  # the time since the last line is kept
    assert (f"checkpoint saved at {saved['updates']} offline updates, {saved['env_steps']:,} env steps, 60 online "
            "updates;") in capsys.readouterr().out  # each phase's count named (the online updates had gone unsaid)
    from robolearn.runs import run_status

    assert run_status(interrupted.run_dir).startswith(f"incomplete: online {saved['env_steps']:,} of 2,000 env_steps;")
    resumed = run(cfg, resume=interrupted.run_dir)
    assert resumed.progress.online_updates == 175  # as test_resume_across_the_phase_boundary's straight count
    assert resumed.online.data["truncated"][saved["env_steps"] - 1]  # the env restarted there: its episode ends
    assert lines(resumed)[-1]["time"] > saved["seconds"]  # time goes on from the checkpoint's
    assert [(r["phase"], r.get("env_steps")) for r in lines(resumed)] == [("offline", None), ("online", 1000),
                                                                          ("online", 2000)]


def test_online_nan_checks_are_deferred_on_a_gpu_and_the_last_good_checkpoint_stays(tmp_path):
    """The online phase had checked every step's values at once (three host syncs per step on a GPU):
    deferred as the online runner defers them, a NaN reward stops the run at the iteration's end, before
    its checkpoint, and the offline phase's checkpoint is kept."""
    from robolearn.evaluate import FiniteWatch, NonFiniteError

    runner = FinetuneRunner(tiny(tmp_path, "wsrl_hopper", "agent.warmup_steps=1000", "runner.total_steps=2000"))  # no update
    runner._finite = FiniteWatch("cpu", deferred=True)  # as on a GPU
    step, calls = runner.train_env.step, {"n": 0}

    def nan_reward(action):
        calls["n"] += 1
        obs, reward, terminated, truncated, info = step(action)
        return obs, reward * float("nan") if calls["n"] == 50 else reward, terminated, truncated, info

    runner.train_env.step = nan_reward
    with pytest.raises(NonFiniteError, match="reward contained NaN or inf during this iteration; training stopped at "
                                             r".*env_steps=1,000.*, last good checkpoint \(.*\) kept"):
        runner.train()
    runner.close()
    assert calls["n"] == 1000  # the iteration ran to its end, then stopped
    assert load_checkpoint(runner.checkpoint_path)["progress"]["phase"] == "online"  # the phase boundary's
    assert load_checkpoint(runner.checkpoint_path)["progress"]["env_steps"] == 0


class HopperZeros(Controller):
    """A controller of another task: hopper's 11 observations, 3 actions."""

    obs_size = 11

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return obs[:, :3] * 0.0


def test_a_bad_guide_is_refused_before_pretraining(tmp_path):
    """agent.guide is checked when the run is built, not hours later at the switch to online."""
    with pytest.raises(FileNotFoundError, match="agent.guide: no exported controller at nope"):
        FinetuneRunner(tiny(tmp_path, "jsrl_hopper", "agent.guide=nope"))
    hopper = tmp_path / "hopper_guide"
    export_controller(HopperZeros(), hopper, ("torchscript",))
    with pytest.raises(ConfigError, match="agent.guide: .*observation width 3 .*trained on 11"):
        FinetuneRunner(tiny(tmp_path, "jsrl_hopper", f"agent.guide={hopper}"))
    assert not (tmp_path / "runs").exists()


def test_a_guide_run_guides_through_its_onnx_file(tmp_path):
    """A run exported with --format onnx had been told 'no exported controller at RUN (give ... a run directory)',
    then to name its controller.onnx; a run exported in both formats guided through its controller.pt, which
    torch.jit.load runs code of as it loads. The ONNX file guides where there is one."""
    guide_run = tmp_path / "guide_run"
    export_controller(PendulumZeros(), guide_run / "export", ("onnx",))
    runner = FinetuneRunner(tiny(tmp_path, "jsrl_hopper", "env.task=pendulum", f"agent.guide={guide_run}"))
    runner.close()
    assert runner._guide_path(str(guide_run)) == guide_run / "export" / "controller.onnx"
    export_controller(PendulumZeros(), guide_run / "export")  # both
    assert runner._guide_path(str(guide_run)) == guide_run / "export" / "controller.onnx"
    assert runner._guide_path(str(guide_run / "export" / "controller.pt")) == guide_run / "export" / "controller.pt"
    (guide_run / "export" / "controller.onnx").unlink()
    assert runner._guide_path(str(guide_run)) == guide_run / "export" / "controller.pt"
    with pytest.raises(FileNotFoundError, match=rf"agent.guide: no exported controller at {tmp_path}"):
        runner._guide_path(str(tmp_path))


def test_a_guide_run_not_exported_yet_is_told_to_export(tmp_path):
    """A run stopped before its end (a checkpoint, no export/) had been told 'no exported controller at RUN (give a
    controller.pt, its folder or a run directory)', which it is."""
    guide_run = tmp_path / "guide_run"
    (guide_run / "checkpoints").mkdir(parents=True)
    (guide_run / "checkpoints" / "latest.pt").write_bytes(b"not read")
    with pytest.raises(FileNotFoundError, match=rf"agent.guide: {guide_run} is a run with no export yet \(stopped before "
                                                rf"its end\): export its latest checkpoint with robolearn export "
                                                rf"{guide_run}, or finish it$"):
        FinetuneRunner(tiny(tmp_path, "jsrl_hopper", f"agent.guide={guide_run}"))


def test_a_resume_whose_pretrained_guide_is_gone_says_so(tmp_path):
    """agent.guide=pretrained (jsrl's default) of a run whose pretrained/ was deleted had been told to "give a
    controller.pt, its folder or a run directory", of a setting that names none."""
    runner = FinetuneRunner(tiny(tmp_path, "jsrl_hopper", "agent.guide=pretrained"))
    runner.train()
    runner.close()
    shutil.rmtree(runner.run_dir / "pretrained")
    with pytest.raises(FileNotFoundError, match=rf"agent.guide=pretrained: {runner.run_dir / 'pretrained'} is missing "
                                                r"\(this run's controller as pretraining left it, .*\); put it back, or "
                                                "guide with another controller: agent.guide=PATH$"):
        FinetuneRunner(tiny(tmp_path, "jsrl_hopper", "agent.guide=pretrained", "runner.total_steps=2000"),
                       resume=runner.run_dir)
    (runner.run_dir / "pretrained").mkdir()  # there, but its files gone: not called missing
    with pytest.raises(FileNotFoundError, match=rf"agent.guide=pretrained: {runner.run_dir / 'pretrained'} holds no "
                                                r"controller.onnx or controller.pt \(this run's"):
        FinetuneRunner(tiny(tmp_path, "jsrl_hopper", "agent.guide=pretrained", "runner.total_steps=2000"),
                       resume=runner.run_dir)


class PendulumZeros(Controller):
    """Pendulum's 3 observations, 1 action."""

    obs_size = 3

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return obs[:, :1] * 0.0


def test_a_guide_of_another_task_or_rate_is_said(tmp_path):
    """A guide was checked only against the observation width: another task's of the same width, or one
    trained at another control rate, guided silently."""
    other = tmp_path / "other_task"
    export_controller(PendulumZeros(), other, ("torchscript",), extra={"task": "gym:Pendulum-v1"})
    with pytest.warns(UserWarning, match=r"agent.guide: .* was trained on task 'gym:Pendulum-v1', this run is on 'pendulum'"):
        FinetuneRunner(tiny(tmp_path, "jsrl_hopper", f"agent.guide={other}")).close()
    slower = tmp_path / "slower"
    export_controller(PendulumZeros(), slower, ("torchscript",), extra={"task": "pendulum", "control_dt": 0.1})
    with pytest.warns(UserWarning, match=r"trained at 10 Hz, the env steps at 50 Hz"):
        FinetuneRunner(tiny(tmp_path, "jsrl_hopper", f"agent.guide={slower}")).close()


def test_the_guide_starts_every_episode_afresh(tmp_path, monkeypatch):
    """A recurrent, chunked or skill guide had carried its memory from one episode into the next."""
    ended = []
    reset = ExportedController.reset
    monkeypatch.setattr(ExportedController, "reset",
                        lambda self, mask=None: (ended.append(mask is not None and bool(mask.any())), reset(self, mask))[1])
    run(tiny(tmp_path, "jsrl_hopper", "runner.total_steps=1500"))
    assert sum(ended) == 3  # one env's three 500-step online episodes


def test_a_warmup_longer_than_the_online_phase_warns_and_another_dataset_on_resume_is_refused(tmp_path, root):
    with pytest.warns(UserWarning, match="agent.warmup_steps=5000 covers all runner.total_steps=300"):
        FinetuneRunner(tiny(tmp_path, "wsrl_hopper", "agent.warmup_steps=5000", "runner.total_steps=300")).close()
    cfg = tiny(tmp_path, "wsrl_hopper", "agent.warmup_steps=600", "runner.total_steps=0")
    first = run(cfg)
    with sims.make_env("pendulum", num_envs=1, seed=0, num_threads=1) as env:
        with DatasetWriter("pendulum-other", env.observation_spec, env.action_spec, metadata={"task": "pendulum"},
                           root=root) as writer:
            record(RandomController(env, 0), env, writer, 1, seed=0, progress=False)
    cfg.runner.total_steps, cfg.dataset = 1000, "pendulum-other"
    with pytest.raises(ConfigError, match="was trained on 'pendulum-tiny'; a resume goes on with the same data"):
        FinetuneRunner(cfg, resume=first.run_dir)


def test_a_dataset_replaced_under_its_name_is_refused_on_resume_where_it_is_still_read(tmp_path, root):
    """Only the name was compared: a dataset re-recorded under it resumed on other data, with the normalizers
    and scales fitted to the first. Online without dataset rows (WSRL's offline_ratio=0) it is only said."""
    def write(episodes: int) -> None:
        with sims.make_env("pendulum", num_envs=1, seed=0, num_threads=1, max_episode_steps=50) as env:
            with DatasetWriter("pendulum-again", env.observation_spec, env.action_spec, metadata={"task": "pendulum"},
                               root=root, overwrite=True) as writer:
                record(RandomController(env, 0), env, writer, episodes, seed=0, progress=False)

    write(5)
    reading = tiny(tmp_path / "a", "calql_finetune_hopper", "dataset=pendulum-again", "runner.total_steps=0",
                   "agent.offline_ratio=0.5")
    done = tiny(tmp_path / "b", "wsrl_hopper", "dataset=pendulum-again", "runner.total_steps=0")
    runs = [run(reading), run(done)]
    for cfg in reading, done:
        cfg.runner.total_steps = 1000
    FinetuneRunner(reading, resume=runs[0].run_dir).close()  # the same data: resumes
    write(6)
    with pytest.raises(ConfigError, match=r"dataset 'pendulum-again-v0' is not the data .* it held 5 episodes and 250 "
                                          r"steps .*, it now holds 6 and 300 .*put that dataset back"):
        FinetuneRunner(reading, resume=runs[0].run_dir)
    with pytest.warns(UserWarning, match=r"it now holds 6 and 300 .*; the run reads it no more \(online, "
                                         r"agent.offline_ratio=0\), so it changes nothing"):
        FinetuneRunner(done, resume=runs[1].run_dir).close()


def test_a_run_folder_moved_while_fine_tuning_stops_the_run(tmp_path, moving_the_run_once):
    """As the online runner: its checkpoint and replay had made a new folder of the old name."""
    moved, runs = tmp_path / "moved", []
    with pytest.raises(FileNotFoundError, match="was moved or deleted while the run trained"):
        run(tiny(tmp_path), stop=moving_the_run_once(tmp_path / "runs", moved, runs))
    assert not runs[0].exists() and (moved / "config.yaml").is_file()


def test_max_minutes_ends_a_fine_tune_early_and_still_evaluates(tmp_path):
    """runner.max_minutes was ignored by both phases: a run given seconds went on to its whole budget."""
    runner = run(tiny(tmp_path, "wsrl_hopper", "agent.warmup_steps=0", "runner.total_steps=5000",
                      "runner.max_minutes=0.01", "runner.eval_episodes=1"))
    assert runner.progress.updates == 20 and runner.progress.env_steps < 5000
    assert json.loads((runner.run_dir / "eval.json").read_text())["online_steps"] == runner.progress.env_steps
    stopped = run(tiny(tmp_path, "wsrl_hopper", "agent.pretrain_updates=3000", "runner.max_minutes=0.005"))
    assert stopped.progress.phase == "offline" and 0 < stopped.progress.updates < 3000
    assert (stopped.run_dir / "export" / "controller.json").is_file()


def test_a_fine_tune_ended_in_its_offline_phase_says_its_offline_budget(tmp_path, capsys, offline_iterations_of_100):
    """It said '1,000 of runner.total_steps=5,000 updates': offline updates against the online env-step budget."""
    run(tiny(tmp_path, "wsrl_hopper", "agent.pretrain_updates=300", "runner.total_steps=5000"),
        stop=lambda m: m["phase"] == "offline")
    assert "ended early: 100 of agent.pretrain_updates=300 offline updates (train()'s stop)" in capsys.readouterr().out


def test_a_fine_tune_resumed_after_an_early_end_in_its_offline_phase_sets_that_end_aside(tmp_path, capsys,
                                                                                         offline_iterations_of_100):
    """The earlier end's eval.json stayed beside its export while the resume trained on: a kill or Ctrl+C in it
    left `list` calling the run 'ended early' there, and `eval` its export finished."""
    from robolearn.runs import run_status

    cfg = tiny(tmp_path, "wsrl_hopper", "agent.pretrain_updates=200", "runner.eval_episodes=1")
    first = run(cfg, stop=lambda m: m["phase"] == "offline")
    evaluation = (first.run_dir / "eval.json").read_text()
    resumed = FinetuneRunner(cfg, resume=first.run_dir)
    resumed.close()
    assert not (first.run_dir / "eval.json").exists()
    assert (first.run_dir / "eval.superseded.json").read_text() == evaluation
    assert run_status(first.run_dir).startswith("incomplete: offline 100 of 200 updates;")


def test_a_resume_refused_for_its_replay_leaves_the_runs_evaluation_where_it_was(tmp_path):
    """The evaluation of a run that ended early is set aside when a resume trains on: a fine-tune had set it aside
    before loading its replay, whose refusal then left the run without one (list called it incomplete)."""
    from robolearn.checkpoint import CheckpointError

    cfg = tiny(tmp_path, "wsrl_hopper", "agent.warmup_steps=100", "runner.eval_episodes=1", "runner.total_steps=3000")
    done = run(cfg, stop=lambda metrics: metrics.get("phase") == "online").run_dir
    replay = done / "checkpoints" / "replay.pt"
    state = torch.load(replay, weights_only=True)
    for key in ("obs", "next_obs"):
        state["data"][key]["policy"] = torch.zeros(state["data"][key]["policy"].shape[0], 5)  # another env's
    torch.save(state, replay)
    with pytest.raises(CheckpointError, match="holds transitions of another env"):
        run(cfg, resume=done)
    assert (done / "eval.json").is_file()


def test_an_online_phase_without_updates_is_said(tmp_path):
    """runner.utd_ratio=0 had fine-tuned nothing without a word (the online runner says it)."""
    with pytest.warns(UserWarning, match=r"runner.utd_ratio=0: the online phase makes no update"):
        FinetuneRunner(tiny(tmp_path, "wsrl_hopper", "runner.utd_ratio=0", "runner.total_steps=200")).close()


def write_gone(root) -> None:
    """A dataset with reference scores, for a test to take away (written anew: the datasets root is shared by the
    tests a worker runs, and one may leave it there)."""
    with sims.make_env("pendulum", num_envs=1, seed=0, num_threads=1, max_episode_steps=50) as env:
        with DatasetWriter("pendulum-gone", env.observation_spec, env.action_spec, metadata={
                "task": "pendulum", "ref_min_score": 0.0, "ref_max_score": 400.0}, root=root,
                overwrite=True) as writer:
            record(RandomController(env, 0), env, writer, 5, seed=0, progress=False)


def test_an_online_resume_without_dataset_rows_needs_no_dataset(tmp_path, root):
    """WSRL keeps no offline data online (agent.offline_ratio=0), yet a resume in its online phase loaded the dataset
    and rebuilt its transitions: one whose dataset was deleted, or whose run was copied without it, failed 'no
    dataset'. It goes on, scored on the reference scores its checkpoint kept."""
    write_gone(root)
    cfg = tiny(tmp_path, "wsrl_hopper", "dataset=pendulum-gone", "agent.warmup_steps=600", "runner.eval_episodes=1",
               "runner.total_steps=2000")
    first = run(cfg, stop=lambda m: m["phase"] == "online")  # stops after 1000 online steps
    (root / "pendulum-gone-v0").rename(tmp_path / "elsewhere")
    resumed = run(cfg, resume=first.run_dir)
    assert resumed.dataset is None and resumed.replay is None and resumed.progress.env_steps == 2000
    scored = [r for r in lines(resumed) if "eval/return" in r]
    assert [(r["phase"], r.get("env_steps")) for r in scored] == [("offline", None), ("online", 1000), ("online", 2000)]
    assert all(r["eval/normalized_score"] == pytest.approx(r["eval/return"] / 400) for r in scored)
    evaluation = json.loads((resumed.run_dir / "eval.json").read_text())
    assert evaluation["dataset"] == "pendulum-gone-v0" and evaluation["online_steps"] == 2000
    assert (evaluation["ref_min_score"], evaluation["ref_max_score"]) == (0.0, 400.0)
    assert evaluation["normalized_score"] == pytest.approx(evaluation["return_mean"] / 400)


def test_an_online_resume_without_dataset_rows_is_not_told_the_dataset_is_small(tmp_path, root):
    """The small-dataset doubt is about the rows a run reads: a resume online that reads none (WSRL's
    agent.offline_ratio=0) is not told again of the dataset its checkpoint already kept what it needs of."""
    import warnings

    write_gone(root)  # 250 transitions: small
    cfg = tiny(tmp_path, "wsrl_hopper", "dataset=pendulum-gone", "agent.warmup_steps=600", "runner.eval_episodes=1",
               "runner.total_steps=2000")
    with pytest.warns(UserWarning, match="dataset 'pendulum-gone-v0': it holds only 250 transitions"):
        first = run(cfg, stop=lambda m: m["phase"] == "online")
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        resumed = FinetuneRunner(cfg, resume=first.run_dir)
        resumed.close()
    assert resumed.rows_unread and resumed.dataset is not None  # there, and not read
    assert not [w for w in said if "holds only" in str(w.message)]


def test_an_online_resume_from_a_checkpoint_of_before_loads_the_dataset(tmp_path, root):
    """A checkpoint that kept nothing of its dataset resumes with it, as it did, and keeps it from then on."""
    write_gone(root)
    cfg = tiny(tmp_path, "wsrl_hopper", "dataset=pendulum-gone", "runner.total_steps=0")
    first = run(cfg)  # pretraining only: the checkpoint sits at the boundary
    payload = load_checkpoint(first.checkpoint_path)
    del payload["progress"]["offline_data"]
    torch.save(payload, first.checkpoint_path)
    cfg.runner.total_steps = 1000
    (root / "pendulum-gone-v0").rename(tmp_path / "elsewhere")
    with pytest.raises(DatasetError, match="no dataset 'pendulum-gone'"):
        FinetuneRunner(cfg, resume=first.run_dir)
    (tmp_path / "elsewhere").rename(root / "pendulum-gone-v0")
    resumed = FinetuneRunner(cfg, resume=first.run_dir)
    resumed.close()
    assert resumed.progress.offline_data == {
        "id": "pendulum-gone-v0", "reference_scores": {"ref_min_score": 0.0, "ref_max_score": 400.0}, "mc_return": True}


def test_a_resume_into_the_online_phase_staggers_the_episode_clocks_as_a_training_resume_does(tmp_path):
    """README: a --resume staggers episode clocks whatever env.random_episode_start says (every episode of the run
    it continues had its own age). The fine-tune's online phase had started every env's episode on one step."""
    cfg = tiny(tmp_path, "wsrl_hopper", "agent.warmup_steps=0", "runner.total_steps=1000", "env.num_envs=4")
    first = run(cfg)
    cfg.runner.total_steps = 2000
    clocks: list[list[int]] = []
    run(cfg, resume=first.run_dir, spy=lambda r, batch: clocks.append(r.train_env.episode_step.tolist()))
    assert len(set(clocks[0])) > 1, clocks[0]


def test_no_online_update_before_the_buffer_holds_a_batch(tmp_path):
    """Without a warmup (naive fine-tuning, JSRL, Cal-QL fine-tuning) the first online updates had drawn whole
    batches from the one or few rows collected so far (512 copies of the first transition); WSRL's and Cal-QL's
    code wait for a batch's worth of online rows (its online share where the dataset is mixed in)."""
    seen: list[int] = []
    spy = lambda r, batch: r.progress.phase == "online" and seen.append(r.online.size)  # noqa: E731
    run(tiny(tmp_path / "wsrl", "wsrl_hopper", "agent.warmup_steps=0", "agent.online_batch_size=512",
             "runner.utd_ratio=1", "runner.total_steps=600"), spy=spy)  # (what comes first: 89 updates, not 489)
    assert min(seen) == 512 and len(seen) == 600 - 511
    seen.clear()
    run(tiny(tmp_path / "calql", "calql_finetune_hopper", "agent.online_batch_size=64", "agent.offline_ratio=0.25",
             "runner.utd_ratio=1", "runner.total_steps=200"), spy=spy)
    assert min(seen) == 48  # 64 rows, 16 of them the dataset's


@pytest.fixture(scope="module")
def arm_tiny(datasets_root) -> str:
    """An arm_reach dataset (a task that reports success, as automatic randomization needs): 1 random episode."""
    with sims.make_env("arm_reach", num_envs=1, seed=0, num_threads=1) as env:
        with DatasetWriter("arm-tiny", env.observation_spec, env.action_spec, metadata={"task": "arm_reach"},
                           root=datasets_root) as writer:
            record(RandomController(env, 0), env, writer, 1, seed=0, progress=False)
    return "arm-tiny"


def auto_randomized_arm(tmp_path, dataset: str, *extra: str):
    """A fine-tune on arm_reach under automatic randomization."""
    return tiny(tmp_path, "wsrl_hopper", f"dataset={dataset}", "env.task=arm_reach", "agent.warmup_steps=100",
                "env.randomization.gain_scale=[0.5,1.0]", "env.randomization.auto=true", "runner.total_steps=1000",
                *extra)


def test_a_fine_tune_keeps_its_randomization_width_across_a_resume_and_is_evaluated_there(tmp_path, arm_tiny):
    """A fine-tune's checkpoint kept no automatic randomization width: a resume started the online env over at
    width 0, and the run was evaluated (and exported, and rebuilt by make_env(run)) on the nominal model."""
    cfg = auto_randomized_arm(tmp_path, arm_tiny)
    first = FinetuneRunner(cfg)
    first.train(stop=lambda m: m["phase"] == "online")
    first.train_env.load_adaptation_state({"width": 0.4, "outcomes": [True]})  # as if it had widened
    first.save()
    first.close()
    cfg.runner.total_steps, cfg.runner.eval_episodes = 2000, 1  # too few episodes (under 64) to widen it further
    resumed = FinetuneRunner(cfg, resume=first.run_dir)
    assert resumed.train_env.width == pytest.approx(0.4) and resumed.train_env._outcomes == [True]
    try:
        result = resumed.train()
    finally:
        resumed.close()
    assert result.evaluation["dynamics"].startswith("randomized at width 0.40 of: ")


def test_a_fine_tunes_online_evaluations_are_at_the_randomization_width_training_reached(tmp_path, arm_tiny):
    """The evaluation env, built with the run, started automatic randomization at width 0 and moved it with the
    success of its own episodes: eval/return was not of the dynamics the controller was training under."""
    cfg = auto_randomized_arm(tmp_path, arm_tiny)
    cfg.runner.eval_episodes = 1
    runner = FinetuneRunner(cfg)
    try:
        runner.train(stop=lambda m: m["phase"] == "online")
        runner.train_env.load_adaptation_state({"width": 0.4, "outcomes": []})  # as if training had widened it
        assert "eval/return" in runner.evaluate()
    finally:
        runner.close()
    assert runner.env.width == pytest.approx(0.4)


def test_evaluations_do_not_move_the_randomization_width_they_run_at(tmp_path, arm_tiny, offline_iterations_of_100):
    """Automatic randomization widened the evaluation env with the success of its own episodes (here every ended
    episode widens it): the offline phase's evaluations ran wider each time, with nothing trained at any width."""
    cfg = auto_randomized_arm(tmp_path, arm_tiny, "env.randomization.auto_window=1", "env.randomization.auto_success=0")
    cfg.runner.eval_episodes, cfg.runner.total_steps, cfg.agent.pretrain_updates = 2, 0, 200
    runner = run(cfg)  # evaluated at 100 and 200 updates
    assert runner.env.width == 0.0
