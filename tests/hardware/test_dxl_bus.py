"""The bus driver (vendor SDK underneath) against the emulated arm: handshake, control loop, faults."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest
import dynamixel_sdk as sdk

from hardware.dynamixel import protocol as p
from hardware.dynamixel.bus import DynamixelBus
from hardware.dynamixel.calibration import Calibration, MotorCalibration
from hardware.dynamixel.control_table import HW_OVERLOAD, TICKS_PER_RAD, WATCHDOG_TRIPPED
from hardware.dynamixel.emulator import DynamixelEmulator, Faults
from hardware.dynamixel.errors import (
    CommTimeoutError,
    HardwareAlertError,
    ModelMismatchError,
    DynamixelError,
    NotConnectedError,
    OutsideLimitsError,
    PacketError,
)


@pytest.fixture
def make_bus(calibration: Calibration) -> Iterator[Callable[..., DynamixelBus]]:
    """Connected buses on an emulator (60 ms reply timeout, 1 s bus watchdog unless told); closed at test end."""
    buses: list[DynamixelBus] = []

    def make(emulator: DynamixelEmulator, **kwargs: object) -> DynamixelBus:
        kwargs.setdefault("calibration", calibration)
        kwargs.setdefault("timeout_ms", 60.0)  # generous: the emulator shares this process (and a busy CI machine)
        # The servos' watchdog runs on the wall clock, lockstep or not: at the bus's 100 ms, a loaded machine's
        # pause between two packets tripped it, and the servos then ignored every goal (a round trip's joints
        # stayed put). The tests of the watchdog give their own window.
        kwargs.setdefault("watchdog_ms", 1000)
        bus = DynamixelBus(emulator.port, **kwargs)
        buses.append(bus)
        bus.connect()
        return bus

    yield make
    for bus in buses:
        bus.close()


def test_connect_checks_models_and_configures_the_servos(emulator, make_bus) -> None:
    bus = make_bus(emulator)
    assert bus.is_connected and all(s.torque_enabled for s in emulator.state().values())
    assert emulator.register(2, "Return_Delay_Time") == 0
    assert emulator.register(2, "Bus_Watchdog") == 50  # the fixture's 1000 ms
    assert emulator.register(2, "Max_Position_Limit") == round(2048 + 1.7 * TICKS_PER_RAD)
    assert bus.ping(3) == 1020


@pytest.mark.parametrize("failure", [PacketError(1, "failed to write Bus_Watchdog after 3 retries"),
                                     KeyboardInterrupt("SIGTERM")], ids=["packet", "kill"])
def test_a_connect_cut_short_after_torque_on_turns_torque_off(emulator, calibration, monkeypatch, failure) -> None:
    """The connect turns torque on, then arms each servo's bus watchdog: a failure between had closed the port
    with every servo holding torque and no bus watchdog to stop them."""
    real = DynamixelBus.write

    def write(self, servo, name, value):
        if name == "Bus_Watchdog" and value > 0 and servo == 1:
            raise failure
        return real(self, servo, name, value)

    monkeypatch.setattr(DynamixelBus, "write", write)
    bus = DynamixelBus(emulator.port, calibration=calibration, timeout_ms=60.0)
    with pytest.raises(type(failure)):
        bus.connect()
    assert not bus.is_connected and not any(s.torque_enabled for s in emulator.state().values())
    real_torque = DynamixelBus.enable_torque

    def torque(self, on, *args, **kwargs):
        if not on and getattr(self, "was_on", False):  # the torque-off after torque on
            raise PacketError(3, "no reply")
        self.was_on = on
        return real_torque(self, on, *args, **kwargs)

    monkeypatch.setattr(DynamixelBus, "enable_torque", torque)  # and the torque-off after it fails: said
    with pytest.raises(type(failure), match="turning torque off after it then failed too .*cut their power"):
        DynamixelBus(emulator.port, calibration=calibration, timeout_ms=60.0).connect()


def test_a_second_ctrl_c_during_a_failed_connects_torque_off_does_not_cut_it_short(emulator, calibration,
                                                                                  monkeypatch) -> None:
    """A Ctrl+C cut the connect short after torque on; a second one during the torque-off that follows had ended
    that too, leaving the servos holding torque (the robot, not connected yet, has no close to take it off)."""
    import os
    import signal

    real_write, real_torque = DynamixelBus.write, DynamixelBus.enable_torque

    def write(self, servo, name, value):
        if name == "Bus_Watchdog" and value > 0 and servo == 1:  # the first Ctrl+C, after torque on
            raise KeyboardInterrupt("SIGINT")
        return real_write(self, servo, name, value)

    def torque(self, on, *args, **kwargs):
        if not on and getattr(self, "was_on", False):
            os.kill(os.getpid(), signal.SIGINT)  # the second, as the torque-off begins
        self.was_on = on
        return real_torque(self, on, *args, **kwargs)

    monkeypatch.setattr(DynamixelBus, "write", write)
    monkeypatch.setattr(DynamixelBus, "enable_torque", torque)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt, match="SIGINT"):
            DynamixelBus(emulator.port, calibration=calibration, timeout_ms=60.0).connect()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert not any(s.torque_enabled for s in emulator.state().values())


def test_a_ctrl_c_inside_an_exchange_leaves_the_bus_usable(emulator, make_bus, monkeypatch) -> None:
    """The SDK marks its port busy for an exchange: a Ctrl+C (or a kill taken as one) raised inside it had
    left every later packet, the safe stop's torque-off too, answered "Port is in use!"."""
    bus = make_bus(emulator)
    packet = bus._packet
    real = packet.rxPacket

    def cut_short(port, *args):  # the request went out; the interrupt lands before the reply is read
        assert port.is_using
        raise KeyboardInterrupt

    monkeypatch.setattr(packet, "rxPacket", cut_short)
    with pytest.raises(KeyboardInterrupt):
        bus.read_state()
    monkeypatch.setattr(packet, "rxPacket", real)
    positions, _ = bus.read_state()  # the unread replies are dropped, not taken for this exchange's
    assert positions.shape == (len(emulator.state()),)
    bus.write(1, "Torque_Enable", 0)
    assert not emulator.state()[1].torque_enabled


