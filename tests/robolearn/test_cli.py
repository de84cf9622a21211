"""Command-line parsing that users trip over."""

import os
import signal
import subprocess
import sys

import pytest

from robolearn.checkpoint import save_checkpoint
from robolearn.cli import main


def test_overrides_may_follow_options(capsys):
    # Fails at config validation, i.e. after argparse accepted the word order.
    assert main(["train", "ppo_cartpole", "--no-wandb", "runner.total_step=5"]) == 2
    assert "unknown key 'runner.total_step'" in capsys.readouterr().err


def test_no_wandb_and_a_wandb_setting_are_not_both_taken(capsys):
    """--no-wandb had silently won over logging.wandb=online."""
    for settings in (["logging.wandb=online"], ["logging.wandb=disabled", "logging.wandb=online"]):  # the last applies
        assert main(["train", "ppo_cartpole", "--no-wandb", *settings]) == 2
        assert "error: --no-wandb and logging.wandb=online: give one of them" in capsys.readouterr().err


def test_an_interrupt_with_json_is_a_json_line_too(monkeypatch, capsys):
    """A script reading --json's last line had seen nothing when the command was interrupted."""
    import json

    from robolearn import cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setitem(cli.COMMANDS, "eval", interrupted)
    assert main(["eval", "runs/x", "--json"]) == 130
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == {"error": "interrupted"}


def test_stray_words_are_still_rejected(capsys):
    with pytest.raises(SystemExit):
        main(["eval", "runs/x", "oops=1"])
    assert "unrecognized arguments: oops=1" in capsys.readouterr().err


@pytest.mark.parametrize("argv, says", [
    (["eval", "runs/x", "--epsiodes", "2"], "robolearn eval: error: unrecognized arguments: --epsiodes 2; "
                                            "--epsiodes: did you mean --episodes?"),
    (["deploy", "runs/x", "--robot", "dxl_arm", "--lockstep"], "--lockstep is an option of `robolearn emulate`, "
                                                                "not of deploy"),
    (["train", "ppo_cartpole", "--total-steps", "100"], "--total-steps: settings are key=value words here, as "
                                                        "runner.total_steps=..."),
    (["train", "sac_pendulum", "--buffer-size", "5"], "--buffer-size: settings are key=value words here, as "
                                                      "agent.buffer_size=..."),
    (["dataset", "info", "cp", "--jsn"], "robolearn dataset info: error: unrecognized arguments: --jsn; --jsn: did "
                                         "you mean --json?"),
    (["dataset", "info", "cp", "--fractions", "0.5"], "--fractions is an option of `robolearn dataset split`, not of "
                                                      "dataset info"),
    (["dataset", "record", "--controller", "random", "--epsiodes", "3"], "robolearn dataset record: error: the "
     "following arguments are required: --episodes; --epsiodes: did you mean --episodes?"),  # (argparse's check first)
    (["dataset", "list", "--json"], "--json is an option of `robolearn eval`, `robolearn deploy`, `robolearn replay`, "
                                    "`robolearn dataset info` and 1 more, not of dataset list"),  # (it had named the
    # last command that takes it alone, dataset replay)
], ids=["misspelled", "another-command's", "setting", "agent-setting", "dataset", "another-dataset-command's",
        "misspelled-required", "several-commands'"])
def test_a_wrong_option_is_said_by_its_command_with_what_it_likely_was(capsys, argv, says):
    """It had printed the top-level usage (the list of commands) and 'unrecognized arguments' only."""
    with pytest.raises(SystemExit):
        main(argv)
    err = capsys.readouterr().err
    assert says in err and err.startswith(f"usage: robolearn {' '.join(argv[:2 if argv[0] == 'dataset' else 1])} ")


def test_bench_lists_the_benchmarks_and_runs_one_with_its_own_flags(capfd):
    assert main(["bench"]) == 0
    listed = capfd.readouterr().out
    assert "ppo_vs_rsl_rl            End-to-end PPO throughput" in listed and "gpu  " in listed
    assert "common" not in listed  # a helper module, not a benchmark
    assert main(["bench", "nope"]) == 2
    assert "no benchmark 'nope'; there are: arm_reach_offline, dataset_read_heap" in capfd.readouterr().err
    assert main(["bench", "make_maze_datasets", "--help"]) == 0  # the flag is the script's, not ours
    assert "--layouts" in capfd.readouterr().out


