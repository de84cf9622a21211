"""The Robot base class: safe exits, watchdog, emergency stop, pacing, auto-reset.

The link here is a test double (joints follow goals with a lag); the real
driver path is tested against the Dynamixel emulator elsewhere.
"""

import os
import signal
import threading
import time

import numpy as np
import pytest
import torch

from hardware.robot import Robot
from hardware.safety import (ConnectionLost, EmergencyStop, ParkSkipped, RobotError, SafetyConfig, ServosStopped,
                             WatchdogStop)
from robolearn.recording import EpisodeRecorder, load_episode
from robolearn.runtime import LoopStats, run

HOME = np.array([0.0, 0.5])
SAFE = np.array([0.2, 0.2])


class LagArm(Robot):
    """Two joints that move halfway to their goal on every read."""

    def __init__(self, fail_reads_after=None, lose_link_after=None, **safety):
        cfg = dict(ramp_speed=5.0, safe_pose=tuple(SAFE), watchdog_s=0.05, stop_after_s=0.2)
        super().__init__(joint_low=np.array([-1.0, -1.0]), joint_high=np.array([1.0, 1.0]), home=HOME,
                         control_dt=0.01, max_episode_steps=20, safety=SafetyConfig(**{**cfg, **safety}))
        self.q, self.goal, self.torque = np.zeros(2), np.zeros(2), False
        self.reads, self.loop_reads, self.writes, self.torque_log = 0, 0, [], []  # (lose_link_after: loop_reads)
        self.fail_reads_after, self.lose_link_after = fail_reads_after, lose_link_after

    def _connect(self):
        self.link = True

    def _disconnect(self):
        self.link = False

    def _read(self):
        self.reads += 1
        if threading.current_thread() is threading.main_thread():  # the loop's: a watchdog's hold reads too, as
            self.loop_reads += 1  # often as a loaded machine's slow steps let it (the link had been lost steps early)
        if self.lose_link_after is not None and self.loop_reads > self.lose_link_after:
            raise ConnectionLost("cable pulled")
        if self.fail_reads_after is not None and self.reads > self.fail_reads_after:
            return None
        if self.torque:
            self.q = self.q + 0.5 * (self.goal - self.q)
        return self.q.copy(), np.zeros(2)

    def _write(self, goal):
        if self.lose_link_after is not None and self.loop_reads > self.lose_link_after:
            raise ConnectionLost("cable pulled")
        self.goal = np.array(goal)
        self.writes.append(self.goal.copy())

    def _set_torque(self, on):
        self.torque = on
        self.torque_log.append(on)

    def _observe(self, q, qd):
        return {"policy": torch.as_tensor(np.concatenate([q, qd]), dtype=torch.float32).unsqueeze(0)}

    def _score(self, q, qd, action, previous):
        return -float(np.abs(q).sum()), bool(np.abs(q).sum() < 0.1)


class Constant(torch.nn.Module):
    def __init__(self, value):
        super().__init__()
        self.value = torch.tensor([value], dtype=torch.float32)

    def act(self, obs):
        return self.value

    def reset(self, mask=None):
        pass


def test_normal_exit_ramps_to_the_safe_pose_then_torque_off():
    arm = LagArm()
    with arm:
        assert arm.torque
        arm.reset()
        np.testing.assert_allclose(arm.goal, HOME)
        arm.step(torch.tensor([[0.3, 0.3]]))
    assert arm.torque_log == [True, False] and not arm.link
    np.testing.assert_allclose(arm.writes[-1], SAFE)
    assert max(np.abs(np.diff(arm.writes, axis=0)).max(axis=1)) <= 5.0 * 0.01 + 0.2 + 1e-9  # ramps and jump limit


def test_exception_in_the_loop_still_stops_safely():
    arm = LagArm()

    class Boom(Constant):
        def act(self, obs):
            raise RuntimeError("policy exploded")

    with pytest.raises(RuntimeError, match="policy exploded"):
        with arm:
            run(Boom([0.0, 0.0]), arm, steps=10)
    assert arm.torque_log[-1] is False and not arm.link
    np.testing.assert_allclose(arm.writes[-1], SAFE)


class SignalAtCall5(Constant):
    """Sends this process ``signum`` during its 5th decision."""

    def __init__(self, value, signum):
        super().__init__(value)
        self.signum, self.calls = signum, 0

    def act(self, obs):
        self.calls += 1
        if self.calls == 5:
            os.kill(os.getpid(), self.signum)
            time.sleep(0.1)
        return self.value


def test_ctrl_c_ends_the_run_as_interrupted_and_stops_safely():
    arm = LagArm()
    with arm:
        stats = run(SignalAtCall5([0.1, 0.1], signal.SIGINT), arm, steps=100)
    assert stats.interrupted and stats.steps == 4
    assert arm.torque_log[-1] is False


def test_actions_are_filtered_and_the_sent_action_reported():
    with LagArm(max_step=0.1) as arm:
        arm.reset()
        step = arm.step(torch.tensor([[float("nan"), 0.0]]))
        assert step.info["safety"] == ["nonfinite"]
        np.testing.assert_allclose(step.info["sent_action"][0], HOME)
        step = arm.step(torch.tensor([[0.9, 0.5]]))
        np.testing.assert_allclose(step.info["sent_action"][0], [0.1, 0.5], atol=1e-6)


def test_a_numpy_or_list_action_is_taken_as_the_simulators_take_it():
    """A script stepping our simulators with numpy actions had met "'numpy.ndarray' object has no attribute
    'detach'" on the robot."""
    with LagArm() as arm:
        arm.reset()
        for action in (np.array([[0.0, 0.45]]), [[0.0, 0.45]]):
            step = arm.step(action)
            assert step.info["safety"] == []
            np.testing.assert_allclose(step.info["sent_action"][0], [0.0, 0.45], atol=1e-6)


def test_the_tasks_own_action_rule_is_not_counted_as_a_safety_intervention():
    """A task that limits goal steps itself (arm_reach's max_goal_step, in simulation too) does so on the
    robot before the safety layer: the layer counts only what it overrules beyond what training did."""

    class StepLimitedArm(LagArm):
        def _actuate(self, action, previous):
            return previous + np.clip(action - previous, -0.1, 0.1)

    with StepLimitedArm(max_step=0.1) as arm:
        arm.reset()
        step = arm.step(torch.tensor([[0.9, 5.0]]))  # far beyond a goal step, and beyond the joint range
        np.testing.assert_allclose(step.info["sent_action"][0], HOME + [0.1, 0.1], atol=1e-6)
        assert step.info["safety"] == []
        for wrong in ([[0.3]], [[0.3, 0.3, 0.3]]):  # an action of another size is held, not broadcast
            step = arm.step(torch.tensor(wrong))
            assert step.info["safety"] == ["nonfinite"]
            np.testing.assert_allclose(step.info["sent_action"][0], HOME + [0.1, 0.1], atol=1e-6)
    with LagArm(max_step=0.1) as arm:  # no rule of its own: the layer's jump limit does it, and counts it
        arm.reset()
        assert arm.step(torch.tensor([[0.9, 0.5]])).info["safety"] == ["jump_limit"]