def test_a_second_process_on_the_same_bus_is_refused_before_touching_the_servos(emulator, make_bus, calibration) -> None:
    """A second deploy on the port had run connect(): torque off, limits rewritten, under the first one's run."""
    from hardware.dynamixel.errors import NotConnectedError

    first = make_bus(emulator)
    writes = emulator.register(1, "Torque_Enable")
    with pytest.raises(NotConnectedError, match="is in use by another process"):
        DynamixelBus(emulator.port, calibration=calibration, timeout_ms=60.0).connect()
    assert first.is_connected and emulator.register(1, "Torque_Enable") == writes == 1
    first.close()
    second = make_bus(emulator)  # free again once the first closed
    assert second.is_connected


@pytest.mark.parametrize("retries", [1.5, None, True, -1])
def test_a_retry_count_that_is_no_whole_number_is_refused_before_the_port_opens(calibration, retries) -> None:
    """deploy(..., retries=1.5) had failed inside connect(), said as a torque-off that failed ("the servos may hold
    torque; cut their power"), and None as a TypeError of '<'."""
    with pytest.raises(ValueError, match=r"retries must be a whole number >= 0, got "):
        DynamixelBus("/dev/null", calibration=calibration, retries=retries)
    assert DynamixelBus("/dev/null", calibration=calibration, retries=np.int64(2)).retries == 2

def test_model_mismatch_names_the_servo_and_both_models(make_emulator, make_bus) -> None:
    emulator = make_emulator(model_number=1060)
    with pytest.raises(ModelMismatchError, match=r"servo 1 is a XL430-W250 \(1060\).*expects a XM430-W350"):
        make_bus(emulator)
    assert not emulator.state()[1].torque_enabled


def test_missing_servo_is_a_timeout_naming_it(make_emulator, make_bus, calibration) -> None:
    emulator = make_emulator()
    extra = Calibration(calibration.motors + (MotorCalibration(9, "j9"),))
    with pytest.raises(CommTimeoutError, match=rf"no reply from servo 9 .* on {emulator.port} at 1000000 baud"):
        make_bus(emulator, calibration=extra, retries=0)


def test_a_servo_that_never_answered_is_not_said_to_hold_torque(make_emulator, make_bus, calibration) -> None:
    """A wrong id or baud rate: the connect's torque-off, failing on the servo that never answered, had added
    "the servos may hold torque; cut their power before touching the arm" to the error, though this connect had
    turned nothing on (the servos that answer were turned off)."""
    emulator = make_emulator()
    motors = list(calibration.motors)
    motors[1] = dataclasses.replace(motors[1], id=7)  # j2 at an id no servo has
    with pytest.raises(CommTimeoutError, match=r"no reply from servo 7 to answer a ping") as refused:
        make_bus(emulator, calibration=Calibration(tuple(motors)), retries=0)
    assert "may hold torque" not in str(refused.value)
    assert not any(s.torque_enabled for s in emulator.state().values())
    emulator.faults.corrupt_crc = 1.0  # a wrong baud rate on a real line: garbled replies, not silence
    with pytest.raises(PacketError, match=r"servo 1: garbled reply .* to answer a ping") as refused:
        make_bus(emulator, retries=0)
    assert "may hold torque" not in str(refused.value)


def test_sync_round_trip_moves_the_joints(emulator, make_bus) -> None:
    bus = make_bus(emulator)
    target = np.array([0.5, -0.3, 0.6, -0.4])
    for _ in range(60):  # lockstep: 1.2 s of simulated time
        positions, velocities = bus.read_state()
        bus.write_goal(target)
    positions, velocities = bus.read_state()
    assert positions == pytest.approx(target, abs=0.05)
    assert np.abs(velocities).max() < 0.2
    assert bus.stats.sync_reads >= 61 and bus.stats.retries == 0


def test_goals_are_clamped_to_the_calibrated_limits(emulator, make_bus) -> None:
    bus = make_bus(emulator)
    sent = bus.write_goal(np.array([9.0, -9.0, 0.0, 0.0]))
    assert sent == pytest.approx([2.6, -1.7, 0.0, 0.0])
    bus.read_state()  # the sync write has no reply: let the emulator catch up
    assert emulator.state()[1].goal == pytest.approx(2.6, abs=1e-3)


def test_calibration_offset_and_direction_both_ways(emulator, make_bus) -> None:
    cal = Calibration((
        MotorCalibration(1, "j1", homing_offset=100, direction=-1, min_position=-2.0, max_position=2.0),
        MotorCalibration(2, "j2", homing_offset=-60, direction=1, min_position=-1.5, max_position=1.5),
        MotorCalibration(3, "j3", min_position=-2.0, max_position=2.0),
        MotorCalibration(4, "j4", direction=-1, min_position=-1.5, max_position=1.5),
    ))
    bus = make_bus(emulator, calibration=cal)
    emulator.set_joint_positions({1: 0.3, 2: 0.2, 3: -0.1, 4: 0.4})
    positions, _ = bus.read_state()
    offsets = np.array([100, -60, 0, 0]) / TICKS_PER_RAD
    directions = np.array([-1, 1, 1, -1])
    sim = np.array([0.3, 0.2, -0.1, 0.4])
    assert positions == pytest.approx(directions * (sim - offsets), abs=1e-3)
    bus.write_goal(np.array([0.5, 0.5, 0.5, 0.5]))
    bus.read_state()
    goals = np.array([emulator.state()[i].goal for i in (1, 2, 3, 4)])
    assert goals == pytest.approx(offsets + directions * 0.5, abs=1e-3)


