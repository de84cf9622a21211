"""The fixed-rate loop that drives a Controller on any VecEnv or Robot.

``run(controller, env)`` is the same loop for evaluation in sim, recording and
deployment: observe, ``act``, ``step``, wait for the next tick. Timing is
drift-free: tick ``k`` is due at ``start + k * period`` (never "sleep one
period after the work"), a tick that starts late is counted as an overrun and
missed ticks are skipped rather than replayed back to back. Every step records
the commanded action and, when the env reports it (``info["sent_action"]``,
what a Robot actually sent after its safety layer), the sent one.

Envs that pace themselves (a :class:`~hardware.robot.Robot` waits for its own
control tick inside ``step``; ``env.paced = True``) are not paced twice: the
loop measures their timing instead. On an exception or Ctrl+C the env is
closed (a Robot ramps to its safe pose and turns torque off), what was recorded
is kept, and the exception propagates (Ctrl+C ends the run as ``interrupted``);
pass ``stats`` to keep the timing of a run that raised. On a Robot a kill
(SIGTERM) and a closed terminal (SIGHUP) stop it as Ctrl+C does, and Ctrl+\\ is
its emergency stop, as in deploy. An action of another shape than the env's is
refused before it is stepped, and a loop that runs below its rate is warned
about during the run (:class:`SlowLoopWarning`).

An env whose automatic reset takes real time (a Robot ramping to the next start
pose) reports it as ``info["reset_s"]``; it is left out of the step timing, so
``step_ms_*`` describe control steps, not the pause between episodes.

Sequence and hierarchical controllers run unchanged: they are called every
control step and keep their queue or skill inside.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import os
import select
import signal
import stat
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
from tqdm import tqdm

# (Actor, check_actor and action_of are evaluate.py's: one Protocol and one check for every loop that runs a controller)
from robolearn.evaluate import Actor, NonFiniteError, action_of, check_actor, check_finite, warn_if_trained_elsewhere
from robolearn.interfaces import Obs, Step, VecEnv


def as_ctrl_c(signum: int, frame: Any) -> None:
    """A signal handler that stops as Ctrl+C does (a kill's SIGTERM, a closed terminal's SIGHUP): the
    command's own KeyboardInterrupt handling then keeps what is done and stops safely."""
    hung_up(signum)
    raise KeyboardInterrupt(signal.Signals(signum).name)


def hung_up(signum: int) -> None:
    """On SIGHUP (a closed terminal or ssh session), point stdout and stderr where they are a terminal at
    /dev/null: a write to the dead terminal raises EIO, which would cut short the safe stop or the save it
    prints about. Output to files (a log, nohup's) is left as it is."""
    if signum != getattr(signal, "SIGHUP", None):
        return
    for fd in (1, 2):
        try:
            if os.isatty(fd):
                to_devnull(fd)
        except OSError:
            pass


def mute_dead_pipes() -> set[int]:
    """Point stdout and stderr at /dev/null where they are pipes whose reader is gone: the ``| tee log`` that
    the same Ctrl+C ended. A write there raises BrokenPipeError, which had turned a run's clean stop, its
    checkpoint saved, into a failure (failed.txt, a traceback) as it said so. Returns the descriptors muted
    (1, 2): what was for stdout may go to a stderr still read. (Linux reports a pipe without readers as
    POLLERR to its writer.)"""
    muted = set()
    for fd in (1, 2):
        try:
            if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                continue
            poller = select.poll()
            poller.register(fd, select.POLLOUT)
            if any(events & select.POLLERR for _, events in poller.poll(0)):
                to_devnull(fd)
                muted.add(fd)
        except (OSError, AttributeError):  # (AttributeError: no select.poll, as on Windows)
            pass
    return muted


def say_what_the_stop_left(err: KeyboardInterrupt, left: str) -> None:
    """Add to a stop's message what it left behind (``"SIGINT; the robot was parked ..."``): the command line's
    "interrupted" line prints a message that says it (one with ``"; "``), where a bare "interrupted" had left the
    user to guess what was written or parked."""
    stop = err.args[0] if err.args and err.args[0] else "SIGINT"
    err.args = (f"{stop}; {left}",)


