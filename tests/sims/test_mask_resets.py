"""Resets by mask, the GPU's way (no ``done.nonzero()``, so no host sync in the step): worlds whose episode
goes on are left exactly as resets of listed worlds leave them, the ended ones start from the task's reset
distribution, and the wrappers (randomization, delay) follow. Run here on CPU with host reads counted as on
a GPU, next to an identical env that lists its resets (CPU's way)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

import pytest
import torch

from robolearn import interfaces
from robolearn.interfaces import VecEnv
from sims import TASKS, make_env
from sims.task import TaskEnv, episode_clock

NUM = 6
MASKED = sorted(name for name in TASKS if getattr(TASKS[name], "resets_by_mask", False))
NOISELESS = {"go1_flat": {"noise_scale": 0.0}, "go1_rough": {"noise_scale": 0.0}}  # noise draws differ per path


@contextmanager
def as_on_a_gpu() -> Iterator[None]:
    """Host reads counted as costly, as on a GPU: TaskEnv resets by mask."""
    saved = set(interfaces.HOST_READS_FREE_ON)
    interfaces.HOST_READS_FREE_ON.clear()
    try:
        yield
    finally:
        interfaces.HOST_READS_FREE_ON.update(saved)


def _task_env(env: VecEnv) -> TaskEnv:
    while not isinstance(env, TaskEnv):
        env = env.env
    return env


def lockstep(make: Callable[[], VecEnv], steps: int = 16) -> tuple[VecEnv, VecEnv, int]:
    """Two copies of ``make()`` stepped with the same actions, the first listing the worlds it resets, the
    second resetting by mask; asserts step by step that every world whose episode has not ended in either
    is identical in both. Episode clocks are staggered, so worlds end on different steps. Returns both envs
    and the number of steps on which some worlds reset while others ran on."""
    by_ids, by_mask = make(), make()
    for env in (by_ids, by_mask):
        env.reset(seed=0)
        clock = episode_clock(env)
        clock.episode_step = (clock.max_episode_steps - 2 - 2 * torch.arange(NUM)).clamp(min=0)
    generator = torch.Generator().manual_seed(1)
    low, high = (torch.as_tensor(bound) for bound in (by_ids.action_spec.low, by_ids.action_spec.high))
    ended = torch.zeros(NUM, dtype=torch.bool)
    mixed = 0
    for _ in range(steps):
        action = low + (high - low) * torch.rand(NUM, *by_ids.action_spec.shape, generator=generator)
        a = by_ids.step(action)
        with as_on_a_gpu():
            b = by_mask.step(action)
        assert "reset_ids" in a.info and "reset_ids" not in b.info
        done = a.terminated | a.truncated
        running = ~ended
        assert torch.equal(done[running], (b.terminated | b.truncated)[running])
        assert torch.equal(a.reward[running], b.reward[running])
        still = running & ~done
        for group in a.obs:
            assert torch.equal(a.info["final_obs"][group][running], b.info["final_obs"][group][running]), group
            assert torch.equal(a.obs[group][still], b.obs[group][still]), group
        states = [_task_env(env).get_state()["state"] for env in (by_ids, by_mask)]
        assert torch.equal(states[0][still], states[1][still])
        assert (_task_env(by_mask).episode_step[done] == 0).all()
        mixed += bool(done[running].any() and still.any())
        ended |= done | b.terminated | b.truncated
    return by_ids, by_mask, mixed


@pytest.mark.parametrize("name", MASKED)
def test_mask_resets_leave_running_worlds_as_listed_resets_do(name: str) -> None:
    by_ids, by_mask, mixed = lockstep(lambda: make_env(name, NUM, seed=0, **NOISELESS.get(name, {})))
    assert mixed >= 3  # resets happened while other worlds ran on


@pytest.mark.parametrize("name", ["go1_flat", "hopper"])
def test_mask_resets_take_the_masked_worlds_draws(name: str) -> None:
    """The ended worlds hold the initial state the task drew for them (every world drew one), on the
    step their episode ended."""
    env = make_env(name, NUM, seed=0)
    env.reset(seed=0)
    env.episode_step = torch.tensor([env.max_episode_steps - 1, 5, env.max_episode_steps - 1, 7, 3, 2])
    drawn = []
    draw = env.task.reset
    env.task.reset = lambda sim, ids, generator: drawn.append(draw(sim, ids, generator)) or drawn[-1]
    with as_on_a_gpu():
        step = env.step(torch.zeros(NUM, *env.action_spec.shape))
    done = step.terminated | step.truncated
    assert done[[0, 2]].all() and len(drawn) == 1 and drawn[0][0].shape == (NUM, env.sim.model.nq)
    qpos, qvel = (value.to(env.sim.dtype) for value in drawn[0])  # (the state as the backend reports it)
    assert torch.equal(env.sim.qpos[done], qpos[done]) and torch.equal(env.sim.qvel[done], qvel[done])
    assert not torch.equal(env.sim.qpos[~done], qpos[~done])  # the others went on
    assert torch.equal(env.episode_step, torch.where(done, 0, torch.tensor([0, 6, 0, 8, 4, 3])))


RANDOMIZED = {"mass_scale": [0.8, 1.2], "friction_scale": [0.5, 1.25], "action_latency_s": [0.0, 0.04],
              "obs_delay_steps": [0, 2],  # per-episode dynamics, latency and delay; pushes and noise draw every
              # step, off here: their draws differ by path. Playground's Go1 terms too: drawn per link, dof, axis
              "link_mass_scale": [0.9, 1.1], "torso_mass_kg": [-1.0, 1.0], "torso_com_m": [-0.05, 0.05],
              "armature_scale": [1.0, 1.05], "qpos0_offset": [-0.05, 0.05],
              "contact_friction_scale": [0.5, 1.25], "frictionloss_scale": [0.9, 1.1]}  # (times friction_scale's)


@pytest.mark.parametrize("name, randomization", [(name, None) for name in MASKED] + [("go1_flat", RANDOMIZED)],
                         ids=[*MASKED, "go1_flat-randomized"])
def test_mujoco_warp_resets_by_mask_as_by_list(name: str, randomization: dict | None) -> None:
    """MuJoCo Warp (here on Warp's CPU device) is the backend this is for: its mask reset is a kernel over
    every world (``reset_where``), the list's the same kernel after a mask made from the list, and the pass
    after either leaves the other worlds' derived fields as their step left them (Ant's reward reads one);
    per-episode masses are written under the mask, their derived constants recomputed for every world."""
    _, _, mixed = lockstep(lambda: make_env(name, NUM, backend="warp", seed=0, randomization=randomization,
                                            **NOISELESS.get(name, {})), steps=10)
    assert mixed >= 3


@pytest.mark.parametrize("pool", [16, 0])
def test_randomized_env_follows_mask_resets(pool: int) -> None:
    """Per-episode dynamics (from a pool, or fresh draws whose derived constants are recomputed), latency
    and observation delay: the running worlds keep theirs, the reset ones draw anew."""
    randomization = {**RANDOMIZED, "dynamics_pool": pool}
    by_ids, by_mask, mixed = lockstep(lambda: make_env("go1_flat", NUM, seed=0, noise_scale=0.0,
                                                       randomization=randomization))
    assert mixed >= 3
    if pool:
        for name in ("body_mass", "body_ipos", "dof_armature", "qpos0"):
            held = by_mask.sim.get_model_field(name).flatten(1)
            variants = by_mask._pool[name].to(held.dtype).flatten(1)  # (as drawn, float64; the backend reports float32)
            assert all(bool((variants == row).all(1).any()) for row in held), name  # every world holds a variant
    for key in ("_latency", "_delay", "_substeps"):
        assert getattr(by_mask, key).max() > 0  # drawn, not left at nominal


def test_delayed_env_follows_mask_resets() -> None:
    by_ids, by_mask, mixed = lockstep(lambda: make_env(
        "cartpole", NUM, seed=0, delay={"obs_delay_steps": 1, "action_latency_steps": 2}))
    assert mixed >= 3


def test_a_run_by_mask_learns_what_a_run_by_list_does_when_resets_draw_nothing(tmp_path) -> None:
    """End to end (PPO, the runner, episode statistics, evaluation): the two ways differ only in which
    random numbers their resets use, so with a reset that draws none (no reset noise) a run that resets by
    mask ends with exactly the weights of one that lists its resets."""
    from robolearn.config import load_config
    from robolearn.runner import train

    def run(name: str) -> dict:
        cfg = load_config("ppo_cartpole", [f"run_dir={tmp_path / name}", "seed=0", "env.num_envs=8",
                                           "env.kwargs.reset_noise_scale=0.0", "env.kwargs.max_episode_steps=24",
                                           "runner.total_steps=1024", "runner.eval_episodes=2", "runner.video_seconds=0",
                                           "logging.progress=false", "logging.wandb=disabled"])
        result = train(cfg)
        assert result.trained["env_steps"] >= 1024 and result.evaluation is not None
        checkpoint = torch.load(next(result.run_dir.glob("checkpoints/latest.pt")), weights_only=True)
        return checkpoint["agent"]

    def tensors(state: object, prefix: str = "") -> dict[str, torch.Tensor]:
        if isinstance(state, torch.Tensor):
            return {prefix: state}
        items = state.items() if isinstance(state, dict) else enumerate(state) if isinstance(state, (list, tuple)) else ()
        return {name: t for key, value in items for name, t in tensors(value, f"{prefix}/{key}").items()}

    by_list = tensors(run("list"))
    with as_on_a_gpu():
        by_mask = tensors(run("mask"))
    assert by_list.keys() == by_mask.keys() and any(name.startswith("/actor/") for name in by_list)
    assert all(torch.equal(value, by_mask[name]) for name, value in by_list.items())


def test_a_subclass_that_changes_the_reset_is_reset_by_list_until_it_says_otherwise() -> None:
    """``resets_by_mask`` vouches for the reset its class sees: a subclass whose reset keeps state for its
    after_reset (as the mazes' do) would get rows of every world in one and of the ended ones in the other."""
    from dataclasses import dataclass
    from typing import ClassVar

    from sims.task import resets_by_mask
    from sims.tasks.cartpole import Cartpole
    from sims.tasks.go1 import Go1Rough, Go1Velocity

    @dataclass(kw_only=True)
    class Mine(Cartpole):
        def reset(self, sim, ids, generator):
            return super().reset(sim, ids, generator)

    @dataclass(kw_only=True)
    class Vouched(Mine):
        resets_by_mask: ClassVar[bool] = True

    @dataclass(kw_only=True)
    class MyGo1(Go1Velocity):
        def after_reset(self, sim, ids, generator):  # and not after_reset_where: the mask would skip it
            super().after_reset(sim, ids, generator)

    assert resets_by_mask(Cartpole()) and resets_by_mask(Go1Rough()) and resets_by_mask(Vouched())
    assert not resets_by_mask(Mine()) and not resets_by_mask(MyGo1())
    task, maze = Cartpole(), TASKS["point_maze_medium"]()
    task.resets_by_mask = False  # an instance can turn it off, not on (the maze's after_reset has no mask form)
    maze.resets_by_mask = True
    assert not resets_by_mask(task) and not resets_by_mask(maze)


@pytest.mark.parametrize("name", MASKED)
def test_a_masked_step_reads_nothing_on_the_host(name: str) -> None:
    """On MuJoCo Warp with host reads counted as on a GPU (Warp's CPU device stands in), a step in which
    worlds end and reset by mask reads no device value on the host: a task whose reset reads one (a
    rejection-sampling loop, as reacher's) must not declare resets_by_mask."""
    from robolearn.host_reads import HostReads

    env = make_env(name, NUM, backend="warp", seed=0)
    env.reset(seed=0)
    env.episode_step = (env.max_episode_steps - 1 - torch.arange(NUM)).clamp(min=0)
    action = torch.zeros(NUM, *env.action_spec.shape)
    with as_on_a_gpu(), HostReads(stand_in=True) as reads:
        for _ in range(3):
            env.step(action)
    assert (env.episode_step < 3).sum() >= 3  # worlds were reset on the way
    assert not reads.sites, dict(reads.sites)