def test_eeprom_write_while_torque_on_is_a_packet_error(emulator, make_bus) -> None:
    bus = make_bus(emulator)
    with pytest.raises(PacketError, match="servo 2: refused to write Operating_Mode=3.*access error"):
        bus.write(2, "Operating_Mode", 3)
    bus.enable_torque(False)
    bus.write(2, "Operating_Mode", 3)


def test_dropped_replies_are_retried(emulator, make_bus) -> None:
    bus = make_bus(emulator)
    emulator.set_joint_positions({1: -0.3, 2: 0.2, 3: 0.1, 4: -0.4})
    emulator.faults.drop_next = 1  # servo 1's reply to the sync read
    positions, _ = bus.read_state()
    np.testing.assert_allclose(positions, [-0.3, 0.2, 0.1, -0.4], atol=2e-3)  # the retry's reply, each in its place
    assert bus.stats.retries == 1 and bus.stats.timeouts == 1
    emulator.faults.drop_next = 2
    assert bus.read(2, "Present_Temperature") == 35
    assert bus.stats.retries == 3 and bus.stats.timeouts == 3


def test_dropped_reply_without_retries_is_a_timeout(emulator, make_bus) -> None:
    bus = make_bus(emulator, retries=0)
    emulator.faults.drop_next = 1
    with pytest.raises(CommTimeoutError, match="no reply from servo 1 to read the joint state"):
        bus.read_state()
    assert bus.read_state()[0].shape == (4,)  # the bus is still usable


def test_a_torque_off_that_no_servo_confirms_is_sent_to_every_servo_and_names_them_all(emulator, make_bus) -> None:
    """The error of a torque-off that failed on every servo had named the first alone (a park's "cut their power"
    then seemed to be about servo 1); each servo is still sent it, after its own retries."""
    bus = make_bus(emulator, retries=1)
    emulator.faults.drop_reply = 1.0  # the servos hear, none answers
    with pytest.raises(CommTimeoutError, match=r"^no reply from servo 1 to write Torque_Enable=0 .*; servos 2, 3, 4 "
                                               r"did not confirm the torque-off either$"):
        bus.enable_torque(False)
    emulator.faults.drop_reply = 0.0
    assert not any(s.torque_enabled for s in emulator.state().values())


def test_corrupt_replies_are_retried_then_a_packet_error(emulator, make_bus) -> None:
    """A servo that answered cleanly earlier on the connection had been told to check the baud rate, which its clean
    replies rule out (a wrong one garbles every reply): its garbled ones are said as corrupted on the way."""
    bus = make_bus(emulator, retries=2)
    emulator.faults.corrupt_next = 1
    bus.read(3, "Present_Temperature")
    assert bus.stats.crc_errors == 1 and bus.stats.retries == 1
    emulator.faults.corrupt_crc = 1.0
    with pytest.raises(PacketError, match=r"servo 3: garbled reply .* on \S+ at \d+ baud: it answered cleanly "
                                          r"earlier on this connection, so replies are being corrupted on the way: "
                                          r"check the cable and its connectors \(loose, noisy\) and the servos' power "
                                          r"supply$"):
        bus.read(3, "Present_Temperature")
    assert bus.stats.crc_errors == 4


def test_a_servo_whose_every_reply_comes_garbled_is_told_to_check_the_baud_rate(make_emulator, calibration) -> None:
    bus = DynamixelBus(make_emulator(faults=Faults(corrupt_crc=1.0)).port, calibration, retries=1)
    with pytest.raises(PacketError, match=r"servo 1: garbled reply .* on \S+ at \d+ baud: check the baud rate \(the "
                                          r"servos' and the robot config's\), the wiring"):
        bus.connect()


def test_hardware_alert_names_the_servo_and_the_bits(emulator, make_bus) -> None:
    bus = make_bus(emulator)
    emulator.faults.hardware_alert[3] = HW_OVERLOAD
    with pytest.raises(HardwareAlertError, match=r"servo 3 .*Hardware_Error_Status=0x20 \(overload\)") as info:
        bus.read_state()
    assert (info.value.servo_id, info.value.hardware_error) == (3, HW_OVERLOAD)
    emulator.faults.hardware_alert.clear()
    bus.reboot(3)
    assert bus.read_state()[0].shape == (4,)
    bus.enable_torque(True)
    assert emulator.state()[3].torque_enabled


def test_a_hardware_alert_whose_status_cannot_be_read_says_unread(emulator, make_bus, monkeypatch) -> None:
    """The Hardware_Error_Status read going unanswered had read as "0x00 (none)", as if the servo named no cause."""
    bus = make_bus(emulator, retries=1)
    emulator.faults.hardware_alert[3] = HW_OVERLOAD
    monkeypatch.setattr(bus._packet, "read1ByteTxRx", lambda port, servo, address: (0, sdk.COMM_RX_TIMEOUT, 0))
    with pytest.raises(HardwareAlertError, match=r"servo 3 .*Hardware_Error_Status unread \(the servo did not answer "
                                                 r"its read, or refused it\); remove the cause") as info:
        bus.read_state()
    assert info.value.hardware_error is None and "0x00" not in str(info.value)


