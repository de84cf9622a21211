"""Data-parallel training: two gloo ranks on CPU stay one model and log like one process with all the worlds.

The two ranks are spawned with torch.multiprocessing and join through the same
env vars torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT), so
``robolearn.distributed.init`` runs exactly as under torchrun.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import re
import socket
import warnings
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
import torch.distributed as dist

from robolearn import cli, distributed, load_config
from robolearn.interfaces import flatten_obs
from robolearn.logger import read_metrics
from robolearn.checkpoint import load_checkpoint
from robolearn.config import load_run_config
from robolearn.runner import Runner
from policies.modules import EmpiricalNormalizer
from policies.sac import SAC, SACConfig

NUM_ENVS = 8  # worlds per rank; the one-process reference steps 2 x NUM_ENVS
ITERATIONS = 4
STEPS = 32  # agent.num_steps


def config(run_dir: Path, num_envs: int):
    # entropy_coef: the bonus these tolerances were set at. With the default run's 0.02 the final std of one and two
    # ranks lies 3 % apart, outside the 2 % below but inside sampling noise: one process alone, seeds 0-3, ends at
    # 0.95-1.03 (0.91-1.02 at 0.005).
    return load_config("ppo_cartpole", [
        f"run_dir={run_dir}", f"env.num_envs={num_envs}", f"agent.num_steps={STEPS}", "env.num_threads=1",
        "agent.entropy_coef=0.005",
        f"runner.total_steps={ITERATIONS * STEPS * 2 * NUM_ENVS}", "logging.wandb=disabled", "logging.progress=false",
        "runner.eval_episodes=0", "runner.video_seconds=0", "runner.checkpoint_every=1",
    ])


def flat(state) -> torch.Tensor:
    """Every tensor of a (nested) state dict, flattened into one float64 vector."""
    values = state.values() if isinstance(state, dict) else state
    parts = []
    for value in values:
        if isinstance(value, torch.Tensor):
            parts.append(value.detach().flatten().double())
        elif isinstance(value, (dict, list, tuple)):
            parts.append(flat(value))
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)


def _worker(rank: int, world: int, port: int, tmp: Path) -> None:
    # a native crash (SIGABRT, SIGSEGV) writes where every thread was (kept open until the process ends)
    faulthandler.enable(open(tmp / f"crash{rank}.txt", "w"), all_threads=True)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    # each rank names its own run_dir: only rank 0's may be created; rank 1 must use the one rank 0 broadcasts
    runner = Runner(config(tmp / f"runs_rank{rank}", NUM_ENVS))
    initial = flat(runner.agent.state_dict())
    seen, params = [], []
    update = runner.agent.update

    def recording_update(batch):
        seen.append(flatten_obs(batch["obs"], ("policy",), batch_dims=2).reshape(-1, runner.agent.actor_obs_dim).clone())
        metrics = update(batch)
        params.append(flat(runner.agent.state_dict()))
        return metrics

    runner.agent.update = recording_update
    result = runner.train()
    out = {"run_dir": str(result.run_dir), "initial": initial, "params": params, "obs": torch.cat(seen),
           "normalizer": runner.agent.actor_normalizer.state_dict(), "lr": runner.agent.learning_rate}

    # SAC: gradients of critics, actor and temperature averaged; each rank updates on its own batches
    torch.manual_seed(100 + rank)
    spec = runner.env.observation_spec
    sac = SAC(spec, runner.env.action_spec, SACConfig(hidden=(32, 32)), torch.device("cpu"))
    sac.load_state_dict(distributed.broadcast_object(sac.state_dict()))
    obs_dim, act_dim = spec["policy"].shape[0], runner.env.action_spec.shape[0]
    for _ in range(3):
        batch = {"obs": {"policy": torch.randn(64, obs_dim)}, "next_obs": {"policy": torch.randn(64, obs_dim)},
                 "action": torch.rand(64, act_dim) * 2 - 1, "reward": torch.randn(64),
                 "terminated": torch.zeros(64, dtype=torch.bool)}
        sac.update(batch)
    out["sac"] = flat(sac.state_dict())
    out["metrics"] = distributed.mean_metrics({"x": float(rank), **({"return": 5.0} if rank == 0 else {})})
    # the collectives themselves: rank r contributes r + 1 (the rank without a gradient, a zero)
    weight, bias = torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(1))
    weight.grad = torch.full((3,), rank + 1.0)
    bias.grad = torch.ones(1) if rank == 0 else None
    distributed.average_gradients([weight, bias])
    out["collectives"] = {"weight": weight.grad, "bias": bias.grad, "mean": distributed.mean(torch.tensor(rank + 1.0))}

    # resume one more iteration: every rank loads the same checkpoint
    cfg = config(tmp / f"runs_rank{rank}", NUM_ENVS)
    cfg.runner.total_steps += STEPS * 2 * NUM_ENVS
    resumed = Runner(cfg, resume=result.run_dir)
    out["resumed_from"] = flat(resumed.agent.state_dict())
    resumed.train()
    out["resumed"] = flat(resumed.agent.state_dict())
    runner.env.close()
    resumed.close()  # leaves the process group
    torch.save(out, tmp / f"rank{rank}.pt")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> tuple[Path, list[dict]]:
    tmp = tmp_path_factory.mktemp("dist")
    try:
        mp.spawn(_worker, args=(2, free_port(), tmp), nprocs=2, join=True)
    except mp.ProcessExitedException as err:
        # A rank killed by a signal, not failed by an error of ours (that is a ProcessRaisedException, never
        # retried): once, in CI, rank 1 aborted in native code ("terminate called without an active exception")
        # near its end (by the timing, after leaving the process group); 0 of 45 runs here did it again.
        # One fresh try, said in the warnings summary; a crash that repeats fails the tests.
        if err.signal_name is None:
            raise
        where = "".join(f"\n{path.name}:\n{path.read_text()}" for path in sorted(tmp.glob("crash*.txt"))
                        if path.stat().st_size)
        warnings.warn(f"distributed test: {err}; retried once in a fresh folder{where}", stacklevel=1)
        tmp = tmp_path_factory.mktemp("dist")
        mp.spawn(_worker, args=(2, free_port(), tmp), nprocs=2, join=True)
    return tmp, [torch.load(tmp / f"rank{r}.pt", weights_only=False) for r in range(2)]


def test_ranks_stay_bit_identical_while_seeing_different_worlds(two_ranks) -> None:
    _, (r0, r1) = two_ranks
    assert len(r0["params"]) == len(r1["params"]) == ITERATIONS
    assert not torch.equal(r0["obs"], r1["obs"])  # own seeds: the ranks really trained on different data
    assert torch.equal(r0["initial"], r1["initial"])
    for p0, p1 in zip(r0["params"], r1["params"]):
        assert torch.equal(p0, p1)
    assert not torch.equal(r0["params"][-1], r0["initial"])
    assert r0["lr"] == r1["lr"] and r0["lr"] != config(Path("."), 1).agent.learning_rate  # adaptive lr moved, alike
    assert torch.equal(r0["sac"], r1["sac"])


def test_normalizers_hold_the_statistics_of_all_ranks_data(two_ranks) -> None:
    _, (r0, r1) = two_ranks
    for key in ("mean", "var", "count"):
        assert torch.equal(r0["normalizer"][key], r1["normalizer"][key])
    data = torch.cat([r0["obs"], r1["obs"]]).double()
    assert int(r0["normalizer"]["count"]) == data.shape[0] == ITERATIONS * STEPS * 2 * NUM_ENVS
    torch.testing.assert_close(r0["normalizer"]["mean"].double(), data.mean(0), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(r0["normalizer"]["var"].double(), data.var(0, unbiased=False), rtol=1e-4, atol=1e-5)


def test_only_rank_0_writes_the_run_directory(two_ranks) -> None:
    tmp, (r0, r1) = two_ranks
    assert r0["run_dir"] == r1["run_dir"]
    run_dir = Path(r0["run_dir"])
    assert run_dir.is_relative_to(tmp / "runs_rank0")
    assert not (tmp / "runs_rank1").exists()
    assert len(list((tmp / "runs_rank0").glob("*/*"))) == 1
    assert {p.name for p in run_dir.iterdir()} >= {"config.yaml", "metrics.jsonl", "checkpoints", "export"}
    steps = [line["env_steps"] for line in read_metrics(run_dir)]  # one writer: each iteration once, all ranks' steps
    assert steps == [STEPS * 2 * NUM_ENVS * (i + 1) for i in range(ITERATIONS + 1)]  # + the resumed one


def test_resume_loads_the_same_checkpoint_on_every_rank(two_ranks) -> None:
    _, (r0, r1) = two_ranks
    assert torch.equal(r0["resumed_from"], r0["params"][-1]) and torch.equal(r1["resumed_from"], r0["params"][-1])
    assert torch.equal(r0["resumed"], r1["resumed"]) and not torch.equal(r0["resumed"], r0["resumed_from"])


def test_two_ranks_log_like_one_process_with_all_the_worlds(two_ranks, tmp_path) -> None:
    tmp, (r0, _) = two_ranks
    runner = Runner(config(tmp_path / "runs", 2 * NUM_ENVS))
    try:
        result = runner.train()
        assert not dist.is_initialized()  # without torchrun, nothing distributed happens
    finally:
        runner.close()
    single, double = read_metrics(result.run_dir), read_metrics(Path(r0["run_dir"]))[:ITERATIONS]  # before the resume
    assert [m["env_steps"] for m in single] == [m["env_steps"] for m in double]
    # Same initial networks (rank 0 and the single process draw them from the same seed) and as many
    # worlds: the updates agree within sampling noise, and a metric summed over ranks instead of
    # averaged (2x) would not.
    one, two = single[0], double[0]
    assert two["entropy"] == pytest.approx(one["entropy"], rel=0.02)
    assert two["value_loss"] == pytest.approx(one["value_loss"], rel=0.5)
    assert two["kl"] == pytest.approx(one["kl"], rel=0.5)
    assert abs(two["policy_loss"] - one["policy_loss"]) < 0.02
    assert 1 / 3 < two["reward/swingup"] / one["reward/swingup"] < 3  # the same initial policy's reward, 16 episodes
    assert double[-1]["std"] == pytest.approx(single[-1]["std"], rel=0.02)


def test_merge_is_chans_parallel_formula() -> None:
    """Folding per-rank (count, mean, var) in rank order gives the statistics of the concatenated data."""
    torch.manual_seed(0)
    ranks = [torch.randn(n, 3) * s + m for n, s, m in ((5, 0.1, 100.0), (300, 3.0, -2.0), (1, 1.0, 0.0), (64, 10.0, 7.0))]
    normalizer = EmpiricalNormalizer(3)
    earlier = torch.randn(50, 3)
    normalizer.update(earlier)  # the statistics before this merge
    for x in ranks:
        normalizer.merge(torch.tensor(x.shape[0]), x.mean(0), x.var(0, unbiased=False))
    data = torch.cat([earlier, *ranks]).double()
    assert int(normalizer.count) == data.shape[0] == 420
    torch.testing.assert_close(normalizer.mean.double(), data.mean(0), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(normalizer.var.double(), data.var(0, unbiased=False), rtol=1e-4, atol=1e-4)


@pytest.fixture
def launches(monkeypatch) -> list[list[str]]:
    """The torchrun command lines `robolearn train --nproc` would start (none is), outside any torchrun and on a
    process allowed two cores."""
    calls: list[list[str]] = []
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr("torch.distributed.run.main", lambda args: calls.append(args))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    return calls


def test_nproc_relaunches_the_same_command_under_torchrun(monkeypatch, capsys) -> None:
    calls = []
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    for name in ("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "LOGLEVEL"):  # set, then removed: their absence is restored after
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    for name in [name for name in logging.root.manager.loggerDict if name.startswith("torch.distributed")]:
        monkeypatch.setattr(logging.getLogger(name), "level", logging.getLogger(name).level)
    monkeypatch.setattr("torch.distributed.run.main", lambda args: calls.append(args))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert cli.main(["train", "ppo_pendulum", "--nproc", "2", "env.num_envs=4", "--no-wandb"]) == 0
    assert "warning" not in capsys.readouterr().err
    # ranks stop at the end of their iteration: torchrun waits for it, not its own 30 s before a SIGKILL
    assert int(os.environ["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"]) >= 600
    assert os.environ["LOGLEVEL"] == "ERROR"  # torchrun's Ctrl+C warnings left out; a failed rank's error kept
    from torch.distributed.launcher.api import LaunchConfig

    monkeypatch.setattr(LaunchConfig, "__dataclass_fields__", {})  # a torch whose torchrun has no such timeout
    assert cli.main(["train", "ppo_pendulum", "--nproc", "2", "env.num_envs=4", "--no-wandb"]) == 0
    assert "note: this torch's torchrun stops the ranks 30 s after a Ctrl+C or kill" in capsys.readouterr().err
    assert cli.main(["train", "ppo_pendulum", "--nproc", "3", "env.num_envs=4", "--no-wandb"]) == 0
    assert "--nproc 3 on 2 CPU cores: the ranks share cores" in capsys.readouterr().err  # runs, but is told
    logs = calls[-1].pop(2)  # torchrun's folder for error files: ours, removed after (it had left one in /tmp a run)
    assert logs.startswith("--log-dir=") and not os.path.exists(logs.split("=", 1)[1])
    assert calls[-1] == ["--standalone", "--nproc_per_node=3", "-m", "robolearn",
                         "train", "ppo_pendulum", "env.num_envs=4", "--no-wandb"]
    for nproc in (["--np", "3"], ["--npro=3"]):  # argparse's abbreviations of --nproc: not given to torchrun or the ranks
        assert cli.main(["train", "ppo_pendulum", *nproc, "env.num_envs=4", "--no-wandb"]) == 0
        assert calls[-1][1] == "--nproc_per_node=3" and calls[-1][5:] == ["train", "ppo_pendulum", "env.num_envs=4",
                                                                           "--no-wandb"]
    capsys.readouterr()
    for wrong, said in (("env.task=nosuch", "unknown task 'nosuch'"), ("env.kwargs.bogus=1", "env.kwargs.bogus: task "
                                                                       "'pendulum' has no such setting")):
        assert cli.main(["train", "ppo_pendulum", "--nproc", "2", wrong, "--no-wandb"]) == 2  # before any rank
        assert capsys.readouterr().err.count(said) == 1 and len(calls) == 5


def test_the_log_folder_a_killed_launcher_left_goes_with_the_next_launch(monkeypatch, tmp_path) -> None:
    """kill -9 of `train --nproc` had left its torchrun log folder in /tmp for good, one per kill."""
    import subprocess
    import tempfile

    from robolearn.data.minari_store import _HOST, WRITING

    dead = subprocess.Popen(["true"])
    dead.wait()
    killed = tmp_path / f".robolearn-torchrun.tmp-{dead.pid}@{_HOST}-k1ll3d"  # as a launcher killed outright leaves it
    running = tmp_path / f".robolearn-torchrun.tmp-{os.getpid()}@{_HOST}-runn1n"  # another launcher's, running
    for folder in (killed, running):
        (folder / "rank0").mkdir(parents=True)
        (folder / WRITING).touch()
    mine = tmp_path / f".notes.old-{dead.pid}"  # someone's own folder in /tmp, named as datasets were set aside once
    mine.mkdir()
    calls = []
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr("torch.distributed.run.main", lambda args: calls.append(args))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert cli.main(["train", "ppo_pendulum", "--nproc", "2", "env.num_envs=4", "--no-wandb"]) == 0
    logs = calls[-1][2].split("=", 1)[1]
    assert os.path.dirname(logs) == str(tmp_path) and not os.path.exists(logs)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([running.name, mine.name])


def test_more_ranks_than_the_cores_this_process_may_use_is_said(monkeypatch, capsys) -> None:
    """A container's or job's share of a larger machine (taskset, cgroup cpusets, SLURM): os.cpu_count() counts
    the machine's cores, and 2 ranks on 1 allowed core had started without the warning."""
    calls = []
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr("torch.distributed.run.main", lambda args: calls.append(args))
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert cli.main(["train", "ppo_pendulum", "--nproc", "2", "env.num_envs=4", "--no-wandb"]) == 0
    assert "--nproc 2 on 1 CPU cores: the ranks share cores" in capsys.readouterr().err and calls


