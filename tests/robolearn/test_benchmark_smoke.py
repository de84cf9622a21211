"""Benchmarks whose peers, if any, are test dependencies, run end to end at tiny settings (their tables go to a temp folder): a script
that no longer runs against today's code is found here, not by the next person reproducing BENCHMARKS.md."""

import importlib.util
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


def test_fas_latency_times_both_exported_formats(tmp_path):
    """It had crashed on every run: its ONNX export, into the TorchScript file's folder, removed that file."""
    quoted = ROOT / "benchmarks" / "results" / "fas_latency.md"  # BENCHMARKS.md's table: not overwritten
    before = quoted.read_bytes()
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fas.py"), "latency", "--latency-steps", "20",
                           "--latency-task", "pendulum", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    table = (tmp_path / "fas_latency.md").read_text()
    for row in ("| SAC | torchscript | 1 | 20 / 20 |", "| SAC | onnx |", "| SRL (J=16) | torchscript | 16 | 2 / 20 |",
                "| SRL (J=16) | onnx |"):
        assert row in table
    assert quoted.read_bytes() == before


def test_ppo_against_sb3_on_mujoco_writes_both_agents_curves(tmp_path):
    """Its peer, Stable-Baselines3, is a test dependency: both agents train a few thousand steps of hopper, and the
    table, the runs file and the plot all land beside --out, never over the quoted results, and SB3 leaves no
    empty ``SB3-<date>`` folder in the temporary directory (its default logger's)."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ppo_mujoco_sb3.py"), "--tasks", "hopper",
                           "--seeds", "1", "--steps", "3072", "--eval-every", "3072", "--processes", "1",
                           "--out", str(tmp_path / "ppo.md")], capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(scratch)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert not list(scratch.glob("SB3-*"))
    table = (tmp_path / "ppo.md").read_text()
    assert "| hopper | Stable-Baselines3 PPO (rl-zoo) | 0 | 3,072 |" in table
    assert "| hopper | robolearn PPO (its config) | 0 | 3,072 |" in table
    runs = [json.loads(line) for line in (tmp_path / "ppo_runs.jsonl").read_text().splitlines()]
    assert sorted(run["agent"] for run in runs) == ["ours", "sb3"]
    assert all(run["curve"][-1]["env_steps"] == 3072 for run in runs)
    assert (tmp_path / "ppo.png").stat().st_size > 0


def test_ppo_against_sb3_refuses_a_task_an_agent_has_no_config_for_before_training(tmp_path):
    """ours_zoo has half_cheetah's config only: asked for hopper too (the default tasks), its job had failed in the
    pool after the runs file was set aside, stopping the runs in flight. (--report-only: were it not refused, nothing
    would train here.)"""
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ppo_mujoco_sb3.py"), "--agents", "ours_zoo",
                           "--report-only", "--out", str(tmp_path / "ppo.md")],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2 and "no configs/ppo_hopper_zoo.yaml, ppo_ant_zoo.yaml: give --tasks" in done.stderr
    assert not list(tmp_path.iterdir())


def _benchmark(name: str, monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """benchmarks/<name>.py as a module, to call its helpers or its main() here."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # its `from common import ...`
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_make_datasets_says_what_expert_steps_a_run_that_ended_no_episode_needs(monkeypatch):
    """half_cheetah ends no episode before its 1000-step time limit: at a small --expert-steps its expert's run has
    no training return, and the script had gone on to fail after the medium run with the dataset writer's
    traceback. (Its own run to that point takes longer than a test should: the helper that decides is tested.)"""
    make_datasets = _benchmark("make_datasets", monkeypatch)
    assert make_datasets.too_few_expert_steps("half_cheetah", 3072, [{"env_steps": 3072}]) == (
        "--expert-steps 3,072: no half_cheetah episode ended in the expert's PPO run, so medium has no training return "
        "to stop at and medium-replay no episode; raise --expert-steps to at least 129,024 (where each of "
        "configs/ppo_half_cheetah.yaml's 128 envs has reached the 1000-step time limit)")  # 42 iterations of 24 steps
    assert make_datasets.too_few_expert_steps("half_cheetah", 129_024, [{"env_steps": 129_024, "return": -2.0}]) is None


