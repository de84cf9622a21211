"""The contract every part of robolearn meets. Read this file first.

Three interfaces:

- :class:`VecEnv`: a batch of ``num_envs`` environments on one torch device.
  Simulators (CPU MuJoCo, MuJoCo Warp), adapters (Gymnasium, mjlab, Isaac) and
  real robots (a VecEnv with ``num_envs == 1``) all implement it.
- :class:`Controller`: the one policy interface. A ``torch.nn.Module`` that maps
  observations to one action per env for *this* control step, with its
  normalization and action scaling inside, so exporting it exports the whole
  deployable thing. Flat, sequence (k actions per decision) and hierarchical
  (a skill held for several steps) controllers differ only in what they keep
  inside and in ``decision_period``.
- :class:`Agent`: what a learning algorithm exposes to a runner. Runners own the
  loop, storage, logging and checkpoints; agents own the math.

Observations are dicts of named groups (``policy``: what the robot senses;
``critic``: privileged sim-only state; ``goal``...), each a tensor of shape
``(num_envs, *group_shape)``.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

class ContractError(TypeError):
    """A task, env, controller or agent of one's own that breaks its part of these interfaces; the message
    names the method and what it must return (the command line prints it as one line)."""


class SimulationFailed(RuntimeError):
    """The physics could not step some worlds (MuJoCo's stack or arena memory full, say): the message names
    them and what to change in the model; a training run stops on it as on a NaN, its last checkpoint kept."""


UNSTABLE_LOG = "sim/unstable_worlds"
"""The ``info["log"]`` key of a simulator's count of worlds whose physics blew up in a step: their episodes
ended there (terminated, reward 0); the runner says so the first time in a run."""

Obs = dict[str, torch.Tensor]
"""Named observation groups, each ``(num_envs, *shape)``."""


class Step(NamedTuple):
    """What :meth:`VecEnv.step` returns; unpacks like Gymnasium's 5-tuple.

    ``info["final_obs"]`` is the true next observation of this transition for
    every env: for envs whose episode just ended (and were reset, so ``obs``
    already holds the first observation of the next episode) it is the last
    observation of the finished episode; for the others it equals ``obs``.
    Bootstrapping a time-limit truncation therefore uses V(s_T) exactly.
    ``info["log"]`` maps names to scalars (floats or 0-dim tensors) to log; the runner
    reads them at the iteration's end, so a logged tensor must not change in place later.
    ``info["success"]``, when the task defines success, is a bool tensor that
    is meaningful on the rows whose episode ended. ``info["reset_ids"]``, where an
    env gives it (our simulators, unless they reset by mask), holds the indices of
    those rows: wrappers take it instead of ``done.nonzero()``, a host sync per step
    on a GPU. Where it is absent (our tasks that reset by mask, on a GPU), wrappers
    go by the mask ``terminated | truncated`` (:class:`sims.worlds.Worlds`).
    """

    obs: Obs
    reward: torch.Tensor  # (num_envs,) float
    terminated: torch.Tensor  # (num_envs,) bool: the MDP ended (fall, goal); no bootstrap
    truncated: torch.Tensor  # (num_envs,) bool: time limit; bootstrap from final_obs
    info: dict[str, Any]


class VecEnv(ABC):
    """A batch of environments stepped together; done envs reset automatically.

    Subclasses set these attributes in ``__init__``:

    - ``num_envs``, ``device``
    - ``control_dt``: seconds of simulated (or real) time per ``step``
    - ``max_episode_steps``: steps after which an episode is truncated
    - ``observation_spec``: group name -> ``gymnasium.spaces.Box`` of one env's shape
    - ``action_spec``: ``Box`` of one env's action in the env's own units. Unless
      the env's docstring says otherwise the bounds are physical (torques,
      positions...); actions outside them are clipped by the env.

    Once closed, an env refuses ``step`` and ``reset`` (``closed``), every subclass's own included: this class
    wraps them where a subclass defines them, and its ``close``, which need not set the flag itself.
    """

    num_envs: int
    device: torch.device
    control_dt: float
    max_episode_steps: int
    observation_spec: dict[str, spaces.Box]
    action_spec: spaces.Box
    closed: bool = False
    """Whether :meth:`close` was called: ``step`` and ``reset`` then raise :class:`EnvClosed` (a closed env's
    threads, renderer and files are gone, and a CPU MuJoCo env had stepped on regardless)."""
    reopens: bool = False
    """A VecEnv that opens again after a close (``hardware.robot.Robot``: ``with robot:``, ``connect()``) says itself
    what a closed one needs: its class sets this, and ``closed`` is not kept for it."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.reopens:
            return
        for name, wrap in (("step", _refused_once_closed), ("reset", _refused_once_closed), ("close", _marks_closed)):
            method = vars(cls).get(name)
            if inspect.isfunction(method) and not getattr(method, "__isabstractmethod__", False):
                setattr(cls, name, wrap(method))

    @abstractmethod
    def reset(self, seed: int | None = None) -> Obs:
        """Reset every env; ``seed`` makes the initial states reproducible."""

    @abstractmethod
    def step(self, action: torch.Tensor) -> Step:
        """Apply ``action`` ``(num_envs, *action_shape)`` for one control step (a tensor; the sims envs and
        adapters take numpy arrays and lists too, and say a wrong shape by name)."""

    def render(self, index: int = 0, width: int = 320, height: int = 240) -> np.ndarray:
        """An RGB frame ``(height, width, 3)`` of env ``index``."""
        raise NotImplementedError(f"{type(self).__name__} cannot render frames")

    def close(self) -> None:
        """Release threads, files or connections held by the env; ``step`` and ``reset`` then refuse."""
        self.closed = True

    def __enter__(self) -> VecEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class EnvClosed(RuntimeError):
    """``step`` or ``reset`` of a :class:`VecEnv` that was closed."""