def test_a_missing_gpu_is_said_once_and_the_ranks_get_the_fallback(monkeypatch) -> None:
    """backend=warp on a CUDA device this machine lacks falls back to MuJoCo on the CPU: the parent says so,
    and its ranks are given that backend, so rank 0 does not say it again."""
    calls = []
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr("torch.distributed.run.main", lambda args: calls.append(args))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    with pytest.warns(UserWarning, match="no CUDA GPU here") as said:
        assert cli.main(["train", "ppo_pendulum", "--nproc", "2", "env.backend=warp", "env.device=cuda",
                         "--no-wandb"]) == 0
    assert len(said) == 1
    assert calls[-1][-2:] == ["env.backend=mujoco", "env.device=cpu"]  # the ranks' overrides win, being last


def test_too_many_minibatches_are_refused_before_the_ranks_start(launches, monkeypatch, capsys) -> None:
    """agent.num_minibatches beyond a rank's rollout had been refused by each rank once torchrun had started
    them (seconds later, with torchrun's 'failed (exitcode: 2) local_rank: 0' after it)."""
    assert cli.main(["train", "ppo_pendulum", "--nproc", "2", "env.num_envs=2", "agent.num_steps=2",
                     "agent.num_minibatches=64", "--no-wandb"]) == 2
    said = "agent.num_minibatches (64) is more than a rollout's 4 samples (env.num_envs 2 x agent.num_steps 2)"
    assert capsys.readouterr().err.count(said) == 1 and not launches
    assert cli.main(["train", "ppo_pendulum", "--nproc", "2", "env.num_envs=2", "agent.num_steps=2",
                     "agent.num_minibatches=4", "--no-wandb"]) == 0 and launches  # as many as samples: it starts


