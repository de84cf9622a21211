"""The env step's host reads (each a wait for the GPU on a GPU), counted on MuJoCo Warp's CPU device."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from robolearn import interfaces
from robolearn.host_reads import HostReads, read_scalars


def test_it_counts_reads_of_device_values_by_line_and_not_reads_of_host_copies():
    x = torch.arange(6.0)
    with HostReads(code=(Path(__file__).parent,)) as reads:
        x.sum().item()
        (x > 2).nonzero()
        x[x > 2]
        host = x.cpu()
        host[host > 2].tolist()  # a copy already on the host: free on a GPU
        first, rest = torch.stack([x, x]).cpu()  # and its parts
        first.sum().item(), rest[rest > 0].tolist()
        x.to("cpu", torch.float64)  # to the device it is on: no transfer
    assert sorted(name for name, _, _ in reads.sites) == ["cpu", "cpu", "item", "mask index", "nonzero"]
    assert {path for _, path, _ in reads.sites} == {"tests/robolearn/test_host_reads.py"}


@pytest.mark.parametrize("folder", [str, Path], ids=["str", "Path"])
def test_code_may_be_one_folder(folder):
    """HostReads(code="my_tasks") had taken the string letter by letter as folders, counting nothing in my_tasks."""
    x = torch.arange(6.0)
    with HostReads(code=folder(Path(__file__).parent)) as reads:
        x.sum().item()
    assert [(name, path) for name, path, _ in reads.sites] == [("item", "tests/robolearn/test_host_reads.py")]


def test_host_copies_stay_usable_and_uncounted_through_stacks_sizes_and_named_tuples():
    x = torch.arange(6.0)
    with HostReads(code=(Path(__file__).parent,)) as reads:
        host = x.cpu()  # the one read
        assert host.shape.numel() == 6 and host.size().numel() == 6  # torch.Size kept, not a plain tuple
        assert host.max(0).values.item() == 5.0 and host.sort().indices.tolist()[0] == 0
        torch.stack([host, host]).tolist()
        host[host > 2] = 0.0
    assert sum(reads.sites.values()) == 1


def test_on_a_gpu_run_reads_of_cpu_tensors_are_free():
    with HostReads(code=(Path(__file__).parent,), stand_in=False) as reads:
        torch.arange(6.0).sum().item()
    assert not reads.sites


def test_tensors_made_without_a_device_and_the_optimizers_step_counters_are_host_values():
    """On a GPU, ``torch.zeros(3)`` is a host tensor, and torch's non-fused Adam keeps its step counters on the
    host (``device="cpu"``) and reads them each step: free there, so a stand-in does not count them."""
    with HostReads(code=(Path(__file__).parent,)) as reads:
        torch.zeros(3).sum().item()
        index = torch.arange(4)
        index[index > 1].tolist()
        weight = torch.nn.Parameter(torch.ones(2, device="cpu"))
        optimizer = torch.optim.Adam([weight], foreach=True)
        for _ in range(2):
            weight.sum().backward()
            optimizer.step()
        torch.ones(2, device="cpu").sum().item()  # the device's own (a stand-in's device is the CPU): counted
        sent = torch.as_tensor([1.0, 2.0]).to("cpu", copy=True)  # a host value sent to the device (Task.on_device)
        sent.sum().item(), sent.to(torch.float64).tolist()  # counted: the device's now
    assert sorted(name for name, _, _ in reads.sites) == ["item", "item", "tolist"], dict(reads.sites)


def test_calls_whose_result_size_depends_on_values_count_and_masked_fills_do_not():
    x, mask = torch.arange(6.0), torch.arange(6) > 2
    with HostReads(code=(Path(__file__).parent,)) as reads:
        torch.equal(x, x)
        torch.where(mask)
        x[mask] = torch.ones(3)  # a tensor of values for the selected rows: their count is read
        x[mask] = 0.0  # masked_fill_
        torch.where(mask, x, 0.0)
    assert sorted(name for name, _, _ in reads.sites) == ["equal", "mask index", "where"]


def test_logged_sums_are_read_in_one_transfer_and_keep_their_order():
    sums = {"loss": torch.tensor(0.5), "kl": torch.tensor(0.01, dtype=torch.float64), "count": 3,
            "clipped": torch.tensor(True), "entropy": torch.tensor([2.0])}
    with HostReads(code=(Path(__file__).parent,)) as reads:  # counted at the line that calls it
        out = read_scalars(sums)
    assert out == {"loss": 0.5, "kl": 0.01, "count": 3.0, "clipped": 1.0, "entropy": 2.0}
    assert list(out) == list(sums) and sum(reads.sites.values()) == 1
    with pytest.raises(ValueError, match="'returns': a logged value must be one number"):
        read_scalars({"returns": torch.zeros(3)})


@pytest.mark.parametrize("by_mask", [True, False])
@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
def test_the_warp_env_step_reads_the_host_only_where_it_lists_its_resets(monkeypatch, device, by_mask):
    """Issue 6: no host sync in the step. Resetting the ended worlds by mask (the Go1 task's way on a GPU)
    reads nothing; listing them (``done.nonzero()``, a task without ``resets_by_mask``) reads once a step.
    Pushes, per-episode dynamics, latency and delay, and the finiteness checks (deferred as on a GPU) must add none."""
    import mujoco_warp  # noqa: F401  (a declared dependency: missing, a failure)
    from robolearn.config import load_config
    from robolearn.registry import make_env
    from sims.task import episode_clock

    monkeypatch.setattr(interfaces, "HOST_READS_FREE_ON", set())  # the checks as on a GPU
    cfg = load_config("ppo_go1_flat", ["env.backend=warp", f"env.device={device}", "env.num_envs=4",  # + latency:
                                       "env.randomization.action_latency_s=[0.0,0.03]",  # substeps of old controls
                                       "env.randomization.obs_delay_steps=[0,2]"])
    env = make_env(cfg.env, seed=0)
    env.env.task.resets_by_mask = by_mask
    env.reset(seed=0)
    clock = episode_clock(env)
    clock.episode_step = torch.tensor([clock.max_episode_steps - k for k in (1, 3, 5, 30)], device=device)
    generator = torch.Generator().manual_seed(0)
    steps = 8
    with HostReads(stand_in=device == "cpu") as reads:
        for _ in range(steps):
            step = env.step((torch.rand((4, 12), generator=generator) * 8 - 4).to(device))
    assert int(clock.episode_step.min()) < steps  # worlds were reset on the way
    assert step.reward.shape == (4,)
    if by_mask:
        assert not reads.sites, dict(reads.sites)
    else:
        assert [(name, path) for name, path, _ in reads.sites] == [("nonzero", "sims/task.py")], dict(reads.sites)
        assert sum(reads.sites.values()) == steps


def test_a_ppo_iteration_reads_the_host_four_times(tmp_path, monkeypatch):
    """The whole loop on the GPU's code path (MuJoCo Warp's CPU device, resets by mask, checks deferred): the
    update's logged means, the NaN verdict, the episode columns (success included) and the env's log sums,
    once an iteration each; nothing per env step or per minibatch (rsl-rl-lib: ~197 an iteration on Go1)."""
    import mujoco_warp  # noqa: F401  (a declared dependency: missing, a failure)
    from robolearn.config import load_config
    from robolearn.runner import train

    monkeypatch.setattr(interfaces, "HOST_READS_FREE_ON", set())
    cfg = load_config("ppo_cartpole", ["env.backend=warp", "env.device=cpu", "env.num_envs=4", f"run_dir={tmp_path}",
                                       "runner.eval_episodes=0", "runner.video_seconds=0", "logging.progress=false",
                                       "logging.wandb=disabled", "runner.total_steps=100000000"])
    reads, iterations = HostReads(counting=False), []

    def stop(metrics: dict) -> bool:  # after each iteration: count iterations 2 to 4
        iterations.append(metrics)
        reads.counting = len(iterations) <= 3
        return len(iterations) > 3

    with reads:
        train(cfg, stop=stop)
    assert "success_rate" in iterations[-1]  # the success column was read too
    assert sorted(name for name, _, _ in reads.sites) == ["__bool__", "cpu", "tolist", "tolist"], dict(reads.sites)
    assert set(reads.sites.values()) == {3}, dict(reads.sites)