def _fake_run(root, name, config, lines, exported=True, checkpoint=True):
    import json

    run = root / name / "20260101-000000"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(json.dumps(config))  # JSON is YAML
    (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    if checkpoint:  # one that loads, of no progress: where a resume goes on from is the metrics' last line
        save_checkpoint(run / "checkpoints" / "latest.pt", config={}, agent={}, progress={})
    if exported:
        (run / "export").mkdir()
        (run / "export" / "controller.json").write_text("{}")
    return run


def test_list_tells_finished_runs_from_exported_unfinished_ones_in_every_phase(tmp_path, capfd):
    online = {"runner": {"total_steps": 1000}, "agent": {"pretrain_updates": 3000}}
    done = _fake_run(tmp_path, "done", online, [{"env_steps": 1024}])
    exported = _fake_run(tmp_path, "exported", online, [{"env_steps": 512}])  # `robolearn export` of an unfinished run
    pretraining = _fake_run(tmp_path, "pretraining", online, [{"env_steps": 0, "phase": "pretrain",
                                                                "pretrain_updates": 1000}], exported=False)
    offline = _fake_run(tmp_path, "offline", {"runner": {"total_steps": 20000}}, [], exported=False)
    ending = _fake_run(tmp_path, "ending", online, [{"env_steps": 1024}], exported=False)  # Ctrl+C in the final eval
    early = _fake_run(tmp_path, "early", online, [{"env_steps": 512}])  # stop= or max_minutes: exported, evaluated
    (early / "eval.json").write_text('{"return_mean": 5.0}')
    assert main(["list", "--runs", str(tmp_path)]) == 0
    out = capfd.readouterr().out
    assert (f"{early}  ended early at 512 of 1,000 env_steps (a stop callback or runner.max_minutes); robolearn "
            f"train --resume {early} trains on  return 5.0") in out
    assert f"{done}  done" in out
    assert f"{exported}  incomplete: 512 of 1,000 env_steps; robolearn train --resume {exported}" in out
    assert f"{pretraining}  incomplete: pretrain 1,000 of 3,000 pretrain_updates; robolearn train --resume" in out
    assert f"{offline}  incomplete: stopped before its first logged iteration; robolearn train --resume" in out
    (offline / "checkpoints" / "latest.pt").write_bytes(b"PK\x05\x06" + bytes(18))  # a zip of nothing: loads not
    assert main(["list", "--runs", str(offline)]) == 0
    assert (f"{offline}  incomplete: stopped before its first logged iteration; its checkpoints/latest.pt does not "
            "load, so it cannot resume (not a readable robolearn checkpoint") in capfd.readouterr().out
    save_checkpoint(offline / "checkpoints" / "latest.pt", config={}, agent={}, progress={"env_steps": 1282})
    assert main(["list", "--runs", str(offline)]) == 0  # a second Ctrl+C's checkpoint, before any metrics line
    assert f"{offline}  incomplete: saved at 1,282 env_steps, stopped before its first logged iteration; " \
           "robolearn train --resume" in capfd.readouterr().out
    assert f"{ending}  trained (1,024 env_steps), not yet exported; robolearn train --resume" in out  # (no evaluation asked)
    (exported / "checkpoints" / "latest.pt").write_bytes(b"")  # cut short: a resume would be refused, so none is offered
    assert main(["list", "--runs", str(exported)]) == 0
    assert (f"{exported}  incomplete: 512 of 1,000 env_steps; its checkpoints/latest.pt does not load, so it cannot "
            "resume (cut short or not a checkpoint)") in capfd.readouterr().out
    save_checkpoint(exported / "checkpoints" / "latest.pt", config={}, agent={}, progress={})
    (done / "eval.json").write_text("{")  # damaged: said on its run's line, the others still listed
    (exported / "eval.json").write_text("{}")
    assert main(["list", "--runs", str(tmp_path)]) == 0
    out = capfd.readouterr().out
    assert f"{done}  done  (eval.json unreadable: JSONDecodeError: Expecting property name" in out
    assert f"(eval.json unreadable: KeyError: 'return_mean'; robolearn eval {exported} gives its numbers again)" in out
    assert f"{ending}  trained (1,024 env_steps)" in out
    # A damaged config.yaml had been "stopped before its first logged iteration" (with a resume that fails),
    # and had stopped the listing's groups with an error; a checkpoint's nonsense progress, with a traceback
    import shutil

    shutil.copytree(early, early.with_name("20260102-000000"))  # a readable seed beside the damaged one
    (early / "config.yaml").write_text("algo: [ppo\n  env: {\n")
    import torch

    torch.save({"format": "robolearn-checkpoint", "version": 1, "config": {}, "agent": {},
                "progress": {"env_steps": "lots"}}, ending / "checkpoints" / "latest.pt")
    seed = _fake_run(tmp_path, "seeds", online, [{"env_steps": 1024}])  # a group of evaluated seeds beside the
    (seed / "eval.json").write_text('{"return_mean": 1}')  # damaged run, which is one of another folder's two
    shutil.copytree(seed, seed.with_name("20260102-000000"))
    assert main(["list", "--runs", str(tmp_path)]) == 0
    out = capfd.readouterr().out
    assert f"{early}  config.yaml unreadable (" in out and f"{done}  done" in out
    assert f"{ending}  trained (1,024 env_steps)" in out  # its metrics' count (load_checkpoint refuses the file)
    assert "groups:     evaluated runs of one folder" in out and f"{seed.parent}  2 runs" in out
    assert f"{early.parent}  " not in out.split("groups:")[1]  # one of its two has no readable config: no group
    assert f"{early.with_name('20260102-000000')}  ended early" in out


def test_list_says_a_group_reruns_a_seed(tmp_path, capfd):
    """Two runs of seed 0 beside a seed 1 had been summed up as three seeds: a rerun's spread is the machine's
    nondeterminism, far under a spread over seeds."""
    import shutil

    runs = [_fake_run(tmp_path / str(seed), "sweep", {"seed": seed, "runner": {"total_steps": 1}}, [{"env_steps": 1}])
            for seed in (0, 1)]
    for run, value in zip(runs, (1, 3)):
        (run / "eval.json").write_text(f'{{"return_mean": {value}}}')
        shutil.move(run, tmp_path / "sweep" / f"2026010{value}-000000")
    shutil.copytree(tmp_path / "sweep" / "20260101-000000", tmp_path / "sweep" / "20260102-000000")
    assert main(["list", "--runs", str(tmp_path / "sweep")]) == 0
    out = capfd.readouterr().out
    assert "3 runs (seeds 0 0 1): return 1.7 ± 0.9; seed 0 more than once: reruns of one seed" in out
    shutil.rmtree(tmp_path / "sweep" / "20260102-000000")
    assert main(["list", "--runs", str(tmp_path / "sweep")]) == 0
    assert "2 runs (seeds 0 1): return 2.0 ± 1.0\n" in capfd.readouterr().out


def test_list_counts_from_the_checkpoint_when_the_metrics_ran_past_it(tmp_path, capfd):
    """A run killed between checkpoints logged iterations its checkpoint lacks: a resume goes on from the
    checkpoint, so that is where list says it stands."""
    import json
    import shutil

    import yaml

    assert main(["train", "ppo_cartpole", f"run_dir={tmp_path}", "--no-wandb", "env.num_envs=4",
                 "runner.total_steps=256", "runner.eval_episodes=0", "runner.video_seconds=0",
                 "logging.progress=false"]) == 0
    run = next(tmp_path.glob("*/*"))
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["runner"]["total_steps"] = 2048  # as if it had been killed on its way there, before any export
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    shutil.rmtree(run / "export")
    with (run / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"env_steps": 768}) + "\n")
    capfd.readouterr()
    assert main(["list", "--runs", str(tmp_path)]) == 0
    assert (f"incomplete: 256 of 2,048 env_steps saved (768 logged past the checkpoint: a resume does them "
            f"again); robolearn train --resume {run}") in capfd.readouterr().out