def _refused_once_closed(method: Callable[..., Any]) -> Callable[..., Any]:
    """A VecEnv subclass's ``step`` or ``reset``, refused once the env is closed (:attr:`VecEnv.closed`)."""
    @functools.wraps(method)
    def checked(self: VecEnv, *args: Any, **kwargs: Any) -> Any:
        if self.closed:
            raise EnvClosed(f"{type(self).__name__}.{method.__name__}(): this env was closed; make a new one with "
                            "robolearn.make_env(run) or sims.make_env(task, num_envs) (runtime.run closes the env it "
                            "ran unless given close_env=False)")
        return method(self, *args, **kwargs)
    return checked


def _marks_closed(close: Callable[..., None]) -> Callable[..., None]:
    """A VecEnv subclass's ``close``, which marks the env closed (:attr:`VecEnv.closed`) whether it ends or raises."""
    @functools.wraps(close)
    def closing(self: VecEnv, *args: Any, **kwargs: Any) -> None:
        try:
            close(self, *args, **kwargs)
        finally:
            self.closed = True
    return closing


# Device types whose values a check may read on the host at once: on a GPU each read waits for the device's
# queue to drain (a host sync), so checks there defer their verdicts or are skipped. benchmarks/host_syncs.py
# empties it to count a GPU run's reads on MuJoCo Warp's CPU device.
HOST_READS_FREE_ON = {"cpu"}


def host_reads_are_free(device: str | torch.device) -> bool:
    """Whether a check may read a value on ``device`` at once (:data:`HOST_READS_FREE_ON`)."""
    return torch.device(device).type in HOST_READS_FREE_ON


