"""Isaac Lab and Isaac Gym (legged_gym) environments as our VecEnv.

Both speak RSL-RL's vec-env contract, in one of three dialects, told apart by
what ``get_observations()`` returns:

- a ``TensorDict`` (or dict) of observation groups: Isaac Lab's
  ``RslRlVecEnvWrapper`` for rsl-rl-lib >= 3, mjlab's wrapper, our
  ``VecEnvAsRslRl``; ``step`` returns ``(obs, rewards, dones, extras)``;
- ``(obs, extras)`` with the other groups in ``extras["observations"]``:
  Isaac Lab's wrapper for rsl-rl-lib 2.x; ``step`` as above, its ``obs`` the
  ``policy`` tensor and ``extras["observations"]`` the rest;
- a tensor: legged_gym's ``LeggedRobot``, whose ``step`` returns ``(obs,
  privileged_obs, rewards, dones, infos)``; ``privileged_obs`` (when not None)
  becomes group ``critic``.

``dones`` covers both endings; ``extras["time_outs"]`` (legged_gym: only with
``cfg.env.send_timeouts``) marks the time limits. We report
``truncated = dones & time_outs`` and ``terminated = dones & ~time_outs``;
masking with ``dones`` matters because legged_gym leaves a stale
``time_outs`` tensor in ``extras`` on steps where no env resets.

**Final observations.** These envs reset finished envs inside ``step`` and
then compute the observations. Isaac Lab built with ``compute_final_obs=True``
(its env config) keeps the finished episodes' last observations, groups as
``obs``'s, in ``extras["final_obs"]``: they are ``info["final_obs"]``, exact.
Otherwise (legged_gym, older Isaac Lab; ``extras["observations"]`` holds the
*new* episode's privileged groups) nothing keeps them: for finished envs
``info["final_obs"]`` is then the observation the env was in *before* this last
step, so V(final_obs) = V(s_{T-1}), the same approximation RSL-RL itself makes
when it bootstraps time-outs. For the other envs it equals ``obs``, as the
interface says.
"""

from __future__ import annotations

import warnings

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from robolearn.interfaces import Obs, Step, VecEnv
from sims.task import checked_action


