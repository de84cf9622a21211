"""Where a run's numbers go: a progress bar, ``metrics.jsonl`` and Weights & Biases.

W&B writes offline run files under the run directory by default (sync them
later with ``wandb sync``); ``online`` streams when the user is logged in;
``disabled`` turns it off.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from robolearn.checkpoint import atomic_write_bytes
from robolearn.config import ConfigError


class _Bar(tqdm):
    """A tqdm bar whose ETA is the time left to ``deadline`` (``time.monotonic()``; ``runner.max_minutes``) where
    that comes first: the run ends there, and an ETA to ``total`` (a config's millions of steps) misled."""

    deadline = float("inf")
    _AT_DEADLINE = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{left} max_minutes, {rate_fmt}{postfix}]"

    @property
    def format_dict(self) -> dict[str, Any]:
        values = super().format_dict
        left = self.deadline - time.monotonic()
        if math.isfinite(left) and values.get("total") and not values.get("bar_format"):
            rate = values.get("rate")
            if not rate or (values["total"] - values["n"]) / rate > left:
                values = {**values, "bar_format": self._AT_DEADLINE, "left": self.format_interval(max(left, 0.0))}
        return values


class RunLogger:
    """Writes one JSON line per ``log`` call and mirrors it to W&B and the progress bar."""

    def __init__(self, run_dir: Path, *, total_steps: int, config: dict[str, Any], wandb_mode: str = "offline",
                 project: str = "robolearn", name: str = "", progress: bool = True, initial_steps: int = 0,
                 counter: str = "env_steps", phase: str | None = None, unit: str = "step", group: str = "",
                 tags: Sequence[str] = (), initial_seconds: float = 0.0) -> None:
        self.metrics_path = Path(run_dir) / "metrics.jsonl"
        # A run resumed from a checkpoint older than its last lines (a crash, a NaN stop) logs those steps
        # again: the old lines move to metrics.superseded.jsonl, so metrics.jsonl is one trajectory.
        set_aside_after(self.metrics_path, counter, initial_steps, phase)
        # a resumed run's ``time`` continues its own: from its checkpoint's seconds (the last line, logged before
        # it, misses the seconds since), or the last line's for a checkpoint saved before they were kept
        self._time_offset = initial_seconds or _last_time(self.metrics_path)
        self._file = self.metrics_path.open("a", buffering=1)
        self._start_steps = initial_steps
        # On a terminal the bar redraws at every log; into a log file, every 30 s (it would write every \r update;
        # tqdm's monitor thread redraws a bar idle for maxinterval, 10 s by default, so that is 30 s too)
        self._redraw = sys.stderr.isatty()
        self._bar_settings = {"unit_scale": True, "dynamic_ncols": True, "disable": not progress, "smoothing": 0.1,
                              "mininterval": 0.1 if self._redraw else 30.0, "maxinterval": 10.0 if self._redraw else 30.0}
        self._wandb = None
        if wandb_mode != "disabled":
            import wandb

            # quiet for this run only (a WANDB_SILENT of one's own decides): set in os.environ, it had silenced the
            # script's own wandb.init after train(), its run's link included
            quiet = wandb.Settings(silent=True) if "WANDB_SILENT" not in os.environ else None

            # reinit="create_new": a run of its own even while another is open in this process (one stopped by an
            # error in a script that goes on); W&B's default there returns that run, and the next run's lines went
            # into it, under its id, and were dropped as steps logged before its last
            try:
                self._wandb = wandb.init(project=project, name=name, dir=str(run_dir), mode=wandb_mode, config=config,
                                         resume="allow", id=_wandb_id(run_dir), group=group or None,
                                         tags=list(tags) or None, reinit="create_new", settings=quiet)
            except BaseException as err:
                self._file.close()
                # no API key, or a bad one: said in a line, not as W&B's 38 lines of traceback
                refused = tuple(getattr(wandb.errors, n) for n in ("UsageError", "AuthenticationError")
                                if hasattr(wandb.errors, n))
                if not isinstance(err, refused):
                    raise
                raise ConfigError(f"logging.wandb={wandb_mode}: W&B refused to start ({err}): run `wandb login` (or "
                                  "set WANDB_API_KEY), or log offline (logging.wandb=offline, the default: `wandb sync` "
                                  "uploads it later) or not at all (--no-wandb); then train again (`--resume` the run "
                                  "if it has saved a checkpoint)") from None
        self._deadline = float("inf")  # runner.max_minutes's (set_deadline): the bars' ETA stops there
        self._bar = _Bar(total=total_steps, initial=initial_steps, unit=unit, **self._bar_settings)
        self._start = time.perf_counter()  # once W&B has started (2 s of its own): its start-up is no training time

    def set_deadline(self, deadline: float) -> None:
        """``runner.max_minutes``'s end on ``time.monotonic()``'s clock (inf: none): the bars' ETA is the time left
        to it where the run would reach its total steps later."""
        self._deadline = self._bar.deadline = deadline

    def seconds(self, elapsed: float | None = None) -> float:
        """The run's ``time`` so far (continuing a resumed run's): what a checkpoint keeps for the resume;
        ``elapsed``: the seconds since this logger started, where the caller has read the clock."""
        elapsed = time.perf_counter() - self._start if elapsed is None else elapsed
        return round(self._time_offset + elapsed, 3)

    def clock(self, count: int) -> tuple[float, float]:
        """The run's ``time`` so far and ``count``'s rate since this logger started."""
        elapsed = time.perf_counter() - self._start
        return self.seconds(elapsed), (count - self._start_steps) / max(elapsed, 1e-9)

    def restart_rate(self, count: int) -> None:
        """Count rates from now, ``count`` done: a phase before this one (pretraining) took time but made no
        env steps, and would drag the fps of the whole first session down. ``time`` runs on unchanged."""
        now = time.perf_counter()
        self._time_offset += now - self._start
        self._start, self._start_steps = now, count

    wandb_offset = 0
    """Added to ``env_steps`` for W&B's step: a run that pretrains first (its lines all at env step 0, which W&B
    would merge into one row) steps W&B through its pretraining updates, then its env steps after them."""

    def log(self, env_steps: int, metrics: dict[str, float], wandb_step: int | None = None) -> None:
        """One line; ``wandb_step``: W&B's step where it is not ``env_steps`` (+ ``wandb_offset``): a pretraining
        line's update count."""
        now, fps = self.clock(env_steps)
        record = {"env_steps": env_steps, "time": now, "fps": round(fps, 1),
                  **{k: _plain(v) for k, v in metrics.items()}}
        postfix = {"fps": f"{fps:,.0f}"}
        if "return" in metrics and not math.isnan(metrics["return"]):
            value = metrics["return"]  # Go1's early 0.006 is no 0.0, a half-cheetah's 11234.5 no 1.123e+04
            postfix["return"] = f"{value:.1f}" if abs(value) >= 10 else f"{value:.3g}"
        self._emit(record, env_steps + self.wandb_offset if wandb_step is None else wandb_step, env_steps, postfix)

    def _emit(self, record: dict[str, Any], wandb_step: int, count: int, postfix: dict[str, str]) -> None:
        """One line to metrics.jsonl and W&B; the bar to ``count``, with ``postfix``."""
        try:
            self._file.write(json.dumps(record) + "\n")
        except OSError as err:  # a full disk: Python's error names no file
            raise OSError(err.errno, err.strerror, str(self.metrics_path)) from err
        if self._wandb is not None:
            self._wandb.log(record, step=wandb_step)
        self._bar.update(count - self._bar.n)
        self._bar.set_postfix(postfix, refresh=self._redraw)

    def advance(self, count: int) -> None:
        """Move the progress bar to ``count`` between logged iterations (tqdm redraws at most every
        ``mininterval``): an iteration of slow updates would otherwise sit at one number for minutes."""
        self._bar.update(count - self._bar.n)

    def phase_bar(self, total: int, initial: int, desc: str, unit: str) -> tqdm:
        """A bar of its own, below the run's, for a phase counted in other units (pretraining updates
        before any env step): the run's bar would sit at 0 with no rate or ETA through it."""
        bar = _Bar(total=total, initial=initial, desc=desc, unit=unit, leave=False, **self._bar_settings)
        bar.deadline = self._deadline
        return bar

    def summary(self, values: dict[str, Any]) -> None:
        if self._wandb is not None:
            self._wandb.summary.update({k: _plain(v) for k, v in values.items()})

    def end_progress(self) -> None:
        """Close the progress bar (before the end-of-run export and evaluation print)."""
        self._bar.close()

    def close(self, exit_code: int = 0) -> None:
        """End the logs; ``exit_code`` non-zero: W&B marks the run failed (a run stopped by an error). A second
        call does nothing."""
        self._bar.close()
        try:
            self._file.close()  # after a full disk's failed line, that line (still buffered) fails again
        finally:
            if self._wandb is not None:
                run, self._wandb = self._wandb, None
                try:
                    run.finish(exit_code=exit_code)
                except OSError as err:  # W&B's files on a full disk: the run's own are whole, and it is no failure
                    warnings.warn(f"W&B's files in {self.metrics_path.parent / 'wandb'} could not be completed "
                                  f"({err.strerror}); metrics.jsonl holds every line", stacklevel=2)