@pytest.mark.parametrize("override, said", [
    ("logging.project=other", r"logging.project: .* logs to W&B with project .*: drop logging.project="),
    ("env.task=cartpole", r"env.task: .* trained on 'pendulum'; a resume goes on with its task, not 'cartpole'")])
def test_a_resume_that_would_move_its_w_and_b_run_or_task_is_refused_before_the_ranks_start(
        launches, tmp_path, monkeypatch, capsys, override, said) -> None:
    """`train --resume RUN --nproc 2 logging.project=other` had been refused by each rank once torchrun had started
    them (refuse_wandb_move and refuse_task_change run in the runner), as --nproc's minibatches had been."""
    import yaml

    from robolearn.config import to_dict

    run = tmp_path / "runs" / "ppo_pendulum" / "20260101-000000"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump(to_dict(load_config("ppo_pendulum", ["logging.wandb=offline"]))))
    (run / "checkpoints" / "latest.pt").write_bytes(b"read by the ranks")
    session = run / "wandb" / "offline-run-20260101_000000-id1" / "run-id1.wandb"
    session.parent.mkdir(parents=True)
    session.write_bytes(b"")
    assert cli.main(["train", "--resume", str(run), "--nproc", "2", override]) == 2
    assert re.search(said, capsys.readouterr().err) and not launches


