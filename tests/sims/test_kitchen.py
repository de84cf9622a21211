"""Kitchen: the generated model, handles where the demonstrator pushes, one-time sub-task rewards,
success and termination, ordered and partial task lists, the scripted demonstrator completing the
sub-tasks by contact in the order it is given, recording a dataset, and MuJoCo Warp compiling the model."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
import torch

import sims
from robolearn.data import Dataset, DatasetWriter, record, replay
from sims.tasks.kitchen import FIXTURES, HOME, NAMES, OBJECT_POSITIONS, Kitchen
from sims.tasks.kitchen_demonstrator import KitchenDemonstrator, handles

TARGETS = torch.tensor([f.target for f in FIXTURES], dtype=torch.float64)


def test_model_and_spaces():
    model = Kitchen().model()
    assert (model.nq, model.nu, model.nmocap) == (3 + len(FIXTURES), 3, len(FIXTURES))
    for k, f in enumerate(FIXTURES):
        joint = model.joint(f.name)
        assert joint.range.tolist() == pytest.approx([0.0, f.limit])  # radians for hinges, not degrees
        assert joint.qposadr[0] == 3 + k
    with sims.make_env("kitchen", num_envs=3, seed=0, num_threads=1) as env:
        obs = env.reset(seed=0)
        assert env.observation_spec["policy"].shape == (14,) and obs["policy"].shape == (3, 14)
        assert env.action_spec.shape == (3,) and (env.action_spec.low == -1).all() and (env.action_spec.high == 1).all()
        assert env.control_dt == pytest.approx(0.08) and env.max_episode_steps == 280
        assert (obs["policy"][:, :3] - torch.tensor(HOME)).abs().max() <= 0.05 + 1e-6
        assert obs["policy"][:, 3:].abs().max() == 0  # at rest, every object closed
        for _ in range(5):
            obs = env.step(torch.tensor([[1.0, 0.0, 0.0]]).expand(3, -1)).obs
        assert obs["policy"][:, 3] == pytest.approx(torch.full((3,), 0.25), abs=0.01)  # 0.25 m/s commanded


def test_handles_touch_the_parts_as_the_joints_move():
    """The demonstrator's contact points are where the effector touches each moving part, at any joint position."""
    model = Kitchen().model()
    data = mujoco.MjData(model)
    effector = model.body("effector").geomadr[0]
    for k, f in enumerate(FIXTURES):
        part = model.body(f.name).geomadr[0]  # each fixture's first geom is the part that is pushed
        for fraction in (0.0, 0.5, 1.0):
            q = torch.zeros(1, len(FIXTURES))
            q[0, k] = fraction * f.target
            point, push = handles(q)
            data.qpos[:] = 0
            data.qpos[:3] = point[0, k].numpy() - np.array(HOME)
            data.qpos[3 + k] = q[0, k]
            mujoco.mj_forward(model, data)
            assert mujoco.mj_geomDistance(model, data, effector, part, 0.1, None) == pytest.approx(0.0, abs=2e-3)
            assert float(push[0, k].norm()) == pytest.approx(1.0)


def set_joints(env, q: torch.Tensor) -> None:
    """Put the objects' joints at ``q`` ``(num_envs, 4)`` without resetting anything else (lamps included)."""
    rows = env.get_state()["state"].clone()
    qpos = env.sim.state_slice("qpos")
    rows[:, qpos.start + 3:qpos.start + 3 + len(FIXTURES)] = q
    env.sim.set_full_state(torch.arange(env.num_envs), rows)


def test_each_sub_task_pays_once():
    with sims.make_env("kitchen", num_envs=2, seed=0, num_threads=1) as env:
        env.reset(seed=0)
        zero = torch.zeros(2, 3)
        q = torch.zeros(2, len(FIXTURES), dtype=torch.float64)
        q[0, 1] = TARGETS[1]  # env 0: the kettle on the back burner
        set_joints(env, q)
        step = env.step(zero)
        assert step.reward.tolist() == [1.0, 0.0] and not step.terminated.any()
        assert step.info["log"]["metrics/done_kettle"] == 0.5
        assert env.step(zero).reward.tolist() == [0.0, 0.0]
        set_joints(env, torch.zeros_like(q))  # undone...
        assert env.step(zero).reward.tolist() == [0.0, 0.0]
        set_joints(env, q)  # ...and redone: nothing more
        assert env.step(zero).reward.tolist() == [0.0, 0.0]
        q[0, 1] = TARGETS[1] - 1.5 * FIXTURES[1].tolerance  # env 1: short of the target
        q[1, 1] = TARGETS[1] - 1.5 * FIXTURES[1].tolerance
        set_joints(env, q)
        assert env.step(zero).reward.tolist() == [0.0, 0.0]


