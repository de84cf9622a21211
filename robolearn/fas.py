"""Frequency-Averaged Score: how well a controller holds up when it decides less often.

Patel & Siegelmann (ICLR 2025) evaluate a trained policy at action-sequence
lengths ``L in {1, 2, 4, 6, ..., 30}``: decide once, run ``L`` control steps
open loop, decide again. ``R(L)`` is the mean return over ``episodes`` episodes
and ::

    FAS = trapz(R(L) + shift, L) / (R_max * 30)

with the task's reference return ``R_max`` and ``shift`` (Pendulum's returns are
negative: shifted by +1550, R_max 1350). A flat policy repeats its action for
the ``L`` steps; a sequence policy plays its own sequence, and past its length
``J`` holds its last action (``beyond="hold"``, the default) or keeps unrolling
its sequence open loop (``beyond="extend"``; SRL's GRU can). No new
observation is decided on inside the ``L`` steps in either case; a stateful
controller (recurrent, skills, subgoals) is still asked every step, so that its
clock keeps time, and its memory sees those observations (said as a warning).

Every ``R(L)`` uses the same env seed (common random numbers), so the curve's
shape is the controller's, not the initial states'.
"""

from __future__ import annotations

import io
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from robolearn.caller import outside_us
from robolearn.checkpoint import atomic_write_bytes
from robolearn.chunking import Beyond, ChunkedController
from robolearn.evaluate import evaluate
from robolearn.interfaces import VecEnv

LENGTHS = (1, *range(2, 31, 2))
"""L = 1, 2, 4, 6, ..., 30 (16 lengths)."""
L_MAX = 30


@dataclass(frozen=True)
class Reference:
    """A task's reference return for FAS: ``(R + shift) / r_max``."""

    r_max: float
    shift: float = 0.0


REFERENCES: dict[str, Reference] = {  # Patel & Siegelmann's table, keyed by our task names
    "gym:Pendulum-v1": Reference(1350.0, 1550.0),
    "gym:Hopper-v5": Reference(3600.0), "gym:Hopper-v4": Reference(3600.0),
    "gym:Walker2d-v5": Reference(5000.0), "gym:Walker2d-v4": Reference(5000.0),
    "gym:Ant-v5": Reference(6500.0), "gym:Ant-v4": Reference(6500.0),
    "gym:HalfCheetah-v5": Reference(17000.0), "gym:HalfCheetah-v4": Reference(17000.0),
    "gym:Humanoid-v5": Reference(10500.0), "gym:Humanoid-v4": Reference(10500.0),
    "gym:InvertedPendulum-v5": Reference(1000.0), "gym:InvertedPendulum-v4": Reference(1000.0),
    "gym:InvertedDoublePendulum-v5": Reference(9400.0), "gym:InvertedDoublePendulum-v4": Reference(9400.0),
    "gym:Reacher-v5": Reference(60.0, 65.0), "gym:Reacher-v4": Reference(60.0, 65.0),
    # Our tasks follow Gymnasium v5's rewards where they share a name; pendulum and cartpole are our
    # swing-ups, whose returns are at most 500 (sims/tasks/pendulum.py, cartpole.py).
    "hopper": Reference(3600.0), "walker2d": Reference(5000.0), "half_cheetah": Reference(17000.0),
    "ant": Reference(6500.0),
    "pendulum": Reference(500.0), "cartpole": Reference(500.0),
}

SAC_BASELINE = {"gym:Pendulum-v1": 0.44, "gym:Hopper-v5": 0.05, "gym:Walker2d-v5": 0.07, "gym:HalfCheetah-v5": 0.007}
"""SAC's published FAS (Patel & Siegelmann), for comparison."""


def reference(task: str, r_max: float | None = None, shift: float | None = None) -> Reference:
    """The task's reference, with ``r_max`` and/or ``shift`` given by the user replacing its values
    (a task without one needs ``r_max``; its shift is then 0 unless given); an error naming the fix otherwise."""
    if r_max is None and task not in REFERENCES:
        raise ValueError(f"no reference return R_max for task {task!r}; pass one (robolearn eval RUN --fas R_MAX, "
                         "and --fas-shift S where returns are negative)")
    known = REFERENCES.get(task, Reference(1.0))
    ref = Reference(known.r_max if r_max is None else float(r_max),
                    (known.shift if r_max is None else 0.0) if shift is None else float(shift))
    if not ref.r_max > 0:
        raise ValueError(f"R_max must be positive, got {ref.r_max:g}: it is the best return plus the shift (the "
                         f"FAS divides R + shift by it), so with negative returns give --fas-shift S and R_max = best "
                         f"return + S (Pendulum-v1: -200 + 1550 = 1350)")
    if not (math.isfinite(ref.r_max) and math.isfinite(ref.shift)):  # (inf had scored every run 0, or "FAS inf")
        raise ValueError(f"R_max and the shift must be finite numbers (--fas R_MAX, --fas-shift S), got R_max "
                         f"{ref.r_max:g}, shift {ref.shift:g}")
    return ref