def test_warp_on_the_cpu_device_is_left_to_rank_0_to_say(launches, monkeypatch, recwarn) -> None:
    """backend=warp device=cpu runs as asked on every rank, and rank 0 says it is slow: the parent had said it
    too, so that `--nproc 2` printed it twice."""
    import sims

    monkeypatch.setattr(sims, "_SAID", set())  # (said once per process: another test's would hide it)
    assert cli.main(["train", "ppo_pendulum", "--nproc", "2", "env.backend=warp", "env.device=cpu",
                     "--no-wandb"]) == 0
    assert launches and not [w for w in recwarn if "backend=warp" in str(w.message)]
    assert launches[-1][-3:] == ["env.backend=warp", "env.device=cpu", "--no-wandb"]  # the ranks resolve it alike
    monkeypatch.setattr(sims, "_SAID", set())  # rank 0, a process of its own, says it
    with pytest.warns(UserWarning, match="backend=warp device=cpu: MuJoCo Warp on Warp's CPU device"):
        sims.resolve_backend("warp", "cpu")


@pytest.mark.parametrize("override, said", [
    ("agent.activation=relu", "agent.activation 'elu' -> 'relu': PPO learnt its controller with the saved value"),
    ("agent.init_std=0.5", "agent.init_std 1.0 -> 0.5: a starting value, which only a new PPO starts from")])
