"""Learning rates changed on a resume take effect.

An optimizer's ``load_state_dict`` puts back the learning rates it saved, so ``--resume RUN
agent.critic_lr=1e-5`` had been announced ("resumed with changed settings") and then ignored. Each
parameter group is tagged, when the agent is built, with the rate its config gave it
(``configured_lr``); the tag is saved with the optimizer. On a resume, a group whose tag from the
checkpoint differs from the fresh agent's has its rate scaled by new / old: a constant rate becomes
the new one, a schedule (IQL's cosine, PPO's adaptive rate) goes on from where it was, scaled. A
group that changes its rate for a new phase (offline-to-online fine-tuning's ``go_online``) sets the
tag with it (:func:`set_configured`). Checkpoints written before the tags resume as they did.

Found by walking the agent's attributes (optimizers live on the agent or on learners it holds),
because agents of one's own keep theirs under any name.
"""

from __future__ import annotations

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
    """After ``agent.load_state_dict``: scale the rate of every group whose loaded tag differs from the
    fresh agent's (``before_load``, from :func:`configured` before the load) by new / old, and its
    schedule's base rate with it; return how many groups changed."""
    schedules = [obj for obj in _reachable(agent) if isinstance(obj, torch.optim.lr_scheduler.LRScheduler)]
    changed, scaled = 0, set()
    for optimizer, fresh in zip(optimizers(agent), before_load):
        for index, (group, new) in enumerate(zip(optimizer.param_groups, fresh)):
            old = group.get(TAG)
            if new is None or old is None or old == new or old <= 0:
                continue
            ratio = new / old
            lr = group["lr"]
            if isinstance(lr, torch.Tensor):  # PPO's adaptive rate, one tensor shared by its groups
                if id(lr) not in scaled:
                    scaled.add(id(lr))
                    with torch.no_grad():
                        lr.mul_(ratio)
            else:
                group["lr"] = lr * ratio
            if "initial_lr" in group:
                group["initial_lr"] *= ratio
            for schedule in schedules:
                if schedule.optimizer is optimizer:
                    schedule.base_lrs[index] *= ratio
            group[TAG] = new
            changed += 1
    return changed
