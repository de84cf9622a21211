"""What is refused before a run builds anything that runs: settings that fit the config's types and ranges
but not the agent, the env or the number of ranks they meet (an algorithm of one's own missing what the runner
reads, a decision period longer than an episode, more minibatches than a rollout holds, a replay too short
for the windows an agent cuts); and warned of: a flat agent that cannot see a goal that changes from episode to
episode (:func:`warn_if_goal_unread`). Each says the key to change; the runner and the command line call them.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

from robolearn.config import ConfigError, TrainConfig
from robolearn.interfaces import Agent, VecEnv


def check_data_parallel(cfg: TrainConfig, ranks: int, said: str) -> None:
    """Refuse ``ranks`` > 1 processes (``said``: how the user asked for them) unless ``cfg.algo`` averages its
    gradients over them (``data_parallel``) and the run is online without a dataset: the ranks' copies of
    another agent would drift apart. The command line asks before it starts the ranks, the runners again."""
    from policies import AGENTS, agent_entry

    if ranks <= 1 or (getattr(agent_entry(cfg.algo)[1], "data_parallel", False) and not cfg.dataset):
        return
    parallel = sorted(name for name, (_, cls) in AGENTS.items() if getattr(cls, "data_parallel", False))
    raise ConfigError(f"{said}: algo '{cfg.algo}' does not average its gradients over ranks (data-parallel: "
                      f"{parallel}, online runs without a dataset only); train it in one process")


def check_agent_contract(cfg: TrainConfig, agent: Agent) -> None:
    """What the online runner reads of an agent and its settings, checked before anything runs: an algorithm
    of one's own missing one is told which, not an AttributeError deep in the loop."""
    name = type(agent).__name__
    if not isinstance(getattr(agent, "on_policy", None), bool):
        raise ConfigError(f"algo '{cfg.algo}': {name} must say on_policy = True (PPO-like: it learns from whole "
                          "rollouts) or False (SAC-like: from replay minibatches)")
    needs = ("num_steps",) if agent.on_policy else ("buffer_size", "batch_size")
    missing = [key for key in needs if not hasattr(cfg.agent, key)]
    if missing:
        why = "steps per env in each rollout" if agent.on_policy else "the replay buffer's rows and the minibatch size"
        raise ConfigError(f"algo '{cfg.algo}': {type(cfg.agent).__name__} needs {', '.join(missing)} ({why}), "
                          "which the runner reads")


DECISION_KEYS = ("sequence_length", "horizon", "subgoal_period")  # our agents' settings that are their decision period


def check_decision_period(cfg: TrainConfig, env: VecEnv, agent: Agent | None = None) -> None:
    """A controller deciding every k steps (a chunk, a skill, a subgoal) with k beyond an episode never plays a
    decision out: refused by name before anything runs (SRL with 2000-step sequences on 500-step episodes
    ran into NaN; a skill horizon of 150 on 100-step episodes trained on nothing but cut-off skills). Called
    before the agent is built, from its settings (:data:`DECISION_KEYS`: a sequence critic's networks grow with
    K, and K=10**9 had failed on a 2 TB allocation first; not where it blends its sequences every step, a sequence
    critic's ``execution: ensemble``), and with ``agent``, from its controller (one's own, whose ``horizon`` may
    be anything: a planning horizon had been refused as its decision period)."""
    from policies import AGENTS

    limit = getattr(env, "max_episode_steps", None)
    if agent is None:
        every_step = getattr(cfg.agent, "execution", None) == "ensemble"  # (its decision period is 1)
        ours = cfg.algo in AGENTS  # whose settings of these names are their decision period
        periods = [] if every_step or not ours else [(getattr(cfg.agent, key, None), [f"agent.{key}"])
                                                     for key in DECISION_KEYS]
    else:
        period = int(getattr(agent.controller(), "decision_period", 1))
        periods = [(period, [f"agent.{key}" for key in DECISION_KEYS if getattr(cfg.agent, key, None) == period]
                    or ["its decision period"])]
    for period, keys in periods:
        if limit and isinstance(period, int) and period > limit:
            raise ConfigError(f"algo '{cfg.algo}' decides every {period} steps ({', '.join(keys)}), more than an "
                              f"episode's {limit} (env.kwargs.max_episode_steps, or the task's default): no decision "
                              f"would play out; lower {keys[0]}")


def check_minibatches(cfg: TrainConfig, on_policy: bool, num_envs: int) -> None:
    """On-policy minibatches split a rollout's samples (a recurrent policy's: its envs, whole sequences): more
    than there are would train on minibatches of one sample, or on fewer than asked, without a word.
    ``num_envs``: each rank's. ``train --nproc`` asks before it starts the ranks, the runner again."""
    minibatches, steps = getattr(cfg.agent, "num_minibatches", None), getattr(cfg.agent, "num_steps", None)
    if not on_policy or not isinstance(minibatches, int) or not isinstance(steps, int):
        return
    recurrent = bool(getattr(cfg.agent, "recurrent", False))
    available = num_envs if recurrent else num_envs * steps
    if minibatches > available:
        what = "envs (a recurrent policy's minibatches are whole envs' sequences)" if recurrent else \
            f"samples (env.num_envs {num_envs} x agent.num_steps {steps})"
        raise ConfigError(f"agent.num_minibatches ({minibatches}) is more than a rollout's {available} {what}: lower it "
                          "or raise env.num_envs")


