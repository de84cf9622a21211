"""HRAC's adjacency: which goal-space states are within ``k`` steps of each other, learned
as a distance in an embedding (Zhang et al. 2020, "Generating Adjacency-Constrained
Subgoals in Hierarchical Reinforcement Learning", sec. 4).

:class:`AdjacencyGraph` is the paper's adjacency matrix: goal-space positions are binned
into cells of side ``cell`` (the paper's discretization of continuous states); every
observed step from one cell to another adds an edge, and two cells are ``k``-adjacent when
a path of at most ``k`` edges joins them (the shortest transition distance through
explored states). ``k`` therefore counts cell crossings: pick ``cell`` about the distance
one env step moves, so that ``k`` is about the subgoal period.

:class:`AdjacencyNetwork` ``psi`` is trained contrastively on cell pairs (eq. 7)::

    L = l * max(|psi(a) - psi(b)| - eps, 0) + (1 - l) * max(eps + delta - |psi(a) - psi(b)|, 0)

with ``l = 1`` for adjacent pairs, so that ``|psi(a) - psi(b)| <= eps`` approximates
"``b`` within ``k`` steps of ``a``"; the high level's subgoals are then held to that
region by the hinge ``max(|psi(phi(s)) - psi(g)| - eps, 0)`` (eq. 8).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from policies.modules import mlp


class AdjacencyGraph:
    """Visited cells (their centres) and the steps observed between them."""

    def __init__(self, cell: float, k: int) -> None:
        if not cell > 0 or k < 1:
            raise ValueError(f"adjacency needs cell > 0 and k >= 1, got cell={cell}, k={k}")
        self.cell, self.k = cell, k
        self.index: dict[tuple[int, ...], int] = {}  # cell coordinates -> node
        self.edges: set[tuple[int, int]] = set()

    def __len__(self) -> int:
        return len(self.index)

    def _nodes(self, positions: torch.Tensor) -> list[int]:
        nodes = []
        for key in map(tuple, torch.floor(positions.detach().cpu().double() / self.cell).long().tolist()):
            nodes.append(self.index.setdefault(key, len(self.index)))
        return nodes

    def add(self, before: torch.Tensor, after: torch.Tensor) -> None:
        """Steps ``before[i] -> after[i]`` (positions ``(n, goal_dim)``)."""
        for a, b in zip(self._nodes(before), self._nodes(after)):
            if a != b:
                self.edges.add((min(a, b), max(a, b)))

    def centers(self) -> torch.Tensor:
        """``(N, goal_dim)`` cell centres in node order."""
        keys = torch.tensor(list(self.index), dtype=torch.float64)
        return ((keys + 0.5) * self.cell).float()

    def reachable(self) -> torch.Tensor:
        """``(N, N)`` bool: joined by a path of at most ``k`` edges (``(A + I)^k > 0`` by squaring)."""
        n = len(self.index)
        step = torch.eye(n)
        if self.edges:
            a, b = torch.tensor(sorted(self.edges)).T
            step[a, b] = step[b, a] = 1.0
        result, power, k = torch.eye(n), step, self.k
        while k:  # binary powers; clamping keeps the entries 0/1
            if k & 1:
                result = (result @ power).clamp_(max=1.0)
            power, k = (power @ power).clamp_(max=1.0), k >> 1
        return result > 0

    def state_dict(self) -> dict[str, Any]:
        """Plain lists (the graph grows, so no fixed tensor shapes for the checkpoint check)."""
        return {"keys": [list(key) for key in self.index], "edges": [list(edge) for edge in sorted(self.edges)]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        keys, edges = state["keys"], state["edges"]
        if not all(isinstance(k, (list, tuple)) and all(isinstance(v, int) for v in k) for k in keys) or not all(
                isinstance(e, (list, tuple)) and len(e) == 2 and all(isinstance(v, int) and 0 <= v < len(keys) for v in e)
                for e in edges):
            raise ValueError("adjacency graph in the checkpoint is malformed (cell keys and edges must be int lists)")
        self.index = {tuple(key): i for i, key in enumerate(keys)}
        self.edges = {(int(a), int(b)) for a, b in edges}


class AdjacencyNetwork(nn.Module):
    """``psi``: goal-space position -> embedding whose distances say "within k steps"."""

    def __init__(self, goal_dim: int, hidden: tuple[int, ...], embedding: int, margin: float, delta: float) -> None:
        super().__init__()
        self.net = mlp(goal_dim, hidden, embedding, "relu")
        self.margin, self.delta = margin, delta

    def forward(self, position: torch.Tensor) -> torch.Tensor:
        return self.net(position)

    def distance(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        # +1e-12 inside the root: the gradient of |x| at x = 0 (a subgoal at the state itself) is finite
        return ((self(a) - self(b)).square().sum(-1) + 1e-12).sqrt()

    def loss(self, a: torch.Tensor, b: torch.Tensor, adjacent: torch.Tensor) -> torch.Tensor:
        """Eq. 7's contrastive hinge, averaged over the pairs."""
        d = self.distance(a, b)
        positive = (d - self.margin).clamp(min=0.0)
        negative = (self.margin + self.delta - d).clamp(min=0.0)
        return torch.where(adjacent, positive, negative).mean()

    def penalty(self, position: torch.Tensor, subgoal: torch.Tensor) -> torch.Tensor:
        """Eq. 8's hinge ``max(|psi(position) - psi(subgoal)| - eps, 0)``, per row."""
        return (self.distance(position, subgoal) - self.margin).clamp(min=0.0)


def sample_pairs(reachable: torch.Tensor, batch_size: int, generator: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Half adjacent pairs (distinct cells where there are any), half uniform pairs: node indices ``(a, b)``."""
    n = reachable.shape[0]
    a = generator.integers(n, size=batch_size)
    b = generator.integers(n, size=batch_size)
    positive = np.argwhere((reachable & ~torch.eye(n, dtype=torch.bool)).numpy())
    if len(positive):
        rows = positive[generator.integers(len(positive), size=batch_size // 2)]
        a[: batch_size // 2], b[: batch_size // 2] = rows[:, 0], rows[:, 1]
    return a, b