def test_success_and_termination_when_all_are_done():
    with sims.make_env("kitchen", num_envs=2, seed=0, num_threads=1) as env:
        env.reset(seed=0)
        q = TARGETS.expand(2, -1).clone()
        q[1, 0] = 0.0  # env 1: all but the microwave
        set_joints(env, q)
        step = env.step(torch.zeros(2, 3))
        assert step.reward.tolist() == [4.0, 3.0]
        assert step.terminated.tolist() == [True, False] and step.info["success"].tolist() == [True, False]
        assert step.obs["policy"][0, 6:].abs().max() == 0  # env 0 was reset: objects closed
        assert env.get_state()["state"][0, env.sim.state_slice("mocap_pos")].view(-1, 3)[:, 2].max() < 0  # lamps off


def test_partial_and_ordered_task_lists():
    with sims.make_env("kitchen", num_envs=1, seed=0, num_threads=1, tasks=["kettle", "burner"]) as env:
        env.reset(seed=0)
        set_joints(env, TARGETS.unsqueeze(0) * torch.tensor([[1.0, 0.0, 0.0, 1.0]], dtype=torch.float64))
        assert env.step(torch.zeros(1, 3)).reward.tolist() == [0.0]  # the microwave and the light are not asked for
        set_joints(env, TARGETS.unsqueeze(0).clone())
        step = env.step(torch.zeros(1, 3))
        assert step.reward.tolist() == [2.0] and step.terminated.tolist() == [True]
    with sims.make_env("kitchen", num_envs=1, seed=0, num_threads=1, tasks=["kettle", "burner"], ordered=True) as env:
        env.reset(seed=0)
        set_joints(env, TARGETS.unsqueeze(0) * torch.tensor([[0.0, 0.0, 1.0, 0.0]], dtype=torch.float64))
        assert env.step(torch.zeros(1, 3)).reward.tolist() == [0.0]  # the burner before the kettle: not yet
        set_joints(env, TARGETS.unsqueeze(0) * torch.tensor([[0.0, 1.0, 1.0, 0.0]], dtype=torch.float64))
        step = env.step(torch.zeros(1, 3))
        assert step.reward.tolist() == [2.0] and step.terminated.tolist() == [True]  # the kettle, then the burner
    with pytest.raises(ValueError, match="toaster"):
        Kitchen(tasks=["kettle", "toaster"])
    with pytest.raises(ValueError, match="distinct"):
        Kitchen(tasks=["kettle", "kettle"])


def test_offsets_move_a_fixture_and_its_surround():
    """A rearranged kitchen: the moved fixture's part and decor shift by the offset, nothing else moves, and
    the demonstrator's contact points (the data's kitchen) no longer touch the moved part."""
    def world(model: mujoco.MjModel) -> tuple[np.ndarray, np.ndarray]:
        data = mujoco.MjData(model)
        mujoco.mj_forward(model, data)
        return data.geom_xpos.copy(), data.xpos.copy()

    base, moved = Kitchen().model(), Kitchen(offsets={"light_switch": [0.04, 0.0, -0.01]}).model()
    (geoms, bodies), (moved_geoms, moved_bodies) = world(base), world(moved)
    assert len(moved_geoms) == len(geoms)  # the decor's static body re-parents geoms (and reorders them), adds none
    key = lambda xyz: tuple(np.round(xyz, 6))  # noqa: E731
    stayed = {key(g) for g in geoms} & {key(g) for g in moved_geoms}
    gone = sorted(key(g) for g in geoms if key(g) not in stayed)
    came = sorted(key(g) for g in moved_geoms if key(g) not in stayed)
    assert len(gone) == len(came) == 2  # the lever and the switch plate, and nothing else
    assert np.allclose(np.array(came) - np.array(gone), [0.04, 0.0, -0.01])
    light_body = base.body("light_switch").id
    assert np.allclose(moved_bodies[moved.body("light_switch").id], bodies[light_body] + [0.04, 0.0, -0.01])
    light = NAMES.index("light_switch")
    contact = handles(torch.zeros(1, len(NAMES)))[0][0, light]  # on top of the data's lever tip
    flipped = {}
    for dx in (0.0, 0.04):
        with sims.make_env("kitchen", num_envs=1, seed=0, num_threads=1, offsets={"light_switch": [dx, 0, 0]}) as env:
            env.reset(seed=0)
            start = torch.cat([contact - torch.tensor(HOME), torch.zeros(len(NAMES))]).double().unsqueeze(0)
            env.sim.set_state(torch.tensor([0]), start, torch.zeros(1, env.sim.model.nv, dtype=torch.float64))
            for _ in range(20):  # push straight down
                obs = env.step(torch.tensor([[0.0, 0.0, -1.0]])).obs
            flipped[dx] = float(obs["policy"][0, OBJECT_POSITIONS][light])
    assert flipped[0.0] > FIXTURES[light].target - FIXTURES[light].tolerance  # where the data's switch is: flipped
    assert flipped[0.04] < 0.1  # moved 4 cm to the side: the same push misses the lever
    with pytest.raises(ValueError, match="toaster"):
        Kitchen(offsets={"toaster": [0.0, 0.0, 0.1]})
    for bad in ([0.1, 0.0], 0.1, ["up", 0, 0], [float("nan"), 0, 0]):
        with pytest.raises(ValueError, match="dx, dy, dz"):
            Kitchen(offsets={"kettle": bad})


