"""End to end: train a small PPO run, evaluate it, export it, reload the export."""

from __future__ import annotations

import json
import re

import numpy as np
import onnxruntime
import pytest
import torch

import sims

from robolearn import load_config
from robolearn.checkpoint import ShapeMismatch
from robolearn.cli import main as cli
from robolearn.export import ExportedController
from robolearn.registry import make_env
from robolearn.config import load_run_config
from robolearn.runner import Runner
from robolearn.runs import load_agent

RANDOM_CARTPOLE_RETURN = 29.0  # uniform random actions, measured over 16 episodes


def small_ppo(tmp_path, *extra: str):
    return load_config("ppo_cartpole", [
        f"run_dir={tmp_path / 'runs'}", "runner.total_steps=60000", "env.num_envs=32", "agent.gamma=0.99",
        "logging.wandb=disabled", "logging.progress=false", "runner.eval_episodes=8", "runner.video_seconds=1",
        *extra,
    ])


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """One trained run shared by the tests below (training is the slow part)."""
    tmp_path = tmp_path_factory.mktemp("e2e")
    runner = Runner(small_ppo(tmp_path))
    result = runner.train()
    runner.close()
    return result


def test_training_learns_and_leaves_a_complete_run(trained_run):
    run = trained_run.run_dir
    for name in ("config.yaml", "metrics.jsonl", "checkpoints/latest.pt", "eval.json", "curves.png",
                 "export/controller.pt", "export/controller.onnx", "export/controller.json"):
        assert (run / name).is_file(), name
    assert (run / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and trained_run.curves == run / "curves.png"
    assert trained_run.evaluation["return_mean"] > 2 * RANDOM_CARTPOLE_RETURN
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1]["env_steps"] >= 60000 and "learning_rate" in lines[-1] and lines[-1]["fps"] > 0
    # the film is part of a complete run (a missing GL stack fails tests/sims/test_render.py): its errors are
    # printed and skipped so as not to cost a trained run, so here its absence is a failure
    assert trained_run.video == run / "video.mp4" and trained_run.video.stat().st_size > 1000


def test_exports_act_like_the_original(trained_run):
    run = trained_run.run_dir
    with make_env(load_run_config(run).env, num_envs=4) as env:
        controller = load_agent(run, env).controller().eval()
        obs = env.reset(seed=3)
        obs["policy"] = obs["policy"] + torch.randn_like(obs["policy"])  # off the reset distribution too
        expected = controller.act(obs).detach()
        for fmt in ("controller.pt", "controller.onnx"):
            actions = ExportedController(run / "export" / fmt).act(obs)
            torch.testing.assert_close(actions, expected, atol=1e-5, rtol=1e-5)
        session = onnxruntime.InferenceSession(str(run / "export" / "controller.onnx"))
        raw = session.run(None, {"obs": obs["policy"].numpy()})[0]
        np.testing.assert_allclose(raw, expected.numpy(), atol=1e-5)


def test_cli_eval_json_matches_for_checkpoint_and_onnx(trained_run, capsys):
    run = str(trained_run.run_dir)
    assert cli(["eval", run, "--episodes", "4", "--json"]) == 0
    from_checkpoint = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert cli(["eval", run, "--episodes", "4", "--json", "--exported", "onnx"]) == 0
    from_onnx = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert from_checkpoint["episodes"] == 4 and "success_rate" in from_checkpoint
    # Actions agree to 1e-5 (test above); over 500 steps of a chaotic swing-up such
    # float differences can move the return a little, so compare loosely here.
    assert from_onnx["return_mean"] == pytest.approx(from_checkpoint["return_mean"], rel=0.1)
    # With the run's own episode count and no --seed, eval gives eval.json's numbers again.
    saved = json.loads((trained_run.run_dir / "eval.json").read_text())
    assert cli(["eval", run, "--episodes", str(saved["episodes"]), "--json"]) == 0
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["return_mean"] == pytest.approx(saved["return_mean"], abs=1e-6)


