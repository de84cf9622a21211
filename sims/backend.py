"""CPU MuJoCo backend: ``num_worlds`` copies of one model stepped on native threads.

Physics runs on :class:`mujoco.batch.Batch`: every world is one row of
``mjSTATE_INTEGRATION`` (time, qpos, qvel, act, warmstart, ctrl, ...) in one
float64 array, and a C thread pool loads each row into a per-thread ``MjData``,
runs ``mj_step`` and writes it back, releasing the GIL for the whole call. The
result is bit-identical to one ``MjData`` per world stepped with ``mj_step``.

Why Batch rather than the two alternatives: measured on this 2-core machine
(Hopper, HalfCheetah and Ant, 64 and 1024 worlds, random actions), Batch was
about as fast as ``mujoco.rollout.Rollout`` or faster (up to 1.8x on Hopper),
and 1.05-2.3x as fast as a Python thread pool over ``mj_step``, whose
per-world Python work holds the GIL. Rollout is also stateless: it drops the
solver warmstart (so results drift from plain ``mj_step``) and returns only
state and sensordata. Batch keeps the warmstart, copies out any derived field
(``xpos``, ``cfrc_ext``...) in C, and gives model fields per-world values in
place (``expand``) instead of one ``MjModel`` copy per world, which is what
randomization needs.

Tasks read ``qpos``, ``qvel``, ``ctrl``, ``sensordata``, ``time`` and the derived
fields they declared, as torch tensors ``(num_worlds, ...)`` on ``device``.
Derived fields are what ``mj_step`` leaves in ``MjData``: computed during the
last substep, not at the new ``qpos``. Sensors read the state at the start of
the last substep.

A world whose physics blows up (NaN, inf or a huge value in ``qpos``, ``qvel``
or ``qacc``) is reset by MuJoCo itself in mid-step (its autoreset: a warning is
printed and the world goes on from ``qpos0`` at time 0, its controls 0);
:meth:`unstable` names such worlds, from their clocks and controls, so that
the env ends their episodes rather than hand the learner a teleport.
"""

from __future__ import annotations

import atexit
import os
import weakref
from collections.abc import Sequence

import mujoco
import numpy as np
import torch
from mujoco import batch as mj_batch

from robolearn.interfaces import ContractError, SimulationFailed

_SETCONST_INPUTS = frozenset(mujoco.MjModel._setconst_inputs)


def field_not_requested(name: str, requested: Sequence[str] = ()) -> ContractError:
    """``sim.field(name)`` of a field nobody asked the backend for: said to a task's author, who makes no backend
    (it had been a KeyError telling them to pass ``fields=`` to the backend, a traceback on the command line).
    ``requested``: the fields it was asked for, kept in the advice (a subclass of Ant told ``('actuator_force',)``
    alone had then lost Ant's own ``cfrc_ext``)."""
    wanted = tuple(field for field in requested if field != "sensordata") + (name,)
    return ContractError(f"field {name!r} was not requested: a task declares the MjData fields it reads, "
                         f"fields = {wanted!r} in its class (Task.fields); a backend made by hand takes "
                         f"fields={wanted!r}")