def all_finite(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` holds no NaN or inf, read at once (a host sync on a GPU). The sum is finite only
    if every value is (IEEE: NaN, or inf with anything but the opposite inf, stays non-finite; +inf - inf is NaN),
    and it is one op where ``isfinite(...).all()`` is two and a bool: a third of the time for the small
    tensors a CPU env step checks. A sum that overflowed finite values is looked at value by value."""
    return math.isfinite(tensor.sum().item()) or bool(torch.isfinite(tensor).all())


def obs_dim(spec: dict[str, spaces.Box], groups: tuple[str, ...]) -> int:
    """Width of the flat vector made by concatenating ``groups`` of ``spec``."""
    if not groups:  # (it had been torch.cat's "expected a non-empty list of Tensors" at the first step)
        raise ValueError("no observation groups to read (an agent's obs_groups, actor_obs_groups or "
                         f"critic_obs_groups is empty); the env has {sorted(spec)}: name at least one, e.g. [policy]")
    missing = [g for g in groups if g not in spec]
    if missing:
        raise ValueError(f"observation groups {missing} not provided; the env has {sorted(spec)} (check the agent's "
                         "*_obs_groups settings)")
    return sum(int(np.prod(spec[g].shape)) for g in groups)


def flatten_obs(obs: Obs, groups: tuple[str, ...], batch_dims: int = 1) -> torch.Tensor:
    """Concatenate ``groups`` of ``obs`` into ``(*batch, obs_dim)``, in order;
    ``batch_dims=2`` for rollouts ``(steps, num_envs, ...)``."""
    return torch.cat([obs[g].flatten(batch_dims) for g in groups], dim=-1)


def controller_input(obs: Obs, groups: tuple[str, ...], size: int, who: str = "controller",
                     device: torch.device | str | None = None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """What a controller's ``act`` feeds its network: ``groups`` of ``obs`` flattened into ``dtype``
    ``(num_envs, size)`` on ``device`` (numpy arrays and other devices are taken), checked first, so a
    wrong input is an error that says what to give instead of a shape mismatch deep inside."""
    if not isinstance(obs, Mapping):
        raise ContractError(f"{who}.act takes a dict of observation groups {{name: (num_envs, ...) tensor}} with "
                        f"{list(groups)}, got a {type(obs).__name__}")
    missing = [g for g in groups if g not in obs]
    if missing:
        raise ValueError(f"{who}.act: observation group(s) {missing} missing; it reads {list(groups)}, got {sorted(obs)}")
    values = [torch.as_tensor(obs[g]) for g in groups]
    if any(v.dim() < 2 for v in values):
        shapes = {g: tuple(v.shape) for g, v in zip(groups, values)}
        raise ValueError(f"{who}.act: observations are batched, (num_envs, ...); got shapes {shapes} "
                         "(one env: add a leading dimension of 1)")
    parts = [v.to(device=device, dtype=dtype).flatten(1) for v in values]
    x = torch.cat(parts, dim=-1)
    if x.shape[-1] != size:
        widths = ", ".join(f"{g} {p.shape[-1]}" for g, p in zip(groups, parts))
        raise ValueError(f"{who}.act: observation width {x.shape[-1]} ({widths}), but it was trained on {size}: "
                         "another task, or another version of it")
    return x


def reset_mask(mask: Any, rows: int | None = None, who: str = "reset") -> torch.Tensor | None:
    """``mask`` as a bool tensor, one flag per world (None stays None: all worlds). Integers or floats of 0
    and 1, numpy arrays and lists are read as flags too: used as an index, a 0/1 tensor would pick rows 0
    and 1 instead. Anything else, or another length than ``rows``, is refused naming ``who``."""
    if mask is None:
        return None
    if not isinstance(mask, torch.Tensor):
        try:
            mask = torch.as_tensor(np.asarray(mask))
        except (TypeError, ValueError, RuntimeError):  # strings, objects, ragged lists: not flags
            raise ValueError(f"{who}(mask): one True/False flag per world, got {mask!r:.60}") from None
    if mask.dim() != 1 or (rows is not None and mask.shape[0] != rows):
        raise ValueError(f"{who}(mask): one flag per world, shape ({rows if rows is not None else 'num_envs'},); "
                         f"got {tuple(mask.shape)}")
    if mask.dtype == torch.bool:
        return mask
    if mask.is_complex() or not bool(((mask == 0) | (mask == 1)).all()):  # a host sync, for a non-bool mask only
        raise ValueError(f"{who}(mask): flags, True where a world's episode ended (or 0/1); got values "
                         f"{mask.unique()[:4].tolist()}: to reset worlds by index, pass a bool mask of them")
    return mask.bool()


def reset_rows(mask: Any, held: torch.Tensor, who: str = "reset") -> slice | torch.Tensor:
    """The rows of ``held`` (acting state, one row per world) that ``mask`` resets, to index it with: all
    when None, else :func:`reset_mask`'s flags on ``held``'s device. ``who``: the caller's ``Class.reset``, named
    where the mask is not one flag per world (a bare ``reset(mask)`` named no controller)."""
    mask = reset_mask(mask, held.shape[0], who)
    return slice(None) if mask is None else mask.to(held.device)


def moved_by(fn: Callable[[torch.Tensor], torch.Tensor], *held: torch.Tensor | None) -> bool:
    """Whether ``fn``, what ``nn.Module._apply`` does to a module's tensors (``.to()``, ``.cpu()``, ``.cuda()``,
    ``.double()``...), would put any of ``held`` (acting state; None where not made yet) elsewhere: a tensor it
    leaves as it is comes back itself. Controllers let such state go when moved (a new episode at the next act)."""
    return any(t is not None and fn(t) is not t for t in held)


def check_setup(controller: nn.Module) -> None:
    """A controller of one's own that skipped a step of its ``__init__`` is told which (acting and
    exporting call this), not nn.Module's error about an internal attribute."""
    if "_parameters" not in controller.__dict__:
        raise ContractError(f"{type(controller).__name__}.__init__ must call super().__init__() (a Controller is an nn.Module)")
    if getattr(controller, "obs_size", None) is None:
        raise ContractError(f"{type(controller).__name__} must set obs_size in __init__: the width of the flat observation "
                        f"it reads (the sum of its obs_groups' widths, {list(getattr(controller, 'obs_groups', ()))})")


class Controller(nn.Module, ABC):
    """The one policy interface: simulators, datasets and robots all call this.

    ``act(obs)`` returns one action per env for *this* control step, in the
    env's ``action_spec`` units. A controller reads the observation groups named
    in ``obs_groups``, concatenated in that order (so an exported controller has
    one flat input). ``decision_period`` is the number of control steps between
    decisions: 1 for a flat policy, k for a sequence policy that emits k actions
    at once, the skill length for a hierarchical one. Queues, recurrent state and
    the current skill live inside; callers only call ``reset(mask)`` for envs
    whose episode ended. Ours let that state go when a move (``.to(device)``,
    ``.double()``...) would take it elsewhere: every env starts anew at the next
    ``act``; one's own does so in its ``_apply`` with :func:`moved_by`.

    ``forward`` is the pure function that is exported (TorchScript, ONNX):
    stateless controllers map ``x -> action``; stateful ones take and return
    their state explicitly and describe it through ``export_inputs``.
    """

    obs_groups: tuple[str, ...] = ("policy",)
    decision_period: int = 1
    obs_size: int  # width of the flat observation read; set by subclasses

    @torch.no_grad()
    def act(self, obs: Obs) -> torch.Tensor:
        """One action per env for this control step."""
        return self(self.read(obs))

    def read(self, obs: Obs) -> torch.Tensor:
        """``obs`` as this controller's network input (:func:`controller_input`), on its device and in its
        floating dtype (float32 unless ``.double()`` or ``.half()`` moved it)."""
        check_setup(self)
        weights = next((w for w in itertools.chain(self.parameters(), self.buffers()) if w.is_floating_point()),
                       None)
        if weights is None:
            return controller_input(obs, self.obs_groups, self.obs_size, type(self).__name__)
        return controller_input(obs, self.obs_groups, self.obs_size, type(self).__name__, weights.device,
                                weights.dtype)

    def reset(self, mask: torch.Tensor | None = None) -> None:
        """Clear internal state for the envs in ``mask``, one bool per env (all when None); read it with
        :func:`reset_mask`, which also takes 0/1 numbers, numpy arrays and lists. A stateless controller has
        nothing to clear but checks the mask alike, so that a wrong one fails here, not only once the loop
        runs a recurrent controller (it cannot know the number of envs: the length goes unchecked)."""
        reset_mask(mask, who=f"{type(self).__name__}.reset")

    def export_inputs(self, batch_size: int = 1) -> dict[str, torch.Tensor]:
        """Named example inputs of ``forward``, in argument order, for export."""
        return {"obs": torch.zeros(batch_size, self.obs_size)}

    def export_outputs(self) -> list[str]:
        """Names of ``forward``'s outputs, for export."""
        return ["action"]


class Agent(ABC):
    """A learning algorithm as a runner sees it.

    The runner collects transitions with :meth:`act` and hands the agent
    batches of them (a whole rollout for on-policy agents, sampled minibatches
    for off-policy ones). A transition batch is a dict with ``obs`` and
    ``next_obs`` (each an :data:`Obs`, ``next_obs`` taken from
    ``info["final_obs"]``), ``reward``, ``terminated``, ``truncated`` and
    whatever :meth:`act` returned besides ``action`` (e.g. the raw sample).
    Rollout batches have shape ``(steps, num_envs, ...)``; replay minibatches
    ``(batch_size, ...)``.

    An agent is built as ``Agent(observation_spec, action_spec, config, device)``, ``config`` the
    dataclass of its settings (a config's ``agent:`` section). The runner reads ``config.num_steps``
    (rollout length) of on-policy agents and ``config.buffer_size`` and ``config.batch_size`` of
    off-policy ones. One of one's own trains as ``algo=module:Class`` once the class names that
    dataclass as ``config_class`` (``policies.agent_entry``). Optional, read where present:

    - every agent: ``data_parallel`` (below); ``resume_fixed`` (config keys a resume may not change: a
      skill's horizon, a sequence's length; an activation is refused by name for every agent, and our
      agents' learnt values' starts, ``init_*``/``*_init``: one's own lists such settings here);
      ``state_metrics()`` (numbers logged as they stand at an iteration's end, not averaged over its updates
      as ``update``'s are: Skill-Critic's stage);
    - off-policy online: ``random_act(obs)`` (the first ``runner.random_steps`` actions);
      ``sample(replay, batch_size, num_envs)`` (its own minibatch: windows of consecutive steps);
      ``observe(transition)`` (every step's transition as it is stored, an ended episode's last one included:
      HRAC's adjacency graph);
    - pretraining online (skills): ``pretrains = True`` with ``prepare(transitions)``, ``pretrain_update()``
      and ``end_pretraining()``; ``reads_rewards`` (default False: skills learn from actions alone);
    - offline (``offline = True``): ``prepare(transitions)`` returns the rows to train on; ``sample(batch_size)``
      (its own minibatch: goal relabeling); ``reads_rewards`` (default True; False for imitation and relabeling);
    - offline-to-online (``finetune = True``): ``go_online()`` at the phase boundary.
    """

    on_policy: bool
    # Averages its gradients over torchrun's ranks (robolearn/distributed.py); runners refuse
    # to train an agent without it on more than one rank, whose copies would drift apart.
    data_parallel: bool = False

    @abstractmethod
    def act(self, obs: Obs, explore: bool = True) -> dict[str, torch.Tensor]:
        """``{"action": env action, ...extras to store with the transition}``."""

    def reset(self, mask: torch.Tensor | None = None) -> None:
        """Clear per-env acting state (recurrent memory) for envs in ``mask``;
        the runner calls it with the done mask after every env step."""

    @abstractmethod
    def update(self, batch: dict[str, Any]) -> dict[str, float | torch.Tensor]:
        """One update from ``batch``; returns scalar metrics to log (one-element tensors may stay on the
        device: the runner averages them and reads them once per iteration)."""

    @abstractmethod
    def controller(self) -> Controller:
        """The deployable controller (a fresh module; safe to export)."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: networks, optimizers, lr, normalizers."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
