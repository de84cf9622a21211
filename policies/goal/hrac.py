"""HRAC (Zhang et al. 2020, "Generating Adjacency-Constrained Subgoals in Hierarchical
Reinforcement Learning"): online goal-conditioned HRL in HIRO's two-level form, with the
high level's subgoals held to the ``k``-step adjacent region of the current state.

Every ``c`` = ``subgoal_period`` steps the high level ``pi_h(s, g)`` picks a subgoal offset
``d`` in ``[-1, 1]^G`` (times ``subgoal_range``, in goal space: the first ``G`` state
features, ``phi(s)``); the low level then reaches for the target ``T = phi(s_t) + d``,
seeing ``(s, T - phi(s))`` (HIRO's relative subgoal with its goal transition
``g' = phi(s) + g - phi(s')``, held as the absolute ``T``), and is rewarded
``-|phi(s') - T|``. The high level learns from ``(s_t, g, d, R, s_{t+c})`` with the env's
rewards over the ``c`` steps (:func:`policies.skills.windows.sample_skill_transitions`:
discounted per step, bootstrapped with ``gamma^c``). Both levels are TD3
(:mod:`policies.td3_learner`); the high level trains once per ``c`` low-level updates.

The adjacency constraint (:mod:`policies.goal.adjacency`): the steps the agent takes build
the graph of visited goal-space cells; every ``adjacency_every`` updates the adjacency
network is trained on it for ``adjacency_updates`` steps, and from then on the high level's
actor loss adds ``eta * max(|psi(phi(s)) - psi(phi(s) + d)| - eps, 0)``. With
``adjacency: false`` the same agent runs without it (the paper's HIRO-like baseline).
Left out: HIRO's off-policy correction of high-level actions (relabeling ``d`` with the
candidate that best explains the low level's later actions); both variants here run
without it, so the comparison isolates the constraint.

The controller (:class:`policies.skills.controller.SkillController`) holds ``T`` as its
skill: one exported module, ``(obs, target, step) -> (action, target, step)``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from robolearn.interfaces import Agent, Controller, Obs, flatten_obs, obs_dim, reset_rows
from robolearn.storage import ReplayBuffer
from policies.goal.adjacency import AdjacencyGraph, AdjacencyNetwork, sample_pairs
from policies.modules import ActionScaler
from policies.skills.controller import SkillController
from policies.skills.windows import sample_skill_transitions
from policies.td3_learner import TD3Learner, TD3Settings


@dataclass
class HRACConfig:
    subgoal_period: int = 10  # c: env steps per subgoal
    subgoal_range: tuple[float, ...] = (2.0, 2.0)  # max |offset| per goal dimension
    goal_dim: int = 2  # phi(s) = s[:goal_dim], the space of obs["goal"]
    gamma: float = 0.99  # both levels, per env step
    batch_size: int = 256
    buffer_size: int = 1_000_000
    hidden: tuple[int, ...] = (256, 256)  # both levels' actors and critics
    actor_lr: float = 1e-4
    critic_lr: float = 1e-3
    tau: float = 0.005
    policy_delay: int = 2
    target_noise: float = 0.2
    target_noise_clip: float = 0.5
    high_noise: float = 0.2  # exploration noise std, in [-1, 1] action units
    low_noise: float = 0.1
    high_reward_scale: float = 1.0
    low_reward_scale: float = 1.0
    # the adjacency constraint
    adjacency: bool = True
    adjacency_k: int = 10  # cell crossings (see policies.goal.adjacency)
    adjacency_cell: float = 0.1
    adjacency_weight: float = 20.0  # eta
    adjacency_margin: float = 1.0  # eps_k
    adjacency_delta: float = 0.2
    adjacency_hidden: tuple[int, ...] = (128, 128)
    adjacency_embedding: int = 32
    adjacency_lr: float = 2e-4
    adjacency_every: int = 5_000  # updates between trainings of the adjacency network
    adjacency_updates: int = 100  # its gradient steps per training
    adjacency_batch_size: int = 512
    state_groups: tuple[str, ...] = ("policy",)  # the low level's input (and phi's source)
    goal_groups: tuple[str, ...] = ("goal",)  # what the high level sees besides the state


def check_config(cfg: HRACConfig) -> None:
    """Raise naming the first bad value (the CLI prints it as one line)."""
    for key in ("subgoal_period", "goal_dim", "batch_size", "policy_delay", "adjacency_k", "adjacency_every",
                "adjacency_updates", "adjacency_batch_size", "adjacency_embedding"):
        if getattr(cfg, key) < 1:
            raise ValueError(f"agent.{key} must be >= 1, got {getattr(cfg, key)}")
    if len(cfg.subgoal_range) != cfg.goal_dim or not all(r > 0 for r in cfg.subgoal_range):
        raise ValueError(f"agent.subgoal_range needs goal_dim = {cfg.goal_dim} positive values, got {cfg.subgoal_range}")
    for key in ("adjacency_cell", "adjacency_margin", "actor_lr", "critic_lr", "adjacency_lr"):
        if not getattr(cfg, key) > 0:
            raise ValueError(f"agent.{key} must be > 0, got {getattr(cfg, key)}")
    if not 0 < cfg.gamma <= 1:
        raise ValueError(f"agent.gamma must be in (0, 1], got {cfg.gamma}")


class HighSubgoal(nn.Module):
    """The exported high level: ``[s, g] -> T = phi(s) + range * tanh(actor([s, g]))``."""

    def __init__(self, actor: nn.Module, goal_dim: int, subgoal_range: torch.Tensor) -> None:
        super().__init__()
        self.actor, self.goal_dim = actor, goal_dim
        self.register_buffer("subgoal_range", subgoal_range)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return obs[:, : self.goal_dim] + self.subgoal_range * torch.tanh(self.actor(obs))


class LowReach(nn.Module):
    """The exported low level: ``([s, g], T, one_hot(k)) -> pre-tanh action of actor([s, T - phi(s)])``."""

    def __init__(self, actor: nn.Module, state_dim: int, goal_dim: int) -> None:
        super().__init__()
        self.actor, self.state_dim, self.goal_dim = actor, state_dim, goal_dim

    def forward(self, obs: torch.Tensor, target: torch.Tensor, one_hot: torch.Tensor) -> torch.Tensor:
        state = obs[:, : self.state_dim]
        return self.actor(torch.cat([state, target - state[:, : self.goal_dim]], dim=-1))


class HRAC(Agent):
    on_policy = False
    # subgoals learnt to be held c steps, as offsets scaled by subgoal_range (in the replay too): a resume keeps both
    resume_fixed = ("subgoal_period", "subgoal_range")

    def __init__(self, observation_spec: dict[str, spaces.Box], action_spec: spaces.Box, cfg: HRACConfig,
                 device: torch.device) -> None:
        if len(action_spec.shape) != 1:
            raise ValueError(f"HRAC expects a flat action_spec, got shape {action_spec.shape}")
        check_config(cfg)
        self.cfg, self.device = cfg, torch.device(device)
        self.state_groups, self.high_groups = tuple(cfg.state_groups), (*cfg.state_groups, *cfg.goal_groups)
        missing = [g for g in self.high_groups if g not in observation_spec]
        if missing:
            raise ValueError(f"HRAC needs observation groups {list(self.high_groups)}; the task has no {missing} "
                             f"(a goal-conditioned task such as point_maze_medium)")
        self.state_dim = obs_dim(observation_spec, self.state_groups)
        self.high_dim = obs_dim(observation_spec, self.high_groups)
        if cfg.goal_dim > self.state_dim:
            raise ValueError(f"agent.goal_dim = {cfg.goal_dim} exceeds the state's {self.state_dim} features")
        task_goal = self.high_dim - self.state_dim  # subgoals live where the task's goals do: phi(s) = s[:goal_dim]
        if cfg.goal_groups and cfg.goal_dim != task_goal:
            raise ValueError(f"agent.goal_dim = {cfg.goal_dim}, but the task's goal ({', '.join(cfg.goal_groups)}) has "
                             f"{task_goal} features: subgoals are points of the goal's space; set agent.goal_dim="
                             f"{task_goal}")
        self.goal_dim, self.period = cfg.goal_dim, cfg.subgoal_period
        self.subgoal_range = torch.tensor(cfg.subgoal_range, dtype=torch.float32, device=self.device)
        self.scaler = ActionScaler(action_spec).to(self.device)
        settings = TD3Settings(hidden=tuple(cfg.hidden), actor_lr=cfg.actor_lr, critic_lr=cfg.critic_lr, tau=cfg.tau,
                               policy_delay=cfg.policy_delay, target_noise=cfg.target_noise,
                               target_noise_clip=cfg.target_noise_clip)
        self.high = TD3Learner(self.high_dim, cfg.goal_dim, settings, self.device)
        self.low = TD3Learner(self.state_dim + cfg.goal_dim, action_spec.shape[0], settings, self.device)
        self.graph = AdjacencyGraph(cfg.adjacency_cell, cfg.adjacency_k)
        self.adjacency = AdjacencyNetwork(cfg.goal_dim, tuple(cfg.adjacency_hidden), cfg.adjacency_embedding,
                                          cfg.adjacency_margin, cfg.adjacency_delta).to(self.device).requires_grad_(False)
        self.adjacency_optimizer = torch.optim.Adam(self.adjacency.parameters(), lr=cfg.adjacency_lr)
        self.adjacency_trained = False
        self.updates = 0
        # acting state, per env: the target T, the offset d it came from, the step in the subgoal
        self.target: torch.Tensor | None = None
        self.offset: torch.Tensor | None = None
        self.step: torch.Tensor | None = None

    # -- acting -------------------------------------------------------------------------------

    @torch.no_grad()
    def act(self, obs: Obs, explore: bool = True) -> dict[str, torch.Tensor]:
        """A new subgoal where the last one has run ``c`` steps, then the low level's action; the
        offset (``skill``), the step in it and the target go into the replay with the transition."""
        return self._act(obs, explore, random=False)

    @torch.no_grad()
    def random_act(self, obs: Obs) -> dict[str, torch.Tensor]:
        """The runner's warm-up (``runner.random_steps``): uniform offsets and uniform actions."""
        return self._act(obs, True, random=True)

    def _act(self, obs: Obs, explore: bool, random: bool) -> dict[str, torch.Tensor]:
        state = flatten_obs(obs, self.state_groups)
        position = state[:, : self.goal_dim]
        n = state.shape[0]
        if self.step is None or self.step.shape[0] != n:
            self.target, self.offset = state.new_zeros(n, self.goal_dim), state.new_zeros(n, self.goal_dim)
            self.step = torch.zeros(n, dtype=torch.long, device=state.device)
        new = (self.step == 0).nonzero().squeeze(1)
        if len(new):
            if random:
                offset = torch.rand(len(new), self.goal_dim, device=state.device) * 2 - 1
            else:
                offset = self.high.act(flatten_obs(obs, self.high_groups)[new], self.cfg.high_noise if explore else 0.0)
            self.offset[new] = offset
            self.target[new] = position[new] + self.subgoal_range * offset
        if random:
            action = torch.rand(n, self.scaler.scale.shape[0], device=state.device) * 2 - 1
        else:
            action = self.low.act(self._low_input(state, self.target), self.cfg.low_noise if explore else 0.0)
        out = {"action": self.scaler(action), "skill": self.offset.clone(), "skill_step": self.step.clone(),
               "target": self.target.clone()}
        self.step = (self.step + 1) % self.period
        return out

    def _low_input(self, state: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return torch.cat([state, target - state[:, : self.goal_dim]], dim=-1)

    def reset(self, mask: torch.Tensor | None = None) -> None:
        """Envs in ``mask`` start a new subgoal at their next step."""
        if self.step is not None:
            self.step[reset_rows(mask, self.step, f"{type(self).__name__}.reset")] = 0

    @torch.no_grad()
    def observe(self, transition: dict[str, Any]) -> None:
        """Each step taken goes into the adjacency graph, from the transition the runner stores: an ended
        episode's step into its last observation too (acting sees the next episode's first instead), so the
        goal's cell, reached as an episode terminates, is in the graph."""
        goal = slice(0, self.goal_dim)
        self.graph.add(flatten_obs(transition["obs"], self.state_groups)[:, goal],
                       flatten_obs(transition["next_obs"], self.state_groups)[:, goal])

    # -- learning -----------------------------------------------------------------------------

    @property
    def replay_window(self) -> int:
        """Steps of each env the replay must hold before the first :meth:`sample`: one subgoal period played
        out, and the step after it (high-level transitions are cut from ended periods only)."""
        return self.period + 1

    def sample(self, replay: ReplayBuffer, batch_size: int, num_envs: int) -> dict[str, Any]:
        """Low-level steps, and high-level transitions cut from them when the high level trains next."""
        batch: dict[str, Any] = {"low": replay.sample(batch_size)}
        if self.updates % self.period == 0:
            batch["high"] = sample_skill_transitions(replay, batch_size, num_envs, self.period, self.cfg.gamma,
                                                     self.high_groups)
        return batch

    def update(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        cfg = self.cfg
        metrics: dict[str, torch.Tensor] = {}
        low = batch["low"]
        state, next_state = flatten_obs(low["obs"], self.state_groups), flatten_obs(low["next_obs"], self.state_groups)
        target = low["target"]
        reward = -cfg.low_reward_scale * (next_state[:, : self.goal_dim] - target).norm(dim=-1)
        discount = cfg.gamma * (1.0 - low["terminated"].float())
        for key, value in self.low.update(self._low_input(state, target), self.scaler.normalize(low["action"]), reward,
                                          discount, self._low_input(next_state, target)).items():
            metrics[f"low_{key}"] = value
        if "high" in batch:
            high = batch["high"]
            penalty = self._adjacency_penalty if cfg.adjacency and self.adjacency_trained else None
            for key, value in self.high.update(flatten_obs(high["obs"], self.high_groups), high["skill"],
                                               cfg.high_reward_scale * high["reward"], high["discount"],
                                               flatten_obs(high["next_obs"], self.high_groups), penalty).items():
                metrics[f"high_{key}"] = value
        self.updates += 1
        if cfg.adjacency and self.updates % cfg.adjacency_every == 0 and len(self.graph) > 1:
            metrics["adjacency_loss"] = self.train_adjacency()
        return metrics

    def _adjacency_penalty(self, obs: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
        """``eta * max(|psi(phi(s)) - psi(phi(s) + d)| - eps, 0)`` (eq. 8); psi's weights stay fixed here."""
        position = obs[:, : self.goal_dim]
        return self.cfg.adjacency_weight * self.adjacency.penalty(position, position + self.subgoal_range * offset)

    def train_adjacency(self) -> torch.Tensor:
        """``adjacency_updates`` steps of eq. 7 on pairs of visited cells; returns the last loss."""
        cfg = self.cfg
        reachable = self.graph.reachable()
        centers = self.graph.centers().to(self.device)
        self.adjacency.requires_grad_(True)
        # Drawn from torch's stream, which the run seeds and its checkpoints restore: each seed samples its
        # own pairs, and a resume the pairs the run would have
        rng = np.random.default_rng(int(torch.randint(2**62, (1,))))
        for _ in range(cfg.adjacency_updates):
            a, b = sample_pairs(reachable, cfg.adjacency_batch_size, rng)
            label = reachable[a, b].to(self.device)
            loss = self.adjacency.loss(centers[a], centers[b], label)
            self.adjacency_optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.adjacency_optimizer.step()
        self.adjacency.requires_grad_(False)
        self.adjacency_trained = True
        return loss.detach()

    # -- the controller and checkpoints -------------------------------------------------------

    def controller(self) -> Controller:
        """Deterministic levels; the target ``T`` is the held skill, renewed every ``c`` steps."""
        return SkillController(nn.Identity(), HighSubgoal(copy.deepcopy(self.high.actor), self.goal_dim,
                                                          self.subgoal_range.clone()),
                               LowReach(copy.deepcopy(self.low.actor), self.state_dim, self.goal_dim),
                               copy.deepcopy(self.scaler), self.period, self.goal_dim, self.high_groups, self.high_dim)

    def state_dict(self) -> dict[str, Any]:
        return {"high": self.high.state_dict(), "low": self.low.state_dict(), "graph": self.graph.state_dict(),
                "adjacency": self.adjacency.state_dict(), "adjacency_optimizer": self.adjacency_optimizer.state_dict(),
                "adjacency_trained": torch.tensor(self.adjacency_trained), "updates": torch.tensor(self.updates)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.high.load_state_dict(state["high"])
        self.low.load_state_dict(state["low"])
        self.graph.load_state_dict(state["graph"])
        self.adjacency.load_state_dict(state["adjacency"])
        self.adjacency_optimizer.load_state_dict(state["adjacency_optimizer"])
        self.adjacency_trained = bool(state["adjacency_trained"])
        self.updates = int(state["updates"])