def test_a_resume_that_changes_the_activation_or_a_start_is_refused_before_the_ranks_start(
        launches, tmp_path, capsys, override, said) -> None:
    """`train --resume RUN --nproc 2 agent.activation=relu` (or agent.init_std=0.5) had been refused by each rank's
    restore once torchrun had started them; the launcher reads the checkpoint's agent settings and refuses it as
    they would."""
    import yaml

    from robolearn.checkpoint import save_checkpoint
    from robolearn.config import to_dict

    run = tmp_path / "runs" / "ppo_pendulum" / "20260101-000000"
    (run / "checkpoints").mkdir(parents=True)
    config = to_dict(load_config("ppo_pendulum", ["logging.wandb=disabled"]))
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    save_checkpoint(run / "checkpoints" / "latest.pt", config=config, agent={},
                    progress={"env_steps": 0, "world_size": 2})
    assert cli.main(["train", "--resume", str(run), "--nproc", "2", override]) == 2
    assert said in capsys.readouterr().err
    assert not launches


def test_a_gym_envs_wrong_setting_is_refused_before_the_ranks_start(launches, capsys) -> None:
    """env.kwargs.foo=1 on a gym: task (which check_task leaves to Gymnasium) had started the ranks, each saying it,
    then torchrun's failure lines."""
    assert cli.main(["train", "ppo_gym_pendulum", "--nproc", "2", "env.kwargs.foo=1", "--no-wandb"]) == 2
    assert capsys.readouterr().err.count("unexpected keyword argument 'foo'") == 1 and not launches
    assert cli.main(["train", "ppo_gym_pendulum", "--nproc", "2", "env.kwargs.g=9.0", "--no-wandb"]) == 0 and launches


def test_more_ranks_than_gpus_is_refused_before_torchrun(monkeypatch, capsys) -> None:
    calls = []
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr("torch.distributed.run.main", lambda args: calls.append(args))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert cli.main(["train", "ppo_pendulum", "--nproc", "2", "env.device=cuda", "--no-wandb"]) == 2
    assert "--nproc 2: each rank takes one GPU and this machine has 1; give --nproc 1" in capsys.readouterr().err
    assert not calls


def test_a_gym_env_on_a_missing_gpu_is_refused_before_torchrun(monkeypatch, capsys) -> None:
    """A gym: task with env.device=cuda on a machine without a GPU (our tasks' backend the launcher resolves; a
    Gymnasium env's it had not) had started the ranks, each failing in torch.cuda.set_device with a traceback."""
    calls = []
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr("torch.distributed.run.main", lambda args: calls.append(args))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cli.main(["train", "ppo_gym_pendulum", "--nproc", "2", "env.device=cuda", "--no-wandb"]) == 2
    assert "device=cuda: no CUDA GPU here (torch.cuda.is_available() is False); use env.device=cpu" in \
        capsys.readouterr().err
    assert not calls


def test_metrics_are_averaged_over_the_ranks_that_have_them(two_ranks) -> None:
    _, (r0, r1) = two_ranks
    assert r0["metrics"] == r1["metrics"] == {"x": 0.5, "return": 5.0}  # rank 1 had no episode yet
    metrics = {"return": 1.5, "kl": 0.01}
    assert distributed.mean_metrics(metrics) is metrics  # one process: untouched, no process group
    assert distributed.world_size() == 1 and distributed.is_main() and not distributed.active()


def test_gradients_and_steering_scalars_are_averaged_not_summed(two_ranks) -> None:
    """One step sees the mean gradient of every rank's batch (what one process would on all the data; a sum would
    double the step where the gradient is clipped, as PPO's is), and PPO's KL is the ranks' mean (a sum would shrink
    the adaptive learning rate by the number of ranks). A parameter a rank has no gradient for counts as zero."""
    _, ranks = two_ranks
    for r in ranks:
        assert r["collectives"]["weight"].tolist() == [1.5, 1.5, 1.5]
        assert r["collectives"]["bias"].tolist() == [0.5]
        assert float(r["collectives"]["mean"]) == 1.5


def test_refuses_agents_that_do_not_average_gradients(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr("policies.ppo.PPO.data_parallel", False)
    monkeypatch.setattr(distributed, "world_size", lambda: 2)
    with pytest.raises(ValueError, match="does not average its gradients"):
        Runner(config(tmp_path / "runs", 2))



def test_resume_starts_as_many_ranks_as_trained_the_run(two_ranks, monkeypatch, capsys) -> None:
    """A run trained with --nproc 2 records it: a plain `train --resume` relaunches on 2 ranks, and a
    resume on another number warns that the batch per update changes."""
    _, (r0, _) = two_ranks
    run_dir = Path(r0["run_dir"])
    assert load_checkpoint(run_dir / "checkpoints" / "latest.pt")["progress"]["world_size"] == 2
    calls = []
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr("torch.distributed.run.main", lambda args: calls.append(args))
    assert cli.main(["train", "--resume", str(run_dir), "runner.total_steps=1e6", "--no-wandb"]) == 0
    assert calls and calls[0][:2] == ["--standalone", "--nproc_per_node=2"]
    assert "resuming on 2 ranks" in capsys.readouterr().out
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})  # fewer cores than ranks: they share them, as --nproc 2 did
    assert cli.main(["train", "--resume", str(run_dir), "runner.total_steps=1e6", "--no-wandb"]) == 0
    assert calls[-1][:2] == ["--standalone", "--nproc_per_node=2"]
    assert "--nproc 2 on 1 CPU cores: the ranks share cores" in capsys.readouterr().err
    cfg = load_run_config(run_dir)
    cfg.runner.total_steps *= 2
    with pytest.warns(UserWarning, match="trained on 2 rank\\(s\\) and resumes on 1.*--nproc 2"):
        Runner(cfg, resume=run_dir).close()


