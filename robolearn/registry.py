"""The one place that wires simulators and algorithms together (name -> factory).

``sims`` and ``policies`` never import each other; runners and the CLI build
envs and agents through these functions.
"""

from __future__ import annotations

import inspect
from dataclasses import fields, replace
from typing import Any

import torch

from robolearn.config import EnvConfig, TrainConfig, build_dataclass
from robolearn.interfaces import Agent, ContractError, VecEnv


def make_env(cfg: EnvConfig, num_envs: int | None = None, seed: int | None = None) -> VecEnv:
    """Build the VecEnv described by ``cfg`` (``num_envs`` overrides the config's)."""
    import sims

    return sims.make_env(cfg.task, num_envs=cfg.num_envs if num_envs is None else num_envs, device=cfg.device,
                         num_threads=cfg.num_threads or None, seed=seed,
                         randomization=cfg.randomization, delay=cfg.delay, backend=cfg.backend, **cfg.kwargs)


def evaluation_dynamics(cfg: EnvConfig) -> str:
    """How an env built from ``cfg`` draws its dynamics, for evaluation reports: ``nominal``, or the
    randomized ranges, noise and pushes it runs with (automatic randomization restarts at width 0); then the
    fixed delays of ``env.delay``, which ``--nominal`` keeps (a report of 'nominal' alone had hidden them)."""
    from sims.delay import Delay

    delay = build_dataclass(Delay, cfg.delay or {}, "env.delay.")
    fixed = [f"{f.name} {getattr(delay, f.name)}" for f in fields(Delay) if getattr(delay, f.name)]
    return _drawn_dynamics(cfg) + (f"; env.delay {', '.join(fixed)} (control steps)" if fixed else "")


def _drawn_dynamics(cfg: EnvConfig) -> str:
    """The randomization part of :func:`evaluation_dynamics`."""
    import sims
    from sims.randomization import Randomization

    if cfg.task.startswith(sims.MJLAB_PREFIX):
        return "the mjlab task's own events"
    if not cfg.randomization:
        return "nominal"
    settings = build_dataclass(Randomization, cfg.randomization, "env.randomization.")  # "1e-3" read as a number
    if settings.auto:
        start = settings.width or 0
        return ("nominal (automatic randomization starts a new env at width 0)" if not start else
                f"automatic randomization from width {start:.2f}, widening or narrowing as episodes succeed")
    if settings.width == 0:
        return "nominal (randomization at width 0)"
    defaults, drawn = Randomization(), []
    for f in fields(Randomization):  # the ranges (switches such as dynamics_pool draw nothing themselves)
        value, default = getattr(settings, f.name), getattr(defaults, f.name)
        if isinstance(default, tuple) and tuple(value) != default:
            drawn.append(f"{f.name} {list(value)}")
    if settings.obs_noise_std:
        drawn.append(f"obs_noise_std {settings.obs_noise_std}")
    if settings.push_velocity:  # (with push_every_s: one without the other is refused)
        drawn.append(f"push_velocity {settings.push_velocity:g} every {settings.push_every_s:g} s")
    if not drawn:
        return "nominal"
    return f"randomized{'' if settings.width is None else f' at width {settings.width:.2f} of'}: " + ", ".join(drawn)


def at_trained_width(cfg: EnvConfig, adaptation: dict[str, Any] | None) -> EnvConfig:
    """``cfg`` with automatic randomization fixed at the width its training reached (``adaptation``: a
    checkpoint's ``env_adaptation``), so a run is evaluated on the dynamics it trained for: a new env would
    start over at width 0, nominal. Any other ``cfg`` as it is."""
    from sims.randomization import Randomization

    if not cfg.randomization or not adaptation or "width" not in adaptation:
        return cfg
    if not build_dataclass(Randomization, cfg.randomization, "env.randomization.").auto:
        return cfg
    return replace(cfg, randomization={**cfg.randomization, "auto": False, "width": float(adaptation["width"])})


def resolve_backend(cfg: EnvConfig) -> None:
    """Set ``cfg.backend`` and ``cfg.device`` to what will run (``sims.resolve_backend``: warp on a missing
    GPU runs MuJoCo on the CPU), so a run records, and later rebuilds, the simulator it used. Only our
    own tasks choose a backend (Gymnasium envs bring theirs; mjlab's is MuJoCo Warp, recorded as warp)."""
    import sims

    if cfg.task.startswith(sims.GYM_PREFIX):
        return
    if cfg.task.startswith(sims.MJLAB_PREFIX):
        cfg.backend = "warp"  # what runs it, whatever was asked: an mjlab task has no other
        return
    backend, device = sims.resolve_backend(cfg.backend, cfg.device)
    cfg.backend, cfg.device = backend, str(device)


def make_agent(cfg: TrainConfig, env: VecEnv) -> Agent:
    """Build the agent named by ``cfg.algo`` for ``env``'s observation and action specs."""
    from policies import agent_entry
    from robolearn.learning_rates import tag_configured

    _, agent_cls = agent_entry(cfg.algo)
    if inspect.isabstract(agent_cls):  # not Python's "Can't instantiate abstract class"
        raise ContractError(f"algo={cfg.algo}: {agent_cls.__name__} does not implement "
                            f"{', '.join(sorted(agent_cls.__abstractmethods__))}, which a robolearn Agent must "
                            "(robolearn/interfaces.py says what each does)")
    agent = agent_cls(env.observation_spec, env.action_spec, cfg.agent, torch.device(env.device))
    tag_configured(agent)  # so that a resume with other learning rates applies them
    return agent


def stagger_episodes(env: VecEnv, env_cfg: EnvConfig, seed: int, resumed: bool = False) -> None:
    """After a reset of every world of a training env: with ``env.random_episode_start``, start each episode
    clock at a random step (:func:`sims.task.start_at_random_steps`); an env that keeps its own time limit is
    refused, so a runner calls this once as it builds, to say so before anything trains. A ``resumed`` run
    staggers its clocks wherever they can be set, whatever the key says: the run it continues had episodes
    of every age by then, and restarting all of them on one step would put the whole batch through its
    start-up at once, again every episode length (a dip in the logged curves until falls spread them)."""
    from sims.task import episode_clock, start_at_random_steps

    if env_cfg.random_episode_start or (resumed and episode_clock(env) is not None):
        start_at_random_steps(env, seed)