def test_list_says_why_a_run_failed_and_a_resume_that_ends_clears_it(tmp_path, capfd):
    """A run that stopped on an error keeps it in failed.txt (summary, then traceback): list tells it from a
    killed one; the resume that finishes it removes the file."""
    import robolearn

    cfg = robolearn.load_config("ppo_cartpole", {"run_dir": str(tmp_path), "env.num_envs": 4,
                                                 "runner.total_steps": 512, "runner.eval_episodes": 0,
                                                 "runner.video_seconds": 0, "logging.progress": False,
                                                 "logging.wandb": "disabled"})

    def crash(metrics):
        raise RuntimeError("the lab's power\nwent out")

    with pytest.raises(RuntimeError):
        robolearn.train(cfg, stop=crash)
    run = next(tmp_path.glob("*/*"))
    failure = (run / "failed.txt").read_text()
    assert failure.startswith("RuntimeError: the lab's power went out\n") and "Traceback" in failure
    capfd.readouterr()
    assert main(["list", "--runs", str(tmp_path)]) == 0
    status = capfd.readouterr().out.split(f"{run}  ")[1]
    assert status.startswith(f"failed (RuntimeError: the lab's power went out; {run / 'failed.txt'}): ")
    assert f"of 512 env_steps; robolearn train --resume {run}\n" in status  # one iteration's steps, then the stop
    (run / "checkpoints" / ".replay.pt.k9x_2abc").write_bytes(b"half")  # as a kill -9 mid-write leaves it
    robolearn.train(resume=run)
    assert not (run / "failed.txt").exists() and not (run / "checkpoints" / ".replay.pt.k9x_2abc").exists()
    assert main(["list", "--runs", str(tmp_path)]) == 0
    assert f"{run}  done" in capfd.readouterr().out