def test_reply_latency_within_the_timeout_still_works(emulator, make_bus) -> None:
    """A sync read's replies share one window. It is wide here, the latency well inside it: 20 ms of a 34 ms
    window had left the emulator's thread 14 ms to spare over 4 replies, which a loaded machine's sleeps
    overshoot (4 ms late each failed it, and the connect's own reads with it)."""
    bus = make_bus(emulator, timeout_ms=250.0)
    emulator.faults.reply_latency = 0.01  # 4 replies: 40 ms of the 250 ms window
    start = time.perf_counter()
    bus.read_state()
    assert time.perf_counter() - start >= 0.04 and bus.stats.retries == 0
    emulator.faults.reply_latency = 0.3  # the first reply alone comes after the window
    bus.retries = 0
    with pytest.raises(CommTimeoutError):
        bus.read_state()
    emulator.faults.reply_latency = 0.0  # (the close's torque-off need not wait out four more)


def test_disconnect_mid_run_is_not_connected(emulator, make_bus) -> None:
    bus = make_bus(emulator)
    bus.read_state()
    assert bus.port.startswith("/dev/pts/")
    emulator.disconnect()
    with pytest.raises(NotConnectedError, match="lost the connection") as lost:
        for _ in range(3):
            bus.write_goal(np.zeros(4))
            bus.read_state()
    assert not bus.is_connected
    # an emulator's pseudo-terminal: the emulator stopped (the USB cable and servo power had been said)
    assert "robolearn emulate dynamixel" in str(lost.value) and "USB cable" not in str(lost.value)
    bus.close()
    bus.close()  # idempotent
    with pytest.raises(NotConnectedError, match="call connect"):
        bus.read_state()


