"""A real robot as a VecEnv with one env, safe on every exit path.

A driver subclasses :class:`Robot` and implements the link (``_connect``,
``_disconnect``, ``_read``, ``_write``, ``_set_torque``); a task subclass says
what the observation, reward and episode start are (``_observe``,
``_begin_episode``, ``_score``). The base class owns everything that must be
the same on every robot:

- ``with robot:`` connects, and on leaving (normally, on an exception, on
  Ctrl+C) stops safely: ramp to the safe pose at ``safety.ramp_speed``, torque
  off, disconnect. If the link is lost, no ramp is possible: the error says so
  (servos with a bus watchdog stop on their own). A stop asked for during that
  ramp (Ctrl+C, a kill's SIGTERM, a closed terminal's SIGHUP) is what the ramp is
  doing already: the first one is said and the park goes on (then raises
  KeyboardInterrupt; one that ends the loop while the watchdog parks is said too,
  as the close waits for that park); a second one (counting the Ctrl+C that began
  the close, and under :func:`~robolearn.runtime.run` one that comes before the
  close begins: see :meth:`Robot.stop_signals`) turns torque off where the robot
  stands and raises
  :class:`~hardware.safety.ParkSkipped`, which says the park was skipped (a park
  the watchdog was making, which the close waits for, too: its stop says so). A park
  that reads nothing (a silent bus, each read waiting out its timeout; or garbled replies, which
  the driver's ``read_failure`` tells apart) says how it goes on stderr, at its start and every
  ``PARK_NOTICE_S``, and is given up once it has read nothing for ``safety.park_blind_s`` (its ramps again
  after a re-arm included): torque off where the robot stands, raised as :class:`~hardware.safety.ParkUnfinished`,
  whose message says the park did not finish and, if the servos did not confirm the torque-off, to cut their
  power. Only time without a reading counts: a park on a bus that loses replies but answers goes on, slower
  than planned, to the safe pose: each waypoint waits out one read at most (a driver's ``_read`` times out), so
  its time is bounded by its waypoints (up to :data:`MAX_PARK_RESTARTS` ramps again included), at up to a failed
  read each (~0.3 s on a Dynamixel bus with its 3 retries, twice that with a torque check: at the worst
  15-30 x the planned time).
- ``step`` paces itself: it sends the command, waits for the next control tick
  (a drift-free :class:`~robolearn.runtime.Ticker`), then reads the state, so the
  observation is one control period after the command. ``paced = True`` tells
  :func:`robolearn.runtime.run` not to pace it again.
- Every command passes the :class:`~hardware.safety.SafetyLayer`;
  ``info["sent_action"]`` is what was actually sent, ``info["goal_action"]`` the goal the
  task's own rule made of the action before it (what simulation would have applied), and
  ``info["safety"]`` the names of the rules that overruled it this step, ``info["metrics"]``
  the task's numbers of the step (``_metrics``: a reach's distance to its target).
- A watchdog thread: if no fresh observation (failed reads) or no ``step``
  call arrives for ``safety.watchdog_s`` (counted from when the loop's last call handed its observation: a call
  waiting for the robot, its reads or the bus, is no silent controller; one stuck in the task's code after its
  read is) the robot holds its last safe command
  (``step`` too: while no observation is fresh it sends that command, not the
  action decided on the frozen one, and reports ``watchdog_hold``);
  after ``safety.stop_after_s`` it stops and the next ``step`` raises
  :class:`~hardware.safety.WatchdogStop`.
- :meth:`emergency_stop` (any thread; the CLI binds it to Ctrl+\\): torque off
  where the robot stands; the next ``step`` raises ``EmergencyStop``.
- Episodes: ``reset`` ramps to the start pose; at the time limit ``step``
  resets by itself like any VecEnv (``info["final_obs"]`` is the last
  observation of the finished episode; ``info["reset_s"]`` the seconds that
  reset's ramp took, which the runtime keeps out of its step timing).
"""

from __future__ import annotations

import contextlib
import math
import signal
import sys
import threading
import time
from abc import abstractmethod
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from tqdm import tqdm

from hardware.safety import (ConnectionLost, EmergencyStop, ParkSkipped, ParkUnfinished, RobotError, SafetyConfig,
                             SafetyLayer, SafetyStop, ServosStopped, WatchdogStop, add_to_message, check_home_pose,
                             check_safe_pose, outside_limits)
from robolearn.interfaces import Obs, Step, VecEnv
from robolearn.runtime import STOP_SIGNALS, Ticker, as_ctrl_c, hung_up


MAX_PARK_RESTARTS = 3  # a park starts again from where re-armed servos stand at most this often
PARK_NOTICE_S = 3.0  # s: how often a park that reads nothing (a silent bus) says how it goes
LOSSY_S = 10.0  # s: a bus that answered again after a failed read this recently loses replies (Robot._failure_said)


UNCONFIRMED = "the torque-off was not confirmed"
SILENT = "a silent bus"  # why a read gave no state, where its driver does not say (Robot.read_failure)
NOT_FINITE = "readings with NaN or inf"  # ... where the driver read one that is not finite (Robot._checked)


def _unconfirmed(err: Exception) -> str:
    return (f"{UNCONFIRMED} ({type(err).__name__}: {err}): the servos may still hold torque; cut "
            "their power before touching the arm")


