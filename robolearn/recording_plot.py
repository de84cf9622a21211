"""A recording at a glance: each joint's command, what was sent and where the joint went, episode by episode.

``robolearn deploy`` leaves ``deploy.png`` beside its recording, and ``robolearn plot <recording folder>``
draws any recording (a deploy's, or one that ``runtime.run`` wrote through an ``EpisodeRecorder``). One row
per action dimension: the controller's command, the goal the task's rule made of it (where recorded), what
was sent after the safety layer, and the measured joint position (a robot's ``joint_state`` group, one
control period after its command); steps a safety rule overruled are marked. The last row is the reward per
step. Episodes follow each other along the time axis, each labelled with its return and success.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import numpy as np

from robolearn.checkpoint import atomic_write_bytes
from robolearn.recording import episode_summary, load_episode

MAX_LABELLED_EPISODES = 20
"""Beyond this many episodes their labels would overlap: only the boundaries are drawn."""


def is_recording(folder: Path) -> bool:
    """Whether ``folder`` holds a recording (episode files), not a run."""
    return Path(folder).is_dir() and any(Path(folder).glob("episode_*.npz"))


def plot_recording(folder: str | Path, out: str | Path | None = None) -> Path:
    """Draw the recording in ``folder`` into ``out`` (default ``<folder>/recording.png``), written atomically;
    returns the path. A folder without episode files is an error that says what it expects."""
    folder = Path(folder)
    files = sorted(folder.glob("episode_*.npz"), key=lambda f: int(re.sub(r"\D", "", f.name) or 0))
    if not files:
        raise ValueError(f"{folder}: no episode_*.npz files; a recording is the folder `robolearn deploy` "
                         "writes (<run>/deploy/<time>)")
    episodes = [load_episode(file) for file in files]
    try:
        dt = float(json.loads((folder / "metadata.json").read_text()).get("control_dt") or 0) or None
    except (OSError, ValueError, AttributeError):
        dt = None

    import matplotlib

    matplotlib.use("Agg")  # files, not windows: this runs beside a robot, often over ssh
    import matplotlib.pyplot as plt

    for arrays in episodes:  # discrete or scalar actions (a gym env's) as one column
        for key in ("actions", "commanded_actions", "goals"):
            if key in arrays:
                arrays[key] = arrays[key].reshape(len(arrays["rewards"]), -1)
    dims = episodes[0]["actions"].shape[1]
    fig, axes = plt.subplots(dims + 1, 1, figsize=(11, 1.9 * (dims + 1) + 0.8), sharex=True, squeeze=False)
    axes = axes[:, 0]
    scale = dt or 1.0
    start = 0
    for index, (file, arrays) in enumerate(zip(files, episodes)):
        steps = len(arrays["rewards"])
        t = (start + np.arange(steps)) * scale
        measured = _measured(arrays, dims)
        overruled = np.array([bool(e) for e in arrays["safety_events"]]) if "safety_events" in arrays else None
        first = index == 0  # one legend entry per line kind
        for dim, ax in enumerate(axes[:-1]):
            ax.step(t, arrays["commanded_actions"][:, dim], where="post", color="C0", lw=0.8, alpha=0.6,
                    label="commanded" if first else None)
            if "goals" in arrays:
                ax.step(t, arrays["goals"][:, dim], where="post", color="C2", lw=0.8, ls="--",
                        label="goal (task rule)" if first else None)
            ax.step(t, arrays["actions"][:, dim], where="post", color="C1", lw=1.0, label="sent" if first else None)
            if measured is not None:
                ax.plot(t + scale, measured[:, dim], color="k", lw=1.0, label="measured" if first else None)
            if overruled is not None and overruled.any():
                ax.plot(t[overruled], arrays["actions"][overruled, dim], "rx", ms=4,
                        label="safety overruled" if first else None)
        axes[-1].plot(t, arrays["rewards"], color="C3", lw=0.8)
        summary = episode_summary(file.name, arrays)
        for ax in axes:
            ax.axvline(start * scale, color="0.6", lw=0.6)
        if len(files) <= MAX_LABELLED_EPISODES:
            mark = {True: " ✓", False: " ✗", None: ""}[summary["success"]]
            cut = " (cut short)" if summary["interrupted"] else ""
            axes[0].annotate(f"{summary['return']:.1f}{mark}{cut}", (start * scale, 1), xycoords=("data", "axes fraction"),
                             xytext=(3, 2), textcoords="offset points", fontsize="x-small", va="bottom")
        start += steps
    for dim, ax in enumerate(axes[:-1]):
        ax.set_ylabel(f"action {dim}" if measured is None else f"joint {dim} (rad)")
        ax.grid(alpha=0.3)
    axes[-1].set_ylabel("reward")
    axes[-1].grid(alpha=0.3)
    axes[-1].set_xlabel("time (s, control steps back to back)" if dt else "control step")
    axes[0].legend(loc="upper right", fontsize="x-small", ncol=5, framealpha=0.8)
    fig.suptitle(_title(folder, files, episodes), fontsize="small")
    fig.subplots_adjust(left=0.08, right=0.98, top=1 - 0.75 / fig.get_figheight(), bottom=0.5 / fig.get_figheight(),
                        hspace=0.15)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    out = Path(out) if out is not None else folder / "recording.png"
    atomic_write_bytes(out, lambda f: f.write(buffer.getvalue()))
    return out


def _measured(arrays: dict[str, np.ndarray], dims: int) -> np.ndarray | None:
    """A robot's measured joint positions after each step (``joint_state`` = [q, qd], rows 1..T), if recorded."""
    state = arrays.get("obs/joint_state")
    if state is None or state.ndim != 2 or state.shape[1] != 2 * dims:
        return None
    return state[1:, :dims]


def _title(folder: Path, files: list[Path], episodes: list[dict[str, np.ndarray]]) -> str:
    """The folder, then the episodes' return mean ± std, successes and safety interventions in one line."""
    summaries = [episode_summary(file.name, arrays) for file, arrays in zip(files, episodes)]
    complete = [s for s in summaries if not s["interrupted"]]  # a cut-short episode's return is a part of one
    cut = len(summaries) - len(complete)
    parts = [f"{len(summaries)} episode{'s' * (len(summaries) != 1)}" + (f" ({cut} cut short)" if cut else "")]
    if complete:
        returns = np.array([s["return"] for s in complete])
        parts.append(f"return {returns.mean():.2f} ± {returns.std():.2f}")
    judged = [s["success"] for s in summaries if s["success"] is not None]
    if judged:
        parts.append(f"success {sum(judged)}/{len(judged)}")
    events: dict[str, int] = {}
    for s in summaries:
        for rule, count in s["safety_events"].items():
            events[rule] = events.get(rule, 0) + count
    if any("safety_events" in arrays for arrays in episodes):
        parts.append("safety: " + (", ".join(f"{rule} {count}" for rule, count in events.items()) or "none"))
    return f"{folder}\n" + "; ".join(parts)
