"""MuJoCo Warp backend: ``num_worlds`` worlds of one model stepped on a GPU (or Warp's CPU device).

The same contract as :class:`sims.backend.MujocoBackend`, so every task runs
unchanged on either; what differs:

- **State is shared, not copied.** ``qpos``, ``qvel``, ``sensordata``... are
  torch views of MuJoCo Warp's arrays (``wp.to_torch``, zero-copy): no host
  round trip, and they change in place when the worlds step. A task that keeps
  a value across a step clones it (``pre_step`` does already).
- **The step is one CUDA graph.** ``nstep`` physics steps are captured once per
  ``nstep`` and replayed with one launch; torch and Warp are ordered by stream
  waits on the device, never by a host synchronization.
- **float32.** MuJoCo Warp computes in single precision; trajectories agree
  with the float64 CPU backend to about 1e-4 over a few hundred steps on smooth
  tasks and diverge (chaotically, as two CPU runs with perturbed states would)
  after contacts-rich episodes. ``tests/sims/test_warp_backend.py`` states the
  tolerances.
- **Derived fields after a reset.** MuJoCo Warp has no per-world forward pass:
  after resetting some worlds it recomputes every world's derived fields and
  sensors, then puts back those a task reads (``fields``, ``sensordata``) for
  the others, which keep what their last step left, as on the CPU backend.
- **No autoreset.** A world whose physics blows up goes on as NaN (CPU
  MuJoCo resets it mid-step); :meth:`unstable` names it either way, and the
  env ends its episode and resets it whole.
- **Per-world model fields** are MuJoCo Warp's batched fields: the first
  :meth:`set_model_field` of a field gives it (and the constants derived from
  it) a leading ``num_worlds`` dimension, after which updates are in-place
  writes, and the captured graphs stay valid.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
from collections.abc import Sequence

import mujoco
import numpy as np
import torch

from sims.backend import FrameRenderer, field_not_requested, state_slice
from sims.worlds import put_rows_

try:
    import mujoco_warp as mjw
    import warp as wp
except ImportError as error:  # the default install has them; a trimmed one may not
    raise ImportError(
        f"backend=warp needs the packages mujoco-warp and warp-lang ({error}): pip install mujoco-warp warp-lang, "
        "or use env.backend=mujoco"
    ) from error



def quiet_warp() -> None:
    """No banner and no line per compiled kernel module (about 40 per env otherwise); warnings stay.
    warp-lang's ``log_level`` replaced its ``quiet`` flag, which newer versions ignore."""
    if hasattr(wp.config, "log_level"):
        wp.config.log_level = getattr(wp, "LOG_WARNING", 30)
    else:
        wp.config.quiet = True


quiet_warp()


def init_warp() -> None:
    """``wp.init()``; on a machine without an NVIDIA driver (torch sees no GPU) its native "could not load
    the CUDA driver" line to stderr is held back: there Warp's CPU device is what was asked for."""
    if torch.cuda.is_available():
        wp.init()
        return
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        wp.init()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def cuda_problem() -> str | None:
    """Why Warp cannot use the GPU that torch sees (a driver older than Warp's CUDA needs), or None."""
    wp.init()
    if wp.is_cuda_available():
        return None
    return (f"torch sees a GPU but warp-lang {wp.__version__} does not: its CUDA runtime needs a newer NVIDIA "
            "driver than this machine has (`nvidia-smi` shows the CUDA version the driver supports); update the "
            "driver, or install a warp-lang built for that CUDA version")

_SETCONST_INPUTS = frozenset(mujoco.MjModel._setconst_inputs)
# Sensors computed from kinematics and velocities alone (no collision, constraint or actuator pass).
_KINEMATIC_SENSORS = frozenset(getattr(mujoco.mjtSensor, f"mjSENS_{name}") for name in (
    "FRAMEPOS", "FRAMEQUAT", "FRAMEXAXIS", "FRAMEYAXIS", "FRAMEZAXIS", "FRAMELINVEL", "FRAMEANGVEL", "GYRO",
    "VELOCIMETER", "JOINTPOS", "JOINTVEL", "BALLQUAT", "BALLANGVEL", "SUBTREECOM", "SUBTREELINVEL",
    "SUBTREEANGMOM", "CLOCK"))
