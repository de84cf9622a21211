"""Does a hierarchical agent's high-level advantage point the right way? OTA's diagnostic, on the point maze.

OTA's argument (Ahn et al. 2025) is that HIQL's value, learned one step at a time, grows too flat far
from the goal for the high level's advantage ``A_h = V(s_h, g') - V(s, g')`` to keep its sign, and
that the option-aware value keeps it. On the point maze the truth is known, so this measures it:
draw the high level's own training triples ``(s, s_h, g')`` (``agent.sample``: ``s_h`` the high
target, ``g'`` the actor goal) and count how often ``sign(A_h)`` agrees with whether ``s_h`` lies
fewer maze cells from ``g'`` than ``s`` does (BFS hop counts, ``MazeGrid.hop_distances``; pairs
whose cells are equally far are left out, as are states in no free cell). Each value network the
agent has is scored: HIQL's ``value``, and OTA's ``high_value`` too (the one its high level uses),
over all triples and over those whose goal is more than ``FAR_CELLS`` cells away.
"""

from __future__ import annotations

import torch

FAR_CELLS = 11  # the large maze's evaluation goals lie 12 to 19 cells from their starts
VALUES = ("value", "high_value")  # HIQL's one-step value; OTA's option-aware value


@torch.no_grad()
def advantage_sign_agreement(agent, grid, samples: int = 32768, seed: int = 0) -> dict[str, float]:
    """Fraction of triples whose advantage sign is right, per value network (``<name>`` and ``<name>_far``),
    and ``pairs``/``far_pairs``, the triples counted. Sampling leaves the global random stream as it was."""
    if not agent.subgoal_steps:
        return {}  # a flat agent: no high level
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        batch = agent.sample(samples)
    goal_dim = agent.goal_dim
    cells = [grid.cells_of(batch[key][:, :goal_dim]) for key in ("obs", "high_target_obs", "actor_goal")]
    dist = torch.as_tensor(grid.hop_distances(), device=batch["obs"].device)
    s_cell, target_cell, goal_cell = cells
    from_s, from_target = dist[goal_cell, s_cell], dist[goal_cell, target_cell]
    counted = (from_s != from_target) & (torch.stack(cells) >= 0).all(0)
    closer, far = from_target < from_s, from_s > FAR_CELLS
    s, _ = agent.normalizer(batch["obs"], batch["actor_goal"])
    s_h, _ = agent.normalizer(batch["high_target_obs"], batch["actor_goal"])
    g = agent.normalizer.goal(batch["actor_goal"])
    result = {"pairs": float(counted.sum()), "far_pairs": float((counted & far).sum())}
    for name in VALUES:
        if (value := getattr(agent, name, None)) is not None:
            right = (value(s_h, g).mean(0) - value(s, g).mean(0) > 0) == closer
            result[name] = float(right[counted].float().mean())
            result[f"{name}_far"] = float(right[counted & far].float().mean())
    return result
