"""MuJoCo Warp backend, run on Warp's CPU device, against the CPU MuJoCo backend.

Tolerances: MuJoCo Warp computes in float32, the CPU backend in float64. On
smooth tasks and on hopper the two agree to 1e-4 over 50 control steps. On
half-cheetah the contacts make the dynamics chaotic: there the bound is the
spread of two float64 runs whose initial states differ by 1e-6. The ant agrees
to 1e-4 with elliptic friction cones; with the pyramidal cones of Gymnasium's
ant.xml, MuJoCo Warp 4.0.0 and MuJoCo 4.0.0 resolve the first ground impacts
differently (velocities differ by ~0.5 after one impact), and the ant's
``cfrc_ext`` (its contact observation) differs in a few entries even with
elliptic cones: properties of the two engines that this test does not hide;
it pins the ant's state under elliptic cones only. The Go1 (one solver
iteration, pyramidal cones) differs by ~0.2 rad/s in joint velocities after
one step; what the two engines agree on there is the standing posture, pinned
to 2 mm of height and 0.02 rad of joint angle after 2 s.
"""

from __future__ import annotations

import pytest
import torch

import mujoco_warp  # noqa: E402, F401  (a declared dependency: missing, it fails here, not skips)

import sims  # noqa: E402
from sims.backend import MujocoBackend  # noqa: E402
from sims.warp_backend import WarpBackend  # noqa: E402
from sims.worlds import Worlds  # noqa: E402

NUM = 4
# Warp's CPU device everywhere; the GPU too where there is one (benchmarks/gpu.sh runs this file there).
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _pair(task: str, device: str = "cpu", **kwargs):
    """The task on Warp (``device``) and on the CPU backend, both in the CPU env's initial state."""
    warp = sims.make_env(task, NUM, device=device, backend="warp", seed=0, **kwargs)
    cpu = sims.make_env(task, NUM, device="cpu", seed=0, **kwargs)
    warp.reset(seed=1), cpu.reset(seed=1)  # same generator states on CPU, for later resets
    warp.set_state(cpu.get_state()["state"].to(device))
    return warp, cpu


