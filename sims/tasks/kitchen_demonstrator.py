"""A scripted kitchen demonstrator: the behaviour policy of the kitchen datasets.

Each env keeps a plan, an ordered list of sub-tasks (fixtures of
:mod:`sims.tasks.kitchen`), drawn per episode: a random permutation of
``plan_length`` of the four sub-tasks, or the fixed ``order``. It works through
the plan with four phases per sub-task, each steering the effector to a
waypoint with a proportional law on position (the action is a velocity):

1. travel to the staging point, in the free plane ``y = safe_y`` in front of
   every object, straight in front of the handle;
2. approach: move in (along y) to just short of the handle;
3. push: follow the handle as the joint moves (the waypoint leads the contact
   point along the push direction), until the joint is near its target;
4. retreat straight back to ``y = safe_y``; then the next sub-task.

Contact points and push directions follow the joint (translated along a
slide's axis, rotated about a hinge's), read from the observation. If the
effector loses the handle while pushing it retreats and tries the sub-task
again; a sub-task already done is skipped. After the plan it returns to
:data:`~sims.tasks.kitchen.HOME` and holds still. Action noise is added by the
recorder (``robolearn.data.record(noise=...)``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from robolearn.interfaces import Obs
from sims.tasks.kitchen import FIXTURES, HOME, MAX_SPEED, NAMES, NUM_FIXTURES, OBJECT_POSITIONS

TRAVEL, APPROACH, PUSH, RETREAT, REST = range(5)


def _rotate(v: torch.Tensor, axis: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """Rodrigues: vectors ``v`` ``(..., 3)`` rotated by ``angle`` ``(...)`` about unit ``axis`` ``(..., 3)``."""
    c, s = angle.cos().unsqueeze(-1), angle.sin().unsqueeze(-1)
    return v * c + torch.cross(axis, v, dim=-1) * s + axis * (axis * v).sum(-1, keepdim=True) * (1 - c)


def handles(q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Contact points and push directions ``(n, NUM_FIXTURES, 3)`` of every fixture at joint positions ``q``
    ``(n, NUM_FIXTURES)``: where the effector centre touches each handle, and which way pushes it on."""
    anchor, axis, contact, push = (torch.tensor([getattr(f, key) for f in FIXTURES]).expand(len(q), -1, -1)
                                   for key in ("anchor", "axis", "contact", "push"))
    hinge = torch.tensor([f.joint == "hinge" for f in FIXTURES])
    angle, shift = q * hinge, q * ~hinge  # a hinge rotates the handle about its axis, a slide moves it along
    point = anchor + _rotate(contact, axis, angle) + shift.unsqueeze(-1) * axis
    return point, _rotate(push, axis, angle)