def test_time_limit_resets_with_the_final_observation():
    with LagArm() as arm:
        arm.reset()
        for _ in range(arm.max_episode_steps):
            step = arm.step(torch.tensor([[0.0, 0.0]]))
        assert bool(step.truncated[0]) and "success" in step.info
        assert step.info["final_obs"]["policy"][0, :2].abs().max() < 0.1  # reached zero
        np.testing.assert_allclose(step.obs["policy"][0, :2], HOME, atol=0.05)  # back at the start pose


def test_stale_observations_hold_then_stop():
    arm = LagArm(fail_reads_after=10)
    with arm:
        arm.reset()
        with pytest.raises(WatchdogStop, match="no fresh observation"):
            for _ in range(200):
                arm.step(torch.tensor([[0.0, 0.0]]))
    assert arm.safety.events["watchdog_hold"] >= 1
    assert arm.torque_log[-1] is False


def test_the_watchdogs_stop_names_what_went_quiet():
    """Reads failing while the loop steps on (a bus gone silent mid-run) and a loop that stops calling step had both
    been said as "no fresh observation or controller call": the stop names the one that went quiet, and why the
    reads failed."""
    arm = LagArm(fail_reads_after=10)
    with arm:
        arm.reset()
        with pytest.raises(WatchdogStop, match=r"^no fresh observation for \d\.\d\d s \(a silent bus; "
                                               r"safety.stop_after_s = 0.2\): parked"):
            for _ in range(200):
                arm.step(torch.tensor([[0.0, 0.0]]))
    arm = LagArm()
    with arm:
        arm.reset()
        arm.step(torch.tensor([[0.0, 0.0]]))
        time.sleep(0.5)  # the loop stops calling, the reads go on (the watchdog's hold reads)
        with pytest.raises(WatchdogStop, match=r"^no controller call for \d\.\d\d s \(safety.stop_after_s = 0.2\)"):
            arm.step(torch.tensor([[0.0, 0.0]]))


def test_the_watchdogs_stop_on_a_bus_that_answered_after_a_failed_read_says_replies_lost_not_a_silent_bus():
    """A few reads in a row failing on a bus that loses 15 % of its replies stopped the run on "(a silent bus; ...)",
    though a read had got through after a failed one moments before: such a stop says replies are being lost."""

    class LosesReplies(LagArm):
        def _read(self):
            if self.reads + 1 == 12 or self.reads + 1 >= 20 and not self.parking:  # one lost, then a run of them
                self.reads += 1
                return None
            return super()._read()

    arm = LosesReplies()
    with arm:
        arm.reset()
        with pytest.raises(WatchdogStop, match=r"^no fresh observation for \d\.\d\d s \(replies lost: none to the "
                                               r"last \d+ reads; 0\.\d s before, one came after a failed read; "
                                               r"safety.stop_after_s = 0.2\): parked"):
            for _ in range(200):
                arm.step(torch.tensor([[0.0, 0.0]]))


def test_a_reconnected_robot_counts_no_failed_read_of_its_last_session():
    """The reads a session lost were counted on into the next: a connect after a stop on lost replies, whose first
    read then got through, made that read "one after a failed read", and a bus silent from then on was said as
    replies lost, not as a silent bus."""

    class LosesReplies(LagArm):
        def _read(self):
            if self.reads + 1 == 12 or self.reads + 1 >= 20 and self.connects == 1 and not self.parking:
                self.reads += 1
                return None
            return super()._read()

        def _connect(self):
            self.connects = getattr(self, "connects", 0) + 1
            super()._connect()

    arm = LosesReplies()
    with arm:
        arm.reset()
        with pytest.raises(WatchdogStop, match="replies lost"):
            for _ in range(200):
                arm.step(torch.tensor([[0.0, 0.0]]))
    with arm:  # the next session: its first read gets through, then the bus goes silent
        arm.fail_reads_after = arm.reads + 1
        arm.reset()
        with pytest.raises(WatchdogStop, match=r"\(a silent bus; safety.stop_after_s"):
            for _ in range(200):
                arm.step(torch.tensor([[0.0, 0.0]]))


def test_stale_observations_hold_the_last_goal_while_the_loop_goes_on():
    """Reads fail but the loop keeps calling step: its actions, decided on a frozen observation, are not sent
    once no observation has been fresh for watchdog_s (the watchdog thread's own hold re-sent the loop's newest
    goal, so the arm had gone on moving blind until stop_after_s)."""
    arm = LagArm(max_step=0.02, stop_after_s=1.0)
    arm.max_episode_steps = 1000  # no time limit (and its ramp home) within the test
    with arm:
        arm.reset()
        for _ in range(3):
            arm.step(torch.tensor([[0.0, 0.5]]))
        arm.fail_reads_after = arm.reads  # from now on no read is fresh
        blind_from = arm.safety.last_sent.copy()
        held, moved = [], 0.0
        with pytest.raises(WatchdogStop):
            for _ in range(300):
                step = arm.step(torch.tensor([[0.9, -0.9]]))  # a policy acting on its frozen observation
                held.append("watchdog_hold" in step.info["safety"])
                moved = max(moved, float(np.abs(step.info["sent_action"][0].numpy() - blind_from).max()))
    # watchdog_s (0.05 s) of 0.01 s steps at 0.02 rad each may pass before the hold: about 0.1 rad, never the
    # 0.9 rad the blind loop would reach in stop_after_s
    assert moved < 0.2, moved
    assert any(held) and held[-1]


def test_a_decision_slow_once_on_a_fresh_observation_is_sent_not_held():
    """Every read succeeds; the first decision after the reset's ramp takes longer than watchdog_s (a TorchScript
    controller's first call): the action was decided on a fresh observation, so the step sends it. Whether it was
    held had hung on the watchdog thread's poll (its hold's read refreshes the state): with the thread idle here,
    the step had held it every time and reported watchdog_hold on a healthy robot."""

    class Unwatched(LagArm):
        def _watch(self):  # the thread's race taken out: the step's own rule is what is tested
            pass

    arm = Unwatched(stop_after_s=1.0)
    arm.max_episode_steps = 1000
    with arm:
        arm.reset()
        time.sleep(arm.safety_cfg.watchdog_s * 1.5)
        step = arm.step(torch.tensor([[0.0, 0.55]]))
        assert "watchdog_hold" not in step.info["safety"], step.info["safety"]
        np.testing.assert_allclose(step.info["sent_action"][0].numpy(), [0.0, 0.55], atol=1e-6)
        arm.step(torch.tensor([[0.0, 0.5]]))
        time.sleep(arm.safety_cfg.watchdog_s * 1.5)  # slow once after an ordinary step too
        assert "watchdog_hold" not in arm.step(torch.tensor([[0.0, 0.5]])).info["safety"]