def test_a_full_disk_is_one_line_that_says_what_to_do_and_other_os_errors_stay_tracebacks(monkeypatch, capsys):
    import errno

    import robolearn.cli as cli_module

    def full(args):
        raise OSError(errno.ENOSPC, "No space left on device", "runs/x/checkpoints/latest.pt")

    monkeypatch.setitem(cli_module.COMMANDS, "list", full)
    assert main(["list"]) == 2
    assert capsys.readouterr().err == (
        "error: No space left on device: runs/x/checkpoints/latest.pt; free some space (or write elsewhere: "
        "run_dir=... for runs, --root for datasets, --out for exports and plots). Files are written aside and "
        "renamed, so what was saved before (checkpoints, datasets) is intact\n")

    def bug(args):
        raise OSError(errno.EBADF, "Bad file descriptor")

    monkeypatch.setitem(cli_module.COMMANDS, "list", bug)
    with pytest.raises(OSError, match="Bad file descriptor"):
        main(["list"])


def test_a_file_size_limit_is_one_line_that_says_what_to_do(monkeypatch, capsys):
    """Under `ulimit -f` (a cluster job's limit) a checkpoint write fails with EFBIG, which had been a traceback."""
    import errno

    import robolearn.cli as cli_module

    def limited(args):
        raise OSError(errno.EFBIG, "File too large", "runs/x/checkpoints/latest.pt")

    monkeypatch.setitem(cli_module.COMMANDS, "list", limited)
    assert main(["list"]) == 2
    said = capsys.readouterr().err
    assert said.startswith("error: File too large: runs/x/checkpoints/latest.pt; the file is larger than this "
                           "process may write (a file size limit: `ulimit -f`") and said.count("\n") == 1


def test_user_warnings_print_as_one_line_and_others_as_python_prints_them():
    from robolearn.cli import _format_warning

    assert _format_warning(UserWarning("resumes on 1 rank"), UserWarning, "/x/runner.py", 9, "self._restore()") \
        == "warning: resumes on 1 rank\n"
    assert "DeprecationWarning: old" in _format_warning(DeprecationWarning("old"), DeprecationWarning, "/x.py", 1)
    from robolearn.runtime import SlowLoopWarning  # deploy's, mid-run: had come with our file, line and source line

    assert _format_warning(SlowLoopWarning("slow"), SlowLoopWarning, "/x/deploy.py", 172, "run(...)") == "warning: slow\n"


