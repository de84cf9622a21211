"""Learning rates changed on a resume take effect.

An optimizer's ``load_state_dict`` puts back the learning rates it saved, so ``--resume RUN
agent.critic_lr=1e-5`` had been announced ("resumed with changed settings") and then ignored. Each
parameter group is tagged, when the agent is built, with the rate its config gave it
(``configured_lr``); the tag is saved with the optimizer. On a resume, a group whose tag from the
checkpoint differs from the fresh agent's takes the new rate: a constant rate becomes it, a schedule
(IQL's cosine) goes on from the step it had reached with the new base, and a rate held in a tensor
(PPO's, adaptive or fixed) restarts from it. A group that changes its rate for a new phase
(offline-to-online fine-tuning's ``go_online``) sets the tag with it (:func:`set_configured`). In a
checkpoint written before the tags, a plain rate is its own configured one (a schedule's ``initial_lr``);
PPO's adapted tensor rate is kept on that first resume (said where the config's rate changed), and
tagged from then on.

Found by walking the agent's attributes (optimizers live on the agent or on learners it holds),
because agents of one's own keep theirs under any name.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch

TAG = "configured_lr"
_OPAQUE = ("torch", "numpy", "mujoco", "mujoco_warp", "warp", "gymnasium", "tensordict", "builtins")


def _reachable(root: Any, depth: int = 5) -> Iterator[Any]:
    """Objects reachable from ``root`` through attributes, dicts, lists and tuples (each once), not
    looking inside library objects other than torch modules (tensors, models, envs)."""
    seen: set[int] = set()
    stack = [(root, 0)]
    while stack:
        obj, level = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        yield obj
        if level >= depth or isinstance(obj, (torch.Tensor, torch.optim.Optimizer)):
            continue
        if isinstance(obj, (dict, list, tuple)) and len(obj) > 1000:  # data (a list of transitions), not parts
            continue
        if isinstance(obj, dict):
            children = list(obj.values())
        elif isinstance(obj, (list, tuple)):
            children = list(obj)
        elif isinstance(obj, torch.nn.Module) or (hasattr(obj, "__dict__")
                                                  and type(obj).__module__.split(".")[0] not in _OPAQUE):
            children = list(vars(obj).values())
        else:
            continue
        stack.extend((child, level + 1) for child in children)


def optimizers(agent: Any) -> list[torch.optim.Optimizer]:
    return [obj for obj in _reachable(agent) if isinstance(obj, torch.optim.Optimizer)]


def tag_configured(agent: Any) -> None:
    """Tag every parameter group of a freshly built ``agent`` with the rate its config gave it."""
    for optimizer in optimizers(agent):
        for group in optimizer.param_groups:
            group.setdefault(TAG, float(group["lr"]))


def set_configured(group: dict[str, Any], lr: float) -> None:
    """Set a group's rate and its tag: a new phase's configured rate."""
    group["lr"] = group[TAG] = float(lr)


def configured(agent: Any) -> list[list[float | None]]:
    """The tags of every group of every optimizer of ``agent``, in a fixed order."""
    return [[group.get(TAG) for group in optimizer.param_groups] for optimizer in optimizers(agent)]


def apply_changed(agent: Any, before_load: list[list[float | None]]) -> int:
    """After ``agent.load_state_dict``: give every group whose loaded tag differs from the fresh agent's
    (``before_load``, from :func:`configured` before the load) its new rate (see the module docstring), and
    tag untagged groups (an older checkpoint's) with theirs; return how many groups kept a saved rate for
    want of a tag (PPO's adapted one)."""
    parts = list(_reachable(agent))
    schedules = [obj for obj in parts if isinstance(obj, torch.optim.lr_scheduler.LRScheduler)]
    untagged = 0
    restarted: set[int] = set()
    for optimizer, fresh in zip((obj for obj in parts if isinstance(obj, torch.optim.Optimizer)), before_load):
        schedule = next((s for s in schedules if s.optimizer is optimizer), None)
        for index, (group, new) in enumerate(zip(optimizer.param_groups, fresh)):
            lr, old = group["lr"], group.get(TAG)
            if old is None and not isinstance(lr, torch.Tensor):  # saved before the tags: a plain rate is its
                old = float(group.get("initial_lr", lr))  # configured one (a schedule's base: initial_lr)
            if new is None:  # an agent built without tags (not through make_agent)
                continue
            if old is not None and math.isclose(old, new, rel_tol=1e-6):  # (a GPU run's tag is a float32's)
                group[TAG] = new
                continue
            group[TAG] = new
            if old is None:  # PPO's tensor rate saved before the tags: adapted, so its configured one is unknown
                untagged += 1
                continue
            if isinstance(lr, torch.Tensor):  # PPO's rate, one tensor shared by its groups: restarts at the new one
                if id(lr) not in restarted:
                    restarted.add(id(lr))
                    with torch.no_grad():
                        lr.fill_(new)
            else:  # the schedule's factor at the step it reached (1 without one), times the new base
                factor = lr / old if old > 0 else _schedule_factor(schedule, index)
                group["lr"] = new * factor
            if "initial_lr" in group:
                group["initial_lr"] = new
            if schedule is not None:
                schedule.base_lrs[index] = new
    return untagged


def _schedule_factor(schedule: Any, index: int) -> float:
    """A LambdaLR's factor for group ``index`` at the step it reached; 1 for no schedule (a rate of 0, which
    scaling cannot move, becomes the new one)."""
    lambdas = getattr(schedule, "lr_lambdas", None)
    return float(lambdas[index](schedule.last_epoch)) if lambdas else 1.0