class KitchenDemonstrator:
    """Waypoint pushing through a plan of sub-tasks per env; ``act(obs)`` reads ``obs["policy"]``."""

    def __init__(self, num_envs: int, plan_length: int = NUM_FIXTURES, order: Sequence[str] | None = None,
                 kp: float = 8.0, safe_y: float = -0.15, lead: float = 0.05, standoff: float = 0.02,
                 arrive: float = 0.02, lost: float = 0.05, seed: int = 0) -> None:
        if order is not None and any(name not in NAMES for name in order):
            raise ValueError(f"order={list(order)}: choose names from {list(NAMES)}")
        if not 1 <= plan_length <= NUM_FIXTURES:
            raise ValueError(f"plan_length={plan_length}: choose 1..{NUM_FIXTURES}")
        self.num_envs, self.order = num_envs, order
        self.plan_length = len(order) if order is not None else plan_length
        self.kp, self.safe_y, self.lead, self.standoff = kp, safe_y, lead, standoff
        self.arrive, self.lost = arrive, lost
        self.target = torch.tensor([f.target for f in FIXTURES])
        self.tolerance = torch.tensor([f.tolerance for f in FIXTURES])
        self.generator = torch.Generator().manual_seed(seed)
        self.plan = torch.zeros(num_envs, self.plan_length, dtype=torch.long)
        self.stage = torch.zeros(num_envs, dtype=torch.long)
        self.phase = torch.zeros(num_envs, dtype=torch.long)
        self.reset()

    def _plans(self, n: int) -> torch.Tensor:
        if self.order is not None:
            return torch.tensor([NAMES.index(name) for name in self.order]).expand(n, -1)
        keys = torch.rand(n, NUM_FIXTURES, generator=self.generator)
        return keys.argsort(1)[:, :self.plan_length]

    def reset(self, mask: torch.Tensor | None = None) -> None:
        """New plans for the envs in ``mask`` (all when None), from their first sub-task."""
        mask = torch.ones(self.num_envs, dtype=torch.bool) if mask is None else mask.cpu().bool()
        self.plan[mask] = self._plans(int(mask.sum()))
        self.stage[mask] = 0
        self.phase[mask] = TRAVEL

    def _current(self, points: torch.Tensor, pushes: torch.Tensor, q: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Contact point, push direction and whether it is done, of each env's current sub-task."""
        rows = torch.arange(self.num_envs)
        fixture = self.plan[rows, self.stage.clamp(max=self.plan_length - 1)]
        done = q[rows, fixture] >= self.target[fixture] - self.tolerance[fixture] / 2
        return points[rows, fixture], pushes[rows, fixture], done

    def _advance(self, position: torch.Tensor, point: torch.Tensor, push: torch.Tensor, done: torch.Tensor) -> bool:
        """Move each env to its next phase (and sub-task) where the current one is over; whether any did."""
        def near(waypoint: torch.Tensor) -> torch.Tensor:
            return (position - waypoint).norm(dim=1) < self.arrive

        old, phase, stage = self.phase, self.phase.clone(), self.stage.clone()
        skip = (old == TRAVEL) & done
        stage += skip.long()
        phase[(old == TRAVEL) & ~done & near(self._staging(point))] = APPROACH
        phase[(old == APPROACH) & near(point - self.standoff * push)] = PUSH
        phase[(old == PUSH) & (done | ((position - point).norm(dim=1) > self.lost))] = RETREAT
        retreated = (old == RETREAT) & ((position[:, 1] - self.safe_y).abs() < self.arrive)
        stage += (retreated & done).long()  # not done: it lost the handle, so it tries again
        phase[retreated] = TRAVEL
        phase[stage >= self.plan_length] = REST
        changed = not (torch.equal(phase, old) and torch.equal(stage, self.stage))
        self.phase, self.stage = phase, stage
        return changed

    def _staging(self, point: torch.Tensor) -> torch.Tensor:
        """``point`` moved along y into the free plane ``y = safe_y``."""
        return torch.cat([point[:, :1], torch.full_like(point[:, :1], self.safe_y), point[:, 2:]], 1)

    def act(self, obs: Obs) -> torch.Tensor:
        state = obs["policy"].cpu().float()
        position, q = state[:, :3], state[:, OBJECT_POSITIONS]
        points, pushes = handles(q)
        for _ in range(3):  # a few phase changes per step, so that no step idles between phases
            if not self._advance(position, *self._current(points, pushes, q)):
                break
        point, push, _ = self._current(points, pushes, q)
        waypoint = torch.tensor(HOME).expand(self.num_envs, -1)
        for phase, target in ((TRAVEL, self._staging(point)), (APPROACH, point - self.standoff * push),
                              (PUSH, point + self.lead * push), (RETREAT, self._staging(position))):
            waypoint = torch.where((self.phase == phase).unsqueeze(1), target, waypoint)
        velocity = self.kp * (waypoint - position) / MAX_SPEED
        action = velocity / velocity.abs().amax(1, keepdim=True).clamp(min=1.0)  # keep the direction when saturated
        return action.to(obs["policy"].device)