# What mjw.set_const writes per world: batched with any batched input so each world keeps its own.
_SETCONST_OUTPUTS = ("body_subtreemass", "body_invweight0", "dof_invweight0", "tendon_invweight0",
                     "actuator_acc0", "geom_aabb", "geom_rbound")
# MjData attribute of each mjtState component of mjSTATE_INTEGRATION (warmstart has its own name).
_STATE_ATTRS = {"warmstart": "qacc_warmstart"}


def _batchable(owner: object, attr: str) -> bool | None:
    """Whether MuJoCo Warp declares field ``attr`` of ``owner`` (its Model or Option) with a world dimension (an
    array spec starting with ``*``); None where it declares no spec (then the array's shape is all there is)."""
    spec = next((f.type for f in dataclasses.fields(type(owner)) if f.name == attr), None) \
        if dataclasses.is_dataclass(owner) else None
    shape = getattr(spec, "shape", None)
    return None if not isinstance(shape, tuple) else bool(shape) and shape[0] == "*"


def warp_device(device: str | torch.device) -> str:
    """The Warp device for a torch device: ``cuda:N`` or ``cpu``."""
    device = torch.device(device)
    if device.type == "cuda":  # plain "cuda" is torch's current GPU (torchrun ranks each set theirs)
        return f"cuda:{torch.cuda.current_device() if device.index is None else device.index}"
    return "cpu"