def to_devnull(fd: int) -> None:
    """Point the file descriptor ``fd`` at /dev/null: writes to it then go nowhere, and cannot fail."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, fd)
    os.close(null)


STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
"""Ctrl+C, a kill, a closed terminal: the signals that ask a command to stop."""


@contextlib.contextmanager
def stops_as_ctrl_c(also: dict[int, Any] | None = None) -> Iterator[None]:
    """Within the block, a kill (SIGTERM) and a closed terminal or ssh session (SIGHUP) stop as Ctrl+C does
    (:func:`as_ctrl_c`), and ``also``'s handlers are installed (deploy's emergency stop); all are given back
    after. Signals set to be ignored (``nohup``: SIGHUP) or handled outside Python are left as they are, and
    outside the main thread, which cannot take signals, nothing is installed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handlers = {signum: as_ctrl_c for signum in STOP_SIGNALS  # (Ctrl+C is Python's own already)
                if signum != signal.SIGINT and signal.getsignal(signum) == signal.SIG_DFL} | (also or {})
    previous = {}
    try:
        for signum, handler in handlers.items():
            previous[signum] = signal.signal(signum, handler)
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def stops_held() -> Iterator[list[int]]:
    """Within the block, stop signals (Ctrl+C, a kill, a closed terminal) are noted in the list it gives, not
    raised: for a short write that must finish once begun (a deployment's summary after the robot is parked).
    Signals set to be ignored stay ignored; outside the main thread nothing is installed."""
    held: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield held
        return

    def hold(signum: int, frame: Any) -> None:
        hung_up(signum)
        held.append(signum)

    previous = {}
    try:
        for signum in STOP_SIGNALS:
            if signal.getsignal(signum) not in (signal.SIG_IGN, None):
                previous[signum] = signal.signal(signum, hold)
        yield held
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class StepSink(Protocol):
    """Where each step goes (a recorder): called after every env step."""

    def add(self, obs: Obs, commanded: torch.Tensor, sent: torch.Tensor, step: Any) -> None: ...
    def close(self) -> None: ...


SPIN_S = 0.0005
"""Sleep until this close to a deadline, then spin: ``time.sleep`` alone overshoots
by up to a scheduler tick (often 50-100 us, ms on loaded machines)."""


def sleep_until(deadline: float, clock: Callable[[], float] = time.perf_counter) -> None:
    """Return at ``deadline`` (of ``clock``) as precisely as the OS allows."""
    remaining = deadline - clock()
    if remaining > SPIN_S:
        time.sleep(remaining - SPIN_S)
    while clock() < deadline:
        pass