def test_a_finished_runs_resume_is_refused_before_its_ranks_start(two_ranks, tmp_path, monkeypatch, capsys) -> None:
    """Its ranks had been started only to refuse it, each, torchrun's error lines after the runner's. (A copy of
    the two ranks' run, its evaluation as its end left it: a test above resumes the run itself further.)"""
    import shutil

    _, (r0, _) = two_ranks
    run_dir = shutil.copytree(r0["run_dir"], tmp_path / "run")
    if (aside := run_dir / "eval.superseded.json").is_file():
        aside.replace(run_dir / "eval.json")
    done = load_checkpoint(run_dir / "checkpoints" / "latest.pt")["progress"]["env_steps"]
    calls = []
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr("torch.distributed.run.main", lambda args: calls.append(args))
    assert cli.main(["train", "--resume", str(run_dir), f"runner.total_steps={done}", "--no-wandb"]) == 2
    assert not calls and "already finished" in capsys.readouterr().err
    assert cli.main(["train", "--resume", str(run_dir), f"runner.total_steps={2 * done}", "--no-wandb"]) == 0
    assert calls  # one that trains on starts its ranks


def test_a_numbered_gpu_under_torchrun_is_refused_before_any_rank_shares_it(monkeypatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(ValueError, match=r"env.device=cuda:0 under torchrun: each rank runs on its own GPU .* set env.device=cuda"):
        distributed.init("cuda:0")


def test_a_world_size_left_in_the_shell_says_what_to_unset(monkeypatch, tmp_path, capsys) -> None:
    """WORLD_SIZE without torchrun's other variables had ended in torch's "environment variable RANK expected,
    but not set", which names neither the stale variable nor how ranks are started; no run folder is left."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    for name in ("RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    assert cli.main(["train", "ppo_pendulum", f"run_dir={tmp_path}", "--no-wandb"]) == 2
    said = capsys.readouterr().err
    assert "WORLD_SIZE=2 is set but RANK, MASTER_ADDR, MASTER_PORT not" in said and "unset WORLD_SIZE" in said
    assert not list(tmp_path.iterdir())


def test_a_rank_that_refuses_the_config_first_says_it_when_rank_0_has_not(monkeypatch, tmp_path, capsys) -> None:
    """Every rank refuses a wrong config; only rank 0 said it, and a later rank that got there first had left at
    once: torchrun then stopped rank 0 before it said it, and `--nproc 2` ended on 'local_rank: 1' alone (1 in 4
    here). A later rank now waits for rank 0 (torchrun stops it once rank 0 has said it), then says it itself."""
    slept = []
    monkeypatch.setattr(cli.time, "sleep", slept.append)
    for name, value in (("RANK", "1"), ("WORLD_SIZE", "2"), ("TORCHELASTIC_RUN_ID", "x")):
        monkeypatch.setenv(name, value)
    assert cli.main(["train", "ppo_pendulum", "env.bogus=1", f"run_dir={tmp_path}", "--no-wandb"]) == 2
    assert slept == [cli.RANK_ERROR_WAIT_S] and "error: unknown key 'env.bogus'" in capsys.readouterr().err


def test_nproc_with_a_world_size_set_is_refused_not_ignored(monkeypatch, tmp_path, capsys) -> None:
    """A WORLD_SIZE=1 left in the shell had made `--nproc 2` train in one process without a word."""
    calls = []
    monkeypatch.setattr("torch.distributed.run.main", lambda args: calls.append(args))
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert cli.main(["train", "ppo_pendulum", "--nproc", "2", f"run_dir={tmp_path}", "--no-wandb"]) == 2
    assert "--nproc 2 with WORLD_SIZE=1 set" in capsys.readouterr().err
    assert not calls and not list(tmp_path.iterdir())


def test_a_rank_is_told_to_stop_when_its_launcher_dies(tmp_path) -> None:
    """torchrun starts ranks in sessions of their own: a launcher killed with SIGKILL had left them training."""
    import subprocess
    import sys
    import time

    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    ready, told = tmp_path / "ready", tmp_path / "told"
    rank = (f"import signal, time, pathlib\n"
            f"from robolearn.distributed import launcher_gone, stop_with_the_launcher\n"
            f"signal.signal(signal.SIGTERM, lambda *_: (pathlib.Path({str(told)!r}).write_text("
            f"f'SIGTERM, launcher gone: {{launcher_gone()}}'), exit(0)))\n"
            f"stop_with_the_launcher()\n"
            f"pathlib.Path({str(ready)!r}).write_text('')\n"
            f"time.sleep(30)\n")
    launcher = (f"import os, subprocess, sys, time, pathlib\n"
                f"subprocess.Popen([sys.executable, '-c', {rank!r}], start_new_session=True)\n"
                f"while not pathlib.Path({str(ready)!r}).exists(): time.sleep(0.02)\n"
                f"os.kill(os.getpid(), 9)\n")
    subprocess.run([sys.executable, "-c", launcher], timeout=60)
    deadline = time.monotonic() + 20
    while not told.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    # the kernel hands the rank to another parent before the signal: the rank can say its launcher is gone
    assert told.exists() and told.read_text() == "SIGTERM, launcher gone: True"


def test_a_sigterm_after_the_launcher_died_is_said_as_that(monkeypatch) -> None:
    """A launcher killed with SIGKILL: its ranks had said "if torchrun sent it because a rank failed", none had."""
    import os
    import signal

    from robolearn.runner import _deferred_stop_line

    monkeypatch.setattr(distributed, "_LAUNCHER_PARENT", os.getppid())
    assert "because a rank failed" in _deferred_stop_line(signal.SIGTERM) and not distributed.launcher_gone()
    monkeypatch.setattr(distributed, "_LAUNCHER_PARENT", os.getppid() + 1)  # another parent now: the launcher died
    said = _deferred_stop_line(signal.SIGTERM)
    assert said.startswith("\nSIGTERM: the launcher (torchrun) is gone, killed or crashed; stopping at the end of "
                           "this iteration") and "rank failed" not in said
    assert _deferred_stop_line(signal.SIGINT).startswith("\nstopping at the end")


def test_a_rank_whose_launcher_died_while_it_started_stops_too(tmp_path) -> None:
    """A launcher killed before its ranks had asked to be told (seconds of imports) had left them orphaned,
    waiting minutes for a rendezvous that was gone: the kernel tells only of a death after the ask."""
    import subprocess
    import sys
    import time

    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    told, launched = tmp_path / "told", tmp_path / "launched"
    rank = (f"import os, signal, time, pathlib\n"
            f"while os.getppid() == int(os.environ['{distributed.LAUNCHER_PID}'].split(':')[0]): time.sleep(0.02)\n"
            f"signal.signal(signal.SIGTERM, lambda *_: (pathlib.Path({str(told)!r}).write_text('SIGTERM'), exit(0)))\n"
            f"from robolearn.distributed import stop_with_the_launcher\n"
            f"stop_with_the_launcher()\n"
            f"time.sleep(30)\n")
    launcher = (f"import os, subprocess, sys, pathlib\n"
                f"os.environ['{distributed.LAUNCHER_PID}'] = f'{{os.getpid()}}:{tmp_path}'\n"
                f"os.environ['TORCHELASTIC_ERROR_FILE'] = {str(tmp_path / 'attempt_0' / '0' / 'error.json')!r}\n"
                f"rank = subprocess.Popen([sys.executable, '-c', {rank!r}], start_new_session=True)\n"
                f"pathlib.Path({str(launched)!r}).write_text(str(rank.pid))\n"
                f"os.kill(os.getpid(), 9)\n")
    subprocess.run([sys.executable, "-c", launcher], timeout=60)
    deadline = time.monotonic() + 20
    while not told.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    if not told.exists():
        os.kill(int(launched.read_text()), 9)  # (the orphan this test is about)
    assert told.exists() and told.read_text() == "SIGTERM"


def test_a_process_a_rank_starts_does_not_take_the_launchers_pid_for_its_own(tmp_path) -> None:
    """A rank's children inherit its environment: one of them that is a rank itself (a plain torchrun line a
    rank runs, a nested launch) found ROBOLEARN_LAUNCHER_PID naming a launcher that is not its parent, and
    stopped itself at once as if that launcher had died."""
    import subprocess
    import sys

    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    told = tmp_path / "told"
    inner = (f"import signal, pathlib\n"
             f"signal.signal(signal.SIGTERM, lambda *_: (pathlib.Path({str(told)!r}).write_text('SIGTERM'), exit(0)))\n"
             f"from robolearn.distributed import stop_with_the_launcher\n"
             f"stop_with_the_launcher()\n")
    rank = (f"import os, subprocess, sys\n"
            f"os.environ['{distributed.LAUNCHER_PID}'] = f'{{os.getppid()}}:{tmp_path}'  # as robolearn train --nproc starts it\n"
            f"os.environ['TORCHELASTIC_ERROR_FILE'] = {str(tmp_path / 'attempt_0' / '0' / 'error.json')!r}  # and torchrun\n"
            f"from robolearn.distributed import stop_with_the_launcher\n"
            f"stop_with_the_launcher()\n"
            f"subprocess.run([sys.executable, '-c', {inner!r}], check=True)\n")
    subprocess.run([sys.executable, "-c", rank], timeout=60, check=True)
    assert not told.exists()


def test_a_plain_torchrun_rank_under_a_launch_variable_left_exported_trains_on(monkeypatch, tmp_path) -> None:
    """ROBOLEARN_LAUNCHER_PID left exported in a shell (copied from a rank's environment) had a plain torchrun
    line's ranks, whose parent is torchrun's agent, stop themselves at once, silently: the variable names the
    launcher's log folder, which holds its own ranks' error files and no other launch's."""
    import signal
    import sys
    import types

    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    monkeypatch.setattr("ctypes.CDLL", lambda *_, **__: types.SimpleNamespace(prctl=lambda *_: 0))  # (not pytest's)
    kills: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: kills.append((pid, sig)))
    monkeypatch.setattr(os, "getppid", lambda: 4242)  # torchrun's agent
    monkeypatch.setattr(distributed, "_LAUNCHER_PARENT", None)  # (set by the calls below: given back after)
    stale = distributed.launcher_said(999_999, tmp_path / ".robolearn-torchrun.tmp-999999@host-ab12")
    plain = str(tmp_path / "torchelastic_x1y2" / "attempt_0" / "0" / "error.json")  # torchrun's own log folder
    for error_file, stopped in ((plain, False), (stale.split(":", 1)[1] + "/attempt_0/0/error.json", True)):
        monkeypatch.setenv(distributed.LAUNCHER_PID, stale)
        monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", error_file)
        kills.clear()
        distributed.stop_with_the_launcher()
        assert kills == ([(os.getpid(), signal.SIGTERM)] if stopped else []), error_file
        assert distributed.LAUNCHER_PID not in os.environ