def _say(line: str) -> None:
    """``line`` on stderr, above a progress bar that may be showing (deploy's): what a stop is doing, while it
    does it. Without tqdm's lock, which a Ctrl+C may have left held mid-acquire: a stop must never wait on a bar.
    A line that cannot be said (a terminal gone: EIO) is dropped, never the stop's failure."""
    try:
        tqdm.write(line, file=sys.stderr, nolock=True)
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 (the park that says it goes on)
        pass


class _BlindPark:
    """Says a park that goes on without a reading, after its first blind waypoint and every ``PARK_NOTICE_S``: on
    a silent bus every read waits out its timeout and retries, so a park of seconds took 10-30 s with nothing
    said, which looked like a frozen terminal. Time left is the waypoints left at the blind waypoints' mean pace.
    Only once nothing has been read for ``silent_s`` (the robot's ``stop_after_s``, which the watchdog's park
    has waited out already): one failed read of a healthy bus had been said as a silent one, 14 s to go of a
    park that took 1.5.

    And bounds it: a park that has read nothing for ``limit_s`` of its own time (``safety.park_blind_s``) is given
    up (:meth:`check`). Blind, each waypoint takes a failed read (~0.28 s on a Dynamixel bus, not 0.02), so a
    park of 5 s had gone on for 70 on a bus that may never answer. Only time without a reading counts, since the
    last one, whichever of the park's ramps it falls in: a park on a bus that loses replies but answers (reads
    retried, a few failing) goes on, slower than planned, its readings saying where the arm is; it still ends, each
    waypoint waiting out one read at most. The time of its failed and retried reads, added up, had been a limit
    too: a park making its way at 15 % of the replies lost (2.8 s planned, 11 of its 110 reads failing) was given up
    at 10.8 s, torque off short of the safe pose, where an unsupported arm drops."""

    def __init__(self, waypoints: int, silent_s: float, limit_s: float) -> None:
        self.left, self.began, self.said_at, self.silent_s = waypoints, time.monotonic(), -math.inf, silent_s
        self.last, self.blind_s, self.blind = self.began, 0.0, 0  # (the seconds and count of blind waypoints)
        self.limit_s = limit_s

    def restart(self, waypoints: int) -> None:
        """A ramp again from where re-armed servos stand: the same park, its time unread going on (a fresh count
        for each ramp would let a park that keeps restarting go on blind for about 4 x ``limit_s``)."""
        self.left = waypoints

    def unread_s(self, fresh_at: float) -> float:
        """Seconds of this park without a reading: since it began or since ``fresh_at`` (the last reading)."""
        return time.monotonic() - max(fresh_at, self.began)

    def check(self, fresh_at: float, why: str = SILENT) -> None:
        """Raise ParkUnfinished once this park has read nothing for ``limit_s``: it stops moving there. ``why``: why
        the last read gave nothing (:attr:`Robot.read_failure`)."""
        if (unread := self.unread_s(fresh_at)) >= self.limit_s:
            raise ParkUnfinished(f"the park to the safe pose did not finish: nothing was read for {unread:.1f} s of "
                                 f"it ({why}; safety.park_blind_s = {self.limit_s:g}), so it was given up "
                                 "short of the safe pose")

    def waypoint(self, fresh_at: float | None, why: str = SILENT) -> None:
        """After each waypoint's read; ``fresh_at``: when the last reading came, None if this read gave one; ``why``:
        why it gave none (:attr:`Robot.read_failure`: a bus whose replies all come garbled is not a silent one)."""
        now = time.monotonic()
        self.left, took, self.last = self.left - 1, now - self.last, now
        if fresh_at is None:
            return
        self.blind_s, self.blind = self.blind_s + took, self.blind + 1
        if now - self.said_at >= PARK_NOTICE_S and now - fresh_at >= self.silent_s:
            self.said_at, remaining = now, self.left * self.blind_s / self.blind
            give_up = max(0.0, self.limit_s - self.unread_s(fresh_at))
            # the give-up is said only where it comes first ("about 0 s left ..., given up in 6 s" had read oddly)
            ends = f", given up in {give_up:.0f} s if nothing is read" if give_up < remaining else ""
            _say(f"no reading for {now - fresh_at:.1f} s ({why}): parking the arm blind, about {remaining:.0f} "
                 f"s left of about {now - self.began + remaining:.0f} s{ends}; a second Ctrl+C cuts the park short")