def check_replay_windows(cfg: TrainConfig, agent: Agent, num_envs: int, world_size: int) -> None:
    """An agent that cuts windows of each env's consecutive steps from the replay (a sequence of K actions, a
    skill, a subgoal period): the buffer must hold whole rows of envs, and the random warm-up must leave
    ``agent.replay_window`` steps of each env before the first update. Refused by key before anything runs,
    not at that update after pretraining and warm-up. ``num_envs``: each rank's."""
    per_step = num_envs * world_size  # env steps per vector step, all ranks: what random_steps counts
    if cfg.agent.buffer_size % num_envs:
        raise ConfigError(f"agent.buffer_size ({cfg.agent.buffer_size}) must be a multiple of env.num_envs "
                          f"({num_envs}): {cfg.algo} cuts windows of each env's consecutive steps from the replay buffer")
    window = int(getattr(agent, "replay_window", 1))
    if cfg.runner.utd_ratio == 0:  # no update ever samples a window (said by the runner)
        return
    # Vector steps before the first update: the warm-up (at least one), then, with utd_ratio x num_envs < 1,
    # those that build up the first whole update
    lag = math.ceil(1.0 / (cfg.runner.utd_ratio * num_envs) - 1e-9) - 1 if cfg.runner.utd_ratio * num_envs < 1 else 0
    warmup = max(1, -(-cfg.runner.random_steps // per_step)) + lag
    if warmup < window:
        raise ConfigError(f"runner.random_steps = {cfg.runner.random_steps} leaves {warmup} step(s) of each env "
                          f"in the replay before the first update; {cfg.algo} samples windows of {window}: set "
                          f"runner.random_steps to at least {(window - lag - 1) * per_step + 1} ({window - lag} steps x "
                          f"{per_step} envs{' over all ranks' if world_size > 1 else ''}"
                          f"{f', and {lag} more build up the first update' if lag else ''})")


def check_fresh_replay(cfg: TrainConfig, resume: object) -> None:
    """``--fresh-replay`` goes with ``--resume`` of a run that learns from a replay buffer (off-policy, or an
    offline-to-online fine-tune): anywhere else it would change nothing, which is said rather than ignored."""
    from policies import agent_entry

    if resume is None:
        raise ConfigError("--fresh-replay goes with --resume RUN: a new run's replay buffer starts empty anyway")
    entry = agent_entry(cfg.algo)[1]
    if getattr(entry, "on_policy", False) or (getattr(entry, "offline", False) and not getattr(entry, "finetune", False)):
        kind = "learns on-policy" if getattr(entry, "on_policy", False) else "trains offline on its dataset"
        raise ConfigError(f"--fresh-replay: algo '{cfg.algo}' {kind} and keeps no replay buffer; resume without it")


GOAL_CONDITIONED = "gcbc, gciql, hiql or ota offline (configs gc*_, hiql_, ota_), hrac online (configs hrac_)"


def warn_if_goal_unread(cfg: TrainConfig, agent: Agent, env: VecEnv) -> None:
    """A flat agent reads the observation groups its settings name (``policy`` by default): on a task with a
    ``goal`` group that changes from episode to episode (the mazes' ``goals: eval`` or ``train``), one that
    does not read it learns without knowing where to go, which it had done without a word. Said once, naming
    the settings that feed it the goal and the goal-conditioned algorithms; a task with one goal
    (:attr:`sims.task.Task.fixed_goal`) and a controller that says no groups (one of one's own) are left be."""
    from robolearn.evaluate import unwrapped_task

    groups = getattr(agent.controller(), "obs_groups", None)
    if "goal" not in env.observation_spec or groups is None or "goal" in groups:
        return
    if getattr(unwrapped_task(env), "fixed_goal", False):
        return
    settings = ({field.name: getattr(cfg.agent, field.name) for field in dataclasses.fields(cfg.agent)}
                if dataclasses.is_dataclass(cfg.agent) else vars(cfg.agent))  # (slots=True: no vars)
    unfed = {key: value for key, value in settings.items()  # (a list of groups: one's own may hold None, or text)
             if key.endswith("obs_groups") and isinstance(value, (list, tuple)) and "goal" not in value}
    feed = " ".join(f"agent.{key}=[{','.join((*value, 'goal'))}]" for key, value in unfed.items())
    warnings.warn(f"env.task={cfg.env.task} has a 'goal' observation group that changes from episode to episode, "
                  f"and algo '{cfg.algo}' reads only {list(groups)}: its controller cannot know the goal. "
                  f"{f'Feed it the goal ({feed}), or train' if unfed else 'Train'} a goal-conditioned algorithm: "
                  f"{GOAL_CONDITIONED}; or give the task one goal (the mazes' env.kwargs.goals=fixed)", stacklevel=3)