class WarpBackend:
    """``num_worlds`` worlds of ``model`` on MuJoCo Warp, state as zero-copy torch tensors.

    ``device`` is a torch device (``cuda:N`` or ``cpu``, Warp's CPU device: slow,
    for tests). ``nconmax``/``njmax`` size the contact and constraint buffers per
    world (MuJoCo Warp's defaults when None). ``graph`` captures steps in CUDA
    graphs (CUDA only; off is useful for debugging).
    """

    def __init__(
        self,
        model: mujoco.MjModel,
        num_worlds: int,
        *,
        device: str | torch.device = "cuda",
        num_threads: int | None = None,  # accepted for parity with MujocoBackend; Warp schedules itself
        fields: Sequence[str] = (),
        dtype: torch.dtype = torch.float32,
        nconmax: int | None = None,
        njmax: int | None = None,
        graph: bool = True,
        light_reset: bool = False,
    ) -> None:
        init_warp()
        self.model = model
        self.num_worlds = num_worlds
        self._wp_device = wp.get_device(warp_device(device))
        self.device = torch.device(str(self._wp_device)) if self._wp_device.is_cuda else torch.device("cpu")
        self.dtype = dtype
        self.timestep = float(model.opt.timestep)
        self._graphs_enabled = graph and self._wp_device.is_cuda
        with wp.ScopedDevice(self._wp_device):
            self._m = mjw.put_model(model)
            # MuJoCo Warp skips the post-constraint RNE (cacc, cfrc_int, cfrc_ext) unless asked.
            self._m.opt.run_rne_postconstraint = bool({"cacc", "cfrc_int", "cfrc_ext"} & set(fields))
            # Few solver iterations are a speed setting (Playground's Go1 uses 1), not an error to print per step.
            self._m.opt.warn_overflow &= ~int(mjw.OverflowType.ITERATIONS | mjw.OverflowType.LS_ITERATIONS)
            self._d = mjw.put_data(model, mujoco.MjData(model), nworld=num_worlds, nconmax=nconmax, njmax=njmax)
            self._stream = wp.get_stream(self._wp_device) if self._wp_device.is_cuda else None
        self._fields = ("sensordata", *fields)
        for name in self._fields:
            if not hasattr(self._d, name):
                raise KeyError(f"MuJoCo Warp's Data has no field {name!r}")
        # the fields read per world, which a reset's pass over every world puts back for the others
        self._per_world_fields = tuple(name for name in self._fields
                                       if getattr(self._d, name).ndim and getattr(self._d, name).shape[0] == num_worlds)
        self._graphs: dict[str, object] = {}
        self._views: dict[str, torch.Tensor] = {}  # zero-copy torch views of MjData arrays
        self._torch_streams: dict[int, object] = {}
        self._reset_mask = torch.zeros(num_worlds, dtype=torch.bool, device=self.device)
        self._forward_on_reset = model.nsensordata > 0 or bool(fields)
        # After a reset, kinematics and the sensors alone (~10x cheaper than a forward pass on Warp's CPU
        # device) where the task reads nothing else then and every sensor is kinematic.
        self._light_reset = light_reset and all(mujoco.mjtSensor(int(t)) in _KINEMATIC_SENSORS for t in model.sensor_type)
        self._const_stale = False
        self._renderer = FrameRenderer()
        self._render_data: mujoco.MjData | None = None

    # ---- state, as (num_worlds, ...) tensors --------------------------------

    def _array(self, name: str) -> torch.Tensor:
        """MjData array ``name`` as a zero-copy torch tensor in Warp's own dtype."""
        tensor = self._views.get(name)
        if tensor is None:  # made once (~5 us each, many per step): MjData's arrays are never replaced
            tensor = self._views[name] = wp.to_torch(getattr(self._d, name))
        return tensor

    def shares_memory(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` is (a view of) one of the live state arrays: a task's observation that is one would
        change under the caller when the worlds step (read on the host: no device sync)."""
        pointer = tensor.untyped_storage().data_ptr()
        return any(view.untyped_storage().data_ptr() == pointer for view in self._views.values())

    def _view(self, name: str) -> torch.Tensor:
        tensor = self._array(name)
        return tensor if tensor.dtype == self.dtype or not tensor.is_floating_point() else tensor.to(self.dtype)

    @property
    def qpos(self) -> torch.Tensor:
        return self._view("qpos")

    @property
    def qvel(self) -> torch.Tensor:
        return self._view("qvel")

    @property
    def ctrl(self) -> torch.Tensor:
        """The controls applied during the last step."""
        return self._view("ctrl")

    @property
    def time(self) -> torch.Tensor:
        return self._view("time")

    @property
    def mocap_pos(self) -> torch.Tensor:
        """Positions of mocap bodies ``(num_worlds, nmocap, 3)``."""
        if not self.model.nmocap:
            raise KeyError("the model has no mocap bodies")
        return self._view("mocap_pos")

    @property
    def sensordata(self) -> torch.Tensor:
        return self.field("sensordata")

    def field(self, name: str) -> torch.Tensor:
        """A derived field named in ``fields`` (or ``sensordata``), ``(num_worlds, ...)``."""
        if name not in self._fields:
            raise field_not_requested(name, self._fields)
        return self._view(name)

    # ---- stepping and resets ------------------------------------------------

    def step(self, ctrl: torch.Tensor, nstep: int = 1) -> None:
        """Hold ``ctrl`` ``(num_worlds, nu)`` for ``nstep`` physics steps in every world."""
        self.refresh_constants()
        wp.to_torch(self._d.ctrl).copy_(ctrl)
        self._run(f"step{nstep}", lambda: [mjw.step(self._m, self._d) for _ in range(nstep)])

    def unstable(self) -> torch.Tensor:
        """``(num_worlds,)`` bool: the worlds whose physics blew up, NaN or beyond ``mjMAXVAL`` (1e10) in ``qpos``
        or ``qvel``, the bounds at which CPU MuJoCo resets a world (a NaN ``qacc`` reaches ``qvel`` in the same
        substep). MuJoCo Warp has no autoreset: they stay so until reset. No host read, and five kernels a step:
        "not within the bound" is true for NaN too, where "beyond it" is not."""
        state = torch.cat((self._array("qpos"), self._array("qvel")), 1)
        return state.abs().amax(1).le(mujoco.mjMAXVAL).logical_not()

    def set_state(self, world_ids: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """Reset worlds ``world_ids`` to ``qpos``/``qvel``, as ``mj_resetData`` then set."""
        ids = world_ids.to(self.device, torch.long)
        if ids.numel() == 0:
            return
        self._mask(ids)
        self._reset_data()
        wp.to_torch(self._d.qpos)[ids] = qpos.to(self.device, torch.float32)
        wp.to_torch(self._d.qvel)[ids] = qvel.to(self.device, torch.float32)
        self._forward_reset(light=self._light_reset)

    def reset_where(self, mask: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """:meth:`set_state` of the worlds where ``mask`` ``(num_worlds,)``, given every world's ``qpos`` and
        ``qvel``: no list of worlds to make, so no host sync. The pass after it covers every world either way."""
        self._reset_mask.copy_(mask)
        self._reset_data()
        for name, value in (("qpos", qpos), ("qvel", qvel)):
            state = wp.to_torch(getattr(self._d, name))
            put_rows_(self._reset_mask, value.to(self.device, torch.float32), state)
        self._forward_reset(light=self._light_reset)

    def _mask(self, ids: torch.Tensor) -> None:
        """``_reset_mask``: worlds ``ids``."""
        self._reset_mask.zero_()
        self._reset_mask[ids] = True

    def _reset_data(self) -> None:
        """``mj_resetData`` of the worlds in ``_reset_mask``."""
        self._run("reset", lambda: mjw.reset_data(self._m, self._d, reset=wp.from_torch(self._reset_mask)))

    def _forward_reset(self, light: bool = False) -> None:
        """:meth:`_forward` for the worlds in ``_reset_mask``: the pass runs for every world, and the fields a
        task reads are put back for the others, which keep what their last step left (Ant's reward differences
        the body position a step leaves, one substep behind its state, as Gymnasium's does)."""
        if not self._forward_on_reset:
            return
        kept = [(view, view.clone()) for view in map(self._array, self._per_world_fields)]
        self._forward(light)
        others = ~self._reset_mask
        for view, before in kept:
            put_rows_(others, before, view)

    def _forward(self, light: bool = False) -> None:
        """Derived fields and sensors of every world at its current state; with ``light``, only kinematics,
        velocities and the (kinematic) sensors: the other derived fields stay as they were until the next
        step computes them, and the task's ``light_reset`` says it does not read them before."""
        if not self._forward_on_reset:
            return
        if light:
            self._run("sensors", self._kinematics_and_sensors)
        else:
            self._run("forward", lambda: mjw.forward(self._m, self._d))

    def _kinematics_and_sensors(self) -> None:
        mjw.fwd_kinematics(self._m, self._d)
        mjw.sensor_pos(self._m, self._d)
        mjw.com_vel(self._m, self._d)
        mjw.sensor_vel(self._m, self._d)

    def _run(self, key: str, launch) -> None:
        """Run Warp work after the torch work queued so far and before what torch queues next.

        On CUDA the work is captured once per ``key`` into a graph; ordering with
        torch is by stream waits on the device (no host synchronization).
        """
        with wp.ScopedDevice(self._wp_device):
            if self._stream is None:
                launch()
                return
            torch_stream = self._torch_stream()
            self._stream.wait_stream(torch_stream)
            with wp.ScopedStream(self._stream):
                if not self._graphs_enabled:
                    launch()
                else:
                    if key not in self._graphs:
                        with wp.ScopedCapture() as capture:
                            launch()
                        self._graphs[key] = capture.graph
                    wp.capture_launch(self._graphs[key])
            torch_stream.wait_stream(self._stream)

    def _torch_stream(self):
        """Warp's handle on torch's current CUDA stream, made once per stream (this runs every step)."""
        current = torch.cuda.current_stream(self.device)
        if current.cuda_stream not in self._torch_streams:
            self._torch_streams[current.cuda_stream] = wp.stream_from_torch(current)
        return self._torch_streams[current.cuda_stream]

    # ---- exact state, for recording and replaying datasets -----------------

    @functools.cached_property
    def _components(self) -> list[tuple[str, int]]:
        """``(MjData attribute, width)`` of each nonempty ``mjSTATE_INTEGRATION`` component, in order."""
        parts = []
        for name, bit in mujoco.mjtState.__members__.items():
            bit = int(bit)
            if bit & (bit - 1) or not bit & int(mujoco.mjtState.mjSTATE_INTEGRATION):
                continue  # combinations such as mjSTATE_PHYSICS
            width = mujoco.mj_stateSize(self.model, bit)
            if width:
                component = name[len("mjSTATE_"):].lower()
                attr = _STATE_ATTRS.get(component, component)
                if not hasattr(self._d, attr):
                    raise NotImplementedError(f"MuJoCo Warp keeps no {attr!r}, which this model's exact state needs")
                parts.append((attr, width))
        return parts

    @property
    def state_size(self) -> int:
        return mujoco.mj_stateSize(self.model, mujoco.mjtState.mjSTATE_INTEGRATION)

    def state_slice(self, component: str) -> slice:
        """Where ``component`` sits in a state row (the CPU backend's layout)."""
        return state_slice(self.model, component)

    def get_state(self, world_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Worlds' ``mjSTATE_INTEGRATION`` rows ``(n, state_size)`` float64, in the CPU backend's
        layout, so datasets recorded on either backend replay on the other."""
        columns = []
        for attr, width in self._components:
            columns.append(wp.to_torch(getattr(self._d, attr)).reshape(self.num_worlds, width).double())
        rows = torch.cat(columns, dim=1)
        return rows if world_ids is None else rows[world_ids.to(self.device, torch.long)]

    def set_full_state(self, world_ids: torch.Tensor, rows: torch.Tensor | np.ndarray) -> None:
        """Put worlds ``world_ids`` in the exact state ``rows`` from :meth:`get_state`."""
        ids = torch.as_tensor(world_ids, device=self.device).long()
        rows = torch.as_tensor(rows, device=self.device)
        if tuple(rows.shape) != (ids.numel(), self.state_size):
            raise ValueError(f"state rows have shape {tuple(rows.shape)}, expected {(ids.numel(), self.state_size)} "
                             "(one mjSTATE_INTEGRATION row per world of this model)")
        if ids.numel() == 0:
            return
        start = 0
        for attr, width in self._components:
            target = wp.to_torch(getattr(self._d, attr))
            values = rows[:, start:start + width].reshape(ids.numel(), *target.shape[1:])
            target[ids] = values.to(target.dtype)
            start += width
        self._mask(ids)
        self._forward_reset()

    def set_mocap_pos(self, world_ids: torch.Tensor, positions: torch.Tensor) -> None:
        """Move the mocap bodies of worlds ``world_ids`` to ``positions`` ``(len, nmocap, 3)``."""
        self.mocap_pos  # raises if the model has none
        wp.to_torch(self._d.mocap_pos)[world_ids.to(self.device, torch.long)] = positions.to(self.device, torch.float32)

    def add_qvel(self, world_ids: torch.Tensor, delta: torch.Tensor) -> None:
        """Add ``delta`` ``(len, nv)`` to the velocities of worlds ``world_ids``: a push."""
        wp.to_torch(self._d.qvel)[world_ids.to(self.device, torch.long)] += delta.to(self.device, torch.float32)

    # ---- per-world model fields (randomization) -----------------------------

    def _model_array(self, name: str):
        if name.startswith("opt."):
            return getattr(self._m.opt, name[4:]), self._m.opt, name[4:]
        return getattr(self._m, name), self._m, name

    def _batch(self, name: str) -> torch.Tensor:
        """Field ``name`` with one row per world, batching it on first use."""
        array, owner, attr = self._model_array(name)
        if not isinstance(array, wp.array) or _batchable(owner, attr) is False:
            # (a shared field whose first dimension is num_worlds or 1 had been taken for a per-world one)
            raise KeyError(f"model field {name!r} cannot vary per world on MuJoCo Warp")
        if array.shape[0] != self.num_worlds:
            if array.shape[0] != 1:
                raise KeyError(f"model field {name!r} has no world dimension on MuJoCo Warp")
            tiled = wp.clone(array).numpy().repeat(self.num_worlds, axis=0)
            setattr(owner, attr, wp.array(tiled, dtype=array.dtype, device=self._wp_device))
            self._graphs.clear()  # captured launches point at the old array
        return wp.to_torch(getattr(owner, attr))

    constant_fields = _SETCONST_OUTPUTS
    """The model fields that :meth:`refresh_constants` derives from the others."""

    def set_model_field(
        self, name: str, values: torch.Tensor | np.ndarray | float, world_ids: torch.Tensor | None = None,
        recompute: bool = True,
    ) -> None:
        """Give model field ``name`` (``body_mass``, ``geom_friction``, ``opt.<name>``...) per-world values.

        ``values`` broadcasts to ``(len(world_ids), *field_shape)``; worlds not in
        ``world_ids`` keep theirs. Constants derived from the field are recomputed before the next step,
        unless ``recompute=False``: the caller then writes those worlds' ``constant_fields`` too, as
        computed for these values before (a pool of variants, ``randomization.dynamics_pool``).
        """
        per_world = self._batch(name)
        ids = slice(None) if world_ids is None else torch.as_tensor(world_ids, device=self.device).long()
        per_world[ids] = torch.as_tensor(values, dtype=per_world.dtype, device=self.device)
        self._changed(name, recompute)

    def set_model_field_where(self, name: str, mask: torch.Tensor, values: torch.Tensor, recompute: bool = True) -> None:
        """:meth:`set_model_field` of the worlds where ``mask`` ``(num_worlds,)``, given every world's
        ``values``: no list of worlds to make, so no host sync; the others keep theirs exactly."""
        per_world = self._batch(name)
        put_rows_(mask.to(self.device), torch.as_tensor(values, dtype=per_world.dtype, device=self.device), per_world)
        self._changed(name, recompute)

    def _changed(self, name: str, recompute: bool) -> None:
        """Model field ``name`` was written: its derived constants are due before the next step."""
        if name in _SETCONST_INPUTS and recompute:
            for output in _SETCONST_OUTPUTS:
                self._batch(output)
            self._const_stale = True  # recomputed once before the next step, however many fields changed

    def refresh_constants(self) -> bool:
        """Recompute the constants derived from changed model fields (:meth:`step` does, right before it
        steps); returns whether any had changed. Captured like the step: launched one by one, its ~360
        kernels cost more than the step's ~100, and per-episode mass draws pay it on nearly every step.
        ``restore=False``: MjData's derived fields are left at each world's reference pose until the next
        step or :meth:`set_state` recomputes them."""
        if not self._const_stale:
            return False
        self._run("set_const", lambda: mjw.set_const(self._m, self._d, restore=False))
        self._const_stale = False
        return True

    def get_model_field(self, name: str) -> torch.Tensor:
        """Model field ``name`` of every world, ``(num_worlds, *field_shape)``."""
        array, owner, attr = self._model_array(name)
        if not isinstance(array, wp.array) or _batchable(owner, attr) is False:  # one value for every world
            shared = torch.as_tensor(array.numpy() if isinstance(array, wp.array) else np.asarray(array),
                                     device=self.device)
            shared = shared.expand(self.num_worlds, *shared.shape)
            return shared.to(self.dtype) if shared.is_floating_point() else shared.clone()
        values = wp.to_torch(array)
        values = values.expand(self.num_worlds, *values.shape[1:]) if values.shape[0] == 1 else values
        return values.clone().to(self.dtype if values.is_floating_point() else values.dtype)

    # ---- rendering -----------------------------------------------------------

    def render(
        self, world: int, width: int = 320, height: int = 240, camera: str | int | mujoco.MjvCamera | None = None
    ) -> np.ndarray:
        """An RGB frame of ``world``: its state copied to CPU MuJoCo and drawn with the nominal model."""
        if self._render_data is None:
            self._render_data = mujoco.MjData(self.model)
        row = self.get_state(torch.tensor([world], device=self.device))[0].cpu().numpy()
        mujoco.mj_setState(self.model, self._render_data, row, mujoco.mjtState.mjSTATE_INTEGRATION)
        return self._renderer.frame(self.model, self._render_data, width, height, camera)

    def close(self) -> None:
        """Free the renderer's GL context."""
        self._renderer.close()