def test_plot_draws_several_runs_and_names_what_is_missing(tmp_path, capfd, monkeypatch):
    lines = [{"env_steps": 100 * i, "time": 6.0 * i, "return": float(i), "loss": 1.0 / (i + 1)} for i in range(5)]
    first = _fake_run(tmp_path, "ppo_a", {}, lines)
    second = _fake_run(tmp_path, "ppo_b", {}, lines[:3])
    out = tmp_path / "both.png"
    assert main(["plot", str(first), str(second), "--metrics", "return", "loss", "--out", str(out)]) == 0
    assert f"curves: {out}" in capfd.readouterr().out and out.read_bytes()[:4] == b"\x89PNG"
    assert main(["plot", str(first)]) == 0 and (first / "curves.png").is_file()  # one run: into its folder
    own = (first / "curves.png").read_bytes()
    monkeypatch.chdir(tmp_path)
    for other in (["--mean"], ["--metrics", "loss"]):  # another plot of it: here, the run's own left as it was
        assert main(["plot", str(first.parent), *other]) == 0 and (tmp_path / "curves.png").is_file()
        assert (first / "curves.png").read_bytes() == own
        (tmp_path / "curves.png").unlink()
    assert main(["plot", str(tmp_path), "--out", str(tmp_path / "all.png")]) == 0  # a folder of runs: all of them
    assert (tmp_path / "all.png").is_file()
    capfd.readouterr()
    assert main(["plot", str(first), "--metrics", "reward"]) == 2
    assert "no run logs reward; they log: env_steps, loss, return, time" in capfd.readouterr().err
    assert main(["plot", str(first), "--out", str(tmp_path / "a.txt")]) == 2  # had written a PNG named a.txt
    assert f"--out {tmp_path / 'a.txt'}: plots are PNG images; give a .png path" in capfd.readouterr().err
    assert not (tmp_path / "a.txt").exists()
    assert main(["plot", str(tmp_path / "ppo_a" / "nothing")]) == 2
    assert f"no such run or recording: {tmp_path / 'ppo_a' / 'nothing'}" in capfd.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["plot", str(tmp_path / "empty")]) == 2
    assert "no metrics.jsonl lines in" in capfd.readouterr().err
    recording = tmp_path / "run" / "deploy" / "20260101-000000"
    recording.mkdir(parents=True)
    (recording / "episode_00000.npz").write_bytes(b"")
    assert main(["plot", str(recording.parent)]) == 2  # the deploy folder: the recordings in it are named
    assert f"holds recordings, not runs; plot one: robolearn plot {recording}" in capfd.readouterr().err
    other = recording.parent / "20260101-000001"  # two recordings, or one beside a run: had been "no metrics.jsonl
    other.mkdir()  # lines in ...: not a run directory"
    (other / "episode_00000.npz").write_bytes(b"")
    for pair in ([recording, other], [first, recording]):
        assert main(["plot", *map(str, pair)]) == 2
        assert (f"{recording} is a recording: plot draws one recording at a time, and no runs beside it: robolearn "
                f"plot {recording}") in capfd.readouterr().err
    # one episode of it had been called a run without metrics.jsonl lines
    assert main(["plot", str(recording / "episode_00000.npz")]) == 2
    assert (f"episode_00000.npz: one episode of a recording; plot draws the recording's folder: robolearn plot "
            f"{recording}") in capfd.readouterr().err
    # a file or folder inside a run had been "a file; plot takes run directories" and "no metrics.jsonl lines in"
    for inside in (first / "metrics.jsonl", first / "checkpoints"):
        assert main(["plot", str(inside)]) == 2
        assert f"{inside}: a {'file in' if inside.is_file() else 'folder inside'} the run {first}; plot draws the run: " \
               f"robolearn plot {first}" in capfd.readouterr().err


def test_list_finds_runs_at_any_depth_and_sums_up_the_seeds_of_a_folder(tmp_path, capfd, monkeypatch):
    import json

    for seed, ret in ((0, 150.0), (1, 170.0)):
        run = tmp_path / "exp" / "pend_base" / f"2026010{seed}-000000"
        (run / "wandb" / "offline-run-x" / "files").mkdir(parents=True)
        (run / "wandb" / "offline-run-x" / "files" / "config.yaml").write_text("{}")  # W&B's copy: not a run
        (run / "config.yaml").write_text(json.dumps({"seed": seed, "runner": {"total_steps": 10}}))
        (run / "eval.json").write_text(json.dumps({"return_mean": ret, "success_rate": seed * 1.0}))
    for i, (gamma, ret) in enumerate(((0.9, 100.0), (0.99, 120.0))):  # two settings in one folder (no name=)
        run = tmp_path / "exp" / "ppo_pendulum" / f"20260101-00000{i}"
        run.mkdir(parents=True)
        (run / "config.yaml").write_text(json.dumps({"seed": 0, "run_dir": str(tmp_path), "agent": {"gamma": gamma}}))
        (run / "eval.json").write_text(json.dumps({"return_mean": ret}))
    assert main(["list", "--runs", str(tmp_path / "exp")]) == 0
    out = capfd.readouterr().out
    assert out.count("pend_base/2026010") == 2 and "offline-run" not in out
    assert f"{tmp_path / 'exp' / 'pend_base'}  2 runs (seeds 0 1): return 160.0 ± 10.0, success 50 ± 50%" in out
    assert "ppo_pendulum  2 runs whose settings differ (agent.gamma): not summed up (give each setting its own name=)" in out
    assert main(["list", "--runs", str(tmp_path / "nowhere")]) == 2
    said = capfd.readouterr()
    assert f"--runs {tmp_path / 'nowhere'}: no such folder" in said.err
    assert said.out == ""  # the listing of configs, tasks and algorithms had come first, the error under it
    (tmp_path / "a_file").write_text("x")  # (had been "no such folder" too)
    assert main(["list", "--runs", str(tmp_path / "a_file")]) == 2
    assert f"--runs {tmp_path / 'a_file'}: a file, not a folder of runs; give the folder the runs are in" \
        in capfd.readouterr().err
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").write_text("x")  # where plain `list` looks: it had said "none yet"
    assert main(["list"]) == 2
    said = capfd.readouterr()
    assert said.err.startswith("error: runs: a file, not a folder of runs; give the folder the runs are in, --runs DIR")
    assert said.out == ""
    (tmp_path / "runs").unlink()  # no runs folder yet: none yet
    assert main(["list"]) == 0 and "none yet" in capfd.readouterr().out