class MujocoBackend:
    """``num_worlds`` worlds of ``model`` on CPU threads, state as torch tensors.

    ``fields`` names derived ``MjData`` fields (``xpos``, ``cfrc_ext``...) to copy
    out after every step, read with :meth:`field`. ``dtype`` is the dtype of the
    tensors handed to tasks; physics stays float64 inside.
    """

    def __init__(
        self,
        model: mujoco.MjModel,
        num_worlds: int,
        *,
        device: str | torch.device = "cpu",
        num_threads: int | None = None,
        fields: Sequence[str] = (),
        dtype: torch.dtype = torch.float32,
    ) -> None:
        self.model = model
        self.num_worlds = num_worlds
        self.device = torch.device(device)
        self.dtype = dtype
        self.timestep = float(model.opt.timestep)
        threads = num_threads or len(os.sched_getaffinity(0))
        self._batch = mj_batch.Batch(model, num_worlds, nthread=min(threads, num_worlds))
        self._qpos = self._batch.bind("qpos")
        self._qvel = self._batch.bind("qvel")
        self._ctrl = self._batch.bind("ctrl")
        self._time = self._batch.bind("time")
        self._mocap_pos = self._batch.bind("mocap_pos") if model.nmocap else None
        # Outputs must be bound before the call that fills them.
        self._outputs = {name: self._batch.bind(name) for name in ("sensordata", *fields)}
        self._cache: dict[str, torch.Tensor] = {}
        self._renderer = FrameRenderer()
        self._render_model: mujoco.MjModel | None = None
        self._render_data: mujoco.MjData | None = None
        self._batch.reset()
        # Each world's state right after mj_resetData, copied back by set_state:
        # for the few worlds reset per step this is much cheaper than a
        # Batch.reset round trip through the thread pool.
        self._reset_rows = self._batch.state.copy()
        # Derived fields of reset worlds need a forward pass only if someone reads them.
        self._forward_on_reset = model.nsensordata > 0 or bool(fields)
        self._unstable = np.zeros(num_worlds, dtype=bool)  # worlds MuJoCo reset since unstable() was last asked
        self._timesteps: float | np.ndarray = self.timestep  # per world once opt.timestep is given per world

    # ---- state, as (num_worlds, ...) tensors --------------------------------

    @property
    def qpos(self) -> torch.Tensor:
        return self._tensor("qpos", self._qpos)

    @property
    def qvel(self) -> torch.Tensor:
        return self._tensor("qvel", self._qvel)

    @property
    def ctrl(self) -> torch.Tensor:
        """The controls applied during the last step."""
        return self._tensor("ctrl", self._ctrl)

    @property
    def time(self) -> torch.Tensor:
        return self._tensor("time", self._time)

    @property
    def mocap_pos(self) -> torch.Tensor:
        """Positions of mocap bodies ``(num_worlds, nmocap, 3)``: goals and markers tasks place."""
        if self._mocap_pos is None:
            raise KeyError("the model has no mocap bodies")
        return self._tensor("mocap_pos", self._mocap_pos)

    @property
    def sensordata(self) -> torch.Tensor:
        return self.field("sensordata")

    def field(self, name: str) -> torch.Tensor:
        """A derived ``MjData`` field named in ``fields`` (or ``sensordata``)."""
        if name not in self._outputs:
            raise field_not_requested(name, tuple(self._outputs))
        return self._tensor(name, self._outputs[name])

    def _tensor(self, name: str, array: np.ndarray) -> torch.Tensor:
        # Copied (never aliased: the arrays change in place) once per state
        # change and shared by every reader until the next one.
        if name not in self._cache:
            self._cache[name] = torch.tensor(array, dtype=self.dtype, device=self.device)
        return self._cache[name]

    # ---- stepping and resets ------------------------------------------------

    def step(self, ctrl: torch.Tensor, nstep: int = 1) -> None:
        """Hold ``ctrl`` ``(num_worlds, nu)`` for ``nstep`` physics steps in every world."""
        given = _numpy(ctrl)
        self._ctrl[:] = given
        before = self._time.copy()
        try:
            self._batch.step(nstep=nstep)
        except mj_batch.SimulationError as err:  # a robolearn error: said in a line, a run stopping as on a NaN
            said = "; ".join(line.strip() for line in str(err).splitlines() if line.strip())  # MuJoCo's are 3 lines
            raise SimulationFailed(f"the physics could not step: {said}") from None
        finally:
            self._cache.clear()
        # MuJoCo's autoreset sends a world's clock back to 0 and zeroes its controls within the step (its own warning
        # is all it says): a world that did not advance by nstep substeps, or no longer holds the controls given, was
        # reset. (The clock alone misses a reset in the first substep from time 0, an episode's first: it ends at dt
        # as a good substep does. Only such a world given every control 0 goes unseen.)
        self._unstable |= (self._time < before + (nstep - 0.5) * self._timesteps) | (self._ctrl != given).any(1)

    def unstable(self) -> torch.Tensor:
        """``(num_worlds,)`` bool: the worlds whose physics blew up in a step since the last call (MuJoCo reset
        them mid-step, so their state no longer follows from the last one); the flags are cleared."""
        flags = torch.from_numpy(self._unstable.copy()).to(self.device)
        self._unstable[:] = False
        return flags

    def set_state(self, world_ids: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """Reset worlds ``world_ids`` to ``qpos``/``qvel``, as ``mj_resetData`` then set.

        Everything else (time, controls, activations, warmstart, applied forces,
        mocap poses) returns to its value at construction; the other worlds are
        untouched.
        """
        ids = _numpy(world_ids).astype(np.int64)
        if ids.size == 0:
            return
        self._batch.state[ids] = self._reset_rows[ids]
        self._qpos[ids] = _numpy(qpos)
        self._qvel[ids] = _numpy(qvel)
        if self._forward_on_reset:
            self._batch.forward(np.sort(ids))  # derived fields and sensors of the new state
        self._cache.clear()

    # ---- exact state, for recording and replaying datasets -----------------

    @property
    def state_size(self) -> int:
        """Width of one world's ``mjSTATE_INTEGRATION`` row."""
        return int(self._batch.state.shape[1])

    def state_slice(self, component: str) -> slice:
        """Where ``component`` sits in a state row (:func:`state_slice`)."""
        return state_slice(self.model, component)

    def get_state(self, world_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The exact state of worlds ``world_ids`` (all when None), ``(n, state_size)`` float64.

        Rows of ``mjSTATE_INTEGRATION``: time, qpos, qvel, act, warmstart, ctrl,
        applied forces, equality flags, mocap poses, userdata. Everything the
        next ``mj_step`` reads, so restoring a row with :meth:`set_full_state`
        and applying the same controls reproduces the run bit for bit.
        """
        rows = self._batch.state if world_ids is None else self._batch.state[_numpy(world_ids).astype(np.int64)]
        return torch.tensor(rows, dtype=torch.float64, device=self.device)

    def reset_where(self, mask: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """:meth:`set_state` of the worlds where ``mask`` ``(num_worlds,)``, given every world's ``qpos``
        and ``qvel`` (the GPU backend's way, which lists no worlds; here listing them is free)."""
        ids = np.flatnonzero(_numpy(mask))
        self.set_state(ids, _numpy(qpos)[ids], _numpy(qvel)[ids])

    def set_full_state(self, world_ids: torch.Tensor, rows: torch.Tensor | np.ndarray) -> None:
        """Put worlds ``world_ids`` in the exact state ``rows`` ``(len, state_size)`` from :meth:`get_state`.

        Derived fields and sensors are recomputed for the new state (as after a
        reset); the other worlds are untouched.
        """
        ids = _numpy(world_ids).astype(np.int64)
        rows = _numpy(rows)
        if rows.shape != (ids.size, self.state_size):
            raise ValueError(f"state rows have shape {rows.shape}, expected {(ids.size, self.state_size)} "
                             "(one mjSTATE_INTEGRATION row per world of this model)")
        if ids.size == 0:
            return
        self._batch.state[ids] = rows
        if self._forward_on_reset:
            self._batch.forward(np.sort(ids))
        self._cache.clear()

    def set_mocap_pos(self, world_ids: torch.Tensor, positions: torch.Tensor) -> None:
        """Move the mocap bodies of worlds ``world_ids`` to ``positions`` ``(len, nmocap, 3)``."""
        self.mocap_pos  # raises if the model has none
        self._mocap_pos[_numpy(world_ids).astype(np.int64)] = _numpy(positions)
        self._cache.clear()

    def add_qvel(self, world_ids: torch.Tensor, delta: torch.Tensor) -> None:
        """Add ``delta`` ``(len, nv)`` to the velocities of worlds ``world_ids``: a push."""
        self._qvel[_numpy(world_ids).astype(np.int64)] += _numpy(delta)
        self._cache.clear()

    # ---- per-world model fields (randomization) -----------------------------

    def set_model_field(
        self, name: str, values: torch.Tensor | np.ndarray | float, world_ids: torch.Tensor | None = None
    ) -> None:
        """Give model field ``name`` (e.g. ``body_mass``, ``geom_friction``) per-world values.

        ``values`` broadcasts to ``(len(world_ids), *field_shape)``; worlds not in
        ``world_ids`` (all when None) keep theirs. MjOption fields are named
        ``opt.<name>``. Constants derived from the field (``mj_setConst``:
        inertia-dependent scalings and the like) are recomputed for those worlds.
        """
        per_world = self._batch.expand(name)
        ids = slice(None) if world_ids is None else _numpy(world_ids).astype(np.int64)
        per_world[ids] = _numpy(values)
        if name in _SETCONST_INPUTS or name.startswith("opt."):
            self._batch.set_const(None if world_ids is None else np.unique(ids))
        if name == "opt.timestep":
            self._timesteps = np.array(self._batch.expanded(name)).reshape(self.num_worlds)

    def set_model_field_where(self, name: str, mask: torch.Tensor, values: torch.Tensor | np.ndarray) -> None:
        """:meth:`set_model_field` of the worlds where ``mask`` ``(num_worlds,)``, given every world's
        ``values`` (the GPU backend's way, which lists no worlds; here listing them is free)."""
        ids = np.flatnonzero(_numpy(mask))
        self.set_model_field(name, _numpy(values)[ids], ids)

    def get_model_field(self, name: str) -> torch.Tensor:
        """Model field ``name`` of every world, ``(num_worlds, *field_shape)``."""
        values = self._batch.expanded(name)
        if values is None:
            shared = getattr(self.model.opt, name[4:]) if name.startswith("opt.") else getattr(self.model, name)
            values = np.broadcast_to(shared, (self.num_worlds, *np.shape(shared)))
        tensor = torch.from_numpy(np.array(values))
        return tensor.to(self.device, self.dtype if tensor.is_floating_point() else tensor.dtype)

    # ---- rendering -----------------------------------------------------------

    def render(
        self, world: int, width: int = 320, height: int = 240, camera: str | int | mujoco.MjvCamera | None = None
    ) -> np.ndarray:
        """An RGB frame ``(height, width, 3)`` of ``world`` with its own model fields.

        ``camera`` is a camera name or id, an ``MjvCamera``, or None for the
        free camera. Needs an OpenGL backend (``MUJOCO_GL=egl`` or ``osmesa``
        on a machine without a display).
        """
        if self._render_model is None:
            self._render_model = self._batch.get_model(world)
            self._render_data = mujoco.MjData(self._render_model)
        model, data = self._render_model, self._render_data
        self._batch.get_model(world, model)
        self._batch.get_data(world, data)
        return self._renderer.frame(model, data, width, height, camera)

    def close(self) -> None:
        """Free the renderer's GL context (the physics threads go with the object)."""
        self._renderer.close()


class FrameRenderer:
    """One offscreen ``mujoco.Renderer``, rebuilt when the frame size changes; shared by the backends."""

    def __init__(self) -> None:
        self._renderer: mujoco.Renderer | None = None
        _OPEN.add(self)

    def frame(self, model: mujoco.MjModel, data: mujoco.MjData, width: int, height: int,
              camera: str | int | mujoco.MjvCamera | None) -> np.ndarray:
        """RGB ``(height, width, 3)`` of ``data`` after a forward pass (derived fields at its state)."""
        if self._renderer is None or (self._renderer.width, self._renderer.height) != (width, height):
            self.close()
            model.vis.global_.offwidth = max(width, model.vis.global_.offwidth)
            model.vis.global_.offheight = max(height, model.vis.global_.offheight)
            try:
                self._renderer = mujoco.Renderer(model, height, width)
            except Exception as err:
                import robolearn

                if robolearn.GL_PICKED_TOO_LATE:  # MuJoCo's own words name an OpenGL context, not what to change
                    raise RuntimeError("mujoco was imported before robolearn (or sims) on a machine without a display, "
                                       "so it chose GLFW, which needs one: import robolearn or sims before mujoco, or "
                                       f"set MUJOCO_GL=osmesa (egl on a GPU) before Python starts ({err})") from err
                raise
        mujoco.mj_forward(model, data)
        self._renderer.update_scene(data, camera=-1 if camera is None else camera)
        return self._renderer.render()

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None


def state_slice(model: mujoco.MjModel, component: str) -> slice:
    """Where ``component`` (``qpos``, ``qvel``, ``ctrl``, ``mocap_pos``...: an ``mjtState``
    name in lower case) sits in an ``mjSTATE_INTEGRATION`` row of ``model``; MuJoCo
    concatenates the components in the order of their ``mjtState`` bits."""
    bit = int(getattr(mujoco.mjtState, f"mjSTATE_{component.upper()}"))
    before = int(mujoco.mjtState.mjSTATE_INTEGRATION) & (bit - 1)
    start = mujoco.mj_stateSize(model, before)
    return slice(start, start + mujoco.mj_stateSize(model, bit))


def _numpy(values: torch.Tensor | np.ndarray | float) -> np.ndarray:
    """float64/int numpy on CPU from a tensor, array or scalar."""
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu()
        return values.double().numpy() if values.is_floating_point() else values.numpy()
    return np.asarray(values)


_OPEN: weakref.WeakSet[FrameRenderer] = weakref.WeakSet()


@atexit.register
def _close_renderers() -> None:
    """Close the renderers of envs left open at exit while the GL library is still loaded: MuJoCo's Renderer
    would otherwise try in its ``__del__`` during interpreter teardown and print a ctypes traceback."""
    for renderer in list(_OPEN):
        try:
            renderer.close()
        except Exception:  # (one that fails must not keep the others open, nor print a traceback at exit)
            pass