def test_an_action_decided_on_a_stale_reading_is_held_though_the_watchdog_read_again_meanwhile():
    """The step's read failed, so the loop decided on a reading watchdog_s old or more; the watchdog's hold then
    read a fresh state before the next step (on a bus losing 15 % of its replies, after nearly every failed read).
    The step had judged the decision by that newer reading, never seen by the loop, and sent it: it is judged by
    the reading the loop was handed, and held."""

    class Unwatched(LagArm):
        def _watch(self):  # (its hold's read, below, made by hand: no race with the thread)
            pass

    arm = Unwatched(stop_after_s=1.0)
    arm.max_episode_steps = 1000
    with arm:
        arm.reset()
        arm.step(torch.tensor([[0.0, 0.5]]))
        arm.fail_reads_after = arm.reads  # the next step's read fails: the loop is handed the last reading again
        arm.step(torch.tensor([[0.0, 0.5]]))
        arm.fail_reads_after = None
        time.sleep(arm.safety_cfg.watchdog_s * 1.5)  # (the loop decides on that reading meanwhile)
        with arm._bus():  # the watchdog's hold reads the state: fresh, but not the one the loop decided on
            arm._refresh()
        step = arm.step(torch.tensor([[0.0, 0.7]]))
        assert step.info["safety"] == ["watchdog_hold"]
        np.testing.assert_allclose(step.info["sent_action"][0].numpy(), [0.0, 0.5], atol=1e-6)


def test_a_stall_counts_as_one_watchdog_hold():
    with LagArm(stop_after_s=1.0) as arm:
        arm.reset()
        for _ in range(2):  # two stalls of 0.3 s (about 20 watchdog polls each), each one hold
            arm.step(torch.tensor([[0.0, 0.0]]))
            time.sleep(0.3)
        arm.step(torch.tensor([[0.0, 0.0]]))
    assert arm.safety.events["watchdog_hold"] == 2


def test_second_ctrl_c_while_parking_says_the_park_was_skipped():
    class CtrlCWhileParking(LagArm):
        parking = False

        def _write(self, goal):
            if self.parking:
                raise KeyboardInterrupt
            super()._write(goal)

    arm = CtrlCWhileParking()
    with pytest.raises(ParkSkipped, match="parking was skipped and torque turned off where the robot stood"):
        with arm:
            arm.reset()
            arm.step(torch.tensor([[0.3, 0.3]]))
            arm.parking = True
    assert arm.torque_log[-1] is False and not arm.link