class RslRlEnvAsVecEnv(VecEnv):
    """An env following RSL-RL's vec-env contract (Isaac Lab, Isaac Gym) as a VecEnv.

    Groups keep their names (``policy``, ``critic``...). Actions go to the env
    unchanged after clipping to ``[-action_limit, action_limit]``; by default
    the env's own clip (Isaac Lab's ``clip_actions``, legged_gym's
    ``cfg.normalization.clip_actions``), else unbounded. ``control_dt`` is read
    from ``env.unwrapped.step_dt`` (Isaac Lab) or ``env.dt`` (legged_gym)
    unless given. ``info["log"]`` merges ``extras["episode"]`` (legged_gym) and
    ``extras["log"]`` (Isaac Lab).
    """

    def __init__(self, env: Any, *, action_limit: float | None = None, control_dt: float | None = None) -> None:
        self.env = env
        self.num_envs = int(env.num_envs)
        self.device = torch.device(env.device)
        self.control_dt = float(control_dt if control_dt is not None else _control_dt(env))
        self.max_episode_steps = int(torch.as_tensor(env.max_episode_length).max())
        limit = action_limit if action_limit is not None else _clip_actions(env)
        self._limit = np.inf if limit is None else float(limit)
        self.action_spec = spaces.Box(-self._limit, self._limit, (int(env.num_actions),), np.float32)
        self._said_unseeded = False
        self._obs = self._observations()
        self.observation_spec = {name: spaces.Box(-np.inf, np.inf, tuple(x.shape[1:]), np.float32)
                                 for name, x in self._obs.items()}

    def reset(self, seed: int | None = None) -> Obs:
        """Seeds the env's generators (``env.seed``) and resets through ``env.reset``
        when it has them (RSL-RL's contract has neither; its envs start reset). legged_gym's envs have no
        ``seed`` (their config's seed is set at creation): a seed is then said to be ignored, once, and the
        env resets, so that ``evaluate`` (seed 0 by default) runs on them."""
        if seed is not None:
            if hasattr(self.env, "seed"):
                self.env.seed(seed)
            elif not hasattr(self.env, "reset"):  # RSL-RL's bare contract: episodes would go on where they are
                raise ValueError(f"{type(self.env).__name__} has neither seed() nor reset(): reset(seed={seed}) can "
                                 "do neither (reset(None) leaves it as it is)")
            elif not self._said_unseeded:
                self._said_unseeded = True
                warnings.warn(f"{type(self.env).__name__} has no seed(): reset(seed={seed}) resets it unseeded (its "
                              "generators were seeded when it was created, by its config's seed)", stacklevel=2)
        if hasattr(self.env, "reset"):
            self.env.reset()
        self._obs = self._observations()
        return self._obs

    def step(self, action: Any) -> Step:
        # numpy and lists too, and a wrong shape said as ours say it (it had failed on `.to` or in the sim)
        action = checked_action(action, self.num_envs, self.action_spec, self.device)
        action = action.clamp(-self._limit, self._limit)
        result = self.env.step(action)
        if len(result) == 5:  # legged_gym: obs, privileged_obs, rewards, dones, infos
            policy, privileged, reward, dones, extras = result
            obs = _legged_gym_groups(policy, privileged)
        else:
            raw, reward, dones, extras = result
            obs = _groups(raw, extras)
        done = dones.bool()
        time_out = extras.get("time_outs", torch.zeros_like(done)).to(self.device).bool() & done
        final = {name: torch.where(_rows(done, x), _last(extras, name, x, self._obs[name]), x)
                 for name, x in obs.items()}
        self._obs = obs
        log = {**extras.get("episode", {}), **extras.get("log", {})}
        return Step(obs, reward.float(), done & ~time_out, time_out, {"final_obs": final, "log": log})

    def close(self) -> None:
        if hasattr(self.env, "close"):
            self.env.close()

    def _observations(self) -> Obs:
        result = self.env.get_observations()
        if isinstance(result, torch.Tensor):  # legged_gym
            return _legged_gym_groups(result, self.env.get_privileged_observations())
        if isinstance(result, tuple):  # rsl-rl-lib 2.x: (policy, extras)
            return _groups(*result)
        return _groups(result, {})


def _last(extras: Mapping[str, Any], name: str, obs: torch.Tensor, before: torch.Tensor) -> torch.Tensor:
    """Group ``name``'s last observation of each finished episode where the env keeps it: Isaac Lab's
    ``extras["final_obs"]`` (``compute_final_obs=True``; it had gone unread, the approximation taken instead),
    else ``before``, the pre-step observation. A ``final_obs`` of another form (per-env lists) is not read."""
    given = extras.get("final_obs")
    last = given[name] if isinstance(given, Mapping) and name in given else None
    return last.to(obs.device, obs.dtype) if isinstance(last, torch.Tensor) and last.shape == obs.shape else before


def _groups(obs: Any, extras: Mapping[str, Any]) -> Obs:
    """Groups of a TensorDict/dict observation, or of a ``policy`` tensor plus
    ``extras["observations"]`` (rsl-rl-lib 2.x)."""
    if isinstance(obs, torch.Tensor):
        return {"policy": obs.clone(), **{k: v.clone() for k, v in extras.get("observations", {}).items()}}
    return {name: obs[name].clone() for name in obs.keys()}


def _legged_gym_groups(obs: torch.Tensor, privileged: torch.Tensor | None) -> Obs:
    groups = {"policy": obs.clone()}
    if privileged is not None:
        groups["critic"] = privileged.clone()
    return groups


def _control_dt(env: Any) -> float:
    unwrapped = getattr(env, "unwrapped", None)
    for owner, name in ((unwrapped, "step_dt"), (env, "step_dt"), (env, "dt")):
        if owner is not None and hasattr(owner, name):
            return float(getattr(owner, name))
    raise ValueError(f"{type(env).__name__} has no step_dt or dt: pass control_dt")


def _clip_actions(env: Any) -> float | None:
    if getattr(env, "clip_actions", None) is not None:
        return float(env.clip_actions)
    normalization = getattr(getattr(env, "cfg", None), "normalization", None)
    return getattr(normalization, "clip_actions", None)


def _rows(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return mask.view(-1, *([1] * (like.dim() - 1)))