def _plain(value: Any) -> Any:
    return float(value) if hasattr(value, "item") or isinstance(value, (int, float)) else value


def _wandb_id(run_dir: Path) -> str:
    """A stable id per run directory, so a resumed run appends to the same W&B run: the id its first session
    logged under (``wandb/offline-run-<start>-<id>/run-<id>.wandb``), so that a run renamed or moved keeps it;
    for a new run, ``<name>-<time>-<8 random hex digits>`` (letters, digits and dashes): the folder's names alone
    were shared by runs of one config started in the same second under other run_dir= (a sweep's machines), which
    `wandb sync` then merged into one W&B run."""
    run = Path(run_dir).resolve()
    if sessions := wandb_sessions(run):
        return sessions[0].stem.removeprefix("run-")
    name = "".join(c if c.isalnum() else "-" for c in f"{run.parent.name}/{run.name}")[-55:]
    return f"{name}-{os.urandom(4).hex()}"


def set_aside_wandb(run_dir: Path, original: Path) -> Path | None:
    """Moves the W&B sessions that the copied run ``run_dir`` holds of its ``original``'s W&B run into
    ``wandb/copied/``: their id (``_wandb_id``) would have the copy log into the original's W&B run. Set aside,
    neither the copy's next id nor `wandb sync RUN/wandb` (which reads the sessions at the top) finds them, so the
    copy starts a W&B run of its own. Its own sessions stay (a resume of the copy that failed before saving leaves
    it a copy, whose next resume had set its own W&B run aside as the original's). The folder they went to, or None
    where there were none. A ``wandb`` folder that is a link out of the run (to the original's, or one both share)
    is refused: set aside there, they would be the original's own files."""
    if not (sessions := originals_wandb(run_dir, original)):
        return None
    folder = Path(run_dir) / "wandb"
    if not folder.resolve().is_relative_to(Path(run_dir).resolve()):
        raise ConfigError(f"{folder} is a link to {folder.resolve()}, W&B files the copy shares with its original: "
                          "set aside there, they would be gone from the original too, and not set aside, the copy "
                          "would log into the original's W&B run; make it a folder of the copy's own (a copy of the "
                          "one it links to), then resume")
    aside = folder / "copied"
    aside.mkdir(exist_ok=True)
    for session in sessions:
        session.parent.rename(aside / session.parent.name)
    return aside


