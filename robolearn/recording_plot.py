"""A recording at a glance: each joint's command, what was sent and where the joint went, episode by episode.

``robolearn deploy`` leaves ``deploy.png`` beside its recording, and ``robolearn plot <recording folder>``
draws any recording (a deploy's, or one that ``runtime.run`` wrote through an ``EpisodeRecorder``). One row
per action dimension: the controller's command, the goal the task's rule made of it (where recorded), what
was sent after the safety layer, and the measured joint position (a robot's ``joint_state`` group, one
control period after its command); steps a safety rule overruled are marked, by rule, on the joints whose goal
it changed (on every joint where goals are not recorded). Then the reward per
step, and a row per recorded metric (a reach's ``distance_m`` to its target). Episodes follow each other
along the time axis, each labelled with its return and success.
"""

from __future__ import annotations

import io
import json
import re
import warnings
from collections import Counter
from pathlib import Path

import numpy as np

from robolearn.checkpoint import atomic_write_bytes
from robolearn.listing import few
from robolearn.recording import episode_summary, load_episode

MAX_LABELLED_EPISODES = 20
"""Beyond this many episodes their labels would overlap: only the boundaries are drawn."""


def is_recording(folder: Path) -> bool:
    """Whether ``folder`` holds a recording (episode files), not a run."""
    folder = Path(folder)  # (one that ended before its first episode still has the recorder's metadata.json)
    return folder.is_dir() and (any(folder.glob("episode_*.npz")) or
                                ((folder / "metadata.json").is_file() and not (folder / "config.yaml").is_file()))


def plot_recording(folder: str | Path, out: str | Path | None = None) -> Path:
    """Draw the recording in ``folder`` into ``out`` (default ``<folder>/recording.png``), written atomically;
    returns the path. A folder without episode files, an episode file itself or an ``out`` that is not a .png is an
    error that says what it expects; an episode file that cannot be read is a warning, and the others are drawn."""
    folder = Path(folder)
    if folder.is_file():  # (had said "no episode_*.npz files" of an episode_*.npz)
        raise ValueError(f"{folder}: a file; a recording is the folder of its episodes: give {folder.parent}")
    if out is not None and Path(out).suffix.lower() != ".png":  # (it had written a PNG named recording.txt)
        raise ValueError(f"out={str(out)!r}: plots are PNG images; give a .png path")
    files = sorted(folder.glob("episode_*.npz"), key=lambda f: int(re.sub(r"\D", "", f.name) or 0))
    if not files and (folder / "metadata.json").is_file():
        raise ValueError(f"{folder}: a recording without episodes (it stopped before its first step was kept): "
                         "nothing to draw")
    if not files:
        raise ValueError(f"{folder}: no episode_*.npz files; a recording is the folder `robolearn deploy` "
                         "writes (<run>/deploy/<time>)")
    files, episodes, unreadable = _readable_episodes(folder, files)
    summaries = [episode_summary(file.name, arrays) for file, arrays in zip(files, episodes)]
    try:
        metadata = json.loads((folder / "metadata.json").read_text())
        dt, joints = float(metadata.get("control_dt") or 0) or None, list(metadata.get("joints") or [])
        success_distance = (metadata.get("task") or {}).get("success_distance")
    except (OSError, ValueError, AttributeError, TypeError):
        dt, joints, success_distance = None, [], None

    import matplotlib

    matplotlib.use("Agg")  # files, not windows: this runs beside a robot, often over ssh
    import matplotlib.pyplot as plt

    dims = episodes[0]["actions"].shape[1]
    metrics = sorted({key for arrays in episodes for key in arrays if key.startswith("metrics/")})  # a row each
    rows = dims + 1 + len(metrics)
    fig, axes = plt.subplots(rows, 1, figsize=(11, 1.9 * rows + 1.1), sharex=True, squeeze=False)
    axes = axes[:, 0]
    joint_axes, reward_axis = axes[:dims], axes[dims]
    scale = dt or 1.0
    start = 0
    labelled: set[str] = set()  # one legend entry per line kind and safety rule, the first time it is drawn

    def label(name: str) -> str | None:
        if name in labelled:
            return None
        labelled.add(name)
        return name

    for arrays, summary in zip(episodes, summaries):
        steps = len(arrays["rewards"])
        t = (start + np.arange(steps)) * scale
        measured = _measured(arrays, dims)
        rules = [str(e).split(",") if e else [] for e in arrays.get("safety_events", [""] * steps)]
        changed = _changed_by_safety(arrays)
        for dim, ax in enumerate(joint_axes):
            # faint: a policy's raw actions swing far past the joints (clipped by the task), a curtain over the rest
            ax.step(t, arrays["commanded_actions"][:, dim], where="post", color="C0", lw=0.6, alpha=0.3,
                    label=label("commanded") if dim == 0 else None)
            if "goals" in arrays and not np.allclose(arrays["goals"], arrays["actions"]):  # else it hides under sent
                ax.step(t, arrays["goals"][:, dim], where="post", color="C2", lw=0.8, ls="--",
                        label=label("goal (task rule)") if dim == 0 else None)
            ax.step(t, arrays["actions"][:, dim], where="post", color="C1", lw=1.0,
                    label=label("sent") if dim == 0 else None)
            if measured is not None:
                ax.plot(t + scale, measured[:, dim], color="k", lw=1.0, label=label("measured") if dim == 0 else None)
            for rule in sorted({rule for step in rules for rule in step}):
                marker, color = RULE_MARKERS.get(rule, ("D", "tab:olive"))
                hit = np.array([rule in step for step in rules], dtype=bool) & changed[:, dim]
                if hit.any():
                    ax.plot(t[hit], arrays["actions"][hit, dim], marker, color=color, ms=4, ls="none",
                            label=label(f"safety: {rule}"))  # on the first row it marks
        reward_axis.plot(t, arrays["rewards"], color="C3", lw=0.8)
        for key, ax in zip(metrics, axes[dims + 1:]):
            if key in arrays and len(arrays[key]) == steps:
                ax.plot(t + scale, arrays[key], color="C4", lw=0.8)
        for ax in axes:
            ax.axvline(start * scale, color="0.6", lw=0.6)
        if len(episodes) <= MAX_LABELLED_EPISODES:
            mark = {True: " ✓", False: " ✗", None: ""}[summary["success"]]
            cut = " (cut short)" if summary["interrupted"] else ""
            axes[0].annotate(f"{summary['return']:.1f}{mark}{cut}", (start * scale, 1), xycoords=("data", "axes fraction"),
                             xytext=(3, 2), textcoords="offset points", fontsize="x-small", va="bottom")
        start += steps
    for dim, ax in enumerate(joint_axes):
        name = joints[dim] if dim < len(joints) else f"{'action' if measured is None else 'joint'} {dim}"
        ax.set_ylabel(name if measured is None else f"{name} (rad)")
        ax.set_ylim(*_limits(episodes, dim, dims))
        ax.grid(alpha=0.3)
    reward_axis.set_ylabel("reward")
    for key, ax in zip(metrics, axes[dims + 1:]):
        ax.set_ylabel(_unit_label(key[len("metrics/"):]))
        if key == "metrics/distance_m" and isinstance(success_distance, (int, float)):
            ax.axhline(success_distance, color="tab:green", lw=0.8, ls=":", label=label("success distance"))
    for ax in axes[dims:]:
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("time (s, control steps back to back)" if dt else "control step")
    handles, names = [sum(pair, []) for pair in zip(*(ax.get_legend_handles_labels() for ax in axes))]
    # the legend goes under the time axis, in a band of its own
    fig.legend(handles, names, loc="lower center", fontsize="x-small", ncol=max(1, len(names)), frameon=False,
               bbox_to_anchor=(0.5, 0.02 / fig.get_figheight()))
    fig.suptitle(_title(folder, summaries, recorded_safety=any("safety_events" in a for a in episodes),
                        unreadable=unreadable), fontsize="small")
    fig.subplots_adjust(left=0.08, right=0.98, top=1 - 0.75 / fig.get_figheight(), bottom=0.8 / fig.get_figheight(),
                        hspace=0.15)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    out = Path(out) if out is not None else folder / "recording.png"
    atomic_write_bytes(out, lambda f: f.write(buffer.getvalue()))
    return out


