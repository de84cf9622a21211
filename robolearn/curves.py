"""Learning curves drawn from runs' ``metrics.jsonl``: how training went, at a glance.

Every run leaves ``curves.png`` when it ends; ``robolearn plot RUN [RUN ...]`` draws one or several runs
at any time (a run still training, or runs to compare). One row per metric; against env steps (updates,
for offline runs; each phase of a fine-tuning run against its own, as its own line) on the left and
wall-clock time on the right.
"""

from __future__ import annotations

import io
import math
import warnings
from collections.abc import Sequence
from pathlib import Path

from robolearn.checkpoint import atomic_write_bytes
from robolearn.logger import read_metrics

DEFAULT_METRICS = ("return", "eval/return", "success_rate")
"""Drawn when present: the training return, periodic evaluations, and the success rate; then up to three
losses (``*loss``), so that a run without returns (offline, no periodic evaluation) still shows how it went."""


def plot_runs(runs: Sequence[Path], out: Path, metrics: Sequence[str] | None = None, mean: bool = False,
              at_end: bool = False) -> Path:
    """Draw ``metrics`` (default: those of :data:`DEFAULT_METRICS` any run logs, then up to three losses) of ``runs``
    into ``out`` (a PNG, written atomically); returns ``out``. Runs sharing a folder (the seeds of a setting) share a
    colour; with ``mean``, they are drawn as their mean and a ±1 std band against env steps instead (at each step,
    of the runs that reached it: a run that stops short is said; against wall-clock each as it ran: their clocks
    differ). A run without ``metrics.jsonl`` lines, or a metric no run logs,
    is an error naming what there is. A run's final evaluation (``eval.json``) is a point at its end; a run training
    now is said so in the title, unless ``at_end`` (the run's own end draws it, holding the run still)."""
    logs = {Path(run): read_metrics(Path(run)) for run in runs}
    empty = [str(run) for run, lines in logs.items() if not lines]
    if empty:
        raise ValueError(f"no metrics.jsonl lines in {', '.join(empty)}: not a run directory, or nothing logged yet")
    chosen = _chosen_metrics(logs, metrics)
    import matplotlib

    matplotlib.use("Agg")  # files, not windows: this runs on headless training machines
    import matplotlib.pyplot as plt

    _warn_if_tasks_differ(list(logs))
    fig, axes = plt.subplots(len(chosen), 2, figsize=(10, 2.8 * len(chosen)), squeeze=False, sharey="row")
    names = _labels(list(logs))
    folders = [run.parent for run in logs]
    by_folder = len(set(folders)) < len(folders)  # seeds of one setting share a folder: a colour per folder
    folder_names = _shortest_names(sorted(set(folders)))
    longest = max((line["time"] for lines in logs.values() for line in lines if _finite(line.get("time"))), default=0)
    unit, per = ("minutes", 60.0) if longest > 120 else ("seconds", 1.0)
    series: dict[str, list[tuple[str, list[dict]]]] = {}  # legend label -> each run's (counter, lines)
    finals: dict[str, list[tuple[float, dict]]] = {}  # legend label -> each ended run's (last count, eval.json)
    ends: dict[str, list[tuple[Path, str, float, float]]] = {}  # legend label -> each run's counter, last count
    # and spacing (_reach)
    run_phases = {run: _phases(lines) for run, lines in logs.items()}
    # runs counting other things (updates, env steps) share the x axis: each legend entry says what it counts
    mixed = len({counter for phases in run_phases.values() for counter, _ in phases.values()}) > 1
    for (run, lines), name in zip(logs.items(), names):
        phases = run_phases[run]
        count = folders.count(run.parent)
        base = (f"{folder_names[run.parent]} ({'mean ± std of ' if mean else ''}{count} runs)" if by_folder and count > 1
                else name)
        for phase, (counter, phase_lines) in phases.items():
            # a run with phases names them, also one still in its first (its seeds that went on are averaged with it)
            label = (f"{base}: {phase or 'online'} ({counter.replace('_', ' ')})" if len(phases) > 1 or phase
                     else f"{base} ({counter.replace('_', ' ')})" if mixed else base)
            series.setdefault(label, []).append((counter, phase_lines))
            ends.setdefault(label, []).append((run, counter, *_reach([line[counter] for line in phase_lines
                                                                      if _finite(line.get(counter))])))
        if (evaluation := _final_evaluation(run)) and _finite(last := phase_lines[-1].get(counter)):
            finals.setdefault(label, []).append((last, evaluation))  # drawn where the last phase ended
    if mean:
        _say_short_runs(ends)
    legend = {}  # label -> a line drawn with it: one legend for all rows
    for index, (label, members) in enumerate(series.items()):
        # the same in every row; past matplotlib's 10 colours, the lines are dashed, then dotted...
        style = {"label": label, "color": f"C{index % 10}", "linestyle": ("-", "--", ":", "-.")[index // 10 % 4]}
        for row, metric in enumerate(chosen):
            points = [[(line[counter], line.get("time"), line[metric]) for line in lines
                       if _finite(line.get(metric)) and _finite(line.get(counter))] for counter, lines in members]
            points = [run for run in points if run]
            by_steps = [[(step, value) for step, _, value in run] for run in points]
            by_time = [[(time / per, value) for _, time, value in run] for run in points
                       if all(_finite(time) for _, time, _ in run)]
            drawn = _draw(axes[row, 0], by_steps, style, mean)
            # against wall-clock each run as it ran: seeds log at other times, so a mean spans only the stretch
            # every one of them covers (a sliver, where their first episodes ended at different times)
            _draw(axes[row, 1], by_time, {**style, "alpha": 0.5} if mean else style, False)
            if drawn is not None:
                legend.setdefault(label, drawn)
            if not mean:
                _draw_spread(axes[row, 0], members, metric, style["color"])
            if metric == _return_row(chosen) and not mean:
                for last, evaluation in finals.get(label, []):
                    marker = axes[row, 0].errorbar(last, evaluation["return_mean"], yerr=evaluation.get("return_std"),
                                                   color=style["color"], marker="D", markersize=5, capsize=3)
                    legend.setdefault(FINAL, marker)

    if FINAL in legend and len(series) > 1:  # each run's diamond is in its colour: the legend's in none of theirs
        from matplotlib.lines import Line2D

        legend[FINAL] = Line2D([], [], color="0.35", marker="D", markersize=5, linestyle="none")
    counters = {counter.replace("_", " ") for members in series.values() for counter, _ in members}
    _label_axes(axes, chosen, " / ".join(sorted(counters)), f"wall-clock ({unit})")
    drawn = [label for label in legend if label != FINAL]  # the runs' own entries
    title = _run_title(next(iter(logs)), live=not at_end) if len(runs) == 1 else (drawn[0] if len(drawn) == 1 else "")
    _add_header(fig, title, legend)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    out = Path(out) / "curves.png" if Path(out).is_dir() else Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out, lambda f: f.write(buffer.getvalue()))
    return out


def _chosen_metrics(logs: dict[Path, list[dict]], metrics: Sequence[str] | None) -> list[str]:
    """The rows to draw: ``metrics``, or those of :data:`DEFAULT_METRICS` any run logs (finite somewhere) and up to three losses
    (those most runs log first); an error names a metric no run logs, and what they do log."""
    logged = sorted({key for lines in logs.values() for line in lines for key, value in line.items()
                     if isinstance(value, (int, float)) and not isinstance(value, bool)})

    def runs_logging(key: str) -> int:
        return sum(any(key in line for line in lines) for lines in logs.values())

    # a metric NaN or inf in every line has nothing to draw: by default no row (it had been an empty one)
    finite = {key for lines in logs.values() for line in lines for key, value in line.items() if _finite(value)}
    losses = sorted((m for m in logged if m.endswith("loss") and m in finite),
                    key=lambda m: (-runs_logging(m), m))  # most runs' first
    chosen = list(metrics) if metrics else [m for m in DEFAULT_METRICS if m in finite] + losses[:3]
    if not chosen:  # (what a default would have drawn, NaN throughout: said as such below)
        chosen = [m for m in DEFAULT_METRICS if m in logged][:1]
    missing = [m for m in chosen if m not in logged]
    if missing or not chosen:
        raise ValueError(f"no run logs {missing[0] if missing else 'a return or a loss'}; "
                         f"they log: {', '.join(logged)}")
    if never := [m for m in chosen if m not in finite]:
        raise ValueError(f"{never[0]} is NaN or inf in every line of {', '.join(map(str, logs))}: nothing to draw")
    return chosen


def _draw_spread(ax, members: list[tuple[str, list[dict]]], metric: str, color: str) -> None:
    """An evaluation's spread over its episodes (``<metric>_std``, as eval/return_std), where logged: a band
    around each of the runs' curves (``members``: each run's counter and lines)."""
    import numpy as np

    for counter, lines in members:
        spread = [(line[counter], line[metric], line[f"{metric}_std"]) for line in lines
                  if _finite(line.get(metric)) and _finite(line.get(f"{metric}_std"))
                  and _finite(line.get(counter))]
        if len(spread) > 1:
            x, y, std = (np.asarray(column, dtype=float) for column in zip(*spread))
            ax.fill_between(x, y - std, y + std, color=color, alpha=0.15, linewidth=0)


def _label_axes(axes, chosen: list[str], steps_label: str, time_label: str) -> None:
    """Each row's metric, grid and scale; the x-axes' labels under the last row (counters left, clock right)."""
    from matplotlib.ticker import EngFormatter

    for row, metric in enumerate(chosen):
        axes[row, 0].set_ylabel(metric)
        if "success" in metric:  # a rate: its whole range, so that 0 to 4% is no full-height jump
            axes[row, 0].set_ylim(-0.03, 1.03)
        axes[row, 0].xaxis.set_major_formatter(EngFormatter(sep=""))  # 100k, 2M: long step counts do not collide
        for ax in axes[row]:
            ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel(steps_label)
    axes[-1, 1].set_xlabel(time_label)


def _add_header(fig, title: str, legend: dict) -> None:
    """Above the plots, in a band the figure grows by (inches): ``title``, then the rows of one ``legend``
    (label -> a line drawn with it) for all rows; then the plots' fixed margins."""
    columns, fontsize = _legend_layout(list(map(str, legend)), fig.get_figwidth())
    legend_rows = math.ceil(len(legend) / columns) if len(legend) > 1 else 0
    header = 0.2 + 0.3 * bool(title) + 0.2 * legend_rows
    plots = fig.get_figheight()
    fig.set_figheight(plots + header)
    if title:
        fig.suptitle(title, fontsize="medium", y=1 - 0.1 / fig.get_figheight(), va="top")
    if legend_rows:
        fig.legend(list(legend.values()), list(legend), loc="upper center", ncol=columns, fontsize=fontsize,
                   frameon=False, bbox_to_anchor=(0.5, 1 - (0.1 + 0.3 * bool(title)) / fig.get_figheight()))
    # Fixed margins, not tight_layout: that measures every label and took 40 % of the drawing time
    fig.subplots_adjust(left=0.09, right=0.98, bottom=0.45 / fig.get_figheight() + 0.02,
                        top=1 - header / fig.get_figheight(), wspace=0.06, hspace=0.3)


def _legend_layout(labels: list[str], width: float) -> tuple[int, float]:
    """Columns (at most 3) and font size (points) of a legend of ``labels`` that fits a figure ``width`` inches
    wide: fewer columns where the widest label would run the rows past its edges (two skill runs' folders, in two
    phases each, had been cut at both), then a smaller font (to 5 points) where one column is too wide. Labels are
    measured as text paths, one each: not a draw of the figure, which costs what tight_layout did."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextPath

    font = FontProperties(size="small")
    size = font.get_size_in_points()
    # (a label of no glyphs, a folder named with spaces, is no path: matplotlib's extents of it raise)
    widest = max((TextPath((0, 0), label, prop=font).get_extents().width / 72 for label in labels if label.strip()),
                 default=0.0)
    room, line = 0.96 * width, 4.8 * size / 72  # a label's line and spacing: handle, pad and column gap (ems)
    columns = max(1, min(3, len(labels), int(room // (widest + line))))
    if widest + line > room:  # one column is too wide: a smaller font, as far as it reads
        size = max(5.0, size * room / (widest + line))
    return columns, size


FINAL = "final evaluation (mean ± std of its episodes)"
FEW_POINTS = 12  # a curve of this many points or fewer is drawn with markers: its lines join few values


def _draw(ax, curves: list[list[tuple[float, float]]], style: dict, mean: bool):
    """Each curve as a line, or with ``mean`` their mean and band; returns a line drawn (None: none)."""
    if mean and len(curves) > 1:
        return _draw_mean(ax, curves, style)
    drawn = None
    for curve in curves:  # a lone point (a short run logs once) needs a marker to show
        drawn = ax.plot(*zip(*curve), **style, marker="o" if len(curve) <= FEW_POINTS else None, markersize=3)[0]
    return drawn


def _return_row(chosen: Sequence[str]) -> str | None:
    """The row a run's final evaluation is drawn in: its periodic evaluations', else the training return's."""
    return next((metric for metric in ("eval/return", "return") if metric in chosen), None)


def _final_evaluation(run: Path) -> dict | None:
    """``run``'s ``eval.json`` where its end evaluated it (a return to draw), else None."""
    import json

    try:
        evaluation = json.loads((run / "eval.json").read_text())
    except (OSError, ValueError):
        return None
    return evaluation if isinstance(evaluation, dict) and _finite(evaluation.get("return_mean")) else None


def _run_title(run: Path, live: bool) -> str:
    """A single run's title: its folder, what it trains (algorithm, task, seed), and whether it trains now."""
    from robolearn.config import read_yaml
    from robolearn.run_lock import holder

    try:
        raw = read_yaml(run / "config.yaml")
        env = raw.get("env") or {}
        what = f": {raw['algo']} on {env.get('task', '?')}, seed {raw.get('seed', 0)}"
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        what = ""
    return f"{run}{what}" + (" (training now)" if live and holder(run) else "")


def _reach(counts: list[float]) -> tuple[float, float]:
    """A run's last count and the closest spacing of its lines (0 for fewer than two lines)."""
    counts = sorted(set(counts)) or [0]
    return counts[-1], min((b - a for a, b in zip(counts, counts[1:])), default=0)


def _say_short_runs(ends: dict[str, list[tuple[Path, str, float, float]]]) -> None:
    """Where a mean's runs end at different counts (a seed just started, or stopped early), say which stop
    short: past their ends the mean is of the runs that got further. A run that would not have logged again
    before the furthest end (its lines further apart: 99,000 in steps of 1,500 beside 100,000 in steps of 1,000)
    reached it as far as its logging goes, and is not said."""
    for label, members in ends.items():
        furthest = max(last for _, _, last, _ in members)
        if short := [f"{run} to {counter.replace('_', ' ')} {last:g}" for run, counter, last, spacing in members
                     if (last + spacing <= furthest if spacing else last < furthest)]:
            warnings.warn(f"{label}: {', '.join(short)}, the others further (to {furthest:g}): past a run's last "
                          "line the mean is of the runs that got further", stacklevel=3)


def _draw_mean(ax, curves: list[list[tuple[float, float]]], style: dict):
    """The curves' mean and a ±1 std band (ddof 0, as ``robolearn list``) at each x any curve logged, over the
    curves that reached it: each is interpolated linearly between its own points, never extrapolated, so a
    seed that has just started counts where it has logged and no further (cutting the mean to the shortest run
    had shrunk it to a point). Returns the mean's line."""
    import numpy as np

    curves = [sorted(curve) for curve in curves]
    grid = np.unique([x for curve in curves for x, _ in curve])
    values = np.full((len(curves), len(grid)), np.nan)
    for row, curve in zip(values, curves):
        xs, ys = map(np.asarray, zip(*curve))
        covered = (grid >= xs[0]) & (grid <= xs[-1])
        row[covered] = np.interp(grid[covered], xs, ys)
    mean, std = np.nanmean(values, 0), np.nanstd(values, 0)
    ax.fill_between(grid, mean - std, mean + std, color=style["color"], alpha=0.2, linewidth=0)
    return ax.plot(grid, mean, **style, marker="o" if len(grid) == 1 else None)[0]  # one step: a point


COUNTERS = ("env_steps", "updates", "pretrain_updates")


def _phases(lines: list[dict]) -> dict[str | None, tuple[str, list[dict]]]:
    """A run's lines by ``phase``, each with the counter its x-axis counts: one phase for most runs; a
    fine-tuning run's offline phase counts updates and its online phase env steps, a skill run's
    pretraining its pretraining updates (all at env step 0)."""
    phases: dict[str | None, list[dict]] = {}
    for line in lines:
        phases.setdefault(line.get("phase"), []).append(line)
    return {phase: (next((c for c in COUNTERS if any(line.get(c) for line in group)), "env_steps"), group)
            for phase, group in phases.items()}


def find_runs(paths: Sequence[Path]) -> list[Path]:
    """``paths`` with each folder of runs (``runs/ppo_cartpole``, ``runs``) replaced by the runs under it."""
    found: list[Path] = []
    for path in map(Path, paths):
        nested = [] if (path / "metrics.jsonl").is_file() else sorted(p.parent for p in path.rglob("metrics.jsonl"))
        found += nested or [path]
    return found


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _warn_if_tasks_differ(runs: list[Path]) -> None:
    """Runs of different tasks drawn together: their returns are not on one scale; said, then drawn."""
    from robolearn.config import read_yaml

    tasks = set()
    for run in runs:
        try:
            raw = read_yaml(run / "config.yaml")
        except (OSError, ValueError):
            continue
        if isinstance(raw, dict) and isinstance(raw.get("env"), dict):
            tasks.add(str(raw["env"].get("task")))
    if len(tasks) > 1:
        warnings.warn(f"these runs are of different tasks ({', '.join(sorted(tasks))}): their curves are drawn "
                      "together, but their returns are not on one scale", stacklevel=3)


def _shortest_names(folders: list[Path]) -> dict[Path, str]:
    """Each folder by the fewest trailing parts that tell it from the others (``sweep_a/ppo_pendulum``
    beside ``sweep_b/ppo_pendulum``; ``pend_base`` alone)."""
    for depth in range(1, max((len(f.parts) for f in folders), default=1) + 1):
        names = {folder: "/".join(folder.parts[-depth:]) for folder in folders}
        if len(set(names.values())) == len(folders):
            return names
    return {folder: str(folder) for folder in folders}


def _labels(runs: list[Path]) -> list[str]:
    """Each run's name (its config's name folder), with its time stamp where two share a name."""
    names = [run.parent.name or run.name for run in runs]
    return [f"{name}/{run.name}" if names.count(name) > 1 else name for name, run in zip(names, runs)]