def originals_wandb(run_dir: Path, original: Path | None) -> list[Path]:
    """The W&B sessions of ``run_dir``, a copy of ``original`` (None: not a copy), that are of the original's W&B
    run (its id, ``run-<id>``): copied with the folder, not the copy's own."""
    ids = {session.stem for session in wandb_sessions(original)} if original else set()
    return [session for session in wandb_sessions(run_dir) if session.stem in ids]


def wandb_sessions(run_dir: Path) -> list[Path]:
    """The W&B run files (``wandb/<offline->run-<start>-<id>/run-<id>.wandb``) of ``run_dir``'s sessions, oldest
    first; none where it never logged to W&B."""
    return sorted(Path(run_dir).glob("wandb/*run-*/run-*.wandb"), key=lambda path: path.parent.name.removeprefix("offline-"))


def set_aside_after(path: Path, counter: str, count: int, phase: str | None) -> None:
    """Move the lines of ``path`` (of ``phase``, if given) whose ``counter`` is past ``count``, and a torn
    line (a kill mid-write; the next line appended would join it), to ``metrics.superseded.jsonl`` beside
    it; nothing is deleted, and ``path`` is rewritten atomically."""
    if not path.is_file():
        return
    text = path.read_text(errors="replace")  # damaged bytes: a line set aside, not a resume refused
    kept, superseded = [], []
    for line in filter(str.strip, text.splitlines()):
        try:
            record = json.loads(line)
            later = record.get(counter, -1) > count and record.get("phase", phase) == phase
        except (ValueError, TypeError, AttributeError, RecursionError):  # (a line of 100,000 nested brackets)
            later = True
        (superseded if later else kept).append(line)
    if superseded:
        aside = path.with_name("metrics.superseded.jsonl")
        with aside.open("a") as f:
            # an earlier resume killed mid-append left half a line: these start on a line of their own
            torn = aside.stat().st_size > 0 and not _ends_with_newline(aside)
            f.write("\n" * torn + "".join(line + "\n" for line in superseded))
    if superseded or (text and not text.endswith("\n")):
        atomic_write_bytes(path, lambda f: f.write("".join(line + "\n" for line in kept).encode()))


def _ends_with_newline(path: Path) -> bool:
    """Whether the non-empty file ``path``'s last byte is a newline (read alone: the file may be large)."""
    with path.open("rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def keep_seconds(progress: Any, logger: RunLogger | None) -> None:
    """Put the training seconds so far (``logger``'s ``time``) into ``progress``, before a checkpoint saves it,
    so that a resume's ``time`` goes on from there (``logger`` None: a rank that does not log; left as it is)."""
    if logger is not None:
        progress.seconds = logger.seconds()


def _last_time(path: Path) -> float:
    """The ``time`` of the last line of ``metrics.jsonl`` (0 for a new run): the seconds trained so far."""
    if not path.is_file():
        return 0.0
    for line in reversed(path.read_text(errors="replace").splitlines()):
        try:
            return float(json.loads(line)["time"])
        except (ValueError, KeyError, TypeError, RecursionError):  # a torn last line (killed mid-write), one without
            # it, or one nested deeper than json decodes
            continue
    return 0.0


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The lines of a run's ``metrics.jsonl``, in order; a torn one (a run killed mid-write, not yet
    resumed) is left out, so curves, ``list`` and benchmarks read the rest."""
    path = Path(run_dir) / "metrics.jsonl"
    records = []
    for line in path.read_text(errors="replace").splitlines() if path.is_file() else []:
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):  # (RecursionError: brackets nested deeper than json decodes)
            continue
        if isinstance(record, dict):
            records.append(record)
    return records