RULE_MARKERS = {"jump_limit": ("x", "tab:red"), "position_limit": ("s", "tab:purple"), "overspeed": ("^", "tab:brown"),
                "nonfinite": ("X", "black")}
"""How each safety rule (hardware/safety.py) marks the steps it overruled; another rule: an olive diamond."""


def _readable_episodes(folder: Path, files: list[Path]) -> tuple[list[Path], list[dict[str, np.ndarray]], int]:
    """The episode files that can be drawn, their arrays (actions as (T, A) columns), and how many could not. A
    plot is a look at a recording: one corrupt file (a copy cut short, a disk error), or one whose actions do not
    fit (:func:`_unfit_actions`), had refused the whole of it, so each unreadable one is a warning naming it and
    why, and the rest are drawn. None readable is an error saying why of each.
    (An import stays strict: a dataset missing an episode would look whole.)"""
    kept, episodes, reasons = [], [], []
    for file in files:
        try:
            arrays = load_episode(file)
        except ValueError as err:
            reasons.append(str(err))
            continue
        # what every episode EpisodeRecorder writes holds (a KeyError had said)
        if missing := [key for key in ("actions", "commanded_actions", "rewards") if key not in arrays]:
            reasons.append(f"{file}: missing '{missing[0]}' (found {', '.join(sorted(arrays))}); not an episode "
                           "a recording writes")
            continue
        if problem := _unfit_actions(arrays, episodes[0]["actions"].shape[1] if episodes else None):
            reasons.append(f"{file}: {problem}")
            continue
        for key in ACTION_KEYS:  # discrete or scalar actions (a gym env's) as one column
            if key in arrays:
                arrays[key] = arrays[key].reshape(len(arrays["rewards"]), -1)
        kept.append(file)
        episodes.append(arrays)
    if not kept:
        raise ValueError(f"{folder}: no readable episode file, nothing to draw: {few(reasons, sep='; ')}")
    for reason in reasons:
        warnings.warn(f"{reason}; left out of the plot", stacklevel=3)
    return kept, episodes, len(reasons)