class SignalWhileParking(LagArm):
    """Sends itself ``signals`` (one per ramp write) once its park has begun."""

    def __init__(self, *signals):
        super().__init__(ramp_speed=1.0)  # a park of about 30 writes
        self.signals, self.parking = list(signals), False

    def _write(self, goal):
        super()._write(goal)
        if self.parking and self.signals:
            os.kill(os.getpid(), self.signals.pop(0))


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_one_stop_signal_during_the_end_of_run_park_lets_it_finish_then_stops(signum, capsys):
    """A kill, a closed terminal or a Ctrl+C while a finished run parked had skipped the park (torque off
    where the arm stood), as only a second one should."""
    previous = {s: signal.signal(s, signal.SIG_DFL) for s in (signal.SIGTERM, signal.SIGHUP)}
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
    arm = SignalWhileParking(signum)
    try:
        with pytest.raises(KeyboardInterrupt, match=signal.Signals(signum).name):
            with arm:
                arm.reset()
                arm.step(torch.tensor([[0.6, -0.6]]))
                arm.parking = True
        assert np.allclose(arm.writes[-1], SAFE) and arm.torque_log[-1] is False and not arm.link  # parked
        assert f"{signal.Signals(signum).name}: parking at the safe pose first" in capsys.readouterr().err
        assert all(signal.getsignal(s) == handler for s, handler in previous.items())  # given back
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def test_a_stop_signal_while_parking_after_run_took_a_ctrl_c_skips_the_park():
    """runtime.run takes the loop's Ctrl+C itself and closes the robot after: its park had counted the next
    press as the first (a third was needed to skip it)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    arm = SignalWhileParking(signal.SIGINT)

    class CtrlCAfter3(Constant):
        calls = 0

        def act(self, obs):
            self.calls += 1
            if self.calls == 3:
                arm.parking = True  # the park that follows gets the next press
                raise KeyboardInterrupt
            return super().act(obs)

    try:
        with pytest.raises(ParkSkipped, match="a second stop"):
            run(CtrlCAfter3([0.6, -0.6]), arm.connect(), episodes=1)
        assert not np.allclose(arm.writes[-1], SAFE) and arm.torque_log[-1] is False and not arm.link
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_stop_signal_while_parking_after_a_ctrl_c_skips_the_park():
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    arm = SignalWhileParking(signal.SIGTERM)
    try:
        with pytest.raises(ParkSkipped, match="a second stop .* parking was skipped"):
            with arm:
                arm.reset()
                arm.step(torch.tensor([[0.6, -0.6]]))
                arm.parking = True
                raise KeyboardInterrupt  # the loop's Ctrl+C: the signal in the park is the second
        assert not np.allclose(arm.writes[-1], SAFE) and arm.torque_log[-1] is False
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.parametrize("lost, said", [(range(3, 4), False), (range(3, 40), True)], ids=["one-read", "silent"])
def test_a_park_says_a_silent_bus_not_one_failed_read(lost, said, capsys):
    """One read that failed mid-park (after the driver's retries) had been said as "bus silent ... parking the arm
    blind, about 14 s left" of a park that took 1.5 s; reads lost for longer than stop_after_s still are."""
    class LosesParkReads(LagArm):
        park_reads = 0

        def _read(self):
            if self.parking:
                self.park_reads += 1
                if self.park_reads in lost:
                    return None
            return super()._read()

    with LosesParkReads(ramp_speed=1.0) as arm:  # a park of about 50 waypoints, 0.01 s each; stop_after_s 0.2
        arm.reset()
        arm.step(torch.tensor([[0.6, -0.6]]))
    assert np.allclose(arm.writes[-1], SAFE) and arm.torque_log[-1] is False  # parked all the same
    assert ("parking the arm blind" in capsys.readouterr().err) is said


def test_a_park_on_a_bus_that_loses_replies_but_answers_reaches_the_safe_pose():
    """Every other read of the park failing, each after its retries' worth of waiting (a bus losing many replies,
    which answers all the same): the time of its failed and retried reads, added up, had given the park up once it
    reached park_blind_s, torque off short of the safe pose (at drop_reply=0.15 on the emulator, 10.8 s of a park of
    2.8 s, 11 of its 110 reads failing). Its readings say where the arm is: it goes on, slower, to the safe pose."""

    class LosesHalfItsParkReads(LagArm):
        park_reads = 0

        def _read(self):
            if self.parking:
                self.park_reads += 1
                if self.park_reads % 2:
                    time.sleep(0.1)  # a read waiting out its timeouts: ten control periods
                    return None
            return super()._read()

    # a park of ~0.5 s, its failed reads ~3 s (six times park_blind_s), never 0.5 s in a row
    arm = LosesHalfItsParkReads(park_blind_s=0.5, stop_after_s=0.5, ramp_speed=1.0)
    with arm:
        arm.reset()
        for _ in range(5):
            arm.step(torch.tensor([[0.6, -0.6]]))
    assert arm.park_reads > 50 and np.allclose(arm.writes[-1], SAFE) and arm.torque_log[-1] is False


def test_a_park_blind_across_its_re_armed_ramps_is_given_up_at_park_blind_s_not_once_per_ramp(monkeypatch):
    """A re-arm starts the park's ramp again from where the servos stand: a fresh count for each ramp would let a
    park on a silent bus go on blind for park_blind_s per ramp (about 4 x at worst). Its time unread goes on across
    its ramps: given up in its second ramp, torque off. The robot's clock moves by the park's reads alone: slept
    for, the first ramp's 5 reads of 0.05 s had 0.25 s to spare of the 0.5 s, and a loaded machine gave it up there."""
    import hardware.robot as robot_module
    from hardware.safety import ParkUnfinished

    now = [robot_module.time.monotonic()]
    monkeypatch.setattr(robot_module.time, "monotonic", lambda: now[0])

    class SilentAndReArmed(LagArm):
        park_reads = 0

        def _read(self):
            if self.parking:
                self.park_reads += 1
                if self.park_reads in (6, 12):  # servos re-armed where they stood: the ramp starts again
                    self.rearms += 1
                now[0] += 0.05  # every read of the park failing, 0.05 s each
                return None
            return super()._read()

    arm = SilentAndReArmed(park_blind_s=0.5, stop_after_s=0.5, ramp_speed=1.0)
    with pytest.raises(ParkUnfinished, match=r"nothing was read for \d\.\d s of it \(a silent bus; "
                                             r"safety\.park_blind_s = 0\.5\)"):
        with arm:
            arm.reset()
            arm.step(torch.tensor([[0.6, -0.6]]))
    assert 6 < arm.park_reads < 12 and arm.torque_log[-1] is False  # (given up in the second ramp)


def test_a_park_on_a_healthy_bus_slower_than_the_control_rate_is_not_given_up():
    """Every read answers, but takes 2.5 control periods (a USB adapter's 16 ms latency timer at 100 Hz): each
    waypoint takes three periods, so the park runs past its planned time by more than park_blind_s. It had been
    given up as one on a bus losing replies ('0 of its 49 reads failing'), torque off short of the safe pose; only
    failed reads count against park_blind_s, and this park reaches the safe pose."""

    class SlowHealthyBus(LagArm):
        def _read(self):
            if self.parking:
                time.sleep(0.025)
            return super()._read()

    arm = SlowHealthyBus(park_blind_s=0.5, stop_after_s=0.5, ramp_speed=1.0)
    arm.settle_s = 0.6  # a park of 0.8 s, taking 1.5 s or more
    with arm:
        arm.reset()
        arm.step(torch.tensor([[0.6, -0.6]]))
    assert np.allclose(arm.writes[-1], SAFE) and arm.torque_log[-1] is False

def test_a_ctrl_c_in_a_loop_of_ones_own_while_the_watchdog_parks_says_the_park_is_under_way(capsys):
    """``with arm:`` and a loop of one's own (no runtime.run): a Ctrl+C while the watchdog parked ended the loop,
    and the close waited for that park with nothing said of the stop."""
    arm = LagArm(ramp_speed=0.5)  # a park of about 0.8 s
    with pytest.raises(WatchdogStop, match="parked at the safe pose"):  # (the stop made before the Ctrl+C, said)
        with arm:
            arm.reset()
            arm.step(torch.tensor([[0.6, -0.6]]))
            arm.fail_reads_after = arm.reads  # silent: the watchdog parks after stop_after_s (0.2 s)
            until = time.monotonic() + 10
            while not arm.parking and time.monotonic() < until:
                time.sleep(0.005)
            raise KeyboardInterrupt  # the Ctrl+C, as Python's handler raises it
    assert arm.torque_log[-1] is False
    assert capsys.readouterr().err.count("SIGINT: a park to the safe pose is under way (the watchdog's): stopping "
                                         "once it ends; a second Ctrl+C cuts it short") == 1


def test_a_second_stop_during_the_torque_off_after_a_park_does_not_cut_it_short():
    """The park after a Ctrl+C had ended and torque was going off when a second stop came: it raised there (the
    close held the bus, though it no longer parked), so the torque-off was never sent and deploy ended as
    "interrupted", torque on and nothing said. Only a park is cut short; the torque-off after it goes through."""
    class SecondStopInTorqueOff(LagArm):
        def _set_torque(self, on):
            if not on and self.parked:
                os.kill(os.getpid(), signal.SIGINT)  # the handler runs here, on this (the main) thread
            super()._set_torque(on)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    arm = SecondStopInTorqueOff()
    arm.parked = False
    try:
        with pytest.raises(KeyboardInterrupt, match="the loop's"):
            with arm:
                arm.reset()
                arm.step(torch.tensor([[0.6, -0.6]]))
                arm.parked = True  # (its park is short: a torque-off follows it)
                raise KeyboardInterrupt("the loop's")  # the first Ctrl+C, which the close's park counts
        assert np.allclose(arm.writes[-1], SAFE) and arm.torque_log[-1] is False and not arm.link
    finally:
        signal.signal(signal.SIGINT, previous)


def test_auto_reset_ramp_is_not_timed_as_a_step(tmp_path, monkeypatch):
    """Each reset's ramp reads as 10 s more on the clock the loop and the recorder time with, so a ramp timed as a
    step shows whatever the machine's load: the ramp's own 0.2 s of settling against steps held to < 0.1 s left a
    step of ~10 ms (42 ms seen beside busy loops) a pause of 90 ms at most."""
    real, ramps_s = time.perf_counter, [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: real() + ramps_s[0])  # (a Ticker keeps the real clock)

    class LongRamps(LagArm):
        def start_at(self, pose):
            obs = super().start_at(pose)
            ramps_s[0] += 10.0
            return obs

    recorder = EpisodeRecorder(tmp_path)
    with LongRamps() as arm:
        stats = run(Constant([0.0, 0.0]), arm, episodes=2, sink=recorder)
    assert stats.steps == 2 * arm.max_episode_steps and ramps_s[0] == 30.0  # the first reset and two auto-resets
    assert max(stats.step_s) < 5.0
    for path in sorted(tmp_path.glob("episode_*.npz")):
        assert np.diff(load_episode(path)["timestamps"]).max() < 5.0


def test_silent_controller_trips_the_watchdog():
    arm = LagArm()
    with arm:
        arm.reset()
        arm.step(torch.tensor([[0.0, 0.0]]))
        time.sleep(0.4)  # the controller hangs
        with pytest.raises(WatchdogStop):
            arm.step(torch.tensor([[0.0, 0.0]]))
    assert arm.torque_log[-1] is False


def test_emergency_stop_cuts_torque_where_the_robot_stands():
    arm = LagArm()
    with arm:
        arm.reset()
        arm.step(torch.tensor([[0.5, 0.5]]))
        writes = len(arm.writes)
        threading.Thread(target=arm.emergency_stop).start()
        time.sleep(0.05)
        with pytest.raises(EmergencyStop):
            arm.step(torch.tensor([[0.5, 0.5]]))
    assert arm.torque_log[-1] is False and len(arm.writes) == writes  # no ramp after an e-stop


def test_an_emergency_stop_during_the_park_is_said_not_reported_as_parked():
    """Ctrl+\\ mid-park turns torque off where the robot stands; the close had then returned as if it had parked,
    and deploy reported "parked" with no error."""
    class EstopWhileParking(LagArm):
        parking = False

        def _write(self, goal):
            super()._write(goal)
            if self.parking and len(self.writes) == self.parked_from + 3:
                self.emergency_stop()  # as the signal handler does, on this thread mid-transaction

    arm = EstopWhileParking()
    with pytest.raises(EmergencyStop, match="during the ramp to the safe pose: parking was skipped"):
        with arm:
            arm.reset()
            arm.step(torch.tensor([[0.5, 0.5]]))
            arm.parking, arm.parked_from = True, len(arm.writes)
    assert arm.torque_log[-1] is False and len(arm.writes) == arm.parked_from + 3  # no waypoint after it


class TorqueOffUnanswered(LagArm):
    """The servos take goals, but their reply to the torque-off never comes (a bus that answers badly)."""

    def _set_torque(self, on):
        if not on:
            raise TimeoutError("no reply from servo 1 to write Torque_Enable=0")
        super()._set_torque(on)


def test_a_torque_off_the_servos_did_not_confirm_is_said_after_a_park():
    with pytest.raises(RobotError, match=r"the torque-off was not confirmed \(TimeoutError: no reply .*\): the servos "
                                         r"may still hold torque; cut their power"):
        with TorqueOffUnanswered():
            pass


def test_a_watchdog_stop_says_what_became_of_its_park():
    """Its message had said "stopped safely" before the stop was made, and stayed so when the torque-off failed
    (the watchdog thread died with a traceback of its own)."""
    arm = TorqueOffUnanswered()
    with arm:
        arm.reset()
        time.sleep(0.4)  # silent past stop_after_s (0.2 s): the watchdog parks and fails to turn torque off
        with pytest.raises(WatchdogStop, match=r"no controller call .*; the safe stop failed: the torque-off was "
                                               r"not confirmed") as stopped:
            arm.step(torch.tensor([[0.0, 0.0]]))
    np.testing.assert_allclose(arm.writes[-1], SAFE)  # parked all the same
    assert str(stopped.value).count("torque-off was not confirmed") == 1  # (close's own torque-off had said it again)
    arm = LagArm()
    with arm:
        arm.reset()
        time.sleep(0.4)
        with pytest.raises(WatchdogStop, match="parked at the safe pose and turned torque off"):
            arm.step(torch.tensor([[0.0, 0.0]]))



def test_a_watchdog_stop_after_the_last_step_is_raised_by_the_close():
    """A bus gone silent as a run's last step was taken: the watchdog stopped the robot after it, its park's
    torque-off unconfirmed, and no step was left to raise that: run() returned and deploy reported the episodes
    done, no error and exit status 0, the servos maybe holding torque."""
    arm = TorqueOffUnanswered()
    with pytest.raises(WatchdogStop, match=r"the safe stop failed: the torque-off was not confirmed"):
        with arm:
            run(Constant([0.0, 0.0]), arm, steps=3, close_env=False)
            time.sleep(0.4)  # silent past stop_after_s (0.2 s): the watchdog parks and fails to turn torque off


def test_a_failed_watchdog_stop_after_the_last_step_is_said_within_the_error_the_run_ends_on():
    """The close raised that stop in place of the error the run was ending on (a recording's disk full), which
    was then lost from what deploy reports: that error stays the one raised, the failed stop said in it."""
    arm = TorqueOffUnanswered()
    with pytest.raises(OSError, match=r"disk full; then WatchdogStop: no controller call .*the safe stop failed: "
                                      r"the torque-off was not confirmed"):
        with arm:
            run(Constant([0.0, 0.0]), arm, steps=3, close_env=False)
            time.sleep(0.4)
            raise OSError("disk full")

class SilentThenCtrlC(Constant):
    """A decision that takes longer than stop_after_s, then a Ctrl+C before any step."""

    def act(self, obs):
        time.sleep(0.4)  # the watchdog stops meanwhile (parks, and on TorqueOffUnanswered fails to turn torque off)
        raise KeyboardInterrupt


def test_a_stop_the_robot_made_before_a_ctrl_c_is_said_not_reported_as_a_park():
    """A watchdog stop whose torque-off went unconfirmed, then a Ctrl+C before a step raised it: run() returned as
    interrupted with no error, and deploy reported "the robot was parked and its torque turned off"."""
    arm = TorqueOffUnanswered()
    with pytest.raises(WatchdogStop, match=r"the safe stop failed: the torque-off was not confirmed"):
        with arm:
            run(SilentThenCtrlC([0.0, 0.0]), arm, steps=10)
    arm = LagArm()
    with pytest.raises(EmergencyStop):  # Ctrl+\, then Ctrl+C: torque off where it stood, not parked
        with arm:
            arm.reset()
            arm.emergency_stop()
            raise KeyboardInterrupt


def test_a_ramp_to_the_start_that_reads_nothing_ends_and_the_watchdog_stops_the_run(monkeypatch):
    """Reads failing during the ramp to an episode's start (a bus gone silent): the ramp, which holds the bus, had
    gone on blind to its end, the watchdog locked out past stop_after_s (18 s on a frozen emulator). The robot's
    clock moves a control period per read: on the wall clock, a loaded machine's ramp made fewer waypoints in
    stop_after_s, and had got to 0.04 rad of the 0.05 asked for."""
    import hardware.robot as robot_module

    now = [robot_module.time.monotonic()]
    monkeypatch.setattr(robot_module.time, "monotonic", lambda: now[0])

    class Clocked(LagArm):
        def _read(self):
            now[0] += self.control_dt
            return super()._read()

    arm = Clocked(ramp_speed=0.5)  # home is 0.5 rad away: a ramp of a second
    with pytest.raises(WatchdogStop, match="no fresh observation"):
        with arm:
            arm.fail_reads_after, started = arm.reads, len(arm.writes)  # silent from here
            arm.reset()
            blind = len(arm.writes) - started
            assert arm.safety.last_sent[1] > 0.05  # what a hold sends: where the ramp got to, not where it began
            for _ in range(100):
                arm.step(torch.tensor([[0.0, 0.5]]))
    assert blind <= 0.2 / 0.01 + 5  # stop_after_s of waypoints, not the whole ramp's 100


def test_an_emergency_stop_whose_torque_off_is_not_confirmed_says_so():
    """Its message had said "torque is off" although no servo confirmed it."""
    arm = TorqueOffUnanswered()
    with pytest.raises(EmergencyStop, match=r"^emergency stop, but the torque-off was not confirmed \(TimeoutError: "
                                            r"no reply .*\): the servos may still hold torque"):
        with arm:
            arm.reset()
            arm.emergency_stop()
            arm.step(torch.tensor([[0.0, 0.0]]))


def test_a_park_whose_servos_keep_stopping_is_given_up_not_restarted_for_ever():
    """Each re-arm restarted the park from where the servos stood, without limit: a servo that kept browning
    out was re-energized every check until a RecursionError."""
    class KeepsStopping(LagArm):
        def _read(self):
            if self._closing.is_set():
                self.rearms += 1  # as a driver counts servos it re-armed where they stood
            return super()._read()

    with pytest.raises(ServosStopped, match="stopped following goals 4 times during the park .* parking was given up"):
        with KeepsStopping() as arm:
            arm.reset()
    assert arm.torque_log[-1] is False


def test_a_fault_found_during_the_last_park_is_raised_not_lost():
    """A servo that stopped following goals during the park after a run that ended well had been re-armed and
    parked, then forgotten: deploy said nothing and wrote no error."""
    class FaultWhileParking(LagArm):
        def _read(self):
            if self.parking and self.fault is None:
                self.fault = ServosStopped("servos [2] had turned their torque off")
                self.rearms += 1
            return super()._read()

    with pytest.raises(ServosStopped, match=r"servos \[2\] had turned their torque off; what still followed goals "
                                            r"parked at the safe pose"):
        with FaultWhileParking() as arm:
            arm.reset()
    assert arm.torque_log[-1] is False
    np.testing.assert_allclose(arm.writes[-1], SAFE)


def test_a_robot_reconnected_after_an_emergency_stop_runs_again():
    """The stop's message says "reconnect to continue", but a reconnected robot had raised it again at every call."""
    arm = LagArm()
    with pytest.raises(EmergencyStop):
        with arm:
            arm.reset()
            arm.emergency_stop()
            arm.step(torch.tensor([[0.0, 0.0]]))
    with arm:
        assert arm.torque
        arm.reset()
        arm.step(torch.tensor([[0.1, 0.1]]))
    assert arm.torque_log[-1] is False and not arm.link


def test_lost_connection_is_typed_and_the_recording_keeps_completed_steps(tmp_path):
    arm = LagArm(lose_link_after=45)  # the reset ramp and settle take ~32 reads: lost mid-episode
    recorder = EpisodeRecorder(tmp_path)
    with pytest.raises(ConnectionLost, match="connection lost before or during the safe stop"):
        with arm:
            run(Constant([0.0, 0.0]), arm, steps=100, sink=recorder)
    episodes = [load_episode(p) for p in sorted(tmp_path.glob("episode_*.npz"))]
    assert sum(len(e["actions"]) for e in episodes) >= 10
    assert episodes[-1]["interrupted"]
    assert not arm.link


def test_an_episode_that_ended_is_kept_whole_when_the_ramp_to_the_next_start_is_cut_short(tmp_path):
    """A robot resets by itself inside the step that ends an episode (a ramp of seconds): a stop or a fault
    during that ramp had lost the step, so a finished episode was recorded as cut short, without its outcome."""
    arm = LagArm(lose_link_after=60)  # the first episode ends at read ~52; the ramp to the next start is cut
    recorder, stats = EpisodeRecorder(tmp_path), LoopStats()
    with pytest.raises(ConnectionLost):
        with arm:
            run(Constant([0.0, 0.0]), arm, steps=100, sink=recorder, stats=stats)
    episodes = [load_episode(p) for p in sorted(tmp_path.glob("episode_*.npz"))]
    assert len(episodes) == 1 and len(episodes[0]["actions"]) == arm.max_episode_steps
    assert not episodes[0]["interrupted"] and "success" in episodes[0]
    assert stats.episodes == 1 and stats.steps == arm.max_episode_steps


def test_watchdog_must_cover_two_control_periods():
    with pytest.raises(ValueError, match="watchdog_s"):
        LagArm(watchdog_s=0.015)


@pytest.mark.parametrize("pose, error", [
    ((0.2,), "safety.safe_pose has 1 positions, the robot has 2 joints"),
    ((0.2, 0.98), "joint 1 at 0.98 rad is outside its limits less position_margin"),
])
def test_a_safe_pose_the_robot_cannot_park_in_is_refused(pose, error):
    """The park ramp clamps its goal into the limits less the margin: a pose outside would be parked elsewhere
    (or, of the wrong length, fail only when stopping)."""
    with pytest.raises(ValueError, match=error):
        LagArm(safe_pose=pose)


def test_a_connect_that_fails_leaves_torque_off_and_the_link_closed():
    """Only a failed first read had been cleaned up: a torque-on or goal write that raised left the link open,
    and `with robot:` (whose __exit__ never runs then) never closed it."""
    class TorqueFails(LagArm):
        def _set_torque(self, on):
            super()._set_torque(on)
            if on:
                raise OSError("motor driver fault")

    arm = TorqueFails()
    with pytest.raises(OSError, match="motor driver fault"):
        with arm:
            pass
    assert not arm.connected and not arm.link and arm.torque_log == [True, False]


def test_a_reading_with_nan_is_a_failed_read_never_a_pose():
    """An encoder or estimator that lost track: at connect its NaN had been written as the goal before torque on;
    mid-run it crashed the park ("cannot convert float NaN to integer") with torque off away from the safe pose."""
    class NanAt(LagArm):
        def __init__(self, nan_from, **kwargs):
            super().__init__(**kwargs)
            self.nan_from = nan_from

        def _read(self):
            q, qd = super()._read()
            return (np.full(2, np.nan), qd) if self.reads >= self.nan_from else (q, qd)

    arm = NanAt(nan_from=1)
    with pytest.raises(RobotError, match=r"first state read failed \(or read NaN or inf\)"):
        arm.connect()
    assert not arm.writes and True not in arm.torque_log and not arm.link  # never a NaN goal, never torque on
    arm = NanAt(nan_from=10**9)
    with arm:
        arm.reset()
        arm.nan_from = arm.reads + 1
        with pytest.raises(WatchdogStop, match="no fresh observation .*: parked at the safe pose"):
            for _ in range(100):
                arm.step(torch.tensor([[0.1, 0.1]]))
                time.sleep(0.01)
    assert np.isfinite(arm.writes).all() and arm.torque_log[-1] is False


def test_the_watchdog_outlives_a_driver_error_of_any_kind():
    """A RuntimeError from _read while holding had killed the watchdog thread: no stop, torque on."""
    class Flaky(LagArm):
        def _read(self):
            if getattr(self, "broken", False):
                raise RuntimeError("sensor bus error")
            return super()._read()

    arm = Flaky()
    with pytest.raises(WatchdogStop, match="the safe stop failed: sensor bus error"):  # (its park cut short: said)
        with arm:
            arm.reset()
            arm.broken = True
            time.sleep(0.5)  # silent: no step, and reads that raise
            assert isinstance(arm.stopped, WatchdogStop) and arm.torque_log[-1] is False
            arm.broken = False


def test_a_kill_under_runtime_run_parks_a_robot_of_ones_own():
    """Only deploy had taken SIGTERM, SIGHUP and Ctrl+\\ as stops: under runtime.run a kill left torque on."""
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        arm = LagArm()
        with arm:
            stats = run(SignalAtCall5([0.1, 0.1], signal.SIGTERM), arm, steps=100)
        assert stats.interrupted and stats.steps == 4 and arm.torque_log[-1] is False
        np.testing.assert_allclose(arm.writes[-1], SAFE)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # given back
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_an_action_of_another_size_is_refused_before_the_robot_holds_it():
    with LagArm() as arm:
        with pytest.raises(ValueError, match=r"action has shape \(1, 3\), the env takes \(1, 2\)"):
            run(Constant([0.0, 0.0, 0.0]), arm, steps=5)
    assert arm.torque_log[-1] is False


def test_a_success_test_undefined_on_some_steps_keeps_the_columns_aligned(tmp_path):
    """_score may return None (undefined): the successes column had held fewer rows than the episode's steps."""
    class Sometimes(LagArm):
        def _score(self, q, qd, action, previous):
            return 0.0, (True if self._episode_step % 2 == 0 else None)

    with Sometimes() as arm:
        run(Constant([0.1, 0.1]), arm, episodes=1, sink=EpisodeRecorder(tmp_path))
    episode = load_episode(tmp_path / "episode_00000.npz")
    assert len(episode["successes"]) == len(episode["rewards"]) == 20
    assert episode["successes"].tolist() == [False, True] * 10 and bool(episode["success"])

    class NotAtTheEnd(LagArm):
        def _score(self, q, qd, action, previous):
            return 0.0, (True if self._episode_step % 2 == 1 else None)

    with NotAtTheEnd() as arm:
        run(Constant([0.1, 0.1]), arm, episodes=1, sink=EpisodeRecorder(tmp_path / "b"))
    assert "success" not in load_episode(tmp_path / "b" / "episode_00000.npz")  # not judged at its end: no outcome


def test_a_connect_cut_short_twice_still_closes_the_link_and_says_a_close_that_fails():
    class Twice(LagArm):
        def _set_torque(self, on):
            raise KeyboardInterrupt("SIGTERM")

    arm = Twice()
    with pytest.raises(KeyboardInterrupt):
        arm.connect()
    assert not arm.connected and not arm.link

    class NeverOpened(LagArm):
        def _connect(self):
            raise OSError("could not open port /dev/ttyUSB7")

        def _disconnect(self):
            self.serial.close()  # a driver whose close assumes an open link

    with pytest.raises(OSError, match=r"could not open port /dev/ttyUSB7; closing the link then failed too "
                                      r"\(AttributeError"):
        NeverOpened().connect()


def test_a_joint_outside_its_limits_at_connect_is_refused_with_torque_off():
    """Its first goal, inside the limits, would have moved it in at full speed (torque on, no ramp)."""
    arm = LagArm()
    arm.q = np.array([0.0, 1.4])  # limits are [-1, 1]: pushed there by hand, or fell there while limp
    with pytest.raises(RobotError, match=r"joint 1 reads 1.400 rad, outside its limits \[-1.000, 1.000\]: torque on "
                                         r"would move it in at full speed, so torque stays off; move the joint"):
        arm.connect()
    assert True not in arm.torque_log and not arm.link and not arm.connected
    arm.q = np.array([0.0, 1.03])  # a few hundredths past, as a joint held at its limit reads under load
    with arm:
        assert arm.torque


def test_a_blind_park_counts_its_own_time_unread_and_says_when_it_is_given_up(monkeypatch):
    """A park that began 1 s after the last reading counts park_blind_s from its own start, not from that reading;
    the notice says the seconds left until then (never fewer than 0), and the park is given up at park_blind_s."""
    import hardware.robot as robot_module
    from hardware.robot import _BlindPark
    from hardware.safety import ParkUnfinished

    now, said = [100.0], []
    monkeypatch.setattr(robot_module.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(robot_module, "_say", said.append)
    park = _BlindPark(waypoints=10, silent_s=0.5, limit_s=10.0)
    now[0] = 104.0
    park.waypoint(99.0)  # blind since 99, the park since 100: 4 s of it
    assert said == ["no reading for 5.0 s (a silent bus): parking the arm blind, about 36 s left of about 40 s, "
                    "given up in 6 s if nothing is read; a second Ctrl+C cuts the park short"]
    park.check(99.0)
    now[0] = 109.9
    park.check(99.0)  # 9.9 s of the park unread
    now[0] = 111.0
    park.waypoint(99.0)
    assert said[-1].endswith("given up in 0 s if nothing is read; a second Ctrl+C cuts the park short")
    with pytest.raises(ParkUnfinished, match=r"nothing was read for 11\.0 s of it \(a silent bus; "
                                             r"safety\.park_blind_s = 10\)"):
        park.check(99.0)
    now[0] = 100.0
    park = _BlindPark(waypoints=10, silent_s=0.5, limit_s=10.0)
    now[0] = 111.0
    park.waypoint(None)  # a waypoint that read: nothing said
    park.check(101.5)  # a reading during the park: 9.5 s since
    assert len(said) == 2
    park = _BlindPark(waypoints=2, silent_s=0.5, limit_s=10.0)  # it ends before its give-up
    now[0] = 112.0
    park.waypoint(111.0)
    assert said[-1] == ("no reading for 1.0 s (a silent bus): parking the arm blind, about 1 s left of about 2 s; a "
                        "second Ctrl+C cuts the park short")


def test_a_stop_left_from_an_earlier_loop_does_not_count_in_the_next():
    """A loop that stopped and was not closed leaves stop_requested and a kept second stop: the next loop's first
    Ctrl+C is its first (it ends the loop), not a second that would cut the next close's park short."""
    robot = LagArm()
    robot.stop_requested = True
    robot._park_cut.set()
    with pytest.raises(KeyboardInterrupt, match="SIGINT"):
        with robot.stop_signals():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1.0)
    assert robot.stop_requested and not robot._park_cut.is_set()


def test_a_stop_signal_left_at_its_default_is_taken_while_a_loop_drives_the_robot():
    """SIGTERM and SIGHUP at their default (end the process, torque left on) are taken as Ctrl+C is for the
    loop and its close, and given back after it."""
    robot = LagArm()
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        with robot.stop_signals():
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, previous)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stop_lands(landed, where):
    """A Ctrl+C that lands at ``where``: the SIGINT handler installed then runs, as Python runs it there. Noted in
    ``landed`` once it returned (ignored, or kept), not where it raised."""
    signal.getsignal(signal.SIGINT)(signal.SIGINT, None)
    landed.append(where)