class Ticker:
    """Drift-free fixed-rate ticks with lateness telemetry.

    ``wait()`` blocks until the next due tick and returns how late it woke
    (seconds). If the caller was so slow that ticks went by, those ticks are
    skipped (counted in ``overruns``) and the schedule keeps its phase.
    """

    def __init__(self, period: float, clock: Callable[[], float] = time.perf_counter) -> None:
        if period <= 0:
            raise ValueError(f"tick period must be positive, got {period}")
        self.period, self.clock = period, clock
        self.start = clock()
        self.tick = 0
        self.overruns = 0
        self.lateness: list[float] = []

    def restart(self) -> None:
        self.start, self.tick = self.clock(), 0

    def wait(self) -> float:
        self.tick += 1
        due = self.start + self.tick * self.period
        now = self.clock()
        if now > due:  # late: this tick is an overrun, and whole ticks already gone are skipped
            behind = int((now - due) // self.period)
            self.overruns += 1 + behind
            self.tick += behind
            due = self.start + self.tick * self.period
        sleep_until(due, self.clock)
        late = self.clock() - due
        self.lateness.append(late)
        return late


@dataclass
class LoopStats:
    """Timing of one run: what a person checks before trusting a deployment (:meth:`summary`; the per-step
    times are left out of its repr, which would print one number per step)."""

    steps: int = 0
    episodes: int = 0
    period_s: float = 0.0
    overruns: int = 0
    compute_s: list[float] = field(default_factory=list, repr=False)  # controller time per step
    step_s: list[float] = field(default_factory=list, repr=False)  # env.step time per step
    lateness_s: list[float] = field(default_factory=list, repr=False)  # tick wake-up lateness
    returns: list[float] = field(default_factory=list)  # env 0's finished episodes
    successes: list[bool] = field(default_factory=list)  # ... where the env reports success
    interrupted: bool = False
    stopped_by: str | None = None  # the stop signal that interrupted it (SIGINT: Ctrl+C; SIGTERM; SIGHUP)
    close_failed: bool = False  # the env's close (a robot's safe stop) raised: the error the run ends with
    error: str | None = None

    def summary(self) -> dict[str, Any]:
        def pct(values: list[float], q: float) -> float:
            return float(np.percentile(values, q)) * 1e3 if values else 0.0

        return {
            "steps": self.steps, "episodes": self.episodes,
            "return_mean": float(np.mean(self.returns)) if self.returns else None,
            "success_rate": float(np.mean(self.successes)) if self.successes else None, "rate_hz": 1 / self.period_s if self.period_s else 0.0,
            "overruns": self.overruns,
            "compute_ms_p50": pct(self.compute_s, 50), "compute_ms_p99": pct(self.compute_s, 99),
            "step_ms_p50": pct(self.step_s, 50), "step_ms_p99": pct(self.step_s, 99),
            "jitter_ms_p50": pct(self.lateness_s, 50), "jitter_ms_p99": pct(self.lateness_s, 99),
            "jitter_ms_max": max(self.lateness_s, default=0.0) * 1e3,
            "interrupted": self.interrupted, "error": self.error,
        }


class SlowLoopWarning(RuntimeWarning):
    """The loop ran below its rate for a while: said during the run, where a person watching a robot can stop
    it, and not only in the report after it."""


class _SlowLoopWatch:
    """Warns once when more than a tenth of the steps of a window of ``window`` steps came late for their
    tick. A single slow step (a garbage collection, a retried read, a stall of seconds) does not: a lossy bus
    or an overloaded machine does, whose controller then acts on old observations and sends fewer goals than
    it was trained to."""

    def __init__(self, window: int = 250, bar: tqdm | None = None) -> None:
        self.window, self.steps, self.late, self.overruns, self.warned = window, 0, 0, 0, False
        self.bar = bar  # the loop's progress bar, cleared while the warning is said (it had been glued to its line)

    def tick(self, overruns: int, period_s: float) -> None:
        """After a step; ``overruns``: the ticker's count so far (ticks, a late step's skipped ones too)."""
        self.steps += 1
        self.late += overruns > self.overruns
        self.overruns = overruns
        if self.warned or self.steps < self.window:
            return
        if self.late > 0.1 * self.steps:
            self.warned = True
            if self.bar is not None:
                self.bar.clear()
            warnings.warn(f"the loop is running below its rate: {self.late} of the last {self.steps} steps came late "
                          f"for their {period_s * 1e3:.0f} ms period, so actions act on older observations and come "
                          "fewer than trained (a slow bus, read retries, a loaded machine); the run goes on, and its "
                          "report counts the overruns", SlowLoopWarning, stacklevel=4)  # (run's no_grad wrapper)
            if self.bar is not None:
                self.bar.refresh()
        self.steps = self.late = 0


def _loop_bar(label: str | None, steps: int | None, episodes: int | None) -> tqdm | None:
    """Counts episodes when the run is told a number of them, else steps. On a terminal it redraws at
    most 10 times a second (a few microseconds per tick otherwise) and is cleared at the end; into a log
    file, every 30 s, and its last state is kept."""
    if label is None:
        return None
    redraw = sys.stderr.isatty()
    by_episode = episodes is not None
    return tqdm(total=episodes if by_episode else steps, desc=label, unit="episode" if by_episode else "step",
                dynamic_ncols=True, mininterval=0.1 if redraw else 30.0, leave=not redraw)


def _check_arguments(controller: Any, env: Any, rate_hz: Any, steps: Any, episodes: Any, sink: Any, seed: Any) -> None:
    """Refuse what ``run`` cannot mean, in words: steps=-1 had run nothing, steps=2.5 three steps, rate_hz=-5 as fast
    as it could, and an env, controller or sink of another kind failed as "'str' object has no attribute 'close'"."""
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)):
        raise ValueError(f"run: seed must be a whole number (or None), got {seed!r}")  # (torch's 'expected a long')
    for name, count in (("steps", steps), ("episodes", episodes)):
        if count is not None and (isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 0):
            raise ValueError(f"run: {name} must be a whole number of at least 0 (or None), got {count!r}")
    if rate_hz is not None and (isinstance(rate_hz, bool) or not isinstance(rate_hz, numbers.Real)
                                or not (math.isfinite(rate_hz) and rate_hz >= 0)):
        raise ValueError(f"run: rate_hz is ticks per second, >= 0 (0: as fast as it can; None: the env's "
                         f"1 / control_dt), got {rate_hz!r}")
    if not all(hasattr(env, name) for name in ("reset", "step", "control_dt", "close")):
        raise TypeError(f"run(controller, env): env must be a VecEnv (robolearn.make_env(run), a connected Robot), "
                        f"got {type(env).__name__}")
    check_actor(controller, "run(controller, env)")
    if sink is not None and not (hasattr(sink, "add") and hasattr(sink, "close")):
        raise TypeError(f"run: sink must have add and close (robolearn.recording.EpisodeRecorder(folder)), got "
                        f"{type(sink).__name__}")