def score(lengths: tuple[int, ...] | list[int], returns: list[float], ref: Reference) -> float:
    """``trapz(R(L) + shift, L) / (R_max * 30)``."""
    shifted = np.asarray(returns, dtype=np.float64) + ref.shift
    x = np.asarray(lengths, dtype=np.float64)
    area = float(np.sum((shifted[1:] + shifted[:-1]) * np.diff(x)) / 2)
    return area / (ref.r_max * L_MAX)


@torch.no_grad()
def curve(controller: nn.Module, make_env: Callable[[int], VecEnv], episodes: int = 10, seed: int = 0,
          lengths: tuple[int, ...] = LENGTHS, beyond: Beyond = "hold") -> dict[int, float]:
    """``R(L)`` for every ``L``: ``controller`` (a Controller or a sequence module) in open-loop chunks of ``L``.

    ``make_env(num_envs)`` builds the env; one env is made and reused for all lengths. A sequence controller
    (a ChunkedController) is chunked from its own source (ChunkedController unwraps it).
    """
    returns: dict[int, float] = {}
    with make_env(episodes) as env:
        for length in lengths:
            chunked = ChunkedController(controller, length=length, mode="open_loop", beyond=beyond).to(env.device)
            if not chunked.stateless and length == lengths[0]:
                warnings.warn(f"{type(chunked.inner).__name__} holds state across steps: it is asked every step "
                              "(its clock keeps time) and only its actions are held, so its memory sees the "
                              "observations inside each L, which a stateless controller's would not", stacklevel=outside_us())
            returns[length] = evaluate(chunked, env, episodes, seed=seed)["return_mean"]
    return returns


def fas(controller: nn.Module, make_env: Callable[[int], VecEnv], task: str, episodes: int = 10, seed: int = 0,
        r_max: float | None = None, beyond: Beyond = "hold", shift: float | None = None) -> dict[str, Any]:
    """R(L) and the FAS of ``controller`` on ``task``: a JSON-ready dict."""
    ref = reference(task, r_max, shift)
    blends = getattr(getattr(controller, "queue", None), "mode", None) == "ensemble"
    if blends:
        warnings.warn("the controller blends its chunks every step (execution=ensemble), which no decision interval "
                      "is: FAS plays its chunks open loop, so R(1) decides every step from each chunk's first action, "
                      "not the blend `robolearn eval` scores", stacklevel=outside_us())
    returns = curve(controller, make_env, episodes, seed, LENGTHS, beyond)
    lengths = list(returns)
    return {"task": task, "fas": score(lengths, list(returns.values()), ref), "r_max": ref.r_max, "shift": ref.shift,
            "lengths": lengths, "returns": list(returns.values()), "episodes": episodes,
            "decision_period": int(getattr(controller, "decision_period", getattr(controller, "chunk_length", 1))),
            "beyond": beyond, "played": "open-loop chunks of a blending controller" if blends else "open-loop chunks"}


def plot(results: dict[str, dict[str, Any]], path: Path, title: str = "") -> Path:
    """R(L) curves (one per label, mean and the seeds' range when lists are given) into a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for label, result in results.items():
        returns = np.atleast_2d(np.asarray(result["returns"], dtype=np.float64))  # (seeds, lengths)
        mean = returns.mean(0)
        line, = ax.plot(result["lengths"], mean, marker="o", markersize=3, label=f"{label} (FAS {np.mean(result['fas']):.3f})")
        if returns.shape[0] > 1:
            ax.fill_between(result["lengths"], returns.min(0), returns.max(0), color=line.get_color(), alpha=0.2)
    ax.set_xlabel("action-sequence length L (control steps per decision)")
    ax.set_ylabel("return R(L)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    buffer = io.BytesIO()  # drawn whole, then written aside and renamed (as curves.png): a kill or a full disk
    fig.savefig(buffer, format=path.suffix.lstrip(".").lower() or "png", dpi=120)  # mid-write had left a cut fas.png
    plt.close(fig)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, lambda f: f.write(buffer.getvalue()))
    return path