def wait_until(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    """Whether ``condition`` came true within ``timeout_s``, looked at every 5 ms: for what the emulator's thread
    does on its own clock (a watchdog's trip), which no packet of the test's marks."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_watchdog_stops_the_arm_when_the_host_goes_quiet(emulator, make_bus) -> None:
    """Waited for, not slept on: a 0.1 s sleep left the emulator's thread 60 ms past the 40 ms window to wake in
    (late by 70 ms, it failed). The re-armed window is one no pause of this test's can outlast: at 40 ms, a
    pause of 45 ms between the re-arm and the goal tripped servo 1 again, and the goal was refused."""
    bus = make_bus(emulator, watchdog_ms=40)
    bus.write_goal(np.array([0.5, 0.0, 0.0, 0.0]))
    assert wait_until(lambda: all(s.watchdog_tripped for s in emulator.state().values()))
    assert bus.read(1, "Bus_Watchdog") == WATCHDOG_TRIPPED
    bus.write_goal(np.array([1.0, 0.0, 0.0, 0.0]))  # refused by the servos (no reply to a sync write)
    bus.read_state()
    assert emulator.state()[1].goal < 0.9
    bus.watchdog_ms = 2000
    bus.enable_torque(True)  # re-arms the watchdog
    bus.write_goal(np.array([1.0, 0.0, 0.0, 0.0]))
    bus.read_state()
    assert emulator.state()[1].goal == pytest.approx(1.0, abs=1e-3)
    assert emulator.register(1, "Bus_Watchdog") == 100


@pytest.mark.parametrize("watchdog_ms, units", [(10, 1), (30, 2), (40, 2)])
def test_a_watchdog_window_rounds_up_to_whole_units_never_to_off(emulator, make_bus, monkeypatch, watchdog_ms,
                                                                 units) -> None:
    """10 ms had rounded to 0 units, which turns the servos' watchdog off, silently. The window written is what is
    asked: no trip overwrites it (0xFF) here, as one did where a loaded machine paused 20 ms before the read."""
    monkeypatch.setattr(DynamixelEmulator, "_check_watchdogs", lambda self, now: None)
    make_bus(emulator, watchdog_ms=watchdog_ms)
    assert emulator.register(1, "Bus_Watchdog") == units


def test_close_turns_torque_off(emulator, calibration) -> None:
    with DynamixelBus(emulator.port, calibration, timeout_ms=60) as bus:
        bus.read_state()
    assert not any(s.torque_enabled for s in emulator.state().values())
    assert not bus.is_connected


def test_torque_off_reaches_every_servo_even_if_one_alerts(emulator, make_bus) -> None:
    """An alert-only status is a write done: torque off is not an error then (it had been raised, and a connect
    cut short by an alerted servo said its torque-off had failed too, when every servo had gone limp)."""
    bus = make_bus(emulator)
    emulator.faults.hardware_alert[1] = 0x01  # input voltage: not a shutdown fault, torque stays on
    bus.enable_torque(False)
    assert not any(s.torque_enabled for s in emulator.state().values())
    emulator.faults.drop_reply = 1.0  # (a real failure is still raised)
    with pytest.raises(CommTimeoutError):
        bus.enable_torque(False)


def test_a_missing_pseudo_terminal_points_at_the_emulator(calibration) -> None:
    """A /dev/pts/N port is an emulator's: gone when `robolearn emulate` stopped, which the adapter hint never said."""
    with pytest.raises(NotConnectedError, match=r"cannot open /dev/pts/987654: .*; a pseudo-terminal is served by "
                                                r"`robolearn emulate dynamixel` while it runs"):
        DynamixelBus("/dev/pts/987654", calibration).connect()
    with pytest.raises(NotConnectedError, match=r"check the adapter is plugged in .*dialout") as raised:
        DynamixelBus("/dev/does-not-exist", calibration).connect()
    assert "robolearn emulate" not in str(raised.value)


def test_an_unsupported_baudrate_lists_the_supported_ones(calibration) -> None:
    with pytest.raises(ValueError, match="baudrate 500000 is not one X-series servos support: 9600, 57600, 115200, "
                                         "1000000, 2000000, 3000000, 4000000, 4500000"):
        DynamixelBus("/dev/null", calibration, baudrate=500_000)


def test_the_bus_runs_at_4_5_mbps(make_emulator, make_bus) -> None:
    """Baud_Rate 7 (XM430, XL430): the SDK's port handler had refused 4.5 Mbps ("cannot open ... unsupported baud
    rate?"), which pyserial sets as a custom rate."""
    bus = make_bus(make_emulator(baudrate=4_500_000), baudrate=4_500_000)
    assert bus.ping(1) == 1020 and bus.read_state()[0].shape == (4,)


def limited(calibration: Calibration, servo_id: int, **changes: float) -> Calibration:
    """The arm's calibration with one motor's settings changed."""
    return Calibration(tuple(dataclasses.replace(m, **changes) if m.id == servo_id else m for m in calibration.motors))


def test_a_reply_that_comes_after_its_timeout_is_not_taken_for_the_next_requests(emulator, make_bus) -> None:
    """The SDK matches a reply by servo id only: a late 1-byte Torque_Enable reply had been read as the joint
    state (a numpy reshape error that ended runs and cut parks short), and a late state reply as Torque_Enable."""
    bus = make_bus(emulator, retries=0, timeout_ms=50.0)
    emulator.faults.reply_latency = 0.08  # past the timeout, well short of the drain after it
    with pytest.raises(CommTimeoutError):
        bus.read(1, "Torque_Enable")
    emulator.faults.reply_latency = 0.0
    q, _ = bus.read_state()
    np.testing.assert_allclose(q, [s.position for s in emulator.state().values()], atol=2e-3)
    assert bus.torque_off() == [] and bus.read(1, "Torque_Enable") == 1


def test_a_reply_seen_after_its_timeout_is_said_late_not_missing(emulator, make_bus) -> None:
    """A reply past the timeout (`--fault reply_latency`, an adapter's 16 ms latency timer) had been said as "no reply
    ...: check power, id and baud rate", of a servo that answers every packet; the drain after the timeout sees it
    come, and the error says it came late, and when. A reply that never comes is still none."""
    bus = make_bus(emulator, retries=0, timeout_ms=100.0)
    emulator.faults.reply_latency = 0.15  # past the timeout, well inside the drain's quiet window after it
    with pytest.raises(CommTimeoutError, match=rf"^late reply from servo 1 to read Torque_Enable on {emulator.port} "
                                               r"\(after \d+ ms, past the 100 ms the bus waits\): check the USB "
                                               r"adapter's latency timer") as late:
        bus.read(1, "Torque_Enable")
    assert late.value.late_ms > 100
    emulator.faults.reply_latency, emulator.faults.drop_next = 0.0, 1
    with pytest.raises(CommTimeoutError, match="^no reply from servo 1 to read Torque_Enable") as missing:
        bus.read(1, "Torque_Enable")
    assert missing.value.late_ms is None
    assert bus.read(1, "Torque_Enable") == 1


def test_another_servos_late_reply_seen_in_a_drain_is_not_said_as_the_servo_asked(emulator, make_bus,
                                                                                  monkeypatch) -> None:
    """A reply later than the drain after its timeout lands in the next exchange: servo 1's, come while the drain
    after servo 2's timeout ran, had been said as servo 2's "late reply ... (after 150 ms)" (what `deploy` said at
    connect with `--fault reply_latency=0.09`). It is said as servo 1's, an earlier request's, servo 2's unseen.
    Servo 1's reply is held until that drain begins, and the drain until it is on the line: timed by a reply latency
    instead, it had to land within the 100 ms of that drain after two timeouts and a drain, and a loaded machine's
    delays had let it miss."""
    bus = make_bus(emulator, retries=0, timeout_ms=100.0)
    drains, real_drain, real_send = [], bus._drain, emulator._send
    second_drain, held_sent = threading.Event(), threading.Event()

    def drain():  # (the second: after servo 2's timeout)
        drains.append(None)
        if len(drains) == 2:
            second_drain.set()
            assert held_sent.wait(10)
        return real_drain()

    def send(replies):  # (the emulator's thread: servo 2's request waits on the line meanwhile)
        held = [packet[4] for _, packet in replies] == [1] and not second_drain.is_set()
        if held:
            assert second_drain.wait(10)
        real_send(replies)
        if held:
            held_sent.set()

    monkeypatch.setattr(bus, "_drain", drain)
    monkeypatch.setattr(emulator, "_send", send)
    with pytest.raises(CommTimeoutError, match="^no reply from servo 1"):
        bus.read(1, "Torque_Enable")
    with pytest.raises(CommTimeoutError, match=rf"^no reply in time from servo 2 to read Torque_Enable on "
                                               rf"{emulator.port}: servo 1's came instead, \d+ ms after this request, "
                                               r"past the 100 ms the bus waits, an earlier request's reply come late: "
                                               r"check the USB adapter's latency timer") as raised:
        bus.read(2, "Torque_Enable")
    assert raised.value.late_from == 1 and raised.value.late_ms > 100
    assert bus.read(2, "Torque_Enable") == 1


def test_a_sync_reads_own_reply_late_after_a_silent_servo_is_no_earlier_requests(emulator, make_bus,
                                                                                 monkeypatch) -> None:
    """A sync read's servos answer in turn: where servo 3 gave no reply and servo 4's came past the timeout, the
    drain saw servo 4's, and it was said as "an earlier request's reply come late", with a fix for a slow line, of
    this request's own. Servo 3 is said as silent. (Servo 4's reply is held until the drain begins, and the drain
    until it is on the line: nothing left to timing.)"""
    bus = make_bus(emulator, retries=0)
    drain_began, held_sent = threading.Event(), threading.Event()
    real_drain, real_send = bus._drain, emulator._send

    def drain():
        drain_began.set()
        assert held_sent.wait(10)
        return real_drain()

    def send(replies):  # (the emulator's thread) a sync read's: servo 3's lost, servo 4's late
        if len(replies) != 4:
            return real_send(replies)
        real_send([reply for reply in replies if reply[1][4] in (1, 2)])
        assert drain_began.wait(10)
        real_send([reply for reply in replies if reply[1][4] == 4])
        held_sent.set()

    monkeypatch.setattr(bus, "_drain", drain)
    monkeypatch.setattr(emulator, "_send", send)
    with pytest.raises(CommTimeoutError, match=rf"^no reply from servo 3 to read the joint state on {emulator.port}, "
                                               r"which answered earlier on this connection") as raised:
        bus.read_state()
    assert raised.value.late_ms is None and raised.value.late_from is None


def test_a_joint_outside_its_limits_is_not_snapped_to_them_at_torque_on(emulator, calibration) -> None:
    """Torque on sends the present pose as the goal, clipped into the limits: the joint had been driven in at
    the motor's full speed (4 rad/s), not at a ramp's."""
    emulator.set_joint_positions({3: 1.6})
    bus = DynamixelBus(emulator.port, limited(calibration, 3, min_position=-1.0, max_position=1.0), timeout_ms=60.0)
    with pytest.raises(OutsideLimitsError, match=r"servo 3 \(j3\) reads 1.600 rad, outside its limits \[-1.000, "
                                                 r"1.000\] .*torque stays off; move the joint within its limits"):
        bus.connect()
    assert not bus.is_connected and not any(s.torque_enabled for s in emulator.state().values())
    assert emulator.state()[3].position == pytest.approx(1.6, abs=1e-3)


def test_max_speed_caps_the_joints_speed_and_velocity_limit_does_not(emulator, calibration, make_bus) -> None:
    """Velocity_Limit bounds only Goal/Profile_Velocity in position mode: a joint "limited" to 1 rad/s had moved at
    the motor's 4.3 rad/s, the calibration saying it capped the speed. max_speed is written to Profile_Velocity;
    left out (the default: what the training simulation has), no profile runs."""
    bus = make_bus(emulator, calibration=limited(calibration, 1, max_speed=1.0))
    assert emulator.register(1, "Profile_Velocity") == 42 and emulator.register(2, "Profile_Velocity") == 0
    speeds = []
    for _ in range(25):  # 0.5 s toward a goal 1 rad away
        bus.write_goal(np.array([1.0, 0.0, 0.0, 0.0]))
        speeds.append(bus.read_state()[1][0])
    assert 0.9 < max(speeds) < 1.3  # (the position loop lags the profile, then catches up a little faster)


def test_connect_to_an_arm_left_holding_keeps_its_torque_on(emulator, make_bus, monkeypatch) -> None:
    """A killed run leaves the servos holding (their bus watchdog): connecting again had turned torque off for the
    EEPROM writes, and the arm sagged. Torque goes off only when a setting must change."""
    first = make_bus(emulator)
    first._close_port()  # (what a kill leaves: the port gone, torque on)
    torque_writes = []
    real_write = DynamixelBus.write
    monkeypatch.setattr(DynamixelBus, "write", lambda bus, i, name, value: (
        torque_writes.append(value) if name == "Torque_Enable" else None, real_write(bus, i, name, value))[1])
    make_bus(emulator).close()
    assert 0 not in torque_writes[:-4]  # (close's torque-off is the last four)
    before = len(torque_writes)
    with emulator._lock:  # another program changed a setting: the write needs torque off
        emulator._servos[2].set("Return_Delay_Time", 250)
    make_bus(emulator)
    assert 0 in torque_writes[before:] and emulator.register(2, "Return_Delay_Time") == 0


def test_a_servo_that_does_not_answer_writes_is_refused_by_name(emulator, calibration) -> None:
    """Status_Return_Level 1 answers pings and reads only: every write then timed out as "no reply ... check power"."""
    with emulator._lock:
        emulator._servos[2].set("Status_Return_Level", 1)
    with pytest.raises(DynamixelError, match=r"servo 2 answers pings and reads, not writes \(Status_Return_Level 1\): "
                                             r"set it to 2"):
        DynamixelBus(emulator.port, calibration, timeout_ms=60.0).connect()


def test_a_joint_holding_torque_past_its_limit_is_kept_holding_at_connect(emulator, calibration, make_bus) -> None:
    """A joint held at its limit sags past it under load: connecting again (to an arm a killed run left holding)
    had refused it as outside its limits, and turned every servo's torque off: the arm fell."""
    tight = limited(calibration, 3, min_position=-1.0, max_position=1.0)
    first = make_bus(emulator, calibration=tight)
    emulator.set_joint_positions({3: 1.1})  # (holding there: the sag, drawn large)
    first._close_port()  # what a kill leaves: torque on
    make_bus(emulator, calibration=tight)
    assert all(s.torque_enabled for s in emulator.state().values())


def test_a_rearm_leaves_a_limp_servo_outside_its_limits_limp_and_arms_the_others(emulator, calibration,
                                                                                 make_bus) -> None:
    """Mid-run, a servo that rebooted and fell past its limits had failed the whole re-arm: the others were left
    with their bus watchdog off, and the message said to move a joint that was holding torque."""
    bus = make_bus(emulator, calibration=limited(calibration, 3, min_position=-1.0, max_position=1.0))
    emulator.reboot(3)
    emulator.set_joint_positions({3: 1.3})
    with pytest.raises(OutsideLimitsError, match=r"servo 3 \(j3\) reads 1.(299|300) rad"):
        bus.enable_torque(True)
    assert [emulator.register(i, "Bus_Watchdog") for i in (1, 2, 4)] == [50] * 3  # (refused before touching them)
    assert bus.enable_torque(True, leave_outside=True) == [3]
    state = emulator.state()
    assert [state[i].torque_enabled for i in (1, 2, 3, 4)] == [True, True, False, True]
    assert [emulator.register(i, "Bus_Watchdog") for i in (1, 2, 4)] == [50] * 3  # armed: the fixture's 1 s


def test_a_late_reply_longer_than_the_one_asked_for_is_not_cut_to_size(emulator, make_bus) -> None:
    """The SDK cuts a reply to the length asked for: a Present_Position reply come after the drain had been read as
    Torque_Enable (0, where torque was on)."""
    bus = make_bus(emulator, retries=0, timeout_ms=50.0)
    emulator.faults.reply_latency = 0.13  # past the timeout and the drain after it
    with pytest.raises(CommTimeoutError):
        bus.read(1, "Present_Position")
    emulator.faults.reply_latency, bus.retries = 0.0, 1
    assert bus.read(1, "Torque_Enable") == 1


def short_status(servo_id: int) -> bytes:
    """A status packet whose LENGTH is 3, one short of the least a status holds (instruction, error, CRC): no
    error byte, yet a valid CRC."""
    body = p.HEADER + bytes([servo_id, 3, 0, p.STATUS])
    crc = p.crc16(body)
    return body + bytes([crc & 0xFF, crc >> 8])


def replace_reply(emulator: DynamixelEmulator, monkeypatch, servo_id: int, wire: bytes, nth: int = 1) -> None:
    """The servo's ``nth`` status packet from now goes on the line as ``wire`` instead (the others as they are)."""
    real, count = emulator._send, [0]

    def swap(packet: bytes) -> bytes:
        if packet[4] != servo_id:
            return packet
        count[0] += 1
        return wire if count[0] == nth else packet

    monkeypatch.setattr(emulator, "_send", lambda replies: real([(delay, swap(packet)) for delay, packet in replies]))


@pytest.mark.parametrize("exchange", ["ping", "read", "write", "read_state"])
def test_a_status_shorter_than_the_least_a_status_holds_is_garbled(emulator, make_bus, monkeypatch, exchange) -> None:
    """The SDK (4.1.0) took a LENGTH 3 status with a valid CRC, followed on the line by any byte, for a good one and
    read its "error byte" out of the CRC (0xe2 for servo 2: "alert + unknown error 98"), a ping's model number out
    of the CRC and the byte after it: the driver raised a refusal the servo never sent (or would have read data that
    is not there). It is a garbled reply, retried as a bad CRC is, at once: the port's wait for the negative count
    of bytes the SDK then asks for had waited out the timeout. (A timeout long enough that no reply misses it on a
    loaded machine: the 60 ms one failed this test now and then at load 7-8, the retry counted twice.)"""
    bus = make_bus(emulator, timeout_ms=1000.0)
    actions = {"ping": lambda: bus.ping(2), "read": lambda: bus.read(2, "Present_Temperature"),
               "write": lambda: bus.write(2, "LED", 1), "read_state": bus.read_state}
    # the stray byte after it: the next servo's reply in a sync read, noise after a lone reply
    replace_reply(emulator, monkeypatch, 2, short_status(2) + (b"" if exchange == "read_state" else b"\x00"))
    start = time.monotonic()
    result = actions[exchange]()
    assert bus.stats.crc_errors == 1 and bus.stats.retries == 1 and time.monotonic() - start < 0.5
    if exchange == "ping":
        assert result == 1020
    elif exchange == "read":
        assert result == 35
    elif exchange == "write":
        assert emulator.register(2, "LED") == 1
    else:
        np.testing.assert_allclose(result[0], [s.position for s in emulator.state().values()], atol=2e-3)


@pytest.mark.parametrize("exchange", ["ping", "alert status"])
def test_a_reply_holding_other_than_what_was_asked_for_is_garbled(emulator, make_bus, monkeypatch, exchange) -> None:
    """The SDK reads a status's data at fixed places whatever its LENGTH: a ping answered without its 3 bytes had its
    model number read out of the CRC (3113), and a Hardware_Error_Status read (the SDK's read1ByteTxRx) answered
    without data had named causes read out of the CRC (0x51: input voltage, electrical shock, where the servo was
    overloaded). Either is a garbled reply, retried."""
    bus = make_bus(emulator)
    if exchange == "ping":
        replace_reply(emulator, monkeypatch, 2, p.encode_status(2, 0, b""))
        assert bus.ping(2) == 1020
    else:
        emulator.faults.hardware_alert[3] = HW_OVERLOAD  # the sync read's reply flags it, then its status is read
        replace_reply(emulator, monkeypatch, 3, p.encode_status(3, p.ERR_ALERT, b""), nth=2)
        with pytest.raises(HardwareAlertError, match=r"servo 3 .*Hardware_Error_Status=0x20 \(overload\)"):
            bus.read_state()
    assert bus.stats.crc_errors == 1 and bus.stats.retries == 1  # (the status read had been retried uncounted)


@pytest.mark.parametrize("error, refusals, expected", [(p.ERR_CRC, 1, HW_OVERLOAD), (p.ERR_CRC, 2, None),
                                                       (p.ERR_INSTRUCTION, 1, None)])
def test_a_refused_hardware_error_status_read_is_not_read_as_causes(emulator, make_bus, monkeypatch, error,
                                                                     refusals, expected) -> None:
    """A refusal carries no data, but the SDK's read1ByteTxRx reads its 'value' out of the CRC, and the bus took it
    whatever the status's error byte said: an overloaded servo whose status read was refused (a CRC error, as on a
    noisy bus) was reported with causes it never had (0x5b for servo 3: input voltage, motor encoder, electrical
    shock; 0x5e for an instruction error). A CRC refusal (the servo heard a garbled instruction) is retried, as
    every exchange's is; another refusal is not (repeated, it changes nothing); a status read refused is unread, as
    one never answered is."""
    bus = make_bus(emulator, retries=1)
    emulator.faults.hardware_alert[3] = HW_OVERLOAD  # the sync read's reply flags it, then its status is read

    def refuse_status_reads() -> None:  # servo 3's replies from now: 1 the sync read's, 2 and 3 its status reads
        for nth in range(2, 2 + refusals):
            replace_reply(emulator, monkeypatch, 3, p.encode_status(3, p.ERR_ALERT | error, b""), nth=nth)

    refuse_status_reads()
    with pytest.raises(HardwareAlertError) as info:
        bus.read_state()
    assert info.value.hardware_error == expected
    refuse_status_reads()
    bus.read_state(allow_alerts=True)
    assert bus.alerted == {3: expected}


class TricklingLine:
    """A port on a fake clock (ms) on which ``data`` (default: a late reply of 120 bytes, six 20-byte status packets)
    arrives one byte every 0.5 ms from 10 ms after the request: a sync read's replies at a slow baud rate, through an
    adapter that passes bytes on as they come."""

    def __init__(self, data: bytes = (p.HEADER + bytes(16)) * 6) -> None:
        self.now, self.packet_start_time, self.taken, self.data = 0.0, 0.0, 0, data
        self.arrivals = [10.0 + 0.5 * i for i in range(len(data))]
        self.ser = self

    def readPort(self, length: int) -> bytes:  # noqa: N802 (SDK name)
        length = min(length, self.getBytesAvailable())
        self.taken += length
        return self.data[self.taken - length:self.taken]

    def fileno(self) -> int:
        return -1

    def _arrived(self) -> int:
        return sum(t <= self.now for t in self.arrivals)

    def getBytesAvailable(self) -> int:  # noqa: N802 (SDK name)
        return self._arrived() - self.taken

    def clearPort(self) -> None:  # noqa: N802 (SDK name)
        self.taken = self._arrived()

    def getCurrentTime(self) -> float:  # noqa: N802 (SDK name)
        return self.now

    def select(self, read: list, write: list, error: list, timeout_s: float) -> tuple[list, list, list]:
        if not self.getBytesAvailable():  # wait for the next byte, or out the timeout
            coming = [t for t in self.arrivals if t > self.now]
            self.now = min(coming[0], self.now + timeout_s * 1000) if coming else self.now + timeout_s * 1000
        return (read if self.getBytesAvailable() else [], [], [])

    def sleep(self, seconds: float) -> None:
        self.now += seconds * 1000


def test_the_drain_after_a_timeout_drops_a_reply_that_trickles_in_whole(monkeypatch) -> None:
    """The drain times a late reply's first byte by waking as it comes; it had woken so for every byte after it too,
    its 20 rounds spent on some 20 bytes of 120, the rest left on the line to be read as the answer to the next
    request. The whole reply is dropped, and said late from its first byte."""
    import types

    import hardware.dynamixel.bus as bus_module

    line = TricklingLine()
    monkeypatch.setattr(bus_module, "select", types.SimpleNamespace(select=line.select))
    monkeypatch.setattr(bus_module, "time", types.SimpleNamespace(sleep=line.sleep))
    bus = DynamixelBus.__new__(DynamixelBus)
    bus._port, bus.timeout_ms = line, 20.0
    assert bus._drain() == (10.0, 0)  # (when, and whose: servo 0's)
    assert line.taken == 120 and not line.getBytesAvailable()


def test_a_late_reply_landing_as_the_drain_looks_is_seen_not_flushed(emulator, make_bus, monkeypatch) -> None:
    """The drain counted the bytes waiting, read them, then flushed the line: a reply landing between the count and
    the flush was dropped unseen, and the drain, quiet after it, said no late reply came (CI: "no reply from servo 2
    ... replies are being lost", where servo 1's late reply had come). Here servo 1's status lands on the real line
    right after the drain's first two counts, which still say 0; it is read, and said as servo 1's."""
    import os

    bus = make_bus(emulator)
    port, counted = bus._port, []
    real_count = port.getBytesAvailable

    def count_then_land() -> int:
        counted.append(None)
        if len(counted) == 1:
            os.write(emulator._master, p.encode_status(1, 0, b"\x01"))
            deadline = time.monotonic() + 5
            while not real_count() and time.monotonic() < deadline:  # (on the line: a flush now drops it)
                time.sleep(0.001)
        return 0 if len(counted) <= 2 else real_count()

    monkeypatch.setattr(port, "getBytesAvailable", count_then_land)
    port.setPacketTimeout(0)
    late = bus._drain()
    assert late is not None and late[1] == 1 and real_count() == 0


def test_a_stray_byte_after_a_timeout_is_no_late_reply(monkeypatch) -> None:
    """Any byte the drain saw after a timeout had been said as a late reply ('late reply from servo 1 ... check the
    adapter's latency timer'), a noise byte on a bus whose servo never answered too; a late reply is one that holds
    a status packet's header, and the byte is dropped all the same."""
    import types

    import hardware.dynamixel.bus as bus_module

    status_of_3 = b"\x00" + p.HEADER + bytes([3]) + bytes(6)  # a noise byte, then servo 3's status
    for data, late in ((b"\x00", None), (b"\xff\x00\xfe", None), (status_of_3, (10.0, 3))):
        line = TricklingLine(data)
        monkeypatch.setattr(bus_module, "select", types.SimpleNamespace(select=line.select))
        monkeypatch.setattr(bus_module, "time", types.SimpleNamespace(sleep=line.sleep))
        bus = DynamixelBus.__new__(DynamixelBus)
        bus._port, bus.timeout_ms = line, 20.0
        assert bus._drain() == late, data
        assert line.taken == len(data)