ACTION_KEYS = ("actions", "commanded_actions", "goals")
"""An episode's arrays of one row per step and one column per action dimension (a row of the plot each)."""


def _unfit_actions(arrays: dict[str, np.ndarray], width: int | None) -> str | None:
    """Why an episode's :data:`ACTION_KEYS` cannot be drawn, or None: each needs a row per reward (a step) and
    ``width`` columns, the first drawn episode's (its own actions' for the first). numpy's reshape or index error
    had refused the whole plot."""
    rewards = arrays["rewards"]
    if rewards.ndim == 0 or not len(rewards):
        return f"'rewards' has shape {rewards.shape}: no step to draw"
    against = "the first episode drawn" if width is not None else "its 'actions'"
    for key in (key for key in ACTION_KEYS if key in arrays):
        shape = arrays[key].shape
        if not shape or shape[0] != len(rewards):
            return f"'{key}' has shape {shape}, not a row per step ('rewards' has {len(rewards)})"
        columns = int(np.prod(shape[1:]))
        width = columns if width is None else width  # (the first episode's own actions set it)
        if columns != width:
            return f"'{key}' has {columns} columns, {against} {width} (a row of the plot each)"
    return None


def _limits(episodes: list[dict[str, np.ndarray]], dim: int, dims: int) -> tuple[float, float]:
    """The y range of one joint: what was sent and measured (and the task's goals), with a margin. A
    controller's raw command can swing far outside it (to the joint limits) and would flatten the rest."""
    values = []
    for arrays in episodes:
        values += [arrays["actions"][:, dim]] + ([arrays["goals"][:, dim]] if "goals" in arrays else [])
        if (measured := _measured(arrays, dims)) is not None:
            values.append(measured[:, dim])
    data = np.concatenate(values)
    data = data[np.isfinite(data)]
    if not len(data):
        return -1.0, 1.0
    low, high = float(data.min()), float(data.max())
    margin = max(0.1 * (high - low), 0.02)
    return low - margin, high + margin


def _changed_by_safety(arrays: dict[str, np.ndarray]) -> np.ndarray:
    """(T, A): where the safety layer sent another goal than the task's rule made (a NaN one too), so that a
    step's rules mark the joints they overruled (a position limit of j4 had been marked on every joint's row);
    every joint of an overruled step where the goals are not recorded."""
    sent = arrays["actions"]
    if "goals" not in arrays or arrays["goals"].shape != sent.shape:
        return np.ones(sent.shape, dtype=bool)
    return ~np.isclose(arrays["goals"], sent, rtol=0.0, atol=1e-6)


def _measured(arrays: dict[str, np.ndarray], dims: int) -> np.ndarray | None:
    """A robot's measured joint positions after each step (``joint_state`` = [q, qd], rows 1..T), if recorded."""
    state = arrays.get("obs/joint_state")
    if state is None or state.ndim != 2 or state.shape[1] != 2 * dims:
        return None
    return state[1:, :dims]


def _title(folder: Path, summaries: list[dict], recorded_safety: bool, unreadable: int) -> str:
    """The folder, then the episodes' return mean ± std, successes and safety interventions in one line, and
    how many episode files could not be read (so that the image alone does not pass for the whole recording)."""
    complete = [s for s in summaries if not s["interrupted"]]  # a cut-short episode's return is a part of one
    cut = len(summaries) - len(complete)
    notes = ([f"{cut} cut short"] if cut else []) + ([f"{unreadable} unreadable, left out"] if unreadable else [])
    parts = [f"{len(summaries)} episode{'s' * (len(summaries) != 1)}" + (f" ({', '.join(notes)})" if notes else "")]
    if complete:
        returns = np.array([s["return"] for s in complete])
        parts.append(f"return {returns.mean():.2f} ± {returns.std():.2f}")
    judged = [s["success"] for s in summaries if s["success"] is not None]
    if judged:
        parts.append(f"success {sum(judged)}/{len(judged)}")
    if recorded_safety:
        events = sum((Counter(s["safety_events"]) for s in summaries), Counter())
        parts.append("safety: " + (", ".join(f"{rule} {count}" for rule, count in events.items()) or "none"))
    return f"{folder}\n" + "; ".join(parts)


def _unit_label(name: str) -> str:
    """A metric's name as an axis label, its unit suffix read out: ``distance_m`` -> ``distance (m)``."""
    for suffix, unit in (("_m", "m"), ("_rad", "rad"), ("_s", "s")):
        if name.endswith(suffix):
            return f"{name[:-len(suffix)].replace('_', ' ')} ({unit})"
    return name.replace("_", " ")