def test_list_sums_up_seeds_whose_name_differs_and_a_resume_with_name_is_no_training_change(tmp_path, capfd):
    """name= is where a run is written (and W&B's name), as run_dir is: runs of one folder that differ only in it
    (moved in from another folder, or resumed with name=) had been 'runs whose settings differ (name)', and a
    resume with name= had said 'the steps so far trained with the earlier ones' and kept a superseded config."""
    import json

    from robolearn.runs import NOT_TRAINING, config_changes

    for seed, name in ((0, "pend_a"), (1, "pend_b")):
        run = tmp_path / "exp" / "pend" / f"2026010{seed}-000000"
        run.mkdir(parents=True)
        (run / "config.yaml").write_text(json.dumps({"seed": seed, "name": name, "agent": {"gamma": 0.9}}))
        (run / "eval.json").write_text(json.dumps({"return_mean": 100.0 + 20 * seed}))
    assert main(["list", "--runs", str(tmp_path / "exp")]) == 0
    assert f"{tmp_path / 'exp' / 'pend'}  2 runs (seeds 0 1): return 110.0 ± 10.0" in capfd.readouterr().out
    assert config_changes({"name": "pend_a", "seed": 0}, {"name": "pend_b", "seed": 0}, NOT_TRAINING) == ""


def test_a_seed_given_as_a_flag_or_under_a_section_says_it_is_a_top_level_override(capsys):
    assert main(["train", "ppo_pendulum", "--seed", "3"]) == 2
    assert "--seed: settings are overrides here, as key=value: seed=3" in capsys.readouterr().err
    assert main(["train", "ppo_pendulum", "runner.seed=3"]) == 2
    assert "'seed' is a top-level setting: seed=..." in capsys.readouterr().err


def test_the_evaluation_line_gives_an_offline_runs_normalized_score():
    from robolearn.cli import _outcome

    assert _outcome({"return_mean": 1.0, "return_std": 0.5, "normalized_score": 0.456}) == \
        "return 1.0 ± 0.5, normalized score 45.6"  # x 100, as D4RL's tables
    assert _outcome({"return_mean": 1.0, "return_std": 0.5, "success_rate": 0.3}) == "return 1.0 ± 0.5, success 30%"