def _actions(env, steps: int):
    generator = torch.Generator().manual_seed(0)
    return [torch.rand((NUM, env.action_spec.shape[0]), generator=generator) * 2 - 1 for _ in range(steps)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("task", ["pendulum", "cartpole", "reacher", "arm_reach", "hopper"])
def test_tasks_follow_the_cpu_backend(task, device):
    warp, cpu = _pair(task, device)
    assert isinstance(warp.sim, WarpBackend) and isinstance(cpu.sim, MujocoBackend)
    for action in _actions(warp, 50):
        a, b = warp.step(action.to(device)), cpu.step(action)
        ended = bool((b.terminated | b.truncated).any())
        for name in b.obs:
            torch.testing.assert_close(a.info["final_obs"][name].cpu(), b.info["final_obs"][name], atol=1e-4, rtol=1e-4)
            if device == "cpu" or not ended:  # new episodes start from each device's own random generator
                torch.testing.assert_close(a.obs[name].cpu(), b.obs[name], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(a.reward.cpu(), b.reward, atol=1e-4, rtol=1e-4)
        assert torch.equal(a.terminated.cpu(), b.terminated) and torch.equal(a.truncated.cpu(), b.truncated)
        if device != "cpu" and ended:
            break


def test_half_cheetah_stays_within_float_chaos():
    warp, cpu = _pair("half_cheetah")
    perturbed = sims.make_env("half_cheetah", NUM, device="cpu", seed=0)
    perturbed.reset(seed=1)
    state = perturbed.get_state()["state"]
    state[:, perturbed.sim.state_slice("qpos")] += 1e-6
    perturbed.set_state(state)
    for step, action in enumerate(_actions(warp, 25), 1):
        a, b, c = warp.step(action), cpu.step(action), perturbed.step(action)
        if step in (5, 10, 25):
            ours = (a.obs["policy"] - b.obs["policy"]).abs().max()
            spread = (c.obs["policy"] - b.obs["policy"]).abs().max()
            assert ours <= spread + 1e-4, f"step {step}: warp differs by {ours:.2e}, float64 spread {spread:.2e}"


def test_ant_with_elliptic_cones_follows_the_cpu_backend():
    spec = sims.TASKS["ant"]()
    model = spec.model()
    model.opt.cone = 1  # mjCONE_ELLIPTIC
    warp = WarpBackend(model, 2, device="cpu", fields=spec.fields)
    cpu = MujocoBackend(model, 2, fields=spec.fields)
    qpos = torch.tensor(model.qpos0).expand(2, -1).clone()
    qpos[:, 2] = 0.6  # lands on its legs within the first steps
    for sim in (warp, cpu):
        sim.set_state(torch.arange(2), qpos, torch.zeros(2, model.nv))
    generator = torch.Generator().manual_seed(0)
    for _ in range(10):
        action = torch.rand((2, model.nu), generator=generator) * 2 - 1
        warp.step(action, 5), cpu.step(action, 5)
        torch.testing.assert_close(warp.qvel, cpu.qvel, atol=1e-4, rtol=1e-4)


def test_go1_stands_alike_on_both_backends():
    warp, cpu = _pair("go1_flat")
    for _ in range(100):  # 2 s of zero actions: the home pose under the position servos
        warp.step(torch.zeros(NUM, 12)), cpu.step(torch.zeros(NUM, 12))
    torch.testing.assert_close(warp.sim.qpos[:, 2], cpu.sim.qpos[:, 2], atol=2e-3, rtol=0)
    torch.testing.assert_close(warp.sim.qpos[:, 7:], cpu.sim.qpos[:, 7:], atol=2e-2, rtol=0)


def test_reset_touches_only_the_chosen_worlds():
    warp, _ = _pair("hopper")
    for action in _actions(warp, 5):
        warp.step(action)
    before = warp.sim.qpos.clone()
    qpos = torch.zeros(1, warp.sim.model.nq, dtype=torch.float64)
    qpos[0, 1] = 1.5
    warp.sim.set_state(torch.tensor([2]), qpos, torch.zeros(1, warp.sim.model.nv, dtype=torch.float64))
    after = warp.sim.qpos
    assert torch.equal(after[[0, 1, 3]], before[[0, 1, 3]])
    assert after[2, 1] == 1.5 and after[2, 0] == 0 and warp.sim.time[2] == 0
    assert torch.all(warp.sim.time[[0, 1, 3]] > 0)


def test_a_reset_by_mask_is_a_reset_of_the_listed_worlds():
    """``reset_where`` (the GPU step's reset, which lists no worlds) leaves every world as ``set_state`` of
    the masked ones does: state, clocks and the sensors' kinematics."""
    by_mask, by_ids = (_pair("ant")[0] for _ in range(2))
    for action in _actions(by_mask, 5):
        by_mask.step(action), by_ids.step(action)
    qpos = torch.rand(NUM, by_mask.sim.model.nq, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    qpos[:, 2] = 0.75  # the torso's height: healthy, so that the step below ends no episode (and resets none)
    qvel = torch.rand(NUM, by_mask.sim.model.nv, dtype=torch.float64)
    mask = torch.tensor([True, False, True, False])
    before = by_mask.sim.qpos.clone()
    by_mask.sim.reset_where(mask, qpos, qvel)
    by_ids.sim.set_state(torch.tensor([0, 2]), qpos[mask], qvel[mask])
    assert torch.equal(by_mask.sim.get_state(), by_ids.sim.get_state())
    assert torch.equal(by_mask.sim.field("xpos"), by_ids.sim.field("xpos"))
    assert torch.equal(by_mask.sim.qpos[~mask], before[~mask]) and torch.equal(by_mask.sim.time[mask], torch.zeros(2))
    step = by_mask.step(_actions(by_mask, 1)[0])  # a step leaves xpos a substep behind the state
    assert not (step.terminated | step.truncated).any()
    state, xpos = by_mask.sim.get_state(), by_mask.sim.field("xpos").clone()
    by_mask.sim.reset_where(torch.zeros(NUM, dtype=torch.bool), qpos, qvel)  # the common step: nothing ended
    assert torch.equal(by_mask.sim.get_state(), state) and torch.equal(by_mask.sim.field("xpos"), xpos)


def test_state_rows_replay_on_the_cpu_backend():
    warp, cpu = _pair("hopper")
    for action in _actions(warp, 10):
        warp.step(action)
    rows = warp.get_state()["state"]
    assert rows.shape == (NUM, cpu.sim.state_size)
    cpu.set_state(rows)
    warp.set_state(rows)
    for action in _actions(warp, 20):
        a, b = warp.step(action), cpu.step(action)
        torch.testing.assert_close(a.obs["policy"], b.obs["policy"], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_per_world_masses_match_the_cpu_backend(device):
    warp, cpu = _pair("hopper", device)
    masses = cpu.sim.get_model_field("body_mass") * torch.tensor([0.5, 1.0, 1.5, 2.0]).unsqueeze(1)
    for env in (warp, cpu):
        env.sim.set_model_field("body_mass", masses)
    warp.set_state(cpu.get_state()["state"].to(device))
    torch.testing.assert_close(warp.sim.get_model_field("body_mass").cpu(), masses.float())
    heights = []
    for action in _actions(warp, 30):
        a, b = warp.step(action.to(device)), cpu.step(action)
        torch.testing.assert_close(a.info["final_obs"]["policy"].cpu(), b.info["final_obs"]["policy"],
                                   atol=2e-4, rtol=2e-4)
        heights.append(b.info["final_obs"]["policy"][:, 0])
        if device != "cpu" and bool((b.terminated | b.truncated).any()):
            break  # new episodes start from each device's own random generator
    assert torch.stack(heights).std(1).mean() > 1e-3  # the worlds really differ
    # Again with other masses: on CUDA the recomputation of the derived constants is now a graph replayed.
    for env in (warp, cpu):
        env.sim.set_model_field("body_mass", masses.flip(0))
    warp.set_state(cpu.get_state()["state"].to(device))
    for action in _actions(warp, 10):
        a, b = warp.step(action.to(device)), cpu.step(action)
        torch.testing.assert_close(a.info["final_obs"]["policy"].cpu(), b.info["final_obs"]["policy"],
                                   atol=2e-4, rtol=2e-4)
        if bool((b.terminated | b.truncated).any()):
            break


def test_randomized_training_runs_on_warp(tmp_path):
    from robolearn.config import load_config
    from robolearn.runner import Runner

    cfg = load_config("ppo_arm_reach_dr", ["env.backend=warp", "env.num_envs=8", "runner.total_steps=512",
                                           "runner.eval_episodes=2", "runner.video_seconds=0",
                                           "logging.wandb=disabled", "logging.progress=false",
                                           f"run_dir={tmp_path}", "agent.num_steps=32"])
    runner = Runner(cfg)
    assert isinstance(runner.env.sim, WarpBackend)
    result = runner.train()
    runner.close()
    assert (result.run_dir / "checkpoints" / "latest.pt").is_file()
    assert torch.isfinite(torch.tensor(result.evaluation["return_mean"]))
    assert runner.env.sim.get_model_field("body_mass").std(0).max() > 0  # masses vary per world


def test_warp_on_a_missing_gpu_falls_back_with_a_warning(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.warns(UserWarning, match="falling back to backend=mujoco"):
        env = sims.make_env("pendulum", 2, device="cuda", backend="warp")
    assert isinstance(env.sim, MujocoBackend) and env.device.type == "cpu"
    with pytest.warns(UserWarning, match=r"resume it with env.backend=warp env.device=cuda:1\)"):  # as asked (had: cuda)
        sims.make_env("pendulum", 2, device="cuda:1", backend="warp")


def test_a_gpu_that_torch_sees_and_warp_does_not_is_a_clear_error(monkeypatch):
    import warp as wp

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(wp, "is_cuda_available", lambda: False)  # as under a driver older than Warp's CUDA
    with pytest.raises(ValueError, match=r"backend=warp device=cuda: torch sees a GPU but warp-lang .* newer NVIDIA driver"):
        sims.make_env("pendulum", 2, device="cuda", backend="warp")


def test_devices_that_cannot_run_are_clear_errors(monkeypatch):
    with pytest.raises(ValueError, match=r"device='gpu' is not a torch device: use 'cpu', 'cuda' or 'cuda:N'$"):
        sims.make_env("pendulum", 2, device="gpu", backend="warp")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="device=cuda: no CUDA GPU here"):  # the CPU backend has no fallback to pick
        sims.make_env("pendulum", 2, device="cuda")


def test_a_missing_gpu_is_said_in_the_callers_terms(monkeypatch):
    """A Python call of make_env(device='cuda') had been told to 'use env.device=cpu', the config's key, not its
    own argument; a config's env.device is still said as that key."""
    from robolearn.config import load_config
    from robolearn.registry import make_env

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for task in ("pendulum", "gym:Pendulum-v1"):
        with pytest.raises(ValueError, match=r"device=cuda: no CUDA GPU here .*; use device='cpu'$"):
            sims.make_env(task, 1, device="cuda")
    with pytest.raises(ValueError, match=r"; use device='cpu'$"):
        sims.resolve_backend("mujoco", "cuda")
    with pytest.raises(ValueError, match=r"; use env.device=cpu$"):
        make_env(load_config("ppo_cartpole", ["env.device=cuda"]).env)


def test_a_device_that_is_no_torch_device_is_said_in_the_callers_terms():
    """make_env(device='gpu') or device=None from Python had been told of 'env.device' (None: torch's TypeError,
    a list of signatures); a config's env.device is still said as that key."""
    from robolearn.config import load_config
    from robolearn.registry import make_env

    for task in ("pendulum", "gym:Pendulum-v1"):
        for device, said in (("gpu", "device='gpu'"), (None, "device=None")):
            with pytest.raises(ValueError, match=rf"^{said} is not a torch device: use 'cpu', 'cuda' or 'cuda:N'$"):
                sims.make_env(task, 1, device=device)
    with pytest.raises(ValueError, match=r"^device='mps': robolearn's envs run on 'cpu', 'cuda' or 'cuda:N', not mps$"):
        sims.resolve_backend("mujoco", torch.device("mps"))
    with pytest.raises(ValueError, match=r"^device 'mps' \(env.device\): robolearn's envs run on cpu, cuda or cuda:N"):
        make_env(load_config("ppo_cartpole", ["env.device=mps"]).env)


def test_a_model_mujoco_warp_cannot_run_is_a_clear_error():
    """A model with a feature MuJoCo Warp lacks (here the PGS solver) had ended in put_model's
    NotImplementedError traceback; it is a ValueError naming the task and the CPU backend."""
    import mujoco

    spec = sims.TASKS["pendulum"]()
    model = spec.model()
    model.opt.solver = mujoco.mjtSolver.mjSOL_PGS
    spec.model = lambda: model
    with pytest.raises(ValueError, match=r"MuJoCo Warp cannot run Pendulum's model \(mjSOL_PGS is unsupported.*"
                                         r"env.backend=mujoco"):
        sims.make_backend("warp", spec, 2, "cpu")


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown backend 'physx'"):
        sims.make_env("pendulum", 2, backend="physx")


def test_contact_and_constraint_buffers_are_env_kwargs():
    """``env.kwargs.nconmax``/``njmax`` size MuJoCo Warp's buffers per world (go1_rough's memory is mostly
    these); the CPU backend takes the same config, and a size that cannot be is refused by name."""
    env = sims.make_env("pendulum", 2, device="cpu", backend="warp", nconmax=3, njmax=7)
    assert (env.sim._d.njmax, env.sim._d.naconmax) == (7, 2 * 3)
    assert isinstance(sims.make_env("pendulum", 2, njmax=7).sim, MujocoBackend)
    with pytest.raises(ValueError, match="^njmax: a positive whole number"):
        sims.make_env("pendulum", 2, njmax=0)
    with pytest.raises(ValueError, match="it takes: .*reset_noise_scale, nconmax, njmax"):
        sims.make_env("pendulum", 2, njmx=7)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; benchmarks/gpu.sh's tests stage runs it")
def test_cuda_randomized_go1_steps_never_sync_the_host():
    """A host sync stalls the GPU until the CPU queues more work. A step of the Go1 config's env (pushes,
    per-episode masses and friction, command draws, resets) makes none: the worlds whose episode ended are
    reset by mask, not listed (``done.nonzero()``); a failure names the line of each sync found."""
    import warnings

    from robolearn.config import load_config

    cfg = load_config("ppo_go1_flat", ["env.backend=warp", "env.device=cuda", "env.num_envs=256"])
    env = sims.make_env(cfg.env.task, cfg.env.num_envs, device="cuda", backend="warp", seed=0,
                        randomization=cfg.env.randomization)
    action = torch.zeros(cfg.env.num_envs, 12, device="cuda")
    for _ in range(3):  # graphs captured, buffers batched
        env.step(action)
    steps = 20
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for _ in range(steps):
                env.step(torch.rand_like(action) * 2 - 1)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = [w for w in caught if "synchroniz" in str(w.message)]
    sites = sorted({f"{w.filename}:{w.lineno}" for w in syncs})
    assert not syncs, f"{len(syncs)} host syncs in {steps} steps, at {sites}"


def test_a_dynamics_pool_gives_the_constants_a_recomputation_would():
    """``randomization.dynamics_pool`` copies each variant's mass-derived constants, computed when the env
    starts, instead of recomputing them for all worlds at each reset: the copies must be what
    ``set_const`` gives for the same masses, and the worlds must step as if it had run."""
    randomization = {"mass_scale": [0.5, 2.0], "friction_scale": [0.5, 1.5], "dynamics_pool": 6}
    env = sims.make_env("arm_reach", NUM, device="cpu", backend="warp", seed=0, randomization=randomization)
    sim = env.sim
    for _ in range(3):  # worlds take variants of the pool at their resets, and step
        env._resample(Worlds(ids=torch.arange(NUM)))
        copied = {name: sim.get_model_field(name) for name in sim.constant_fields}
        assert not sim._const_stale  # nothing left to recompute
        sim._const_stale = True
        sim.refresh_constants()
        for name, value in copied.items():
            torch.testing.assert_close(sim.get_model_field(name), value, atol=1e-6, rtol=1e-5, msg=name)
        env.step(torch.zeros(NUM, 4))
    subtree = sim.get_model_field("body_subtreemass")[:, 0]
    assert subtree.unique().numel() > 1  # the worlds' constants differ, as their masses do
    friction_only = sims.make_env("arm_reach", NUM, device="cpu", backend="warp", seed=0,
                                  randomization={"friction_scale": [0.5, 1.5], "dynamics_pool": 6})
    assert set(friction_only._pool) == {"geom_friction", "dof_frictionloss"}  # nothing derives from friction


def test_a_light_reset_gives_the_observations_a_full_forward_pass_would():
    """Go1 declares ``light_reset``: after a reset MuJoCo Warp recomputes kinematics and sensors only. The
    observations and sensors of the reset worlds must be those of a whole forward pass from the same state
    (the others keep what their last step left); a task with a sensor that needs more (the ant's cfrc_ext,
    framelinacc) keeps the whole pass."""
    env = sims.make_env("go1_flat", NUM, device="cpu", backend="warp", seed=0, noise_scale=0.0)  # same obs twice
    sim = env.sim
    assert sim._light_reset and not sims.make_env("ant", 2, device="cpu", backend="warp").sim._light_reset
    generator = torch.Generator().manual_seed(0)
    for _ in range(5):  # walk a bit, so the worlds' states differ from their reset ones
        env.step(torch.rand((NUM, 12), generator=generator) * 2 - 1)
    ids = torch.tensor([0, 2])
    qpos, qvel = env.task.reset(sim, ids, generator)
    stepped = sim.sensordata.clone()
    sim.set_state(ids, qpos, qvel)  # the light pass
    light = {"sensordata": sim.sensordata.clone(), **{k: v.clone() for k, v in env.task.observations(sim).items()}}
    assert torch.equal(light["sensordata"][[1, 3]], stepped[[1, 3]])  # the others' as their step left them
    sim._forward()  # a whole forward pass from the same state
    full = {"sensordata": sim.sensordata, **env.task.observations(sim)}
    for name, value in full.items():
        torch.testing.assert_close(light[name][ids], value[ids], atol=1e-6, rtol=1e-6, msg=name)
    assert (light["sensordata"][ids] != 0).any()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the line is Warp's on machines without an NVIDIA driver")
def test_warp_on_the_cpu_does_not_print_that_cuda_is_missing():
    """Warp's native init writes "could not load the CUDA driver" to stderr; asked for its CPU device, a
    user was told on every command. A fresh process: Warp initializes once."""
    import os
    import subprocess
    import sys

    code = "import sims; sims.make_env('pendulum', 1, backend='warp', device='cpu', seed=0).step([[0.0]])"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert "CUDA driver" not in done.stderr


def test_warp_on_the_cpu_is_said_once_per_process_not_for_every_env(monkeypatch):
    """A run builds several envs (training, evaluation, film): the note had been printed for each."""
    import warnings

    monkeypatch.setattr(sims, "_SAID", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            sims.resolve_backend("warp", "cpu")
    assert [str(w.message)[:40] for w in caught] == ["backend=warp device=cpu: MuJoCo Warp on "]


def test_an_observation_that_is_the_live_state_is_kept_as_it_was():
    """A task of one's own may return ``sim.qpos`` as it is: on MuJoCo Warp that is a live view, and the next
    step had changed every kept observation (and the time-limit ``final_obs``) in place to the newest state."""
    from sims.tasks.pendulum import Pendulum

    class Raw(Pendulum):
        def observations(self, sim):
            return {"policy": sim.qpos, "vel": sim.qvel[:, :1]}

    def play(backend: str) -> list[dict[str, torch.Tensor]]:
        task = Raw(max_episode_steps=3)
        with sims.TaskEnv(task, sims.make_backend(backend, task, NUM, "cpu", 1), seed=0) as env:
            kept = [env.reset(seed=0)]
            for _ in range(3):
                step = env.step(torch.ones(NUM, 1))
                kept.append(step.info["final_obs"] if bool(step.truncated.all()) else step.obs)
        return kept

    warp, cpu = play("warp"), play("mujoco")
    assert not torch.equal(warp[1]["policy"], warp[3]["policy"])  # the pendulum moved
    for a, b in zip(warp, cpu):
        for group in b:
            torch.testing.assert_close(a[group], b[group], atol=1e-4, rtol=1e-4)


def test_a_field_mujoco_warp_shares_across_worlds_is_not_taken_for_a_per_world_one():
    """Hopper has nv = 6: with 6 worlds its shared dof_length (one row per dof) had been taken for per-world values, so
    "world 0's" write changed dof 0 in every world; and a shared field was read without its world dimension."""
    warp = sims.make_env("hopper", 6, backend="warp", device="cpu", seed=0)
    cpu = sims.make_env("hopper", 6, seed=0)
    before = warp.sim.get_model_field("dof_length").clone()
    with pytest.raises(KeyError, match="'dof_length' cannot vary per world on MuJoCo Warp"):
        warp.sim.set_model_field("dof_length", 2.0, torch.tensor([0]))
    assert torch.equal(warp.sim.get_model_field("dof_length"), before)
    for name in ("geom_type", "dof_length"):
        a, b = warp.sim.get_model_field(name), cpu.sim.get_model_field(name)
        assert a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.double(), b.double()), name
