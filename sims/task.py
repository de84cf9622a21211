"""Tasks written once in torch over a backend's batched state, and the VecEnv that runs them.

A :class:`Task` is data plus a few pure functions of the backend's state: the
model, the control period, observation groups, named reward terms (summed into
the reward and logged one by one), termination, success and the reset
distribution. :class:`TaskEnv` owns everything else a
:class:`~robolearn.interfaces.VecEnv` does: action clipping, episode counters,
time limits, automatic resets with ``final_obs``, seeding and rendering.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import numbers
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import mujoco
import numpy as np
import torch
from gymnasium import spaces

from robolearn.interfaces import UNSTABLE_LOG, ContractError, Obs, Step, VecEnv, all_finite, host_reads_are_free
from sims.backend import MujocoBackend
from sims.worlds import where_rows, zero_rows


class Task(ABC):
    """One learning problem over ``MujocoBackend``-like state. Subclasses set the
    class attributes and implement :meth:`model`, :meth:`observations` and
    :meth:`rewards`; the rest has defaults.
    """

    frame_skip: int = 1
    """Physics steps per control step."""
    max_episode_steps: int = 1000
    """Control steps after which an episode is truncated."""
    fields: tuple[str, ...] = ()
    """Derived ``MjData`` fields the task reads through ``sim.field``."""
    nconmax: int | None = None
    """Contacts per world MuJoCo Warp allocates room for (its heuristic when None)."""
    njmax: int | None = None
    """Constraint rows per world MuJoCo Warp allocates room for (its heuristic when None)."""
    resets_by_mask: bool = False
    """True when :meth:`reset` only draws (it keeps nothing of its own, reads nothing on the host and copies
    nothing to the device: :meth:`on_device`) and an :meth:`after_reset` comes with an
    :meth:`after_reset_where`. Where a host read is not free (a GPU), TaskEnv then resets the worlds whose
    episode ended without listing them (``done.nonzero()``, a host sync every step): every world draws an
    initial state and the done ones take theirs. The class that sets it vouches for the ``reset`` and
    ``after_reset`` it sees; a subclass that overrides either sets it again (:func:`resets_by_mask`)."""
    fixed_goal: bool = False
    """True when a ``goal`` observation group is the same in every episode (one target): a controller that does
    not read it loses nothing. Where it may change (False), a flat agent that reads no ``goal`` (PPO or SAC on
    ``policy`` alone) is warned that it cannot know where to go (``robolearn.preflight.warn_if_goal_unread``)."""
    light_reset: bool = False
    """True when, between a reset and the next step, the task reads only the state and its sensors (not
    ``fields``): MuJoCo Warp then recomputes kinematics and sensors for a reset instead of a whole forward
    pass of every world (it still does the whole pass where a sensor needs more than kinematics)."""

    @abstractmethod
    def model(self) -> mujoco.MjModel:
        """The compiled model, with any sensors the task reads."""

    def action_spec(self, model: mujoco.MjModel) -> spaces.Box:
        """Actions are the actuators' controls, bounded by their ``ctrlrange``, which each must have
        (without one MuJoCo's range is [0, 0], and every action would be clipped to zero), within MuJoCo's
        ``mjMAXVAL`` (1e10): MuJoCo zeroes every control of a world with one beyond it (``BADCTRL``), so
        an agent scaling [-1, 1] to a range of 1e30 would have acted on nothing."""
        if model.nu == 0:  # no action to learn: PPO had trained on until its std went NaN, blaming the learning rate
            raise ValueError(f"{type(self).__name__}: the model has no actuators, so there is nothing to act on; add an "
                             "<actuator> (a motor or position servo with a ctrlrange) to the MJCF, or override "
                             "Task.action_spec and Task.actuate")
        names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_ACTUATOR, i) or f"#{i}" for i in range(model.nu)]
        ranges = model.actuator_ctrlrange
        unbounded = [i for i in range(model.nu) if not model.actuator_ctrllimited[i]]
        if unbounded:
            # a range given but left unlimited is said as such, with why: its low is not below its high ("1 -1",
            # "0.5 0.5"), or (a proper range) the actuator or the compiler turns limits off
            reversed_ = ", ".join(f"{names[i]} {ranges[i].tolist()}" for i in unbounded
                                  if ranges[i].any() and ranges[i][0] >= ranges[i][1])
            off = ", ".join(f"{names[i]} {ranges[i].tolist()}" for i in unbounded if ranges[i][0] < ranges[i][1])
            why = "; ".join(([f"{reversed_}: its low must be below its high"] if reversed_ else []) + (
                [f"{off}: it is not ctrllimited (ctrllimited=\"false\", or <compiler autolimits=\"false\"/>: set "
                 "ctrllimited=\"true\")"] if off else []))
            why = f" (MuJoCo ignores the ctrlrange of {why})" if why else ""
            raise ValueError(f"{type(self).__name__}: actuator(s) {[names[i] for i in unbounded]} have no "
                             f"ctrlrange{why}; give each a ctrlrange in the MJCF (actions are clipped to it), or "
                             "override Task.action_spec")
        huge = [f"{names[i]} {ranges[i].tolist()}" for i in range(model.nu)
                if np.abs(ranges[i]).max() > mujoco.mjMAXVAL]
        if huge:
            raise ValueError(f"{type(self).__name__}: actuator(s) {', '.join(huge)} have a ctrlrange beyond "
                             f"{mujoco.mjMAXVAL:g}, MuJoCo's largest control: one past it makes MuJoCo zero all of the "
                             "world's controls, and actions scaled from [-1, 1] to such a range are past it; give "
                             "each the range the actuator can apply in the MJCF (e.g. ctrlrange=\"-1 1\", with a "
                             "gear for the force)")
        low, high = model.actuator_ctrlrange.T.astype(np.float32)
        return spaces.Box(low, high, dtype=np.float32)

    def start(self, sim: MujocoBackend) -> None:
        """A whole-env reset (``env.reset``) is about to reset every world: state kept across a world's
        episodes (an episode counter) starts over, so that the same seed gives the same episodes."""

    def reset(
        self, sim: MujocoBackend, ids: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Initial ``(qpos, qvel)`` for worlds ``ids``, float64; default: the model's."""
        qpos0 = self.on_device("qpos0", sim.model.qpos0, sim.device, torch.float64)
        return qpos0.expand(len(ids), -1).clone(), torch.zeros(len(ids), sim.model.nv, dtype=torch.float64, device=sim.device)

    def after_reset(self, sim: MujocoBackend, ids: torch.Tensor, generator: torch.Generator) -> None:
        """Called once worlds ``ids`` hold their initial state: place goals (mocap bodies) and the like."""

    def after_reset_where(self, sim: MujocoBackend, mask: torch.Tensor, generator: torch.Generator) -> None:
        """:meth:`after_reset` for the worlds where ``mask`` ``(num_worlds,)`` is True, without listing them
        (draw for every world, keep the masked rows), for :attr:`resets_by_mask`."""

    def on_device(
        self, name: str, values: Any | Callable[[], Any], device: str | torch.device, dtype: torch.dtype
    ) -> torch.Tensor:
        """Host ``values`` (a model field, a constant; or a function that makes them, called once) as a
        ``dtype`` tensor on ``device``, copied there once: a copy from host memory every step would wait
        for the GPU's queue to drain, as a host read does."""
        copies = self.__dict__.setdefault("_device_copies", {})
        key = (name, torch.device(device), dtype)
        if key not in copies:
            copies[key] = torch.as_tensor(values() if callable(values) else values).to(device, dtype, copy=True)
        return copies[key]

    def state_from_observation(self, obs: Obs) -> dict[str, torch.Tensor]:
        """The task's own state that observations ``obs`` (groups, one row per world, as
        :meth:`observations` returns) report, by ``mjSTATE_INTEGRATION`` component (``mocap_pos``...:
        :func:`~sims.backend.state_slice` names), one ``(num_worlds, ...)`` row each: a target that
        :meth:`after_reset` drew. A replay of a recording without simulator state (a robot's) starts
        from the recorded joints and these, not from a target drawn anew. Default: none."""
        return {}

    def actuate(self, sim: MujocoBackend, action: torch.Tensor) -> torch.Tensor:
        """The controls to apply for ``action`` (already clipped to the action spec);
        default: the action itself. ``sim.ctrl`` still holds the last step's controls."""
        return action

    def pre_step(self, sim: MujocoBackend) -> None:
        """Called before the physics step: keep what rewards difference against, as a copy (``.clone()``): on
        MuJoCo Warp ``sim.qpos`` and the rest are live views, which the step changes in place."""

    @abstractmethod
    def observations(self, sim: MujocoBackend) -> Obs:
        """Observation groups, each ``(num_worlds, *shape)``."""

    @abstractmethod
    def rewards(self, sim: MujocoBackend, action: torch.Tensor) -> dict[str, torch.Tensor]:
        """Named, already weighted reward terms ``(num_worlds,)`` (a flag or a count counts as a float); the reward
        is their sum, in the backend's dtype."""

    def metrics(self, sim: MujocoBackend) -> dict[str, torch.Tensor]:
        """Per-world diagnostics ``(num_worlds,)`` (tracking errors and the like; a flag logs as the fraction
        of worlds), logged as ``metrics/<name>`` batch means next to the reward terms; default none."""
        return {}

    def terminated(self, sim: MujocoBackend) -> torch.Tensor:
        """Whether the MDP ended (a fall, a goal); default never."""
        return torch.zeros(sim.num_worlds, dtype=torch.bool, device=sim.device)

    def success(self, sim: MujocoBackend) -> torch.Tensor | None:
        """Whether each world's episode counts as a success if it ends now; None if undefined."""
        return None

    def camera(self) -> str | int | mujoco.MjvCamera | None:
        """The camera :meth:`TaskEnv.render` uses; None for MuJoCo's free camera."""
        return None


def check_settings_declared(cls: type, said: str) -> None:
    """Refuse a dataclass task class ``cls`` of which a class of its lineage sets a field without declaring it
    (a plain subclass's ``max_episode_steps = 100``, or a dataclass subclass's without an annotation): the
    ``__init__`` sets the declared default over it, so the value would have no effect. ``said``: how the task
    was given (``env.task=my_task:Shorter``; ``TaskEnv(Shorter())`` from Python, which had escaped the check)."""
    if not dataclasses.is_dataclass(cls) or (shadowed := _shadowed_setting(cls)) is None:
        return
    owner, name = shadowed
    annotate = setting_line(owner, name)
    if "__dataclass_fields__" not in vars(owner):
        raise ValueError(f"{said}: {owner.__name__} sets {name} as a class attribute, which the __init__ of its "
                         f"dataclass base overrides with the base's default, so it would have no effect: decorate "
                         f"{owner.__name__} with @dataclass(kw_only=True) and annotate it ({annotate}): its values "
                         "then are the defaults of settings")
    raise ValueError(f"{said}: {owner.__name__} sets {name} without an annotation, so the dataclass keeps its base's "
                     f"default for that setting and the value would have no effect: annotate it ({annotate})")


def _shadowed_setting(cls: type) -> tuple[type, str] | None:
    """``(class, name)`` of a dataclass task's field that a class of its lineage sets without declaring it; None
    where there is none."""
    for field in dataclasses.fields(cls):
        for owner in cls.__mro__:  # down to the class that declares the field (its default, or a factory's)
            if "__dataclass_fields__" in vars(owner) and field.name in inspect.get_annotations(owner):
                break
            if field.name in vars(owner):
                return owner, field.name
    return None


def setting_line(owner: type, name: str) -> str:
    """``name: int = 10``: the annotated line that makes ``owner``'s attribute ``name`` a dataclass field."""
    value = getattr(owner, name)
    return f"{name}: {type(value).__name__} = {value!r}"


def uniform(shape: tuple[int, ...] | torch.Size, low: float, high: float, generator: torch.Generator) -> torch.Tensor:
    """float64 U(low, high) samples on ``generator``'s device, for reset distributions."""
    return torch.empty(shape, dtype=torch.float64, device=generator.device).uniform_(low, high, generator=generator)


def check_noise_scales(task: Task, named: str | None = None, **scales: float) -> None:
    """Refuse a negative reset noise scale of ``task`` (said as ``named``, default its class's name) by name:
    U(-s, s) of one had failed at the first reset as torch's "uniform_ expects to return a [from, to) range"."""
    for key, value in scales.items():
        if not value >= 0:
            raise ValueError(f"{named or type(task).__name__} {key}={value}: must be >= 0")


def normal(shape: tuple[int, ...] | torch.Size, std: float, generator: torch.Generator) -> torch.Tensor:
    """float64 N(0, std^2) samples on ``generator``'s device, for reset distributions."""
    return std * torch.randn(shape, dtype=torch.float64, device=generator.device, generator=generator)


def bump(z: torch.Tensor) -> torch.Tensor:
    """0.1 ** (z^2): a smooth reward factor, 1 at 0 and 0.1 at |z| = 1."""
    return torch.exp(math.log(0.1) * z.square())


def tracking_camera(body: int, distance: float, elevation: float = -20.0, azimuth: float = 90.0) -> mujoco.MjvCamera:
    """A camera that follows ``body`` from ``distance`` metres."""
    camera = mujoco.MjvCamera()
    camera.type = mujoco.mjtCamera.mjCAMERA_TRACKING
    camera.trackbodyid = body
    camera.distance, camera.elevation, camera.azimuth = distance, elevation, azimuth
    return camera


def checked_seed(seed: Any) -> int | None:
    """``seed`` as a Python int (a numpy integer too), or None; one that is no whole number, or too large for torch's
    64-bit generators (``np.random.SeedSequence().entropy``'s 128 bits), is refused in words, not as torch's
    "manual_seed expected a long" or "Overflow when unpacking long long"."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise ValueError(f"seed: a whole number, or None; got {seed!r}")
    if not -2**63 <= seed < 2**63:  # (an unsigned 64-bit seed would overflow with the offsets the wrappers add)
        raise ValueError(f"seed: {seed} does not fit torch's 64-bit generators; give one in [0, 2**32 - 1] (numpy's "
                         "and torch's seeds, as a config's seed=), e.g. seed % 2**32")
    return int(seed)


def checked_action(action: Any, num_envs: int, action_spec: spaces.Box, device: torch.device) -> torch.Tensor:
    """``action`` as a float32 tensor on ``device`` (numpy and lists accepted), refused with a message when its
    shape is not ``(num_envs, *action_spec.shape)`` or, on CPU, when it holds NaN or inf: MuJoCo would quietly
    reset such a world mid-episode. (On a GPU that check would cost a host sync per step; there the runner's
    finiteness check, read once per iteration, stops the run: NaN actions may step the physics until then,
    and tasks must not index with them.)"""
    action = torch.as_tensor(action, dtype=torch.float32, device=device)
    expected = (num_envs, *action_spec.shape)
    if tuple(action.shape) != expected:
        raise ValueError(f"action: expected shape {expected} (num_envs, *action_spec.shape), got {tuple(action.shape)}")
    if host_reads_are_free(device) and not all_finite(action):
        worlds = (~torch.isfinite(action)).flatten(1).any(1).nonzero().squeeze(1).tolist()
        raise ValueError(f"action: NaN or inf in world(s) {worlds[:8]}; check the controller's inputs and weights")
    return action


class TaskEnv(VecEnv):
    """A :class:`Task` on a backend, as a :class:`~robolearn.interfaces.VecEnv`.

    Actions are in the task's ``action_spec`` units and are clipped to it.
    ``info["log"]`` holds the batch mean of each reward term as
    ``reward/<term>`` and of each of the task's :meth:`Task.metrics` as ``metrics/<name>``; ``info["success"]`` is present when the task defines it.

    A world whose physics blows up (the backend's ``unstable()``: MuJoCo's autoreset on the CPU, NaN or
    beyond 1e10 on MuJoCo Warp) ends its episode in that step, terminated with reward 0 and no success, and is reset like
    any other; ``info["log"]["sim/unstable_worlds"]`` counts them, and ``final_obs`` holds its next episode's
    first observation (its own is NaN or past MuJoCo's reset; a terminated step bootstraps from none).

    For datasets, :meth:`get_state` and :meth:`set_state` read and restore every
    world's exact simulator state, and with ``keep_final_state = True`` each
    step also reports ``info["final_state"]``, the state matching
    ``info["final_obs"]`` (taken before the automatic resets overwrite it).
    """

    keep_final_state: bool = False

    def __init__(self, task: Task, backend: MujocoBackend, seed: int | None = None) -> None:
        check_settings_declared(type(task), f"TaskEnv({type(task).__name__}())")  # as make_env does
        self.task, self.sim = task, backend
        self.num_envs = backend.num_worlds
        self.device = backend.device
        self.control_dt = task.frame_skip * backend.timestep
        self.max_episode_steps = task.max_episode_steps
        self.action_spec = task.action_spec(backend.model)
        self._low = torch.as_tensor(self.action_spec.low, device=self.device)
        self._high = torch.as_tensor(self.action_spec.high, device=self.device)
        self._generator = torch.Generator(device=self.device)
        if seed is None:
            self._generator.seed()
        self._episode_step = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        # worlds a reset began an episode in (not a restored mid-episode state): no earlier control to hold
        self._fresh = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        self._worlds = torch.arange(self.num_envs, device=self.device)
        self.actuation_delay: torch.Tensor | None = None
        """Per-world physics substeps (< frame_skip) that the previous controls still act
        at the start of each step: actuation latency finer than a control step."""
        self._rewards_checked = self._outcomes_checked = self._reset_checked = False
        obs = self.reset(seed)
        self._check_observations(obs)
        self.observation_spec = {name: _space(value) for name, value in obs.items()}

    @property
    def episode_step(self) -> torch.Tensor:
        """Control steps since each world's episode began; it is truncated at ``max_episode_steps``."""
        return self._episode_step

    @episode_step.setter
    def episode_step(self, steps: torch.Tensor) -> None:
        """Set each world's episode clock, as legged_gym's ``init_at_random_ep_len`` does after the first reset:
        episodes that began together then end at staggered times (otherwise every world resets on one step)."""
        self._episode_step.copy_(checked_episode_steps(steps, self))

    def reset(self, seed: int | None = None) -> Obs:
        if (seed := checked_seed(seed)) is not None:  # a numpy integer too (torch's takes Python ints only)
            self._generator.manual_seed(seed)
        self.task.start(self.sim)
        self._reset_worlds(self._worlds)
        return self._observe()

    def step(self, action: torch.Tensor) -> Step:
        action = torch.clamp(checked_action(action, self.num_envs, self.action_spec, self.device), self._low,
                             self._high)
        self.task.pre_step(self.sim)
        ctrl = self.task.actuate(self.sim, action)
        delay = self.actuation_delay
        # (where a host read is not free, the substeps run whether any world's delay is due: no read per step)
        if delay is not None and (not host_reads_are_free(self.device) or bool((delay > 0).any())):
            # the old controls, except in an episode's first step, where the reset left none (ctrl 0 is a joint
            # target to a position actuator, not "no command"): the first action acts at once, as it fills the
            # action latency's queue (RandomizedEnv)
            previous = torch.where(self._fresh.unsqueeze(1), ctrl, self.sim.ctrl.to(ctrl.dtype))
            self._fresh.zero_()  # (only read here: a world without delay ignores its flag)
            for substep in range(self.task.frame_skip):  # the old controls act until each world's delay passes
                self.sim.step(torch.where((substep < delay).unsqueeze(1), previous, ctrl), 1)
        else:
            self.sim.step(ctrl, self.task.frame_skip)
        self._episode_step += 1

        obs = self._observe()
        # worlds whose physics blew up: their episodes end here (terminated, reward 0, no success), not as a
        # teleport on the CPU (MuJoCo's autoreset) or NaN on a GPU (MuJoCo Warp has none) handed to the learner
        unstable = self.sim.unstable()
        terms = self.task.rewards(self.sim, action)
        if not self._rewards_checked:  # once: their shapes do not change from step to step
            self._check_rewards(terms)
            self._rewards_checked = True
        # in the backend's dtype, as observations: a flag (bool) or count term would fail the means below, a
        # float64 one would make the reward float64
        stacked = torch.stack(list(terms.values())).to(self.sim.dtype).masked_fill_(unstable, 0.0)
        reward = stacked.sum(0)
        terminated = self.task.terminated(self.sim)
        success = self.task.success(self.sim)
        if not self._outcomes_checked:  # once, as the rewards: a (num_envs, 1) one would broadcast into a matrix
            self._check_flags("terminated", terminated)
            if success is not None:
                self._check_flags("success", success)
            self._outcomes_checked = True
        terminated = terminated | unstable
        truncated = self._episode_step >= self.max_episode_steps
        info: dict = {"log": {f"reward/{name}": mean for name, mean in zip(terms, stacked.mean(1).unbind())}}
        info["log"].update({f"metrics/{name}": zero_rows(unstable, value.to(self.sim.dtype)).mean()  # a flag too
                            for name, value in self.task.metrics(self.sim).items()})
        info["log"][UNSTABLE_LOG] = unstable.sum(dtype=torch.float32)
        if success is not None:
            info["success"] = success & ~unstable

        info["final_obs"] = obs
        if self.keep_final_state:
            info["final_state"] = self.get_state()
        done = terminated | truncated
        if not host_reads_are_free(self.device) and resets_by_mask(self.task):
            self._reset_where(done)  # no host sync; wrappers reset by the mask too (no info["reset_ids"])
        else:
            ids = done.nonzero().squeeze(1)
            info["reset_ids"] = ids  # the worlds reset below: wrappers need not find them again
            if not len(ids):
                return Step(obs, reward, terminated, truncated, info)
            self._reset_worlds(ids)
        fresh = self._observe()
        # (an unstable world's last observation is NaN or after MuJoCo's reset: its next episode's first stands in,
        # finite and never bootstrapped from, the episode having terminated)
        info["final_obs"] = {name: where_rows(unstable, fresh[name], value) for name, value in obs.items()}
        if self.keep_final_state:  # the state final_obs was observed in: for an unstable world, that first one's too
            info["final_state"] = {name: where_rows(unstable, value, info["final_state"][name])
                                   for name, value in self.get_state().items()}
        obs = {name: where_rows(done, fresh[name], value) for name, value in obs.items()}
        return Step(obs, reward, terminated, truncated, info)

    def _observe(self) -> Obs:
        """The task's observations, floating groups in the backend's dtype (a no-op for ours): a task of
        one's own computing in float64 would otherwise meet float32 networks in a dtype error."""
        obs = self.task.observations(self.sim)
        if not isinstance(obs, dict):
            return obs  # _check_observations says what it should be
        return {name: self._snapshot(value) for name, value in obs.items()}

    def _snapshot(self, value: Any) -> Any:
        """``value`` in the backend's dtype, and copied where it is a live view of MuJoCo Warp's state (a task
        returning ``sim.qpos`` as it is): the next step would change that observation in place, a kept
        transition or time-limit ``final_obs`` with it. The CPU backend hands out copies already."""
        if not isinstance(value, torch.Tensor):
            return value
        if value.is_floating_point() and value.dtype != self.sim.dtype:
            return value.to(self.sim.dtype)  # a copy
        shares = getattr(self.sim, "shares_memory", None)
        return value.clone() if shares is not None and shares(value) else value

    def _check_observations(self, obs: Any) -> None:
        """A task of one's own that returns something else than ``{group: (num_envs, ...) tensor}`` is
        told so by name here, once, not by a shape error deep in a learner."""
        name = f"{type(self.task).__name__}.observations"
        if not isinstance(obs, dict) or not obs:
            raise ContractError(f"{name} must return a dict of observation groups {{name: (num_envs, ...) tensor}}, "
                                f"e.g. {{'policy': ...}}; got {type(obs).__name__}")
        for group, value in obs.items():
            if not isinstance(value, torch.Tensor) or value.dim() < 2 or value.shape[0] != self.num_envs:
                shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
                raise ContractError(f"{name}: group '{group}' must be a (num_envs={self.num_envs}, ...) tensor "
                                    f"(a scalar per world: (num_envs, 1)); got {shape}")

    def _check_rewards(self, terms: Any) -> None:
        """Each reward term a ``(num_envs,)`` tensor: a ``(num_envs, 1)`` one would broadcast the summed
        reward into a matrix. Checked on the first step only, shapes on the host: no device sync."""
        name = f"{type(self.task).__name__}.rewards"
        if not isinstance(terms, dict) or not terms:
            raise ContractError(f"{name} must return a dict of named (num_envs,) reward terms; got {type(terms).__name__}")
        for term, value in terms.items():
            if not isinstance(value, torch.Tensor) or tuple(value.shape) != (self.num_envs,):
                shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
                raise ContractError(f"{name}: term '{term}' must be a (num_envs={self.num_envs},) tensor; got {shape}")

    def _check_flags(self, method: str, value: Any) -> None:
        """``Task.terminated`` and ``Task.success``: one bool per world (shapes and dtype on the host: no sync)."""
        if not isinstance(value, torch.Tensor) or value.dtype != torch.bool or tuple(value.shape) != (self.num_envs,):
            got = f"{value.dtype} {tuple(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__
            raise ContractError(f"{type(self.task).__name__}.{method} must return a (num_envs={self.num_envs},) bool "
                                f"tensor, one flag per world; got {got}")

    def get_state(self) -> dict[str, torch.Tensor]:
        """Every world's exact state: ``state`` (the backend's full state rows,
        what :meth:`set_state` restores), ``qpos`` and ``qvel``; float64."""
        rows = self.sim.get_state()
        return {"state": rows, "qpos": rows[:, self.sim.state_slice("qpos")],
                "qvel": rows[:, self.sim.state_slice("qvel")]}

    def set_state(self, rows: torch.Tensor) -> Obs:
        """Start a new episode in every world from the exact state ``rows``
        ``(num_envs, state_size)`` (from :meth:`get_state`); returns its observations."""
        self.sim.set_full_state(self._worlds, rows)
        self._episode_step.zero_()
        self._fresh.zero_()  # the restored state's controls are the ones to hold under actuation latency
        return self._observe()

    def _reset_worlds(self, ids: torch.Tensor) -> None:
        state = self.task.reset(self.sim, ids, self._generator)
        if not self._reset_checked:  # once, on host-side shapes: set_state's broadcast error would not name reset
            model, name = self.sim.model, f"{type(self.task).__name__}.reset"
            if not isinstance(state, (tuple, list)) or len(state) != 2:  # qpos alone: Python's "values to unpack"
                got = f"{len(state)} values" if isinstance(state, (tuple, list)) else type(state).__name__
                raise ContractError(f"{name} must return a pair (qpos, qvel) of tensors of shapes (len(ids), "
                                    f"nq={model.nq}) and (len(ids), nv={model.nv}); got {got}")
            qpos, qvel = state
            for what, value, width in (("qpos", qpos, model.nq), ("qvel", qvel, model.nv)):
                if not isinstance(value, torch.Tensor) or tuple(value.shape) != (len(ids), width):
                    got = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
                    raise ContractError(f"{name} must return (qpos, qvel) tensors of shapes (len(ids), nq={model.nq}) "
                                        f"and (len(ids), nv={model.nv}); {what} is {got}")
            self._reset_checked = True
        qpos, qvel = state
        self.sim.set_state(ids, qpos, qvel)
        self.task.after_reset(self.sim, ids, self._generator)
        self._episode_step[ids] = 0
        self._fresh[ids] = True

    def _reset_where(self, mask: torch.Tensor) -> None:
        """:meth:`_reset_worlds` for the worlds where ``mask``, without listing them (a task that
        :attr:`~Task.resets_by_mask`): every world draws, the masked ones take it. On MuJoCo Warp a reset
        recomputes every world's kinematics anyway, and with thousands of worlds nearly every step has one."""
        qpos, qvel = self.task.reset(self.sim, self._worlds, self._generator)
        self.sim.reset_where(mask, qpos, qvel)
        self.task.after_reset_where(self.sim, mask, self._generator)
        self._episode_step.masked_fill_(mask, 0)
        self._fresh |= mask

    def render(self, index: int = 0, width: int = 320, height: int = 240) -> np.ndarray:
        return self.sim.render(index, width, height, camera=self.task.camera())

    def close(self) -> None:
        self.sim.close()


def resets_by_mask(task: Task) -> bool:
    """Whether ``task`` may be reset by mask (:attr:`Task.resets_by_mask`): it says so, from a class at or
    below those that define its ``reset`` and ``after_reset``, and its ``after_reset_where`` is as recent as
    its ``after_reset`` (a subclass that changes either and says nothing is reset by list, which is always
    right). It vouches for what those call too (a subclass that overrides a helper of theirs says it again).
    An instance's own ``resets_by_mask = False`` (set on the object) turns it off; only a class turns it on."""
    return vars(task).get("resets_by_mask") is not False and _class_resets_by_mask(type(task))


@functools.cache
def _class_resets_by_mask(cls: type[Task]) -> bool:
    """:func:`resets_by_mask` of a class: worked out once, as the env step asks every step."""
    if not cls.resets_by_mask:
        return False

    def owner(name: str) -> type:
        return next(base for base in cls.__mro__ if name in vars(base))

    says, after = owner("resets_by_mask"), owner("after_reset")
    return issubclass(says, owner("reset")) and issubclass(says, after) and issubclass(owner("after_reset_where"), after)


def checked_episode_steps(steps: Any, env: VecEnv) -> torch.Tensor:
    """``steps`` as episode clocks for ``env``'s worlds: one whole number each, in [0, max_episode_steps)."""
    steps = torch.as_tensor(steps, device=env.device)
    if steps.shape != (env.num_envs,) or steps.is_floating_point() or steps.dtype == torch.bool:
        raise ValueError(f"episode_step: one whole number per world, shape ({env.num_envs},); got "
                         f"{steps.dtype} of shape {tuple(steps.shape)}")
    if bool(((steps < 0) | (steps >= env.max_episode_steps)).any()):
        raise ValueError(f"episode_step: each in [0, max_episode_steps={env.max_episode_steps}); got "
                         f"{int(steps.min())} to {int(steps.max())}")
    return steps


def episode_clock(env: VecEnv) -> VecEnv | None:
    """The env under ``env``'s wrappers (randomization, delay) whose ``episode_step`` can be set (a
    :class:`TaskEnv`, an mjlab env); None for one that keeps its own time limit (a Gymnasium env)."""
    while not isinstance(getattr(type(env), "episode_step", None), property):
        env = getattr(env, "env", None)
        if env is None:
            return None
    return env


def start_at_random_steps(env: VecEnv, seed: int) -> None:
    """After a reset of every world, start each episode's clock at a uniform step in [0, max_episode_steps)
    (``env.random_episode_start``; legged_gym's ``init_at_random_ep_len``): the first episodes are cut
    short at staggered times, so later ones end spread out and the training return moves every iteration
    instead of in steps a whole episode apart. Refused for envs that keep their own time limits."""
    clock = episode_clock(env)
    if clock is None:
        raise ValueError(f"env.random_episode_start: {type(env).__name__} keeps its own episode time limit, which "
                         "cannot be set from here; use one of our tasks or an mjlab: task, or leave env.random_episode_start false")
    generator = torch.Generator(device=clock.device).manual_seed(seed)
    clock.episode_step = torch.randint(0, clock.max_episode_steps, (clock.num_envs,), generator=generator,
                                       device=clock.device)


def _space(value: torch.Tensor) -> spaces.Box:
    """An observation group's space in its own dtype: unbounded floats (the backend's dtype), and flags
    or counts a task of one's own may return within their dtype's range."""
    shape, dtype = tuple(value.shape[1:]), torch.empty((), dtype=value.dtype).numpy().dtype
    if value.is_floating_point():
        return spaces.Box(-np.inf, np.inf, shape, dtype=dtype)
    if value.dtype == torch.bool:
        return spaces.Box(0, 1, shape, dtype=np.bool_)
    return spaces.Box(np.iinfo(dtype).min, np.iinfo(dtype).max, shape, dtype=dtype)