def test_a_rank_that_lost_its_peers_says_so_and_how_to_go_on(monkeypatch, tmp_path) -> None:
    """Rank 0 of a run whose other rank died had ended in gloo's 30-line traceback, naming neither; and it
    offers a resume only where there is a checkpoint to resume."""
    monkeypatch.setattr(distributed, "rank", lambda: 0)
    monkeypatch.setattr(distributed, "world_size", lambda: 2)
    monkeypatch.chdir(tmp_path)
    gloo = RuntimeError("[../gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:6053. This is "
                        "typically caused by a remote worker crashing.")
    lost = distributed.lost_peers(gloo, "runs/ppo/1")
    assert isinstance(lost, distributed.PeersLost) and str(lost).startswith(
        "rank 0 lost the other ranks: one of them stopped (torchrun's log names it")
    assert str(lost).endswith("runs/ppo/1 saved no checkpoint yet: train it anew (robolearn train "
                              "runs/ppo/1/config.yaml --nproc 2), then remove this folder")  # had said '<config>'
    assert "<" not in str(lost)
    (tmp_path / "runs" / "ppo" / "1" / "checkpoints").mkdir(parents=True)
    (tmp_path / "runs" / "ppo" / "1" / "checkpoints" / "latest.pt").write_bytes(b"")
    assert str(distributed.lost_peers(gloo, "runs/ppo/1")).endswith("robolearn train --resume runs/ppo/1 --nproc 2")
    assert distributed.lost_peers(dist.DistBackendError("NCCL error"), "r") is not None
    assert distributed.lost_peers(RuntimeError("CUDA out of memory"), "r") is None  # its own error: as it is



