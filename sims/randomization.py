"""Domain randomization as configuration, with DORAEMON-style automatic widening.

A :class:`RandomizedEnv` wraps a :class:`~sims.task.TaskEnv` and gives every
episode of every world its own physics and sensing: scaled masses (per world or
per link), added torso mass, shifted torso centre of mass, friction (contacts and
joints together, or apart), joint damping and armature, actuator gains and a shifted reference pose ``qpos0``
(per-world model fields on the backend, each a :class:`Term` of :data:`TERMS`),
action latency and observation delay in control steps, observation noise, and
random pushes. All of it is data in ``env.randomization`` of a run config::

    env:
      randomization: {mass_scale: [0.8, 1.3], gain_scale: [0.6, 1.1],
                      action_latency_s: [0.0, 0.03], auto: true}

Each range is ``[low, high]`` around the nominal value (scale 1; 0 for offsets, steps and seconds).
With ``auto: true`` the ranges start at the nominal point and widen by
``auto_step`` of their full width whenever the success rate of the last
``auto_window`` finished episodes is at least ``auto_success`` (and narrow when
it falls below): DORAEMON's idea (Tiboni et al., 2024: maximise the entropy of
the dynamics distribution subject to a success-rate constraint), simplified to
one shared width for uniform ranges instead of per-parameter Beta
distributions under a KL trust region. The current width is logged as
``randomization/width``, and a run is evaluated at the width it reached
(``width: 0.55, auto: false``: each range at that fraction, fixed).

What the worlds hold now is logged too, for every range that is not nominal: the smallest and largest
value over the worlds (``randomization/mass_scale_min``, ``..._max``; latency in seconds, delay in
control steps), so a run's metrics show that, and how wide, its dynamics were drawn.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, fields
from typing import Any

import mujoco
import torch

from robolearn.interfaces import Obs, Step, VecEnv
from sims.delay import DelayLine, check_shorter_than_episode, delay_lines, seen_late
from sims.task import TaskEnv, checked_action, uniform
from sims.worlds import Worlds


@dataclass
class Randomization:
    """Ranges ``[low, high]``; the defaults change nothing.

    ``friction_scale`` is one factor per world on both every geom's sliding friction and every joint's
    ``dof_frictionloss`` (an arm's servo friction with its grip's). ``contact_friction_scale`` and
    ``frictionloss_scale`` draw them apart, as Playground's Go1 recipe does: the first one factor per world on
    the sliding friction alone, the second a factor per dof on the frictionloss alone. Set together with
    ``friction_scale`` they multiply its factor (terms of one field apply in :data:`TERMS` order, as
    ``mass_scale`` and ``link_mass_scale`` do on ``body_mass``): nothing is refused or overridden.
    """

    mass_scale: tuple[float, float] = (1.0, 1.0)  # every body's mass (and inertia), one factor per world
    # Playground's Go1 recipe (mujoco_playground/_src/locomotion/go1/randomize.py): a factor per link, mass alone
    link_mass_scale: tuple[float, float] = (1.0, 1.0)
    torso_mass_kg: tuple[float, float] = (0.0, 0.0)  # kg added to the floating-base body (Playground: +-1 kg)
    torso_com_m: tuple[float, float] = (0.0, 0.0)  # m added to its centre of mass, per axis (Playground: +-5 cm)
    friction_scale: tuple[float, float] = (1.0, 1.0)  # geom sliding friction and joint frictionloss
    contact_friction_scale: tuple[float, float] = (1.0, 1.0)  # geom sliding friction alone, one factor per world
    frictionloss_scale: tuple[float, float] = (1.0, 1.0)  # joint frictionloss alone, a factor per dof
    damping_scale: tuple[float, float] = (1.0, 1.0)  # joint damping
    armature_scale: tuple[float, float] = (1.0, 1.0)  # joint armature (rotor inertia), a factor per dof
    gain_scale: tuple[float, float] = (1.0, 1.0)  # actuator gains (motor strength; servo kp and kv)
    qpos0_offset: tuple[float, float] = (0.0, 0.0)  # added to each hinge and slide joint's qpos0 (rad or m)
    action_latency_s: tuple[float, float] = (0.0, 0.0)  # seconds before an action reaches the actuators
    obs_delay_steps: tuple[int, int] = (0, 0)  # control steps the policy's observation lags
    obs_noise_std: float = 0.0  # Gaussian noise added to the ``policy`` group
    push_every_s: float = 0.0  # mean seconds between pushes; 0: none
    push_velocity: float = 0.0  # pushes add U(-v, v) to every joint velocity
    # False: masses, friction, damping and gains are drawn once per world when the env starts (mjlab's
    # "startup" events) instead of every episode. On MuJoCo Warp a mass draw recomputes the constants
    # derived from masses for all worlds, which costs more than a physics step when worlds reset every step.
    dynamics_every_episode: bool = True
    # > 0: every episode's masses, friction, damping and gains are one of this many variants drawn when the env
    # starts, each with its mass-derived constants computed then; a reset copies a variant's rows instead of
    # having MuJoCo Warp recompute the constants of all worlds. Draws from the same ranges; 0: fresh draws.
    dynamics_pool: int = 0
    auto: bool = False  # DORAEMON-style: start nominal, widen while successful
    # The fraction of every range (and of the noise and pushes) in use: None is 1, or with auto the start, 0.
    # A run's evaluation sets the width automatic widening reached (auto: false, width: 0.55).
    width: float | None = None
    auto_success: float = 0.8
    auto_step: float = 0.05
    auto_window: int = 64

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, (tuple, list)):
                low, high = value
                if f.name.endswith("_scale") and not 0 < low <= high:  # a zero mass or gain is no robot
                    raise ValueError(f"env.randomization.{f.name}: scales multiply the model's values, so need "
                                     f"0 < low <= high, got {list(value)}")
                if f.name in OFFSETS and low > high:  # offsets are added: negative ones too
                    raise ValueError(f"env.randomization.{f.name}: need low <= high, got {list(value)}")
                if f.name not in OFFSETS and (low > high or low < 0):
                    raise ValueError(f"env.randomization.{f.name}: need 0 <= low <= high, got {list(value)}")
        for name in ("obs_noise_std", "push_every_s", "push_velocity"):
            if getattr(self, name) < 0:  # a negative std or velocity silently means its magnitude, or nothing
                raise ValueError(f"env.randomization.{name} must be >= 0, got {getattr(self, name)}")
        if (self.push_every_s > 0) != (self.push_velocity > 0):  # one of the two alone pushed nothing, silently
            raise ValueError(f"env.randomization: a push needs push_every_s (mean seconds between pushes) and "
                             f"push_velocity (their size) both > 0, got {self.push_every_s} and {self.push_velocity}: "
                             "set both, or neither")
        if not self.auto_step > 0 or self.auto_window < 1:
            raise ValueError(f"env.randomization.auto_step must be > 0 and auto_window >= 1, got "
                             f"{self.auto_step} and {self.auto_window}")
        if self.auto and not self.dynamics_every_episode:
            raise ValueError("env.randomization.auto widens the ranges episode by episode: it needs dynamics_every_episode: true")
        if self.dynamics_pool < 0 or (self.dynamics_pool and not self.dynamics_every_episode):
            raise ValueError(f"env.randomization.dynamics_pool: 0 (fresh draws) or a number of variants for draws every "
                             f"episode (dynamics_every_episode: true); got {self.dynamics_pool}")
        if self.auto and self.dynamics_pool:
            raise ValueError("env.randomization.auto widens the ranges as it goes, and a dynamics_pool is drawn once: "
                             "set dynamics_pool: 0")
        if self.width is not None and not 0.0 <= self.width <= 1.0:
            raise ValueError(f"env.randomization.width is the fraction of each range in use: in [0, 1], got {self.width}")
        if not 0.0 <= self.auto_success <= 1.0:
            raise ValueError(f"env.randomization.auto_success must be in [0, 1], got {self.auto_success}")


@dataclass(frozen=True)
class Term:
    """How one range of :class:`Randomization` changes one model field, starting from the compiled values."""

    key: str  # the range
    field: str  # the model field
    add: bool = False  # False: the draw multiplies the values (nominal 1); True: it is added to them (nominal 0)
    columns: int | slice | None = None  # which columns of each row (None: all)
    rows: str | None = None  # which rows: None all, "floating_base" (bodies), "joint_qpos" (hinge and slide joints)
    each: bool = False  # a draw for each element changed (link, dof, axis), else one per world for all of them


# In order: a field's terms apply one after another (Playground scales the links' masses, then adds the torso's).
TERMS = (
    Term("mass_scale", "body_mass"),
    Term("mass_scale", "body_inertia"),  # a body scaled as a whole
    # Playground scales body_mass alone, inertia as compiled (each link lighter or heavier, its inertia kept), and
    # adds the torso's mass and offsets its centre of mass (body_ipos) alike, inertia kept: done so here.
    Term("link_mass_scale", "body_mass", each=True),
    Term("torso_mass_kg", "body_mass", add=True, rows="floating_base", each=True),
    Term("torso_com_m", "body_ipos", add=True, rows="floating_base", each=True),
    Term("friction_scale", "geom_friction", columns=0),
    Term("friction_scale", "dof_frictionloss"),
    # Playground's Go1: floor friction one draw per world, frictionloss x U(0.9, 1.1) per joint, independently
    Term("contact_friction_scale", "geom_friction", columns=0),
    Term("frictionloss_scale", "dof_frictionloss", each=True),  # (a free joint's frictionloss, 0 in our models, too)
    Term("damping_scale", "dof_damping"),
    Term("armature_scale", "dof_armature", each=True),  # (a free joint's armature, 0 in our models, too)
    Term("gain_scale", "actuator_gainprm", columns=0),
    Term("gain_scale", "actuator_biasprm", columns=slice(1, 3)),
    # MuJoCo's reference pose: where mj_resetData starts and the constants mj_setConst computes at (Playground jitters
    # it so). Tasks reset to poses of their own (Go1: the home keyframe, as Playground's) and leave it be.
    Term("qpos0_offset", "qpos0", add=True, rows="joint_qpos", each=True),
)
OFFSETS = frozenset(term.key for term in TERMS if term.add)  # ranges around 0, negative values allowed


def term_rows(model: Any, term: Term) -> list[int] | None:
    """The rows of ``term.field`` that ``term`` changes in ``model`` (None: all); an error naming the range
    where the model has none."""
    if term.rows is None:
        return None
    if term.rows == "floating_base":  # a body on a free joint, hanging from the world: a legged robot's trunk
        rows = [body for body in range(1, model.nbody) if model.body_parentid[body] == 0 and any(
            int(model.jnt_type[joint]) == int(mujoco.mjtJoint.mjJNT_FREE)
            for joint in range(model.body_jntadr[body], model.body_jntadr[body] + model.body_jntnum[body]))]
        what = "floating-base body (one on a free joint)"
    elif term.rows == "joint_qpos":  # one number per joint: a quaternion offset by a number is none
        rows = [int(model.jnt_qposadr[joint]) for joint in range(model.njnt)
                if int(model.jnt_type[joint]) in (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE))]
        what = "hinge or slide joint"
    else:
        raise ValueError(f"randomization term {term}: unknown rows {term.rows!r}")
    if not rows:
        raise ValueError(f"env.randomization.{term.key}: the task's model has no {what} to randomize")
    return rows


class RandomizedEnv(VecEnv):
    """``env`` with each episode's dynamics and sensing drawn from ``cfg``."""

    def __init__(self, env: TaskEnv, cfg: Randomization, seed: int | None = None) -> None:
        self.env, self.cfg, self.sim = env, cfg, env.sim
        if cfg.auto and env.task.success(env.sim) is None:  # it would stay at width 0: no randomization at all
            raise ValueError(f"env.randomization.auto widens the ranges as episodes succeed, and task "
                             f"{type(env.task).__name__} reports no success: set fixed ranges (auto: false)")
        for name in ("num_envs", "device", "control_dt", "max_episode_steps", "observation_spec", "action_spec"):
            setattr(self, name, getattr(env, name))
        if cfg.obs_noise_std > 0 and "policy" not in self.observation_spec:  # it would have noised nothing, silently
            raise ValueError(f"env.randomization.obs_noise_std adds noise to the 'policy' observation group, and task "
                             f"{type(env.task).__name__} has none (its groups: {list(self.observation_spec)}): name the "
                             "group the robot senses 'policy', or set obs_noise_std: 0")
        # The most control steps of latency, counted as _resample counts a draw: whole physics steps, rounded
        max_latency = round(cfg.action_latency_s[1] / env.sim.timestep) // env.task.frame_skip
        check_shorter_than_episode("env.randomization.obs_delay_steps", cfg.obs_delay_steps[1], self.max_episode_steps)
        check_shorter_than_episode("env.randomization.action_latency_s", max_latency, self.max_episode_steps)
        # (an env.delay around this env adds its fixed steps to these: sims.delay.DelayedEnv checks the sum)
        self.most_delay_steps = {"obs_delay_steps": cfg.obs_delay_steps[1], "action_latency_steps": max_latency}
        self.width = cfg.width if cfg.width is not None else 0.0 if cfg.auto else 1.0
        self._generator = torch.Generator(device=self.device)
        if seed is None:  # unseeded: other draws every time, as the env's own initial states
            self._generator.seed()
        else:
            self._generator.manual_seed(seed + 7919)
        # The compiled model's values in float64, which CPU MuJoCo steps in: the backend's tensors are float32,
        # and a draw scaling their rounding would make no scale (width 0 neither) the model's own values
        self._nominal = {name: torch.as_tensor(getattr(self.sim.model, name), dtype=torch.float64, device=self.device)
                         for name in dict.fromkeys(term.field for term in TERMS)}
        # The terms of the ranges in use, each with the rows it changes (a slice where they follow one another: a
        # view to change in place), and the shape of each range's draws: () one per world, else its elements'
        self._terms = [(term, self._row_index(term_rows(self.sim.model, term))) for term in TERMS
                       if self._in_use(term.key)]
        self._draw_shapes: dict[str, tuple[int, ...]] = {}
        for term, rows in self._terms:
            part = self._part(self._nominal[term.field].unsqueeze(0), term, rows)[1]
            self._draw_shapes.setdefault(term.key, tuple(part.shape[1:]) if term.each else ())
        self._check_masses()
        self._outcomes: list[bool] = []
        n = self.num_envs
        self._latency = torch.zeros(n, dtype=torch.long, device=self.device)
        self._delay = torch.zeros(n, dtype=torch.long, device=self.device)
        self._substeps = torch.zeros(n, dtype=torch.long, device=self.device)
        self._timestep = env.sim.timestep
        self._actions = DelayLine(max_latency + 1,
                                  torch.zeros(n, *self.action_spec.shape, device=self.device))
        self._history: dict[str, DelayLine] = {}
        self._fresh = torch.ones(n, dtype=torch.bool, device=self.device)
        self._worlds = torch.arange(n, device=self.device)  # every world's index, made once (pushes use it each step)
        # MuJoCo Warp derives constants (constant_fields) for all worlds at once: a pool brings them along
        self._derives = hasattr(self.sim, "constant_fields")
        # Each world's draws now (of the ranges not at nominal), logged as extremes: one row of columns per world,
        # every range's side by side, written in one go at a reset however many ranges (each a kernel on a GPU);
        # _drawn views each range's columns in its own shape.
        keys = sorted(self._draw_shapes)
        self._drawn_columns = torch.cat([torch.full((n, math.prod(self._draw_shapes[key])), self._nominal_of(key))
                                         for key in keys], dim=1).to(self.device) if keys else None
        self._drawn = self._ranges_of(self._drawn_columns)
        self._log_segments: torch.Tensor | None = None  # which range each column of the logged draws is
        self._pool_draws: torch.Tensor | None = None  # each pool variant's draws, as _drawn_columns
        self._pool_scales: dict[str, torch.Tensor] = {}
        self._draws_log: dict[str, torch.Tensor] = {}
        self._pool = self._dynamics_pool(cfg.dynamics_pool) if cfg.dynamics_pool else None
        self._robots_drawn = False  # dynamics_every_episode: false: each world's drawn once, at the first reset
        self.reset(seed)

    # ---- sampling -------------------------------------------------------------

    @staticmethod
    def _nominal_of(name: str) -> float:
        """The value of range ``name`` that changes nothing: 1 for scales, 0 for offsets, delays and noise."""
        return 1.0 if name.endswith("_scale") else 0.0

    def _in_use(self, name: str) -> bool:
        """Whether range ``name`` is configured away from nominal (one at nominal draws and writes nothing: on
        MuJoCo Warp a mass write also recomputes constants)."""
        return tuple(getattr(self.cfg, name)) != (self._nominal_of(name),) * 2

    def _range(self, name: str) -> tuple[float, float]:
        """The current range of ``name``: nominal widened by ``width`` of the configured range."""
        low, high = getattr(self.cfg, name)
        nominal = self._nominal_of(name)
        return nominal + self.width * (low - nominal), nominal + self.width * (high - nominal)

    def _row_index(self, rows: list[int] | None) -> slice | torch.Tensor | None:
        """``rows`` as an index of a field's rows: a slice where they follow one another, else a device tensor."""
        if rows is None:
            return None
        if rows == list(range(rows[0], rows[-1] + 1)):
            return slice(rows[0], rows[-1] + 1)
        return torch.tensor(rows, dtype=torch.long, device=self.device)

    @staticmethod
    def _part(values: torch.Tensor, term: Term, rows: slice | torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Of ``values`` ``(n, *field_shape)``: the rows ``term`` changes (a view unless ``rows`` is a tensor), and
        of those the columns it changes (a view of the first)."""
        part = values if rows is None else values[:, rows]
        return part, part if term.columns is None else part[..., term.columns]

    def _ranges_of(self, columns: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """Each range's draws in ``columns`` ``(rows, columns)`` (as :attr:`_drawn_columns`), as views
        ``(rows, *draw shape)``."""
        ranges, start = {}, 0
        for key in sorted(self._draw_shapes):
            width = math.prod(self._draw_shapes[key])
            ranges[key] = columns[:, start:start + width].view(len(columns), *self._draw_shapes[key])
            start += width
        return ranges

    @staticmethod
    def _as_columns(draws: dict[str, torch.Tensor]) -> torch.Tensor:
        """``draws`` by range (from :meth:`_draw_dynamics`) side by side, as :attr:`_drawn_columns`."""
        return torch.cat([draws[key].reshape(len(draws[key]), -1) for key in sorted(draws)], dim=1)

    def _check_masses(self) -> None:
        """Refuse ranges that would give a body a mass of 0 or less (an added negative torso mass can): at the
        full width, where each range is widest (a linear widening from nominal, positive)."""
        if not self._in_use("torso_mass_kg"):
            return
        mass = self._nominal["body_mass"].clone()
        for key in ("mass_scale", "link_mass_scale"):
            mass *= getattr(self.cfg, key)[0]
        for term, rows in self._terms:
            if term.key == "torso_mass_kg":
                lightest = float((mass[rows] + self.cfg.torso_mass_kg[0]).min())
                if lightest <= 0:
                    raise ValueError(f"env.randomization.torso_mass_kg: {list(self.cfg.torso_mass_kg)} kg added to "
                                     f"the torso would leave it {lightest:.3g} kg at the ranges' lowest; a mass "
                                     "must stay positive")

    def _draw_dynamics(self, worlds: Worlds) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Fresh draws for ``worlds``, applied to the compiled values and written to the model fields; returns the
        values written (by field, float64) and the draws (by range: ``(n,)``, or ``(n, *elements)``)."""
        n = len(worlds)
        draws = {key: uniform((n, *self._draw_shapes[key]), *self._range(key), self._generator)
                 for key in sorted(self._draw_shapes)}  # fixed draw order: reproducible
        written: dict[str, torch.Tensor] = {}
        for term, rows in self._terms:  # (a field's terms in TERMS's order)
            if term.field not in written:
                written[term.field] = self._nominal[term.field].expand(n, *self._nominal[term.field].shape).clone()
            values = written[term.field]
            part, changed = self._part(values, term, rows)
            drawn = draws[term.key]
            drawn = drawn.view(*drawn.shape, *[1] * (changed.dim() - drawn.dim()))  # a world's, or an element's
            if term.add:  # in place: changed is a view of part
                changed += drawn
            else:
                changed *= drawn
            if isinstance(rows, torch.Tensor):  # part was a copy
                values[:, rows] = part
        for name, values in written.items():
            worlds.set_model_field(self.sim, name, values)
        return written, draws

    def _dynamics_pool(self, size: int) -> dict[str, torch.Tensor]:
        """``size`` variants of the model fields, drawn as fresh draws are, with the constants the backend
        derives from them (MuJoCo Warp: ``constant_fields``, computed here for ``num_envs`` variants at a
        time, where a drawn field is one they derive from: masses, not friction). The CPU backend derives
        them per world as each variant is written: it keeps only the fields. The pool assumes nothing
        else changes those fields' inputs later (nothing here does)."""
        parts: dict[str, list[torch.Tensor]] = {}
        draws = []
        for start in range(0, size, self.num_envs):
            worlds = Worlds(ids=self._worlds[: min(self.num_envs, size - start)])
            written, drawn = self._draw_dynamics(worlds)  # kept as drawn: the backend's tensors are float32
            if self._derives and self.sim.refresh_constants():
                written |= {name: self.sim.get_model_field(name)[: len(worlds)] for name in self.sim.constant_fields}
            for name, rows in written.items():
                parts.setdefault(name, []).append(rows)
            draws.append(self._as_columns(drawn))
        self._pool_draws = torch.cat(draws)
        self._pool_scales = self._ranges_of(self._pool_draws)
        pool = {name: torch.cat(rows) for name, rows in parts.items()}
        if self._derives:  # MuJoCo Warp holds them in float32: cast once here rather than at every reset (a kernel each)
            pool = {name: rows.to(self.sim.get_model_field(name).dtype) for name, rows in pool.items()}
        return pool

    def _resample(self, worlds: Worlds, dynamics: bool = True) -> None:
        """New latency and delay for ``worlds``, and new dynamics if ``dynamics``."""
        n = len(worlds)
        if dynamics and self._pool:
            pick = torch.randint(self.cfg.dynamics_pool, (n,), generator=self._generator, device=self.device)
            given = {"recompute": False} if self._derives else {}  # the pool holds them
            for name, rows in self._pool.items():
                worlds.set_model_field(self.sim, name, rows[pick], **given)
            if self._drawn_columns is not None:
                worlds.put_(self._drawn_columns, self._pool_draws[pick])
        elif dynamics:
            drawn = self._draw_dynamics(worlds)[1]
            if drawn:
                worlds.put_(self._drawn_columns, self._as_columns(drawn))
        # Latency: whole control steps through the action queue, the rest as physics substeps.
        latency = uniform((n,), *self._range("action_latency_s"), self._generator)
        physics_steps = torch.round(latency / self._timestep).long()
        steps_per_action = self.env.task.frame_skip
        worlds.put_(self._latency, (physics_steps // steps_per_action).clamp(max=len(self._actions.buffer) - 1))
        worlds.put_(self._substeps, physics_steps % steps_per_action)
        if self.cfg.action_latency_s[1] > 0:  # else every world's is 0: not checked on every step
            self.env.actuation_delay = self._substeps
        low, high = self._range("obs_delay_steps")
        worlds.put_(self._delay, torch.randint(round(low), round(high) + 1, (n,), generator=self._generator,
                                               device=self.device))
        worlds.put_(self._fresh, torch.ones(n, dtype=torch.bool, device=self.device))
        self._draws_log = self._extremes()

    def _extremes(self) -> dict[str, torch.Tensor]:
        """The smallest and largest value over the worlds of each range not at nominal, as logged: computed
        when draws change (resets), not every step; device tensors, read when the runner logs."""
        names, columns = list(self._drawn), [] if self._drawn_columns is None else [self._drawn_columns]
        if self.cfg.action_latency_s[1] > 0:  # as applied: whole control steps and physics substeps
            names.append("action_latency_s")
            latency = (self._latency * self.env.task.frame_skip + self._substeps) * self._timestep
            columns.append(latency.float().unsqueeze(1))
        if self.cfg.obs_delay_steps[1] > 0:
            names.append("obs_delay_steps")
            columns.append(self._delay.float().unsqueeze(1))
        if not names:
            return {}
        # Over worlds and elements (a link's, a dof's) alike: every range's columns side by side, their extremes over
        # the worlds, then over each range's columns. A few kernels however many ranges, and no host read.
        columns = torch.cat(columns, dim=1) if len(columns) > 1 else columns[0]
        if self._log_segments is None:
            widths = [math.prod(self._draw_shapes[key]) for key in self._drawn] + [1] * (len(names) - len(self._drawn))
            self._log_segments = torch.repeat_interleave(torch.arange(len(names)), torch.tensor(widths)).to(self.device)
        column_lows, column_highs = torch.aminmax(columns, dim=0)
        lows = column_lows.new_zeros(len(names)).scatter_reduce_(0, self._log_segments, column_lows, "amin",
                                                                  include_self=False)
        highs = column_highs.new_zeros(len(names)).scatter_reduce_(0, self._log_segments, column_highs, "amax",
                                                                    include_self=False)
        return {f"randomization/{key}_{end}": row for key, low, high in zip(names, lows, highs)
                for end, row in (("min", low), ("max", high))}

    # ---- VecEnv ----------------------------------------------------------------

    def reset(self, seed: int | None = None) -> Obs:
        seed = None if seed is None else operator.index(seed)  # a numpy integer too: torch's generators refuse one
        obs = self.env.reset(seed)
        if seed is not None:  # the same seed, the same draws, as the env's initial states (another stream than
            self._generator.manual_seed(seed + 104_729)  # the construction's, which drew a dynamics pool)
        # Per-robot dynamics stay the robots' (from the construction's seed) whatever a later reset's seed: a
        # resume, which resets with another seed, keeps them
        self._resample(Worlds(ids=self._worlds), dynamics=self.cfg.dynamics_every_episode or not self._robots_drawn)
        self._robots_drawn = True
        self._history = delay_lines(obs, self.cfg.obs_delay_steps[1] + 1)
        return self._noisy(obs)

    def step(self, action: torch.Tensor) -> Step:
        action = checked_action(action, self.num_envs, self.action_spec, self.device)  # (numpy too, as TaskEnv)
        # Latency: the actuators get the action sent `latency` steps ago; the
        # first action of an episode fills the queue.
        self._actions.push(action)
        self._actions.fill_where(self._fresh, action)
        self._fresh[:] = False
        applied = self._actions.read(self._latency)
        self._push()
        obs, reward, terminated, truncated, info = self.env.step(applied)
        done = terminated | truncated
        # Delay: the policy sees the observation from `delay` steps ago (the critic's privileged state as it is)
        info = {**info, "final_obs": self._noisy(seen_late(self._history, info["final_obs"], self._delay))}
        next_obs = info["final_obs"]
        # As TaskEnv reset them: its list, or (no host sync on a GPU) the mask. done.nonzero() here would be a sync
        worlds = Worlds.of_step(info, done)
        if worlds.maybe_any:
            if self.cfg.auto and "success" in info:  # (the outcomes are counted on the host: a read per step)
                self._adapt(info["success"][done].tolist())
            self._resample(worlds, dynamics=self.cfg.dynamics_every_episode)
            for k, h in self._history.items():  # a new episode has no past: its first frame throughout
                worlds.fill(h, obs[k])
            fresh = self._noisy({k: worlds.take(v) for k, v in obs.items()})
            next_obs = {k: worlds.merged(v, fresh[k]) for k, v in next_obs.items()}
        info["log"] = {**info.get("log", {}), "randomization/width": self.width, **self._draws_log}
        return Step(next_obs, reward, terminated, truncated, info)

    def _noisy(self, obs: Obs) -> Obs:
        if self.cfg.obs_noise_std <= 0 or "policy" not in obs:
            return obs
        noise = torch.randn(obs["policy"].shape, generator=self._generator, device=self.device)
        return {**obs, "policy": obs["policy"] + self.cfg.obs_noise_std * self.width * noise}

    def _push(self) -> None:
        if self.cfg.push_every_s <= 0 or self.cfg.push_velocity <= 0:
            return
        chance = self.control_dt / self.cfg.push_every_s
        hit = torch.rand(self.num_envs, generator=self._generator, device=self.device) < chance
        # Every world gets a draw and the missed ones add zero: picking the hit ones (hit.nonzero()) would
        # be a host sync every step on a GPU, and the draws are cheap next to a physics step.
        v = self.cfg.push_velocity * self.width
        delta = uniform((self.num_envs, self.sim.model.nv), -v, v, self._generator) * hit.unsqueeze(1)
        self.sim.add_qvel(self._worlds, delta)

    def adaptation_state(self) -> dict[str, Any]:
        """What automatic widening has learned (the width and the outcomes toward the next update), for
        checkpoints: a resumed run goes on at the width it reached instead of starting over at 0."""
        return {"width": float(self.width), "outcomes": [bool(o) for o in self._outcomes]}

    def load_adaptation_state(self, state: dict[str, Any]) -> None:
        self.width, self._outcomes = float(state["width"]), [bool(o) for o in state["outcomes"]]

    def _adapt(self, outcomes: list[bool]) -> None:
        """DORAEMON-style width update from finished episodes' success."""
        self._outcomes.extend(outcomes)
        if len(self._outcomes) < self.cfg.auto_window:
            return
        rate = sum(self._outcomes) / len(self._outcomes)
        self._outcomes.clear()
        step = self.cfg.auto_step if rate >= self.cfg.auto_success else -self.cfg.auto_step
        self.width = min(1.0, max(0.0, self.width + step))

    def render(self, index: int = 0, width: int = 320, height: int = 240):
        return self.env.render(index, width, height)

    def close(self) -> None:
        self.env.close()
