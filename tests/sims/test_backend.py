"""MujocoBackend against plain mujoco.mj_step: stepping, resets, per-world model fields."""

from pathlib import Path

import mujoco
import numpy as np
import pytest
import torch

from robolearn.interfaces import ContractError
from sims.backend import MujocoBackend
from sims.tasks.gym_assets import gym_asset

FRAME_SKIP = 4


def _controls(model: mujoco.MjModel, num_worlds: int, steps: int) -> np.ndarray:
    return np.random.default_rng(0).uniform(-1, 1, (steps, num_worlds, model.nu))


def _reference(model: mujoco.MjModel, controls: np.ndarray) -> tuple[np.ndarray, ...]:
    """qpos, qvel, sensordata and xpos of one MjData per world stepped with mj_step."""
    datas = [mujoco.MjData(model) for _ in range(controls.shape[1])]
    for data in datas:
        mujoco.mj_forward(model, data)
    for ctrl in controls:
        for data, u in zip(datas, ctrl):
            data.ctrl[:] = u
            mujoco.mj_step(model, data, nstep=FRAME_SKIP)
    return tuple(np.stack([getattr(d, name) for d in datas]) for name in ("qpos", "qvel", "sensordata", "xpos"))


def _with_sensors(asset: str) -> mujoco.MjModel:
    """A Gymnasium model plus a position and a velocity sensor on its first body."""
    spec = mujoco.MjSpec.from_file(gym_asset(asset))
    body = spec.bodies[1].name
    for sensor in (mujoco.mjtSensor.mjSENS_FRAMEPOS, mujoco.mjtSensor.mjSENS_FRAMELINVEL):
        spec.add_sensor(type=sensor, objtype=mujoco.mjtObj.mjOBJ_BODY, objname=body)
    return spec.compile()


@pytest.mark.parametrize("asset", ["hopper.xml", "ant.xml"])
def test_step_matches_mj_step_bit_for_bit(asset: str) -> None:
    model = _with_sensors(asset)
    controls = _controls(model, 3, 25)
    sim = MujocoBackend(model, 3, num_threads=2, fields=("xpos",), dtype=torch.float64)
    for ctrl in controls:
        sim.step(torch.from_numpy(ctrl), FRAME_SKIP)
    qpos, qvel, sensordata, xpos = _reference(model, controls)
    np.testing.assert_array_equal(sim.qpos.numpy(), qpos)
    np.testing.assert_array_equal(sim.qvel.numpy(), qvel)
    np.testing.assert_array_equal(sim.sensordata.numpy(), sensordata)
    np.testing.assert_array_equal(sim.field("xpos").numpy(), xpos)
    np.testing.assert_allclose(sim.time.numpy(), 25 * FRAME_SKIP * model.opt.timestep)
    np.testing.assert_array_equal(sim.ctrl.numpy(), controls[-1])


def test_state_tensors_are_float32_copies_on_the_device() -> None:
    model = mujoco.MjModel.from_xml_path(gym_asset("hopper.xml"))
    sim = MujocoBackend(model, 2)
    before = sim.qpos
    sim.step(torch.ones(2, model.nu), FRAME_SKIP)
    assert before.dtype == torch.float32 and before.device == torch.device("cpu")
    assert not torch.equal(before, sim.qpos), "an old tensor must not change with the state"