def test_evaluating_a_randomized_run_says_so_and_can_go_nominal(tmp_path, capsys):
    import json

    assert main(["train", "ppo_pendulum", f"run_dir={tmp_path}", "runner.total_steps=256", "env.num_envs=4",
                 "runner.eval_episodes=1", "runner.video_seconds=0", "env.randomization.mass_scale=[0.5,2.0]",
                 "--no-wandb"]) == 0
    (run,) = tmp_path.glob("*/*")
    written = json.loads((run / "eval.json").read_text())
    assert written["dynamics"] == "randomized: mass_scale [0.5, 2.0]" and written["backend"] == "mujoco"
    capsys.readouterr()
    assert main(["eval", str(run), "--episodes", "1"]) == 0
    assert "; dynamics randomized: mass_scale [0.5, 2.0] (--nominal without)" in capsys.readouterr().out
    assert main(["eval", str(run), "--episodes", "1", "--nominal", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["dynamics"] == "nominal"


def test_the_dynamics_an_evaluation_reports():
    from robolearn.config import EnvConfig
    from robolearn.registry import evaluation_dynamics

    def said(**randomization):
        return evaluation_dynamics(EnvConfig(task="pendulum", randomization=randomization))

    assert said(obs_noise_std="1e-3") == "randomized: obs_noise_std 0.001"  # YAML reads 1e-3 as a string
    assert said(mass_scale=[1.0, 1.0], dynamics_every_episode=False) == "nominal"  # switches draw nothing
    assert said(auto=True).startswith("nominal (automatic randomization starts a new env at width 0)")
    assert said(mass_scale=[0.5, 1.5], width=0.5) == "randomized at width 0.50 of: mass_scale [0.5, 1.5]"
    assert said(mass_scale=[0.5, 1.5], width=0.0) == "nominal (randomization at width 0)"
    assert said(push_every_s=10, push_velocity=0.5) == "randomized: push_velocity 0.5 every 10 s"
    assert evaluation_dynamics(EnvConfig(task="mjlab:Mjlab-Velocity-Flat-Unitree-Go1")) == "the mjlab task's own events"
    # a fixed delay is kept by --nominal, and had gone unsaid: 'nominal' of a run evaluated 2 control steps late
    assert (evaluation_dynamics(EnvConfig(task="pendulum", delay={"action_latency_steps": 2, "obs_delay_steps": 0}))
            == "nominal; env.delay action_latency_steps 2 (control steps)")


def test_ctrl_c_while_the_command_line_imports_is_interrupted_not_a_traceback():
    """The package imports without torch, so the entry point is running when the slow import starts, and a
    Ctrl+C then (stood in for by an import that raises it) ends as one later does: 'interrupted', 130."""
    code = ("import sys\n"
            "import robolearn.entry\n"
            "assert 'torch' not in sys.modules, 'importing robolearn imported torch'\n"
            "import robolearn\n"
            "assert {'VecEnv', 'load_config', 'train'} <= set(dir(robolearn)), 'lazy names hidden from dir()'\n"
            "assert 'torch' not in sys.modules, 'dir(robolearn) imported torch'\n"
            "class CtrlC:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'robolearn.cli':\n"
            "            raise KeyboardInterrupt\n"
            "sys.meta_path.insert(0, CtrlC())\n"
            "sys.exit(robolearn.entry.main())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 130 and done.stderr.strip() == "interrupted", done.stderr


def test_ctrl_c_that_torch_swallows_while_it_imports_numpy_is_still_interrupted():
    """torch imports numpy from C and swallows that import's errors, a KeyboardInterrupt too: a Ctrl+C then had
    let the command run on with numpy half-imported (a deploy connected, then failed in a traceback, "module
    'numpy' has no attribute 'matrix'")."""
    code = ("import os, signal, sys\n"
            "import robolearn.entry\n"
            "class CtrlC:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'numpy.matrixlib':\n"
            "            sys.meta_path.remove(self)\n"
            "            os.kill(os.getpid(), signal.SIGINT)\n"
            "sys.meta_path.insert(0, CtrlC())\n"
            "sys.argv = ['robolearn', '--help']\n"
            "sys.exit(robolearn.entry.main())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 130 and done.stderr.strip() == "interrupted", (done.returncode, done.stderr)


def test_a_ctrl_c_as_the_process_tears_down_ends_it_without_a_traceback(tmp_path):
    """The second of a double Ctrl+C that stopped a run can land after the run saved and said how to resume, in the
    interpreter's teardown: raised there, it had printed 'Exception ignored in atexit callback' and a KeyboardInterrupt
    traceback under the run's last words. It now ends the process at once, by the signal (the shell's 130)."""
    code = ("import atexit, os, signal, sys, time\n"
            "signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, not ignored\n"
            "atexit.register(lambda: (os.kill(os.getpid(), signal.SIGINT), time.sleep(5)))  # Ctrl+C in the teardown\n"
            "import robolearn.entry\n"
            f"sys.argv = ['robolearn', 'list', '--runs', {str(tmp_path / 'none')!r}]\n"
            "sys.exit(robolearn.entry.main())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGINT and done.stderr.startswith("error: --runs"), done.stderr
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr, done.stderr


def test_ctrl_c_while_a_later_torchrun_rank_imports_is_said_by_rank_0_alone():
    """A Ctrl+C in the first seconds of `robolearn train --nproc 2` reaches every rank while it imports torch: each
    had printed 'interrupted', the line twice on two ranks."""
    code = ("import sys\n"
            "import robolearn.entry\n"
            "class CtrlC:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'robolearn.cli':\n"
            "            raise KeyboardInterrupt\n"
            "sys.meta_path.insert(0, CtrlC())\n"
            "sys.argv = ['robolearn', 'train', 'ppo_cartpole']\n"
            "sys.exit(robolearn.entry.main())\n")
    rank_1 = {**os.environ, "RANK": "1", "WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "none"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=rank_1)
    assert done.returncode == 130 and done.stderr.strip() == "", done.stderr

def test_a_package_not_installed_says_how_to_install_it():
    """Without setup.sh the command had ended in a ModuleNotFoundError traceback from deep in the package."""
    code = ("import sys\n"
            "import robolearn.entry\n"
            "class NoTorch:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'torch':\n"
            "            raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n"
            "sys.meta_path.insert(0, NoTorch())\n"
            "sys.exit(robolearn.entry.main())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stderr.startswith("error: robolearn needs the package 'torch', which is not "
                                                           "installed; run `bash setup.sh`"), done.stderr


def test_under_torchrun_a_refused_config_and_a_ctrl_c_are_said_by_rank_0_alone(monkeypatch, capsys):
    """Every rank had printed the same error (and `interrupted`): twice on two ranks. A later rank that refuses the
    config waits for rank 0 to say it, torchrun then stopping it (test_distributed's
    test_a_rank_that_refuses_the_config_first_says_it_when_rank_0_has_not)."""
    import robolearn.cli as cli_module

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    assert main(["train", "ppo_cartpole", "--no-wandb", "runner.total_step=5"]) == 2
    assert "error: unknown key 'runner.total_step'" in capsys.readouterr().err

    def ctrl_c(args):
        raise KeyboardInterrupt

    monkeypatch.setitem(cli_module.COMMANDS, "list", ctrl_c)
    monkeypatch.setenv("RANK", "1")
    assert main(["list"]) == 130 and capsys.readouterr().err == ""


def test_failed_txt_keeps_no_terminal_colours(tmp_path):
    """torch.export's errors carry ANSI colour codes, which failed.txt and `robolearn list` had shown as text."""
    from robolearn.runs import record_failure

    record_failure(tmp_path, RuntimeError("\x1b[96mdynamic_shapes\x1b[0m must match"))
    assert (tmp_path / "failed.txt").read_text().startswith("RuntimeError: dynamic_shapes must match\n")


def test_a_run_folder_that_is_a_file_is_said_in_one_line(tmp_path, capsys, monkeypatch):
    """A file named runs had been a NotADirectoryError traceback."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").write_text("hi")
    assert main(["train", "ppo_pendulum", "runner.total_steps=64", "--no-wandb"]) != 0
    err = capsys.readouterr().err
    assert "a file stands where a folder goes (runs, run_dir=, name=)" in err and "Traceback" not in err


def test_plot_leaves_out_a_run_that_logged_nothing_yet_found_in_a_folder_or_named(tmp_path, capsys):
    """One run starting beside finished ones had failed the whole folder's plot ("no metrics.jsonl lines"), and
    still did when named beside them; alone, it is an error."""
    config = {"algo": "ppo", "env": {"task": "pendulum"}, "runner": {"total_steps": 2000}}
    finished = _fake_run(tmp_path / "runs", "a", config, [{"env_steps": 1000, "time": 1.0, "return": -500.0},
                                               {"env_steps": 2000, "time": 2.0, "return": -300.0}])
    starting = _fake_run(tmp_path / "runs", "b", config, [])
    assert main(["plot", str(tmp_path / "runs"), "--out", str(tmp_path / "c.png")]) == 0
    out = capsys.readouterr().out
    assert f"left out (no metrics.jsonl lines yet): {starting}" in out and (tmp_path / "c.png").is_file()
    assert main(["plot", str(finished), str(starting), "--out", str(tmp_path / "d.png")]) == 0  # named: the same
    out = capsys.readouterr().out
    assert f"left out (no metrics.jsonl lines yet): {starting}" in out and (tmp_path / "d.png").is_file()
    assert main(["plot", str(starting)]) == 2  # alone, nothing to draw: an error
    assert "no metrics.jsonl lines in" in capsys.readouterr().err
    (tmp_path / "notes").mkdir()  # named beside them, a folder that is no run at all: still an error
    assert main(["plot", str(finished), str(tmp_path / "notes"), "--out", str(tmp_path / "e.png")]) == 2
    assert f"{tmp_path / 'notes'}: not a run directory (no metrics.jsonl or config.yaml)" in capsys.readouterr().err


def test_list_says_a_checkpoint_it_may_not_read_is_denied_not_cut_short(tmp_path, capfd, monkeypatch):
    """zipfile.is_zipfile reads a file it may not open as no zip: list had called such a checkpoint cut short.
    (As root every file is readable: the denial is made by os.access here.)"""
    import os

    run = _fake_run(tmp_path, "denied", {"runner": {"total_steps": 1000}}, [{"env_steps": 512}])
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: False if str(path).endswith("latest.pt") else real_access(path, mode))
    assert main(["list", "--runs", str(tmp_path)]) == 0
    assert (f"{run}  incomplete: 512 of 1,000 env_steps; its checkpoints/latest.pt does not load, so it cannot resume "
            "(permission denied: fix its permissions)") in capfd.readouterr().out