def test_a_rank_that_lost_its_peers_says_so_though_torchrun_terminates_it_meanwhile(tmp_path) -> None:
    """torchrun sends SIGTERM to the ranks left once one has died, about when rank 0 finds its peers lost. It had
    landed while rank 0 closed its logs and env (W&B's close takes a while), after the Ctrl+C handler was gone: rank 0
    died there, its resume line unsaid (2 of 6 kills of rank 1 here), leaving torchrun's 'exitcode: -9' as all
    there was."""
    import subprocess
    import sys

    rank = (f"import os, signal, sys\n"
            f"from robolearn import cli, distributed\n"
            f"from robolearn.runner import Runner\n"
            f"def lose_peers(self, stop=None):\n"
            f"    distributed.active = lambda: True  # as under torchrun, from here on\n"
            f"    raise RuntimeError('[gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:6053')\n"
            f"close = Runner.close\n"
            f"def close_then_terminated(self):  # torchrun's SIGTERM, mid-teardown\n"
            f"    close(self)\n"
            f"    os.kill(os.getpid(), signal.SIGTERM)\n"
            f"Runner.train, Runner.close = lose_peers, close_then_terminated\n"
            f"sys.exit(cli.main(['train', 'ppo_cartpole', 'run_dir={tmp_path}', 'env.num_envs=2', "
            f"'logging.wandb=disabled', 'logging.progress=false']))\n")
    done = subprocess.run([sys.executable, "-c", rank], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "error: rank 0 lost the other ranks" in done.stderr

def _disagreeing_worker(rank: int, world: int, port: int, tmp: Path) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    cfg = config(tmp / f"runs_rank{rank}", NUM_ENVS)
    cfg.agent.num_epochs = 5 if rank == 0 else 2
    try:
        Runner(cfg).close()
        said = "built"
    except cli.ConfigError as err:
        said = str(err)
    (tmp / f"said{rank}.txt").write_text(said)


def test_ranks_started_with_different_configs_are_refused_on_every_rank(tmp_path) -> None:
    """Ranks that disagree on agent.num_epochs had been built and then waited for ever in a collective (rank 0
    makes more gradient all-reduces); ones that disagree on a loss weight had averaged it silently."""
    mp.spawn(_disagreeing_worker, args=(2, free_port(), tmp_path), nprocs=2, join=True)
    for rank in range(2):
        said = (tmp_path / f"said{rank}.txt").read_text()
        assert said.startswith("the ranks were started with different configs: agent.num_epochs is 5 on rank 0 "
                               "and 2 on rank 1"), said
    assert not list(tmp_path.glob("runs_rank*/*"))  # nothing written