def _closed(arm):
    """What ``arm.close()`` raised, a KeyboardInterrupt too (which, raised out of a test, ends pytest's session)."""
    try:
        arm.close()
    except BaseException as err:  # noqa: BLE001
        return err
    return None


def test_a_stop_after_a_kept_second_one_is_ignored_in_the_closes_first_park_read(monkeypatch):
    """A second stop kept before the close (stop_signals) is the close's second: its park is cut at its first
    waypoint, torque off where the arm stands. A third, landing in the read that park begins with, is ignored and
    the read goes on; counted as the second (the kept one as the first), it had raised there, in the driver's
    exchange with the servos."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    arm = LagArm(watchdog_s=0.5, stop_after_s=5.0).connect()  # (a slow machine: no watchdog stop meanwhile)
    landed, read = [], arm._read

    def third_stop_in_the_parks_read():
        if arm.parking and "tried" not in landed:
            landed.append("tried")
            _stop_lands(landed, "the park's read")
        return read()

    try:
        arm.reset()
        arm.step(torch.tensor([[0.6, -0.6]]))
        with arm.stop_signals():
            with pytest.raises(KeyboardInterrupt, match="SIGINT"):
                _stop_lands(landed, "the loop")  # the first ends the loop
            _stop_lands(landed, "the loop's clean-up")  # the second is kept for the close
            monkeypatch.setattr(arm, "_read", third_stop_in_the_parks_read)
            raised = _closed(arm)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert arm.torque_log[-1] is False and not arm.link
    assert isinstance(raised, ParkSkipped) and "a second stop" in str(raised), repr(raised)
    assert landed == ["the loop's clean-up", "tried", "the park's read"]
    assert not np.allclose(arm.writes[-1], SAFE)  # cut short where it stood


def test_stops_after_the_second_in_the_closes_park_are_ignored_and_torque_goes_off(monkeypatch):
    """The loop's Ctrl+C, then a second stop in the close's park: raised where it lands, it cuts the park short,
    and torque goes off. Later ones are ignored: one that lands as the skip is said (the close still parking) had
    been raised again, out of the stop before its torque-off (torque left on, the ParkSkipped lost), and one in
    the torque-off must not cut it short."""
    landed = []

    class SaidAsAThirdStopLands(ParkSkipped):  # (said in the close's stop, still parking)
        def __init__(self, *args):
            _stop_lands(landed, "the skip said")
            super().__init__(*args)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    arm = LagArm(watchdog_s=0.5, stop_after_s=5.0, ramp_speed=1.0).connect()  # a park of about 30 waypoints
    write, torque_off = arm._write, arm._torque_off_quietly

    def second_stop_in_the_park(goal):
        write(goal)
        if arm.parking and "the park" not in landed:
            landed.append("the park")
            _stop_lands(landed, "the park, raised")  # the second: cut here (raised, not noted)

    def fourth_stop_in_the_torque_off():
        if "the park" in landed and "the torque-off" not in landed:
            _stop_lands(landed, "the torque-off")
        return torque_off()

    try:
        arm.reset()
        arm.step(torch.tensor([[0.6, -0.6]]))
        arm.stop_requested = True  # the loop's Ctrl+C, as runtime.run notes it for the close
        monkeypatch.setattr(arm, "_write", second_stop_in_the_park)
        monkeypatch.setattr("hardware.robot.ParkSkipped", SaidAsAThirdStopLands)
        monkeypatch.setattr(arm, "_torque_off_quietly", fourth_stop_in_the_torque_off)
        raised = _closed(arm)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert arm.torque_log[-1] is False and not arm.link
    assert isinstance(raised, ParkSkipped) and "a second stop" in str(raised), repr(raised)
    assert landed == ["the park", "the skip said", "the torque-off"]
    assert not np.allclose(arm.writes[-1], SAFE)  # cut short where it stood


def test_a_third_stop_before_the_close_is_not_said_again(capsys):
    """stop_signals keeps a second stop for the close and says so; a third before the close (the loop's clean-up
    still saving the recording) is left to the close, not said as "a second stop" again."""
    robot = LagArm()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    landed = []
    try:
        with robot.stop_signals():
            with pytest.raises(KeyboardInterrupt, match="SIGINT"):
                _stop_lands(landed, "the loop")  # the first ends the loop
            _stop_lands(landed, "the second")
            _stop_lands(landed, "the third")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert landed == ["the second", "the third"] and robot.stop_requested and robot._park_cut.is_set()
    assert capsys.readouterr().err.count("SIGINT: a second stop: no park to the safe pose") == 1


def test_a_park_that_reads_now_and_then_goes_on_and_is_given_up_only_for_park_blind_s_unread(monkeypatch):
    """Three reads in four failing, for 40 s of a park of 1.6 s: the failed reads' time, added up, had given it up
    at park_blind_s (10 s), though a reading came every 2 s. Only time without a reading counts: given up once
    nothing has been read for park_blind_s, saying why the last read failed."""
    import hardware.robot as robot_module
    from hardware.robot import _BlindPark
    from hardware.safety import ParkUnfinished

    now = [100.0]
    monkeypatch.setattr(robot_module.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(robot_module, "_say", lambda line: None)
    park, fresh_at = _BlindPark(waypoints=80, silent_s=0.5, limit_s=10.0), 100.0
    for step in range(80):  # each read after 0.5 s of retries; one in four gets through
        now[0] += 0.5
        fresh_at = now[0] if step % 4 == 3 else fresh_at
        park.waypoint(None if fresh_at == now[0] else fresh_at, "garbled replies")
        park.check(fresh_at, "garbled replies")  # 40 s of the park, 30 of them failed reads: goes on
    now[0] += 9.9
    park.check(fresh_at, "garbled replies")
    now[0] += 0.1
    with pytest.raises(ParkUnfinished, match=r"nothing was read for 10\.0 s of it \(garbled replies; "
                                             r"safety\.park_blind_s = 10\), so it was given up short of the safe pose"):
        park.check(fresh_at, "garbled replies")


def test_a_step_waiting_for_the_bus_is_no_silent_controller():
    """Every read gets through, but only after 0.3 s (its tries retried, on a bus that loses replies): the step's
    call had been timed from when it got the bus, so the time its read took, and its wait for the bus that the
    watchdog's holds and their reads take, counted as the controller's silence, and a deploy at --fault
    drop_reply=0.15 stopped on "no fresh observation or controller call" of a controller that was waiting for the
    robot. The controller's time counts from the end of a call, when it has the observation to decide on."""

    class SlowReads(LagArm):
        read_s = 0.0

        def _read(self):
            time.sleep(self.read_s)
            return super()._read()

    arm = SlowReads(stop_after_s=0.25)
    arm.max_episode_steps = 1000
    with arm:
        arm.reset()
        arm.read_s = 0.3  # past stop_after_s, with every read fresh
        for _ in range(4):
            arm.step(torch.tensor([[0.0, 0.5]]))
            time.sleep(0.02)  # the controller decides
        arm.read_s = 0.0
    assert arm.stopped is None


def test_a_step_stuck_in_the_tasks_own_code_after_its_read_is_stopped_as_a_silent_controller():
    """A step's call is no silent controller while it waits for the robot (its reads, the bus), but the task's own
    code after the read (``_observe``, ``_score``, ``_metrics``) is no wait for the robot: a step stuck there had been
    exempt for as long as it lasted, the watchdog's holds keeping the readings fresh, so the arm was held with torque
    on and never parked; it is stopped after stop_after_s, as a controller that stalls is."""

    class StuckScore(LagArm):
        stuck_s = 0.0

        def _score(self, q, qd, action, previous):
            time.sleep(self.stuck_s)
            return super()._score(q, qd, action, previous)

    arm = StuckScore()
    with arm:
        arm.reset()
        arm.stuck_s = 0.6  # past stop_after_s (0.2), every read fresh
        arm.step(torch.tensor([[0.0, 0.5]]))
        with pytest.raises(WatchdogStop, match="no controller call"):
            arm.step(torch.tensor([[0.0, 0.5]]))
    assert arm.torque_log[-1] is False