def test_learning_curves_says_what_steps_a_run_that_ended_no_episode_needs(tmp_path, monkeypatch):
    """A run that ended no episode has no curve: the script had said only "give more --steps", not how many (the
    figure make_datasets gives its expert). train() is stood in for by a finished run of one iteration."""
    import robolearn

    learning_curves = _benchmark("learning_curves", monkeypatch)
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"env_steps": 3072, "time": 4.0}) + "\n")
    monkeypatch.setattr(robolearn, "train", lambda cfg: types.SimpleNamespace(run_dir=tmp_path, evaluation=None))
    monkeypatch.setattr(sys, "argv", ["learning_curves.py", "--configs", "ppo_half_cheetah", "--steps", "3072",
                                      "--out", str(tmp_path / "curves.md")])
    with pytest.raises(SystemExit) as stopped:
        learning_curves.main()
    assert str(stopped.value) == (
        "ppo_half_cheetah: no training episode ended within 3,072 env steps, so there is no curve; raise --steps to "
        "at least 129,024 (where each of configs/ppo_half_cheetah.yaml's 128 envs has reached the 1000-step time "
        "limit)")
    assert not (tmp_path / "curves.md").exists()


def test_learning_curves_writes_the_table_of_the_configs_that_have_a_curve(tmp_path, monkeypatch):
    """With several configs, one that ended no episode had stopped the script there: the earlier configs' PNGs were
    written but no table. The table now holds the runs with a curve, names the one without, and the script still
    ends in error saying what --steps it needs."""
    import robolearn

    learning_curves = _benchmark("learning_curves", monkeypatch)
    runs = {"ppo_ant": tmp_path / "ant", "ppo_half_cheetah": tmp_path / "cheetah"}
    for run_dir in runs.values():
        run_dir.mkdir()
    (runs["ppo_ant"] / "metrics.jsonl").write_text(json.dumps({"env_steps": 3072, "time": 4.0, "return": -12.5}) + "\n")
    (runs["ppo_half_cheetah"] / "metrics.jsonl").write_text(json.dumps({"env_steps": 3072, "time": 4.0}) + "\n")
    monkeypatch.setattr(robolearn, "train", lambda cfg: types.SimpleNamespace(
        run_dir=runs[f"ppo_{cfg.env.task}"], evaluation={"return_mean": -11.0, "return_std": 2.0}))
    monkeypatch.setattr(sys, "argv", ["learning_curves.py", "--configs", "ppo_ant", "ppo_half_cheetah", "--steps", "3072",
                                      "--out", str(tmp_path / "curves.md")])
    with pytest.raises(SystemExit) as stopped:
        learning_curves.main()
    assert str(stopped.value).startswith("ppo_half_cheetah: no training episode ended within 3,072 env steps")
    table = (tmp_path / "curves.md").read_text()
    assert "| ant | " in table and "| 3,072 | 4 | 768 | -11 ± 2 | ![](curves_ppo_ant.png) |" in table
    assert "| half_cheetah |" not in table
    assert "No curve: ppo_half_cheetah: no training episode ended" in table
    assert (tmp_path / "curves_ppo_ant.png").stat().st_size > 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="the message of a machine without a GPU")
def test_warp_profile_without_a_gpu_names_a_cpu_run_of_few_worlds(monkeypatch):
    """Run as the README gives it (``python benchmarks/warp_profile.py``: 4096 worlds on CUDA) without a GPU, it had said only "--device cpu": that
    run, at the default 4096 worlds on Warp's CPU device, took 1.7 s a step here, the profile's
    ~300 steps a quarter of an hour or more."""
    profile = _benchmark("warp_profile", monkeypatch)
    monkeypatch.setattr(sys, "argv", ["warp_profile.py"])
    with pytest.raises(SystemExit) as refused:
        profile.main()
    assert "--device cpu --worlds 64" in str(refused.value)