def _robot_stop_signals(env: Any, signals: contextlib.ExitStack) -> None:
    """For a robot (an env with ``emergency_stop``), entered into ``signals``, held while it runs and through its
    close: a kill or a closed terminal stops it safely as Ctrl+C does, and Ctrl+\\ is its emergency stop (deploy's,
    for any robot); a robot that takes stop signals itself (``stop_signals``: a :class:`~hardware.robot.Robot`, which
    keeps a second stop that comes before its close for that close) is given them. For a sim, nothing. Each is in
    ``signals`` once installed, so a stop that lands among them still has them given back with the close."""
    if callable(getattr(env, "emergency_stop", None)):
        estop = {signal.SIGQUIT: lambda *_: env.emergency_stop()} if hasattr(signal, "SIGQUIT") else {}
        signals.enter_context(stops_as_ctrl_c(also=estop))
        if callable(getattr(env, "stop_signals", None)):
            signals.enter_context(env.stop_signals())


def _check_action(commanded: torch.Tensor, expected_shape: tuple[int, ...] | None, step: int, episode: int) -> None:
    """Refuse an action of another shape than the env takes (``expected_shape``; said before a robot holds it
    step after step) or one with NaN or inf: a broken controller stops here, before the robot or sim, saying
    when (``step`` of ``episode``)."""
    if expected_shape is not None and tuple(commanded.shape) != expected_shape:
        raise ValueError(f"the controller's action has shape {tuple(commanded.shape)}, the env takes {expected_shape} "
                         "(num_envs, *action_spec.shape): a controller of another task or robot?")
    try:
        check_finite("action", commanded)
    except NonFiniteError as err:
        raise NonFiniteError(f"{err} at step {step} of episode {episode} (both counted from 0, as a recording's "
                             "episode files and their steps): the controller is broken (check its inputs and "
                             "weights); the run stopped", err.sources) from None


def _keep_timing(stats: LoopStats, ticker: Ticker | None, paced_env: Any) -> None:
    """The tick lateness and overruns into ``stats``: of the loop's own ``ticker``, or else of the env that
    paces itself (``paced_env``: a Robot's ticker), where either is there."""
    if ticker:
        stats.lateness_s, stats.overruns = ticker.lateness, ticker.overruns
    elif paced_env is not None and getattr(paced_env, "ticker", None) is not None:
        stats.lateness_s, stats.overruns = list(paced_env.ticker.lateness), paced_env.ticker.overruns