def test_demonstrator_completes_the_sub_tasks_in_its_order():
    """Four envs, each with its own random order of all four sub-tasks, with the datasets' action noise:
    every sub-task gets done by pushing, in the planned order, well within the episode."""
    with sims.make_env("kitchen", num_envs=4, seed=0, num_threads=1) as env:
        demonstrator = KitchenDemonstrator(4, seed=4)
        plans = demonstrator.plan.clone()
        assert sorted(plans[:, 0].tolist()) == [0, 1, 2, 3]  # this seed: each env starts with another sub-task
        obs = env.reset(seed=0)
        generator = torch.Generator().manual_seed(0)
        finished = torch.full((4, len(NAMES)), -1)
        for t in range(env.max_episode_steps):
            action = (demonstrator.act(obs) + 0.2 * torch.randn(4, 3, generator=generator)).clamp(-1, 1)
            step = env.step(action)
            assert not step.truncated.any() and step.info["success"][step.terminated].all()
            done = env.task.completed(env.sim) | step.terminated.unsqueeze(1)  # terminated worlds were reset
            finished[done & (finished < 0)] = t
            obs = step.obs
            if (finished >= 0).all():
                break
    assert (finished >= 0).all() and finished.max() < 240
    for order, times in zip(plans, finished.gather(1, plans)):
        assert times.tolist() == sorted(times.tolist()), (order, times)
    fixed = KitchenDemonstrator(2, order=["light_switch", "kettle"])
    assert fixed.plan.tolist() == [[NAMES.index("light_switch"), NAMES.index("kettle")]] * 2


def test_recording_a_dataset(tmp_path):
    """As benchmarks/make_kitchen_dataset.py: demonstrations of 2 sub-tasks each, replayable exactly."""
    kwargs = {"max_episode_steps": 120}
    with sims.make_env("kitchen", num_envs=2, seed=0, num_threads=1, **kwargs) as env:
        meta = {"task": "kitchen", "task_kwargs": kwargs}
        with DatasetWriter("kitchen-tiny", env.observation_spec, env.action_spec, metadata=meta, root=tmp_path) as writer:
            stats = record(KitchenDemonstrator(2, plan_length=2, seed=0), env, writer, 2, noise=0.2, seed=0,
                           progress=False)
    assert stats.returns == [2.0, 2.0]
    dataset = Dataset.load("kitchen-tiny", root=tmp_path)
    batch = dataset.transitions()
    assert batch["obs"]["policy"].shape == (240, 14) and batch["action"].shape == (240, 3)
    assert batch["reward"].sum() == 4 and batch["truncated"].sum() == 2 and not batch["terminated"].any()
    assert batch["action"].abs().max() <= 1.0
    with sims.make_env("kitchen", num_envs=1, seed=1, num_threads=1, **kwargs) as env:
        replayed = replay(dataset.episodes[1], env)  # the lamps are in the recorded state: rewards replay too
    assert replayed.restored and replayed.replayed_return == 2.0 and replayed.qpos_divergence.max() == 0


def test_compiles_on_mujoco_warp():
    import warp as wp
    import mujoco_warp as mjw
    with wp.ScopedDevice("cpu"):
        model = mjw.put_model(Kitchen().model())
    assert model.nu == 3 and model.nmocap == len(FIXTURES)