def test_cli_export_and_play(trained_run, tmp_path, capsys):
    run = str(trained_run.run_dir)
    assert cli(["export", run, "--format", "onnx", "--out", str(tmp_path / "onnx_only")]) == 0
    assert (tmp_path / "onnx_only" / "controller.onnx").is_file()
    assert not (tmp_path / "onnx_only" / "controller.pt").exists()
    # both formats, then one: the other's removal is said (deploy's default file had gone without a word)
    assert cli(["export", run, "--out", str(tmp_path / "onnx_only")]) == 0
    assert cli(["export", run, "--format", "onnx", "--out", str(tmp_path / "onnx_only")]) == 0
    assert re.search(r"removed: +\S+controller.pt \(of the controller exported before; --format torchscript "
                     r"exports it again\)", capsys.readouterr().out)
    assert cli(["play", run, "--video", str(tmp_path / "play.mp4"), "--seconds", "0.5"]) == 0
    assert (tmp_path / "play.mp4").stat().st_size > 1000
    assert cli(["list", "--runs", str(trained_run.run_dir.parents[1])]) == 0
    assert "done" in capsys.readouterr().out


def test_foreign_checkpoint_is_refused_naming_the_tensor(trained_run, tmp_path, capsys):
    """A checkpoint from another task (other observation size) is refused, not half-loaded."""
    cfg = small_ppo(tmp_path, "env.task=pendulum", "runner.total_steps=1")
    runner = Runner(cfg)
    runner.save()
    runner.close()
    foreign = runner.run_dir
    (foreign / "checkpoints" / "latest.pt").write_bytes((trained_run.run_dir / "checkpoints" / "latest.pt").read_bytes())
    assert cli(["eval", str(foreign), "--episodes", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: checkpoint tensor 'agent.") and "shape" in err and "\n" not in err


def test_cli_bad_config_is_one_line(capsys):
    assert cli(["train", "ppo_cartpole", "agent.learning_rat=1e-3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: unknown key 'agent.learning_rat'") and "\n" not in err
    assert cli(["train", "ppo_cartpole", "env.num_envs=lots"]) == 2
    assert "env.num_envs: expected int, got 'lots'" in capsys.readouterr().err


def test_load_controller_from_python(trained_run):
    """The Python way to act with a run: its checkpoint (no env needed) or its exported files, alike."""
    from robolearn import load_controller

    obs = {"policy": torch.randn(3, 5)}
    from_checkpoint = load_controller(trained_run.run_dir).act(obs)
    for fmt in ("torchscript", "onnx"):
        torch.testing.assert_close(load_controller(str(trained_run.run_dir), exported=fmt).act(obs), from_checkpoint,
                                   rtol=1e-5, atol=1e-5)
    with pytest.warns(UserWarning, match=r"trained at 50 Hz, the env steps at 25 Hz") as caught:  # env: said
        load_controller(trained_run.run_dir, sims.make_env("cartpole", 1, seed=0, frame_skip=4), exported="onnx")
    assert caught[0].filename == __file__
    with pytest.raises(ShapeMismatch, match=r"trained on task 'cartpole', the env given runs Pendulum \(checkpoint "
                                            r"tensor .* build the run's env with robolearn.make_env\(run\)"):
        load_controller(trained_run.run_dir, sims.make_env("pendulum", 1, seed=0))  # another task's env: named
    export = trained_run.run_dir / "export"
    for wrong in (export, export / "controller.json"):
        with pytest.raises(ValueError, match="give the exported file itself.*controller.pt"):
            ExportedController(wrong)


def test_load_controller_of_an_export_folder_names_the_run(trained_run, tmp_path):
    """load_controller(<run>/export, exported=...) had said '<run>/export/export: no exported controller' and told to
    run `robolearn export <run>/export`, which fails in turn; the checkpoint's path already named the run."""
    from robolearn import load_controller

    export = trained_run.run_dir / "export"
    for fmt in (None, "onnx", "torchscript"):
        with pytest.raises(FileNotFoundError, match=rf"a folder inside the run {re.escape(str(trained_run.run_dir))} "
                                                    r"\(export\); give the run's folder itself"):
            load_controller(export, exported=fmt)
    with pytest.raises(FileNotFoundError, match="no such run directory"):
        load_controller(tmp_path / "nowhere", exported="onnx")


def test_export_run_from_python_writes_what_robolearn_export_does(trained_run, tmp_path):
    """`robolearn export RUN` had been the CLI's alone: from Python, export_controller wrote a controller.json without
    the task, rate and training counts that deploy and eval --exported check."""
    from robolearn import export_run, load_controller

    own = json.loads((trained_run.run_dir / "export" / "controller.json").read_text())
    paths = export_run(str(trained_run.run_dir), "onnx", out=tmp_path / "again")
    assert paths == {"onnx": tmp_path / "again" / "controller.onnx", "meta": tmp_path / "again" / "controller.json"}
    meta = json.loads(paths["meta"].read_text())
    for key in ("task", "task_kwargs", "control_dt", "run", "run_id", "trained", "obs_size", "randomization", "delay"):
        assert meta[key] == own[key], key
    obs = {"policy": torch.randn(3, 5)}
    torch.testing.assert_close(ExportedController(paths["onnx"]).act(obs), load_controller(trained_run.run_dir).act(obs),
                               rtol=1e-5, atol=1e-5)
    meta["run"], meta["run_id"] = "/elsewhere/another-run", "0123456789abcdef"  # (the same id: this run, moved)
    paths["meta"].write_text(json.dumps(meta))
    with pytest.raises(FileExistsError, match="holds the export of run /elsewhere/another-run; pass --overwrite "
                                              r"\(overwrite=True\)"):
        export_run(trained_run.run_dir, out=tmp_path / "again")
    assert set(export_run(trained_run.run_dir, out=tmp_path / "again", overwrite=True)) == {"torchscript", "onnx", "meta"}
    # formats=None is the default, as out=None is (it had been "'NoneType' object is not iterable")
    assert set(export_run(trained_run.run_dir, None, out=tmp_path / "again")) == {"torchscript", "onnx", "meta"}


def test_an_export_into_a_runs_own_folder_is_refused(trained_run, tmp_path, capsys):
    """export_run(run, out=run) had written controller.pt, .onnx and .json among the run's config.yaml and
    checkpoints, where load_controller, eval --exported and deploy (which read <run>/export) never look."""
    import shutil

    from robolearn import export_run

    run = trained_run.run_dir
    before = sorted(path.name for path in run.iterdir())
    with pytest.raises(ValueError, match=rf"--out {re.escape(str(run))}: the run's own folder, where the exported "
                                         rf"files would lie among its config.yaml and checkpoints; the run's export "
                                         rf"goes to {re.escape(str(run / 'export'))} \(the default, without --out\)"):
        export_run(run, out=run)
    other = tmp_path / "other"
    shutil.copytree(run, other, ignore=shutil.ignore_patterns("export", "*.mp4"))
    with pytest.raises(ValueError, match="another run's folder"):
        export_run(run, out=other)
    capsys.readouterr()
    assert cli(["export", str(run), "--out", f"{run}/"]) == 2 and "the run's own folder" in capsys.readouterr().err
    assert sorted(path.name for path in run.iterdir()) == before


def test_python_evaluation_under_the_runs_torch_settings_gives_robolearn_evals_numbers(tmp_path, capsys):
    """robolearn eval computes under the run's torch settings; evaluate(load_controller(run, env), env, ...) from
    Python under the script's (float32 matmuls), so a run at matmul_precision: medium (sac_half_cheetah's) had given
    other returns from Python (-2.6762934569 against eval's -2.6762936946 on an AVX512-BF16 CPU). Within
    run_torch_settings(run) the same numbers; the caller's settings come back after."""
    import robolearn
    from robolearn.config import torch_settings_kept
    from robolearn.evaluate import evaluate
    from robolearn.runs import run_torch_settings

    with pytest.warns(UserWarning, match="covers the whole run"):  # (its untrained controller does here)
        run = robolearn.train(load_config("sac_half_cheetah", [
            f"run_dir={tmp_path}", "runner.total_steps=100", "runner.random_steps=1000", "runner.eval_episodes=1",
            "runner.video_seconds=0", "logging.wandb=disabled", "logging.progress=false"])).run_dir
    with torch_settings_kept():  # (the command applies the run's settings to its whole process)
        assert cli(["eval", str(run), "--json"]) == 0
    said = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    callers = torch.get_num_threads(), torch.get_float32_matmul_precision()
    seed = load_run_config(run).seed + 10_000  # the run's own evaluation's, eval's default
    with run_torch_settings(run):
        assert (torch.get_num_threads(), torch.get_float32_matmul_precision()) == (1, "medium")
        with robolearn.make_env(run, num_envs=1, seed=seed) as env:
            result = evaluate(robolearn.load_controller(run, env), env, 1, seed=seed)
    assert result["return_mean"] == said["return_mean"] and said["episodes"] == 1
    assert (torch.get_num_threads(), torch.get_float32_matmul_precision()) == callers


def test_eval_by_default_gives_eval_jsons_numbers_again(trained_run, capsys):
    """The run's own evaluation's episodes and seed: the same numbers (and it says what it evaluated)."""
    capsys.readouterr()
    assert cli(["eval", str(trained_run.run_dir), "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    own = json.loads((trained_run.run_dir / "eval.json").read_text())
    assert result["episodes"] == own["episodes"] == 8 and result["controller"] == "checkpoint"
    assert result["return_mean"] == pytest.approx(own["return_mean"])


def test_play_refuses_a_path_that_cannot_take_the_video_before_filming(trained_run, tmp_path, capsys):
    run = str(trained_run.run_dir)
    (tmp_path / "taken.mp4").write_bytes(b"a file")
    for video, said in ((tmp_path / "notes.txt", "give a file ending in .mp4"), (tmp_path, "a folder; give the "),
                        (tmp_path / "taken.mp4" / "x.mp4", "taken.mp4 is a file, not a folder"),
                        ("/proc/ep.mp4", "video /proc/ep.mp4: cannot write there (")):  # (its temp file had been named)
        assert cli(["play", run, "--video", str(video), "--seconds", "0.5"]) == 2
        err = capsys.readouterr().err
        assert said in err and ".tmp" not in err and "\n" == err[-1] and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken.mp4"]  # no temp file left
    assert cli(["play", run, "--video", str(tmp_path / "clip.gif"), "--seconds", "0.3"]) == 0
    from PIL import Image

    with Image.open(tmp_path / "clip.gif") as gif:  # plays on and on, as a video on a page (it had played once)
        assert gif.info.get("loop") == 0 and gif.n_frames > 1


def test_an_export_copied_in_from_another_run_is_said_and_a_moved_run_is_not(trained_run, tmp_path, capsys):
    """eval --exported had run another run's export (copied into export/) as the run's own, silently where both
    had trained as far. The run's id, kept in its checkpoint and its export, tells them apart; a folder moved
    elsewhere keeps both, so it is not said (nor is an export from before ids were recorded)."""
    import shutil
    import warnings

    from robolearn.checkpoint import load_checkpoint, save_checkpoint

    moved = tmp_path / "moved" / trained_run.run_dir.name
    shutil.copytree(trained_run.run_dir, moved)  # as `mv`: the export's recorded path is the old one
    payload = load_checkpoint(moved / "checkpoints" / "latest.pt")
    meta = json.loads((moved / "export" / "controller.json").read_text())
    assert meta["run_id"] == payload["progress"]["run_id"] and meta["run"] == str(trained_run.run_dir.resolve())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cli(["eval", str(moved), "--episodes", "1", "--exported", "onnx"]) == 0
    robot = tmp_path / "for_the_robot"
    assert cli(["export", str(moved), "--out", str(robot)]) == 0
    moved_on = moved.rename(tmp_path / "moved_on")  # moved again: its export in --out is still its own to replace
    assert cli(["export", str(moved_on), "--out", str(robot)]) == 0  # (it had asked for --overwrite)
    assert cli(["export", str(trained_run.run_dir), "--out", str(robot)]) == 2  # a copy's, the original still there
    other = tmp_path / "other"  # another run of as many steps, whose export/ was replaced by the trained run's
    shutil.copytree(trained_run.run_dir, other)
    payload["progress"]["run_id"] = "0123456789abcdef"
    save_checkpoint(other / "checkpoints" / "latest.pt", config=payload["config"], agent=payload["agent"],
                    progress=payload["progress"])
    said = f"{other}: its export was made from another run ({trained_run.run_dir.resolve()} when exported), not from"
    with pytest.warns(UserWarning, match=re.escape(f"{said} this run's checkpoint (copied in?)")):
        assert cli(["eval", str(other), "--episodes", "1", "--exported", "onnx"]) == 0
    del meta["run_id"]  # an export from before ids: nothing to compare
    (other / "export" / "controller.json").write_text(json.dumps(meta))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cli(["eval", str(other), "--episodes", "1", "--exported", "onnx"]) == 0


def test_an_export_older_than_the_checkpoint_is_said_and_export_to_another_runs_folder_asks(trained_run, tmp_path, capsys):
    """A resume that trained on and stopped before its end leaves the earlier export: eval --exported says
    so; `robolearn export` brings it up to date. An export into a folder holding another one asks for
    --overwrite; one format alone removes the other's older file."""
    import shutil
    import warnings

    from robolearn.checkpoint import load_checkpoint, save_checkpoint

    run = tmp_path / "run"
    shutil.copytree(trained_run.run_dir, run)
    payload = load_checkpoint(run / "checkpoints" / "latest.pt")
    trained = json.loads((run / "export" / "controller.json").read_text())["trained"]
    assert trained == {"env_steps": payload["progress"]["env_steps"]}
    payload["progress"]["env_steps"] += 4096  # as a resume that trained on, then was stopped
    save_checkpoint(run / "checkpoints" / "latest.pt", config=payload["config"], agent=payload["agent"],
                    progress=payload["progress"])
    with pytest.warns(UserWarning, match=r"its export is older than its checkpoint, which has trained to .* env steps"):
        assert cli(["eval", str(run), "--episodes", "2", "--exported", "onnx"]) == 0
    assert cli(["export", str(run)]) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cli(["eval", str(run), "--episodes", "2", "--exported", "onnx"]) == 0

    other = trained_run.run_dir / "export"
    capsys.readouterr()
    assert cli(["export", str(run), "--out", str(other)]) == 2
    assert f"holds the export of run {trained_run.run_dir.resolve()}; pass --overwrite" in capsys.readouterr().err
    mine = tmp_path / "for_the_robot"
    assert cli(["export", str(run), "--out", str(mine)]) == 0
    assert cli(["export", str(run), "--out", str(mine)]) == 0  # this run's own earlier export: replaced
    copy = tmp_path / "theirs"
    shutil.copytree(other, copy)
    assert cli(["export", str(run), "--out", str(copy), "--overwrite"]) == 0
    assert json.loads((copy / "controller.json").read_text())["run"] == str(run.resolve())
    assert cli(["export", str(run), "--format", "onnx"]) == 0
    assert not (run / "export" / "controller.pt").exists() and (run / "export" / "controller.onnx").is_file()