def test_set_state_resets_only_the_chosen_worlds() -> None:
    model = mujoco.MjModel.from_xml_path(gym_asset("hopper.xml"))
    controls = _controls(model, 4, 10)
    sim = MujocoBackend(model, 4, dtype=torch.float64)
    untouched = MujocoBackend(model, 4, dtype=torch.float64)
    for ctrl in controls[:5]:
        sim.step(torch.from_numpy(ctrl), FRAME_SKIP)
        untouched.step(torch.from_numpy(ctrl), FRAME_SKIP)

    qpos = torch.tensor(model.qpos0).repeat(2, 1) + 0.01
    sim.set_state(torch.tensor([3, 1]), qpos, torch.zeros(2, model.nv))
    assert torch.equal(sim.qpos[[1, 3]], qpos) and torch.all(sim.time[[1, 3]] == 0)
    assert torch.equal(sim.qpos[[0, 2]], untouched.qpos[[0, 2]])

    for ctrl in controls[5:]:
        sim.step(torch.from_numpy(ctrl), FRAME_SKIP)
        untouched.step(torch.from_numpy(ctrl), FRAME_SKIP)
    assert torch.equal(sim.qpos[[0, 2]], untouched.qpos[[0, 2]])
    assert torch.equal(sim.qvel[[0, 2]], untouched.qvel[[0, 2]])
    assert not torch.equal(sim.qpos[[1, 3]], untouched.qpos[[1, 3]])


def test_model_field_changes_only_the_chosen_world() -> None:
    model = mujoco.MjModel.from_xml_path(gym_asset("hopper.xml"))
    controls = np.repeat(_controls(model, 1, 20), 3, axis=1)  # same controls in every world
    sim = MujocoBackend(model, 3, dtype=torch.float64)
    heavier = model.body_mass * 2.0
    sim.set_model_field("body_mass", heavier, world_ids=torch.tensor([1]))
    for ctrl in controls:
        sim.step(torch.from_numpy(ctrl), FRAME_SKIP)

    masses = sim.get_model_field("body_mass")
    assert torch.equal(masses[1], torch.tensor(heavier)) and torch.equal(masses[0], torch.tensor(model.body_mass))
    assert torch.equal(sim.qpos[0], sim.qpos[2])
    assert not torch.allclose(sim.qpos[0], sim.qpos[1])

    # World 1 is exactly a model compiled with the heavier masses (constants re-derived).
    heavy_model = mujoco.MjModel.from_xml_path(gym_asset("hopper.xml"))
    heavy_model.body_mass[:] = heavier
    mujoco.mj_setConst(heavy_model, mujoco.MjData(heavy_model))
    qpos = _reference(heavy_model, controls[:, :1])[0]
    np.testing.assert_array_equal(sim.qpos[1].numpy(), qpos[0])


def test_fields_must_be_requested() -> None:
    model = mujoco.MjModel.from_xml_path(gym_asset("hopper.xml"))
    sim = MujocoBackend(model, 2, fields=("xpos",))
    assert sim.field("xpos").shape == (2, model.nbody, 3)
    # the advice keeps the fields asked for: ('cfrc_ext',) alone had lost them (a subclass of Ant then failed on xpos)
    with pytest.raises(ContractError, match=r"field 'cfrc_ext' was not requested: a task declares .* "
                                            r"fields = \('xpos', 'cfrc_ext'\) in its class"):
        sim.field("cfrc_ext")


def test_a_world_that_cannot_step_is_a_simulation_failed_naming_it() -> None:
    """MuJoCo's SimulationError (here its stack memory, which contacts fill) had gone up as a traceback through
    the runner; a SimulationFailed is said in a line, and a training run stops on it as on a NaN."""
    from mujoco import batch as mj_batch

    from robolearn.interfaces import SimulationFailed

    text = Path(gym_asset("hopper.xml")).read_text().replace('<mujoco model="hopper">',
                                                             '<mujoco model="hopper"><size memory="6K"/>', 1)
    sim = MujocoBackend(mujoco.MjModel.from_xml_string(text), 4)
    generator = torch.Generator().manual_seed(0)
    with pytest.raises(SimulationFailed, match=r"(?s)^the physics could not step: MuJoCo raised in \d of 4 simulations "
                                               r".*mj_stackAlloc: out of memory.*increase <size memory") as caught:
        for _ in range(1000):  # it fails within ~50 steps, as the hopper falls and its contacts fill the stack
            sim.step(torch.rand((4, sim.model.nu), generator=generator) * 2 - 1)
    assert not isinstance(caught.value, mj_batch.SimulationError)
    assert "\n" not in str(caught.value)  # one line: a run's stop appends where its checkpoint is