class Robot(VecEnv):
    """Base of real robots whose actions are joint position commands."""

    num_envs = 1
    reopens = True  # a closed robot connects again (`with robot:`); a step before that says so (not connected)
    paced = True
    settle_s = 0.2  # seconds to hold a pose reached by a ramp before going on

    def __init__(self, *, joint_low: np.ndarray, joint_high: np.ndarray, home: np.ndarray, control_dt: float,
                 max_episode_steps: int, safety: SafetyConfig | None = None,
                 joint_names: list[str] | None = None) -> None:
        self.device = torch.device("cpu")
        self.control_dt = control_dt
        self.max_episode_steps = max_episode_steps
        self.joint_low, self.joint_high = np.asarray(joint_low, float), np.asarray(joint_high, float)
        self.home = np.asarray(home, float)
        self.safety_cfg = safety or SafetyConfig()
        if self.safety_cfg.watchdog_s < 2 * control_dt:
            raise ValueError(f"safety.watchdog_s ({self.safety_cfg.watchdog_s}) must cover at least two control "
                             f"periods ({2 * control_dt:.3f} s) or every step would trip it")
        self.joint_names = (list(joint_names) if joint_names is not None
                            else [f"joint {i}" for i in range(len(self.home))])
        self.safety = SafetyLayer(self.joint_low, self.joint_high, self.safety_cfg, self.joint_names)
        check_safe_pose(self.safety_cfg, self.joint_low, self.joint_high, self.joint_names)
        check_home_pose(self.safety_cfg, self.home, self.joint_low, self.joint_high, self.joint_names)
        self.action_spec = spaces.Box(self.joint_low.astype(np.float32), self.joint_high.astype(np.float32))
        self.ticker = Ticker(control_dt)
        self.connected = False
        self.stopped: SafetyStop | None = None
        self._stop_raised: SafetyStop | None = None  # the stop a call raised (one whose park failed, unraised: close)
        # The robot cannot go on (a servo stopped following goals and the link re-armed it where it stood, or a
        # servo's hardware alert): the next
        # ``step`` raises it, and ``close`` parks as after any error. ``rearms`` counts those re-arms, so that
        # a ramp under way starts again from where the robot is (its next waypoints would jump)
        self.fault: Exception | None = None
        self.rearms = 0
        self.parking = False  # within the park of a stop: servos that stopped following goals are re-armed for it
        self.stop_requested = False  # a stop was asked for before close (see _park_signals)
        self._closed = False  # a session was closed: its stop is over once the robot reconnects
        self._lock = threading.RLock()  # one bus user at a time: the loop or the watchdog (see _bus)
        self._bus_thread: int | None = None  # the thread inside a bus section, if any
        self._q = self.home.copy()
        self._qd = np.zeros_like(self.home)
        self._fresh_at = self._called_at = time.monotonic()  # (_called_at: when the loop's last call ended)
        self._calling = False  # a call of the loop's (step; reset, start_at) is under way: see _call
        # When the reading last handed to the loop (by step, start_at) was taken, where the read that handed it
        # failed (None: it was fresh): an action decided on it is held once it is watchdog_s old (see step)
        self._handed_stale: float | None = None
        self._read_fresh = True  # whether the last _refresh read a state
        # Why the last read gave no state, in words a park that reads nothing says (its notices, ParkUnfinished):
        # a driver's ``_read`` sets it where it knows (garbled replies are no silent bus), else SILENT
        self.read_failure = SILENT
        self._failed_reads = 0  # reads in a row that gave no state
        self._answered_again_at = -math.inf  # when a read last gave a state after a failed one (_failure_said)
        self._episode_step = 0
        self._watchdog: threading.Thread | None = None
        self._closing = threading.Event()
        self._park_cut = threading.Event()  # a second stop came during close: a park under way ends (_park_signals)

    # ---- what a driver implements ---------------------------------------------

    @abstractmethod
    def _connect(self) -> None:
        """Open the link and check the hardware (ids, models); torque stays off."""

    @abstractmethod
    def _disconnect(self) -> None:
        """Close the link; must not raise if it is already gone (or was never opened: a failed ``_connect``)."""

    @abstractmethod
    def _read(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Joint positions and velocities, one value per joint; None for a transient failure (after the
        driver's own retries; a reading with NaN or inf counts as one), with ``self.read_failure`` set to why
        where the driver knows (default :data:`SILENT`); raise ConnectionLost if the link is gone. Return within
        about a control period (time out): the watchdog and the safe stop wait for it."""

    @abstractmethod
    def _write(self, goal: np.ndarray) -> None:
        """Send joint position goals; raise ConnectionLost if the link is gone. Return within a control period."""

    @abstractmethod
    def _set_torque(self, on: bool) -> None:
        """Turn the actuators on or off; raise ConnectionLost if the link is gone."""

    # ---- what a task implements -------------------------------------------------

    @abstractmethod
    def _observe(self, q: np.ndarray, qd: np.ndarray) -> Obs:
        """Observation groups, each ``(1, ...)``, from the joint state."""

    def _begin_episode(self, rng: np.random.Generator) -> np.ndarray:
        """Set up a new episode (sample a goal...) and return its start pose; default home."""
        return self.home

    def _score(self, q: np.ndarray, qd: np.ndarray, action: np.ndarray, previous: np.ndarray) -> tuple[float, bool | None]:
        """Reward of the step (``action`` sent after ``previous``) and success if the
        episode ended now (None: undefined)."""
        return 0.0, None

    def _metrics(self, q: np.ndarray, qd: np.ndarray) -> dict[str, float]:
        """Numbers a person reads a step by (a reach's distance to its target), reported per step as
        ``info["metrics"]`` and recorded, so a deployment says why an episode missed; default none."""
        return {}

    # ---- life cycle ------------------------------------------------------------

    def connect(self) -> Robot:
        """Open the link, hold the measured pose, torque on. A session after one that a stop ended (emergency,
        watchdog, a fault) and :meth:`close` closed starts clear of it, as its message says ("reconnect to
        continue"; it had raised again at every call); an emergency stop asked for before a first connect holds."""
        if self._closed:
            self.stopped = self.fault = None
            self._closed = self.stop_requested = False
        with self._bus():  # an emergency stop while connecting: torque stays off
            # a new session counts no read the last one lost (its first read had been "one after a failed read")
            self._failed_reads, self._answered_again_at = 0, -math.inf
            try:
                self._connect()
                self.connected = True
                state = self._checked(self._read())
                if state is None:
                    raise RobotError("connected, but the first state read failed (or read NaN or inf): check wiring, "
                                     "power and the encoders")
                self._q, self._qd = state
                self._refuse_outside_limits(self._q)
                self.safety.start(self._q)
                self._write(self.safety.last_sent)  # goal = where it stands, before torque on: no jump
                if self.stopped is None:
                    self._set_torque(True)
            except BaseException as err:  # a connect that fails leaves torque off and the link closed
                try:
                    if self.connected and (failed := self._torque_off_quietly()) is not None:
                        add_to_message(err, _unconfirmed(failed))
                finally:  # (even when a second stop cuts the torque-off short)
                    self.connected = False
                    try:
                        self._disconnect()
                    except Exception as closing:  # noqa: BLE001 (the error that ended the connect is the one said)
                        add_to_message(err, f"closing the link then failed too ({type(closing).__name__}: {closing})")
                raise
        self._fresh_at = self._called_at = time.monotonic()
        self._handed_stale = None
        self._closing.clear()
        self._park_cut.clear()
        self._watchdog = threading.Thread(target=self._watch, name="robot-watchdog", daemon=True)
        self._watchdog.start()
        return self

    def __enter__(self) -> Robot:
        return self.connect()

    def _refuse_outside_limits(self, q: np.ndarray) -> None:
        """Torque stays off for a joint measured outside its limits: the first goal, inside them, would be
        reached at the motor's full speed, not at a ramp's."""
        if outside := outside_limits(q, self.joint_low, self.joint_high):
            i = outside[0]
            raise RobotError(f"{self.joint_names[i]} reads {q[i]:.3f} rad, outside its limits [{self.joint_low[i]:.3f}, "
                             f"{self.joint_high[i]:.3f}]: torque on would move it in at full speed, so torque stays "
                             "off; move the joint within its limits by hand (or widen them in the robot config), then "
                             "connect again")

    def close(self) -> None:
        """Stop safely (ramp to the safe pose, torque off) and disconnect; idempotent."""
        self._closing.set()
        if not self.connected:
            return
        # A Ctrl+C (or a kill) ends the loop before a step raised what the robot had met by then (its watchdog's
        # stop, an emergency stop, a fault): said here, or the run had been reported as parked with torque off
        unseen = self.stop_requested or isinstance(sys.exc_info()[1], KeyboardInterrupt)
        try:
            with self._park_signals():  # (a park the watchdog is making goes on: the stop signals count for it too)
                if self._watchdog is not None and self._watchdog is not threading.current_thread():
                    self._watchdog.join(timeout=1.0)
                with self._bus():
                    if self.stopped is None:
                        fault_before = self.fault
                        self._stop(ramp=True)
                        if self.fault is not None:  # the error the run stopped with says how its park went
                            add_to_message(self.fault, "what still followed goals parked at the safe pose, then torque "
                                                       "went off")
                            if self.fault is not fault_before or unseen:  # found during this park, after a run that
                                raise self.fault  # ended well, or before a Ctrl+C: said, not lost
                    else:  # stopped already (emergency, watchdog): torque off again, in case a write raced the stop
                        failed = self._torque_off_quietly()  # (an emergency stop during connect() had left torque on)
                        if isinstance(self.stopped, EmergencyStop) and failed is not None:  # instead of "torque is off"
                            self.stopped.args = (f"emergency stop, but {_unconfirmed(failed)}",)
                        elif failed is not None and UNCONFIRMED not in str(self.stopped):  # (the stop's own park may
                            add_to_message(self.stopped, _unconfirmed(failed))  # have said so: once is enough)
                        # a stop no call raised (the watchdog's after the loop's last step, a run that had ended
                        # well) whose park or torque-off failed: said, not lost
                        unsaid = self.stopped is not self._stop_raised and (
                            failed is not None or getattr(self.stopped, "park_failed", False))
                        pending = sys.exc_info()[1]  # the error the run is ending on, if any
                        if unsaid and not (unseen or self._park_cut.is_set()) and pending not in (None, self.stopped):
                            # (raised, it had replaced that error, the one deploy reports): said within it
                            add_to_message(pending, f"then {type(self.stopped).__name__}: {self.stopped}")
                        elif unseen or self._park_cut.is_set() or unsaid:  # (a park of the watchdog's, cut short)
                            raise self.stopped
        finally:
            self.connected = False
            self._closed = True
            self._disconnect()

    @contextlib.contextmanager
    def stop_signals(self) -> Iterator[None]:
        """Stop signals (Ctrl+C, a kill's SIGTERM, a closed terminal's SIGHUP) while a loop drives the robot, until
        and through its close (:func:`robolearn.runtime.run` holds this; main thread only). The first ends the loop
        as Ctrl+C does (KeyboardInterrupt). A second, before the close takes stop signals its own way
        (:meth:`_park_signals`; the loop's clean-up, which saves the recording, comes first), is kept for the close,
        said, and not raised: raised, it had cut that save short and reached the close as the first stop, so the
        park went on (a third was needed), and raised before the close it could skip the close, torque left on.
        Kept, it cuts the park short (``_park_cut``: the close's, or the watchdog's under way) and torque goes off
        where the robot stands. Later ones are left to the close. Signals set to be ignored, or to a handler of
        one's own, stay as they are."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        self.stop_requested = False  # (a loop before this one that was not closed: its stops are over)
        self._park_cut.clear()

        def take(signum: int, frame: Any) -> None:
            hung_up(signum)  # a closed terminal: no EIO from the prints of the stop
            name = signal.Signals(signum).name
            if not self.stop_requested:
                self.stop_requested = True
                self._say_park_under_way(name)
                raise KeyboardInterrupt(name)
            if not self._park_cut.is_set():
                self._park_cut.set()
                _say(f"{name}: a second stop: no park to the safe pose (one under way is cut short); torque goes off "
                     "where the robot stands")

        stops = (signal.SIG_DFL, signal.default_int_handler, as_ctrl_c)  # (as_ctrl_c: deploy's SIGTERM and SIGHUP)
        previous: dict[int, Any] = {}
        try:  # each kept before it is replaced: a stop among the installs (take raises) still gives all back
            for signum in STOP_SIGNALS:
                if (handler := signal.getsignal(signum)) in stops:
                    previous[signum] = handler
                    signal.signal(signum, take)
            yield
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _say_park_under_way(self, stop: str) -> None:
        """Where the watchdog is parking as a first stop comes, say so: the loop's end waits for that park, which
        had said nothing of the stop (the close's own park says one that comes during it), so a Ctrl+C seemed
        unheard until the park ended, or, on a silent bus, was given up."""
        if self.parking:
            _say(f"{stop}: a park to the safe pose is under way (the watchdog's): stopping once it ends; a second "
                 "Ctrl+C cuts it short (torque off where the robot stands)")

    @contextlib.contextmanager
    def _park_signals(self) -> Iterator[None]:
        """While :meth:`close` parks (main thread): the first stop signal (Ctrl+C, SIGTERM, SIGHUP) is said and
        the park goes on, then raises KeyboardInterrupt after it; a second cuts the park short, said as ParkSkipped:
        at once (it raises) where this thread parks, else at the park's next waypoint (``_park_cut``: the watchdog
        thread's park that the close waits for, or the close's own once it begins); later ones are ignored (the
        torque-off that follows must not be cut short). A stop asked before the close (``stop_requested``, which
        :func:`~robolearn.runtime.run` sets on a Ctrl+C, or a close that unwinds a KeyboardInterrupt) counts as the
        first, and a second one kept by :meth:`stop_signals` as the second. Signals set to be ignored stay ignored."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        earlier = self.stop_requested or isinstance(sys.exc_info()[1], KeyboardInterrupt)
        asked: list[str] = ["earlier"] * (2 if self._park_cut.is_set() else 1 if earlier else 0)
        if earlier and not self.stop_requested:  # a Ctrl+C in a loop of one's own (stop_signals says run's)
            self._say_park_under_way(str(sys.exc_info()[1]) or "SIGINT")

        def press(signum: int, frame: Any) -> None:
            hung_up(signum)  # a closed terminal: no EIO from the prints of the stop
            asked.append(signal.Signals(signum).name)
            if len(asked) == 2:
                self._park_cut.set()  # (raised while the close waited for the watchdog's park, it had ended the
                # close, that park left to die with the process, unsaid; raised in this thread's torque-off after
                # its park, it had cut the torque-off short)
                if self.parking and self._bus_thread == threading.get_ident():
                    raise KeyboardInterrupt(asked[-1])
            if len(asked) == 1:
                _say(f"{asked[0]}: parking at the safe pose first, then stopping (once more: torque off where the "
                     "robot stands)")

        previous = {signum: signal.signal(signum, press) for signum in STOP_SIGNALS
                    if signal.getsignal(signum) not in (signal.SIG_IGN, None)}
        try:
            yield
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        if asked and asked[0] != "earlier":  # asked during a park of a run that ended by itself: stop now
            raise KeyboardInterrupt(asked[0])

    def emergency_stop(self) -> None:
        """Torque off now, where the robot stands (callable from any thread or a signal handler).

        A signal handler runs on the main thread, maybe in the middle of that thread's own bus transaction,
        where a write of its own would collide (the SDK answers "port is in use") and torque could stay on.
        There it only marks the stop: the transaction's section ends at once (a ramp stops at its next
        waypoint) and turns torque off as it leaves (:meth:`_bus`)."""
        self.stopped = EmergencyStop("emergency stop: torque is off; reconnect to continue")
        if self._bus_thread == threading.get_ident():
            return
        with self._bus():
            self._torque_off_quietly()

    @contextlib.contextmanager
    def _call(self) -> Iterator[None]:
        """A call of the loop's (step; reset, start_at) waiting for the robot, however long the reads and the bus
        take (the watchdog's holds take it, their reads retried, and a lock serves no queue): its controller is not
        silent meanwhile. Its silence counts from the section's end, when it has the observation to decide on (a
        step's ends there, not after the task's own code: see step): timed from when a step got the bus, a deploy at
        --fault drop_reply=0.15 had stopped on a controller that waited."""
        outer, self._calling = self._calling, True
        try:
            yield
        finally:
            self._called_at, self._calling = time.monotonic(), outer

    @contextlib.contextmanager
    def _bus(self) -> Iterator[None]:
        """One user of the bus at a time; leaving the outermost section after an emergency stop turns torque off."""
        with self._lock:
            outer, self._bus_thread = self._bus_thread, threading.get_ident()
            try:
                yield
            finally:
                self._bus_thread = outer
                if outer is None and isinstance(self.stopped, EmergencyStop):
                    self._torque_off_quietly()

    # ---- VecEnv ------------------------------------------------------------------

    def reset(self, seed: int | None = None) -> Obs:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._require_running()
        return self.start_at(self._begin_episode(self._episode_rng()))

    def start_at(self, pose: np.ndarray) -> Obs:
        """Begin an episode at ``pose`` (reached by a slow ramp within the safety limits)."""
        self._require_running()
        with self._call(), self._bus():
            self._move_to(np.asarray(pose, dtype=np.float64))
            self._hand()  # the ramp's last read: what the first decision sees
        self._require_running()  # a fault found during the ramp (which it cut short)
        self._episode_step = 0
        self.ticker.restart()
        return self._observe(self._q, self._qd)

    def step(self, action: torch.Tensor) -> Step:
        self._require_running()
        # a numpy array or a list as our simulators take it (checked_action), not an AttributeError on .detach
        action = torch.as_tensor(action).detach().reshape(-1).cpu().double().numpy()
        # A wait for the robot (the bus, its reads) until the observation is handed: no silent controller. The
        # task's own code after it is not: a step stuck there had been held for as long as it lasted, never stopped
        with self._call():
            with self._bus():
                previous = self.safety.last_sent.copy()
                # What the action means in simulation (TaskEnv clamps it into the action box, the task's actuate
                # makes it a goal), so the safety layer counts only what it overrules beyond what training did.
                command = (self._actuate(np.clip(action, self.joint_low, self.joint_high), previous)  # NaN stays NaN
                           if action.shape == self.joint_low.shape else action)  # the wrong size: the layer holds it
                handed = self._handed_stale  # (when the stale reading the action was decided on was taken)
                if handed is not None and time.monotonic() - handed >= self.safety_cfg.watchdog_s:
                    # The action was decided on a frozen state, watchdog_s old (judged by the reading the loop was
                    # handed: one the watchdog's hold read since, unseen by the loop, had let it through). Hold the
                    # last goal (the watchdog thread's hold re-sends it, which this write would otherwise overrule
                    # step after step, the arm moving blind until stop_after_s). An action decided on a fresh state
                    # is sent however long the decision took: the watchdog held meanwhile, and its stop_after_s stands
                    sent, events = previous, ["watchdog_hold"]
                else:
                    sent, events = self.safety.filter(command, self._q, self._qd)
                self._write(sent)
            self.ticker.wait()
            with self._bus():
                self._refresh()
                self._hand()
        self._require_running()
        self._episode_step += 1
        obs = self._observe(self._q, self._qd)
        reward, success = self._score(self._q, self._qd, sent, previous)
        truncated = self._episode_step >= self.max_episode_steps
        goal = command if command.shape == sent.shape else np.full_like(sent, np.nan)  # a wrong-sized action: none
        info = {"sent_action": torch.as_tensor(sent, dtype=torch.float32).unsqueeze(0), "final_obs": obs,
                "goal_action": torch.as_tensor(goal, dtype=torch.float32).unsqueeze(0), "safety": events,
                "metrics": self._metrics(self._q, self._qd),
                "log": {f"safety/{k}": float(v) for k, v in self.safety.events.items()}}
        if success is not None:
            info["success"] = torch.tensor([success])
        false = torch.zeros(1, dtype=torch.bool)
        step = Step(obs, torch.tensor([reward], dtype=torch.float32), false, torch.tensor([truncated]), info)
        if truncated:  # auto-reset (the VecEnv contract); its ramp is timed apart from the step
            began = time.perf_counter()
            try:
                obs = self.reset()
            except BaseException as err:  # the episode had ended: the error carries it, for a loop to keep
                err.ended_step = step  # (robolearn.runtime.run takes it off and records it before the error goes on)
                raise
            info["reset_s"] = time.perf_counter() - began
        return step._replace(obs=obs)

    def _actuate(self, action: np.ndarray, previous: np.ndarray) -> np.ndarray:
        """The goal ``action`` commands after the goal ``previous``, by the task's own rule (its simulated
        ``Task.actuate``); the safety layer then judges that goal. Default: the action itself."""
        return action

    # ---- internals -----------------------------------------------------------------

    def _episode_rng(self) -> np.random.Generator:
        if not hasattr(self, "_rng"):
            self._rng = np.random.default_rng()
        return self._rng

    def _require_running(self) -> None:
        if self.stopped is not None:
            with self._lock:  # a stop the watchdog thread is making (its park) ends first: its error says how it went
                pass
            self._stop_raised = self.stopped
            raise self.stopped
        if self.fault is not None:
            raise self.fault
        if not self.connected:
            raise RobotError(f"{type(self).__name__} is not connected: use `with robot:` or robot.connect()")

    def _hand(self) -> None:
        """The state is handed to the loop now: where the read failed, when the reading it holds was taken."""
        self._handed_stale = None if self._read_fresh else self._fresh_at

    def _refresh(self) -> None:
        """Read the state; a failed read keeps the last one (the watchdog judges staleness), and
        ``read_failure`` says why it failed. Failed reads in a row are counted, and a read that gets through after
        one is timed: a bus that answers again is said to lose replies, not to be silent (:meth:`_failure_said`)."""
        self.read_failure = SILENT  # (unless the driver's _read says otherwise)
        state = self._checked(read := self._read())
        if read is not None and state is None:
            self.read_failure = NOT_FINITE
        self._read_fresh = state is not None
        if state is not None:
            self._q, self._qd = state
            self._fresh_at = time.monotonic()
            if self._failed_reads:
                self._answered_again_at = self._fresh_at
        self._failed_reads = 0 if self._read_fresh else self._failed_reads + 1

    def _checked(self, state: tuple[np.ndarray, np.ndarray] | None) -> tuple[np.ndarray, np.ndarray] | None:
        """``_read``'s state as float arrays of one value per joint; a reading with NaN or inf (an encoder or
        estimator that lost track) counts as a failed read, never as a pose to hold or ramp from. Another
        shape is the driver's mistake, said."""
        if state is None:
            return None
        if not isinstance(state, (tuple, list)) or len(state) != 2:
            raise RobotError(f"{type(self).__name__}._read must return (positions, velocities) or None, got "
                             f"{type(state).__name__}" + (f" of {len(state)}" if isinstance(state, (tuple, list)) else ""))
        q, qd = (np.asarray(part, dtype=np.float64).reshape(-1) for part in state)
        if q.shape != self.home.shape or qd.shape != self.home.shape:
            raise RobotError(f"{type(self).__name__}._read returned {q.size} positions and {qd.size} velocities for "
                             f"{self.home.size} joints")
        return (q, qd) if np.isfinite(q).all() and np.isfinite(qd).all() else None

    def _move_to(self, pose: np.ndarray, parking: bool = False, restarts: int = 0,
                 blind: _BlindPark | None = None) -> None:
        """Ramp from the measured pose to ``pose`` at the safe speed, one waypoint per tick, then hold it for
        ``settle_s`` so an episode starts at rest, as in simulation. If the servos stopped themselves and were
        re-armed where they stood (``rearms``), the waypoints ahead would jump: a park (``parking``) ramps again
        from there (``MAX_PARK_RESTARTS`` times: servos that keep stopping are not re-energized for ever), within
        the bounds of the park so far (``blind``: its time without a reading goes on across its ramps); any
        other ramp ends, as it does on any fault (the fault then stops the run)."""
        if restarts > MAX_PARK_RESTARTS:
            raise ServosStopped(f"the servos stopped following goals {restarts} times during the park (a supply that "
                                "keeps dipping?): parking was given up and torque turned off where the arm stood")
        self._refresh()
        rearms = self.rearms  # (after the first read: a re-arm there leaves the waypoints below starting right)
        ticker = Ticker(self.control_dt)
        waypoints = self.safety.ramp(self._q, pose, self.control_dt)
        hold = np.repeat(waypoints[-1:], int(round(self.settle_s / self.control_dt)), axis=0)
        path = np.vstack([waypoints, hold])
        if blind is None:
            blind = _BlindPark(len(path), self.safety_cfg.stop_after_s, self.safety_cfg.park_blind_s)
        else:
            blind.restart(len(path))
        written = None
        for waypoint in path:
            if isinstance(self.stopped, EmergencyStop):  # marked by a signal handler mid-ramp: stop here
                return
            if parking and self._park_cut.is_set():  # a second stop during close, on another thread than this park's
                raise KeyboardInterrupt("a second stop")  # (_stop says it as ParkSkipped)
            if self.rearms != rearms:
                return self._move_to(pose, parking, restarts + 1, blind) if parking else None
            if self.fault is not None and not parking:  # the run stops: no ramp to a start it will not use
                return
            if parking:  # blind for park_blind_s of it (a silent bus): given up here, torque off (_stop)
                blind.check(self._fresh_at, self._failure_said())
            if not parking and time.monotonic() - self._fresh_at >= self.safety_cfg.stop_after_s:
                # blind for stop_after_s (a silent bus): the watchdog, locked out while a ramp holds the bus, stops
                # the run (a frozen emulator's reset ramp had gone on blind for 18 s, each read timing out); its
                # holds keep the last waypoint, not the goal before the ramp
                if written is not None:
                    self.safety.start(written)
                return
            self._write(waypoint)
            written = waypoint
            ticker.wait()
            self._called_at = time.monotonic()  # a ramp is the robot's own controller: not silent
            self._refresh()
            if parking and not self._park_cut.is_set():  # a park goes on blind (other ramps end after stop_after_s
                # of it, above): said as it goes, but not once a second stop came in the read (cut at the loop's top)
                blind.waypoint(None if self._read_fresh else self._fresh_at, self._failure_said())
        if self.rearms != rearms:  # re-armed in the last tick's read: short of the pose
            return self._move_to(pose, parking, restarts + 1, blind) if parking else None
        self.safety.start(self.safety.ramp(self._q, pose, self.control_dt)[-1])

    def _stop(self, ramp: bool) -> None:
        """Park at the safe pose (if ``ramp``) and turn torque off; raise what went otherwise: a park cut short
        (a second stop, an emergency stop, a lost link) or a torque-off the servos did not confirm."""
        failure: BaseException | None = None
        try:
            if ramp:
                safe = np.asarray(self.safety_cfg.safe_pose) if self.safety_cfg.safe_pose is not None else self.home
                self.parking = True
                self._move_to(safe, parking=True)
        except ConnectionLost:
            failure = ConnectionLost("connection lost before or during the safe stop: the ramp and the torque-off "
                                     "could not be done; servos with a bus watchdog stop by themselves, others keep "
                                     "their last goal")
        except KeyboardInterrupt:  # a second stop before or while parking: torque off (below), and say so
            failure = ParkSkipped("a second stop (Ctrl+C, a kill, a closed terminal) before or during the ramp to the "
                                  "safe pose: parking was skipped and torque turned off where the robot stood (an "
                                  "unsupported joint may drop)")
        except BaseException as err:  # noqa: BLE001 (whatever cut the park short, torque goes off first)
            failure = err
        finally:
            self.parking = False
        # A park begins only while not stopped (close) or stopped by its watchdog: an emergency stop came during it
        if ramp and failure is None and isinstance(self.stopped, EmergencyStop):
            failure = EmergencyStop("emergency stop (Ctrl+\\) during the ramp to the safe pose: parking was skipped "
                                    "and torque turned off where the robot stood (an unsupported joint may drop)")
        failed = self._torque_off_quietly()
        if isinstance(failure, ParkUnfinished) and failed is None:
            add_to_message(failure, "torque was turned off where the robot stood (an unsupported joint may drop)")
        if ramp and failure is not None and not isinstance(failure, (SafetyStop, ConnectionLost)):
            add_to_message(failure, "it cut the park to the safe pose short"  # a driver's own error, said as such
                           + (": torque was turned off where the robot stood" if failed is None else ""))
        if failed is not None and not isinstance(failure, ConnectionLost):  # (whose message says so already)
            if failure is None:
                failure = (ConnectionLost if isinstance(failed, ConnectionLost) else RobotError)(_unconfirmed(failed))
            else:
                add_to_message(failure, _unconfirmed(failed))
        if failure is not None:
            raise failure

    def _torque_off_quietly(self) -> Exception | None:
        """Torque off; the error if it failed (None: done). Never raises but for a KeyboardInterrupt: the last
        step of every stop must not be cut short by the error of a bus that answers badly."""
        try:
            self._set_torque(False)
        except Exception as err:  # noqa: BLE001 (the caller says it, with what the stop was for)
            return err
        return None

    def _quiet_s(self) -> tuple[float, float]:
        """Seconds without a fresh observation, and without the controller: since its last call ended, none while
        a call is under way (:meth:`_call`)."""
        now = time.monotonic()
        return now - self._fresh_at, 0.0 if self._calling else now - self._called_at

    def _quiet_said(self, blind_s: float, idle_s: float) -> str:
        """The watchdog's stop, naming what went quiet: the readings, with why their reads failed (the driver's
        :attr:`read_failure`), or the controller; it had said "no fresh observation or controller call" of both."""
        limit = self.safety_cfg.stop_after_s
        blind, idle = blind_s >= limit, idle_s >= limit
        what = ("fresh observation or controller call" if blind and idle else "controller call" if idle else
                "fresh observation")
        why = f"{self._failure_said()}; " if blind else ""
        return f"no {what} for {max(blind_s, idle_s):.2f} s ({why}safety.stop_after_s = {limit:g})"

    def _failure_said(self) -> str:
        """Why the reads give no state (:attr:`read_failure`), as the watchdog's stop and a park's notices say it;
        no reply (:data:`SILENT`) on a bus that answered again after a failed read within ``LOSSY_S`` is said as
        replies lost: a few reads in a row failing on a bus losing 15 % of its replies had stopped the run on "a
        silent bus", sending a person to a bus that answers."""
        ago = time.monotonic() - self._answered_again_at
        if self.read_failure != SILENT or ago >= LOSSY_S:
            return self.read_failure
        return (f"replies lost: none to the last {self._failed_reads} reads; {ago:.1f} s before, one came after a "
                "failed read")

    def _watch(self) -> None:
        """Hold on stale observations or a silent controller; stop when it lasts."""
        poll = min(self.safety_cfg.watchdog_s / 4, self.control_dt)
        holding = False  # count each hold once, not every poll while it lasts
        while not self._closing.wait(poll):
            if self.stopped is not None:
                return
            if max(self._quiet_s()) < self.safety_cfg.watchdog_s:
                holding = False
                continue
            with self._bus():
                quiet = self._quiet_s()  # (once: a call that begins meanwhile changes neither the stop nor its words)
                if self._closing.is_set() or max(quiet) < self.safety_cfg.watchdog_s:
                    holding = False
                    continue
                if not holding:
                    self.safety.events["watchdog_hold"] += 1
                    holding = True
                if max(quiet) >= self.safety_cfg.stop_after_s:
                    said = self._quiet_said(*quiet)
                    self.stopped = stop = WatchdogStop(said)
                    try:  # this thread's stop: what became of it goes into the error the next step raises
                        self._stop(ramp=True)
                        stop.args = (f"{said}: parked at the safe pose and turned torque off",)
                    except Exception as err:  # noqa: BLE001
                        stop.args = (f"{said}; the safe stop failed: {err}",)
                        stop.park_failed = True  # (raised by close where no step is left to raise it)
                    return
                try:  # hold: re-send the last safe command, and try to read again
                    self._write(self.safety.last_sent)
                    self._refresh()
                except Exception:  # noqa: BLE001 (any driver's error: the hold goes on, and the stop after it)
                    pass