@torch.no_grad()
def run(
    controller: Actor,
    env: VecEnv,
    *,
    rate_hz: float | None = None,
    steps: int | None = None,
    episodes: int | None = None,
    sink: StepSink | None = None,
    seed: int | None = None,
    close_env: bool = True,
    stats: LoopStats | None = None,
    progress: str | None = None,
) -> LoopStats:
    """Drive ``controller`` on ``env`` for ``steps`` control steps or until
    ``episodes`` episodes (of env 0) have ended, whichever comes first.

    ``rate_hz``: ticks per second; default ``1 / env.control_dt`` (real time);
    0 runs as fast as possible (simulation only). ``sink`` receives every step
    (a recorder); it is closed on every exit path so completed steps are kept.
    ``stats``: filled in place (and returned), so a caller still has it when the run raises.
    ``progress``: a bar with this label on stderr (episodes done, last return, steps, rate), for a
    person watching a long deploy; None runs silent.
    """
    if steps is None and episodes is None:
        raise ValueError("run needs steps or episodes (or both) to know when to stop")
    _check_arguments(controller, env, rate_hz, steps, episodes, sink, seed)
    warn_if_trained_elsewhere(controller, env)  # an exported controller says its rate and task settings
    paced_by_env = bool(getattr(env, "paced", False))
    rate = (1.0 / env.control_dt) if rate_hz is None else rate_hz
    stats = stats if stats is not None else LoopStats()
    stats.period_s = 1.0 / rate if rate > 0 else 0.0
    ticker = Ticker(stats.period_s) if rate > 0 and not paced_by_env else None
    bar = _loop_bar(progress, steps, episodes)
    pacing = ticker or (getattr(env, "ticker", None) if paced_by_env else None)  # whose overruns count
    slow = _SlowLoopWatch(bar=bar)
    expected_shape = (env.num_envs, *env.action_spec.shape) if hasattr(env, "action_spec") else None  # an action's
    signals = contextlib.ExitStack()
    try:
        # in the try: a first stop that lands as they are installed (a robot's raises it) still closes the env
        _robot_stop_signals(env, signals)
        obs = env.reset(seed=seed)
        controller.reset()
        if ticker:
            ticker.restart()
        episode_return, episode_start = 0.0, 0  # (the step the episode began at: where a recording's file begins)

        def count(obs: Obs, commanded: torch.Tensor, step: Step) -> None:
            """Record ``step`` and count it (and the episode it ended)."""
            nonlocal episode_return, episode_start
            if sink is not None:
                sink.add(obs, commanded, step.info.get("sent_action", commanded), step)
            controller.reset(done := step.terminated | step.truncated)
            stats.steps += 1
            episode_return += float(step.reward[0])
            if bool(done[0]):
                stats.episodes += 1
                stats.returns.append(episode_return)
                episode_return, episode_start = 0.0, stats.steps
                if "success" in step.info:
                    stats.successes.append(bool(step.info["success"][0]))
                if bar is not None and episodes is not None:
                    bar.set_postfix_str(f"return {stats.returns[-1]:.2f}, {stats.steps} steps", refresh=False)
                    bar.update(1)
            if bar is not None and episodes is None:
                bar.update(1)

        while (steps is None or stats.steps < steps) and (episodes is None or stats.episodes < episodes):
            t0 = time.perf_counter()
            check_finite("observation", obs)  # said as the env's fault, not as the action it would spoil
            commanded = action_of(controller, obs).to(env.device)
            _check_action(commanded, expected_shape, stats.steps - episode_start, stats.episodes)
            t1 = time.perf_counter()
            try:
                step = env.step(commanded)
            except BaseException as err:  # a robot's episode that had ended when its ramp to the next start was
                if (ended := vars(err).pop("ended_step", None)) is not None:  # cut short (a Ctrl+C, a fault): kept
                    count(obs, commanded, ended)  # (taken off: a robot raises its fault again on every later call)
                raise
            t2 = time.perf_counter()
            count(obs, commanded, step)
            obs = step.obs
            reset_s = float(step.info.get("reset_s", 0.0))
            stats.compute_s.append(t1 - t0)
            stats.step_s.append(t2 - t1 - reset_s)
            if ticker:
                if reset_s:  # a slow auto-reset is a pause between episodes, not missed ticks
                    ticker.restart()
                ticker.wait()
            if pacing is not None:
                slow.tick(pacing.overruns, stats.period_s)
    except KeyboardInterrupt as stop:
        stats.interrupted, stats.stopped_by = True, str(stop) or "SIGINT"  # (Ctrl+C's own has no name)
        if hasattr(env, "stop_requested"):  # a robot: a stop signal during its park is then the second one
            env.stop_requested = True
    except BaseException as err:
        stats.error = f"{type(err).__name__}: {err}"
        raise
    finally:
        try:  # (a stop landing in any of these still leaves the robot's close, its park and torque-off, to run)
            if bar is not None:
                bar.close()
            _keep_timing(stats, ticker, env if paced_by_env else None)
            if sink is not None:
                sink.close()
        finally:
            with signals:  # given back after the robot's park, which they stop as they did the run
                if close_env:
                    try:
                        env.close()
                    except BaseException:
                        stats.close_failed = True
                        raise
    return stats
