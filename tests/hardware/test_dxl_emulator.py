"""The emulator as a device: the vendor SDK talks to it over the pty, byte for byte."""

from __future__ import annotations

import math
import signal
import subprocess
import sys
import termios
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import dynamixel_sdk as sdk
import pytest
import yaml

from hardware.dynamixel import protocol as p
from hardware.dynamixel.bus import SelectPortHandler
from hardware.dynamixel.calibration import RobotConfig
from hardware.dynamixel.control_table import (CURRENT_UNIT_A, HW_OVERHEATING, HW_OVERLOAD, RAD_S_PER_VELOCITY_UNIT,
                                              TABLE, rad_to_ticks, ticks_to_rad)
from hardware.dynamixel.emulator import (NO_LOAD_SPEED, DynamixelEmulator, Faults, PhysicsOverrides,
                                         motor_torque_bounds)

REPO = Path(__file__).resolve().parents[2]
PH = sdk.PacketHandler(2.0)
OK = (sdk.COMM_SUCCESS, 0)


@pytest.fixture
def connect() -> Iterator[Callable[..., SelectPortHandler]]:
    """Open SDK ports on emulators (10 ms reply timeout); closed at test end."""
    ports: list[SelectPortHandler] = []

    def open_port(emulator: DynamixelEmulator, baudrate: int = 1_000_000) -> SelectPortHandler:
        port = SelectPortHandler(emulator.port, timeout_ms=60)  # generous: the emulator shares this process
        assert port.openPort() and port.setBaudRate(baudrate)
        ports.append(port)
        return port

    yield open_port
    for port in ports:
        try:
            port.closePort()
        except OSError:
            pass


def write(port: SelectPortHandler, servo_id: int, name: str, value: int) -> tuple[int, int]:
    item = TABLE[name]
    return PH.writeTxRx(port, servo_id, item.address, item.size, list(item.to_bytes(value)))


def read(port: SelectPortHandler, servo_id: int, name: str) -> tuple[int, int, int]:
    item = TABLE[name]
    data, result, error = PH.readTxRx(port, servo_id, item.address, item.size)
    return (item.from_bytes(bytes(data)) if result == sdk.COMM_SUCCESS else None), result, error


def goal(port: SelectPortHandler, ticks: dict[int, int]) -> None:
    """Sync-write goal ticks and return once the emulator has handled them."""
    group = sdk.GroupSyncWrite(port, PH, TABLE["Goal_Position"].address, 4)
    for servo_id, value in ticks.items():
        group.addParam(servo_id, list(TABLE["Goal_Position"].to_bytes(value)))
    assert group.txPacket() == sdk.COMM_SUCCESS
    assert PH.ping(port, next(iter(ticks)))[1] == sdk.COMM_SUCCESS  # a sync write has no reply: wait for it here


def test_ping_reports_model_and_unknown_ids_stay_silent(make_emulator, connect) -> None:
    port = connect(make_emulator(model_number=1060))
    assert [PH.ping(port, i) for i in (1, 4)] == [(1060, sdk.COMM_SUCCESS, 0)] * 2
    assert PH.ping(port, 7)[1] == sdk.COMM_RX_TIMEOUT


def test_servos_of_several_models_and_an_id_already_taken(make_emulator, connect) -> None:
    """Each servo answers with its own model (a robot YAML may mix them: the emulator had given all the
    first's); an ID another servo has is refused (the other had vanished from the bus)."""
    port = connect(make_emulator(model_number={1: 1020, 2: 1020, 3: 1020, 4: 1200}))
    assert [PH.ping(port, i)[0] for i in (1, 4)] == [1020, 1200]
    assert write(port, 2, "ID", 3) == (sdk.COMM_SUCCESS, p.ERR_DATA_RANGE)
    assert [PH.ping(port, i)[1] for i in (2, 3)] == [sdk.COMM_SUCCESS] * 2
    write(port, 2, "ID", 9)  # a free id is taken (the status comes back from the new id, which the SDK refuses)
    assert PH.ping(port, 9)[1] == sdk.COMM_SUCCESS and PH.ping(port, 2)[1] == sdk.COMM_RX_TIMEOUT


def test_broadcast_ping_gets_every_servo(emulator, connect) -> None:
    found, result = PH.broadcastPing(connect(emulator))
    assert result == sdk.COMM_SUCCESS and sorted(found) == [1, 2, 3, 4]
    assert all(model == 1020 for model, _firmware in found.values())


def test_wrong_baud_rate_gets_no_reply(emulator, connect) -> None:
    port = connect(emulator, baudrate=57_600)
    assert PH.ping(port, 1)[1] == sdk.COMM_RX_TIMEOUT


@pytest.mark.parametrize("code, baudrate", [(0, 9_600), (4, 2_000_000), (6, 4_000_000), (7, 4_500_000)])
def test_a_baud_rate_write_moves_the_servo_to_that_rate(emulator, connect, code, baudrate) -> None:
    """The e-Manual's Baud Rate(8) for the XM430/XL430: 0-6 are 9600 bps .. 4 Mbps, and 7 is 4.5 Mbps. Code 7 was
    taken (no range error) but left the servo hearing no host at any rate: no termios constant names 4.5 Mbps, so
    the emulator neither listed it nor read a host's custom rate off the pty."""
    port = connect(emulator)
    assert write(port, 2, "Baud_Rate", code) == OK  # (the status still comes at the old rate)
    assert PH.ping(port, 2)[1] == sdk.COMM_RX_TIMEOUT and PH.ping(port, 1)[1] == sdk.COMM_SUCCESS
    port.closePort()
    moved = connect(emulator, baudrate=baudrate)
    assert PH.ping(moved, 2) == (1020, sdk.COMM_SUCCESS, 0) and PH.ping(moved, 1)[1] == sdk.COMM_RX_TIMEOUT
    assert read(moved, 2, "Baud_Rate") == (code, *OK)
    assert write(moved, 2, "Baud_Rate", 3) == OK  # and back
    moved.closePort()
    assert PH.ping(connect(emulator), 2)[1] == sdk.COMM_SUCCESS


def test_an_xl330_takes_no_baud_rate_above_4_mbps(make_emulator, connect) -> None:
    """The XL330-M288's Baud Rate(8) stops at 6 (4 Mbps): 7 is out of its range, as the e-Manual lists it. It had
    been taken, and the servo moved to a rate it does not run at."""
    emulator = make_emulator(model_number=1200)
    port = connect(emulator)
    assert write(port, 2, "Baud_Rate", 7) == (sdk.COMM_SUCCESS, p.ERR_DATA_RANGE)
    assert write(port, 2, "Baud_Rate", 6) == OK
    with pytest.raises(ValueError, match=r"servo 1 \(model number 1200\) tops out at 4000000 bps, below baudrate "
                                         "4500000"):
        make_emulator(model_number=1200, baudrate=4_500_000)


def test_an_emulator_serves_at_4_5_mbps(make_emulator, connect) -> None:
    """4.5 Mbps has no termios constant: the pty is set to it as a custom rate, as pyserial sets a host's."""
    emulator = make_emulator(baudrate=4_500_000)
    assert emulator.register(1, "Baud_Rate") == 7
    assert PH.ping(connect(emulator, baudrate=4_500_000), 1) == (1020, sdk.COMM_SUCCESS, 0)
    assert PH.ping(connect(emulator), 1)[1] == sdk.COMM_RX_TIMEOUT


def test_control_table_defaults_and_limits_from_the_mjcf(emulator, connect) -> None:
    port = connect(emulator)
    assert read(port, 2, "ID") == (2, *OK)
    assert read(port, 2, "Position_P_Gain") == (800, *OK)
    assert read(port, 2, "Return_Delay_Time") == (250, *OK)
    assert read(port, 2, "Max_Position_Limit")[0] == rad_to_ticks(1.7)
    assert read(port, 2, "Min_Position_Limit")[0] == rad_to_ticks(-1.7)


def test_write_errors_eeprom_locked_while_torque_on(emulator, connect) -> None:
    port = connect(emulator)
    assert write(port, 1, "Return_Delay_Time", 0) == OK  # EEPROM, torque off: fine
    assert write(port, 1, "Torque_Enable", 1) == OK
    assert write(port, 1, "Return_Delay_Time", 10) == (sdk.COMM_SUCCESS, p.ERR_ACCESS)
    assert write(port, 1, "Velocity_Limit", 100) == (sdk.COMM_SUCCESS, p.ERR_ACCESS)
    assert write(port, 1, "Torque_Enable", 0) == OK
    assert write(port, 1, "Velocity_Limit", 100) == OK
    assert read(port, 1, "Velocity_Limit") == (100, *OK)
    assert write(port, 1, "Torque_Enable", 2) == (sdk.COMM_SUCCESS, p.ERR_DATA_RANGE)
    assert write(port, 1, "Present_Position", 0) == (sdk.COMM_SUCCESS, p.ERR_ACCESS)  # read-only
    assert write(port, 1, "Goal_Position", 4000) == (sdk.COMM_SUCCESS, p.ERR_DATA_LIMIT)  # j1 range +-2.6 rad
    assert PH.writeTxRx(port, 1, 117, 2, [0, 0]) == (sdk.COMM_SUCCESS, p.ERR_DATA_LENGTH)  # half an item


def test_goals_move_the_joints_in_lockstep(emulator, connect) -> None:
    port = connect(emulator)
    for i in (1, 2, 3, 4):
        assert write(port, i, "Torque_Enable", 1) == OK
    target = {1: 0.5, 2: -0.2, 3: 0.4, 4: 0.3}
    for _ in range(50):  # 1 s of simulated time at step_dt 0.02
        goal(port, {i: rad_to_ticks(q) for i, q in target.items()})
    state = emulator.state()
    for i, q in target.items():
        assert state[i].goal == pytest.approx(q, abs=1e-3)
        assert state[i].position == pytest.approx(q, abs=0.05)  # j2/j3 sag a little under gravity
    reader = sdk.GroupSyncRead(port, PH, 128, 8)
    for i in target:
        reader.addParam(i)
    assert reader.txRxPacket() == sdk.COMM_SUCCESS
    assert ticks_to_rad(reader.getData(1, 132, 4)) == pytest.approx(0.5, abs=0.01)


def test_bulk_read_and_bulk_write(emulator, connect) -> None:
    port = connect(emulator)
    writer = sdk.GroupBulkWrite(port, PH)
    writer.addParam(1, TABLE["LED"].address, 1, [1])
    writer.addParam(3, TABLE["Position_P_Gain"].address, 2, [0x40, 0x06])  # 1600
    assert writer.txPacket() == sdk.COMM_SUCCESS
    reader = sdk.GroupBulkRead(port, PH)
    reader.addParam(1, TABLE["LED"].address, 1)
    reader.addParam(3, TABLE["Position_P_Gain"].address, 2)
    assert reader.txRxPacket() == sdk.COMM_SUCCESS
    assert reader.getData(1, TABLE["LED"].address, 1) == 1
    assert reader.getData(3, TABLE["Position_P_Gain"].address, 2) == 1600


def test_status_return_level(emulator, connect) -> None:
    port = connect(emulator)
    # Level 1: reads (and pings) answer, writes are applied but silent.
    assert write(port, 2, "Status_Return_Level", 1)[0] == sdk.COMM_RX_TIMEOUT
    assert write(port, 2, "LED", 1)[0] == sdk.COMM_RX_TIMEOUT
    assert read(port, 2, "LED") == (1, *OK)
    # Level 0: only pings answer.
    PH.write1ByteTxOnly(port, 2, TABLE["Status_Return_Level"].address, 0)
    assert read(port, 2, "LED")[1] == sdk.COMM_RX_TIMEOUT
    assert PH.ping(port, 2) == (1020, sdk.COMM_SUCCESS, 0)
    assert emulator.register(2, "Status_Return_Level") == 0


def _min_ping_ms(port: SelectPortHandler, n: int = 10) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        assert PH.ping(port, 1)[1] == sdk.COMM_SUCCESS
        times.append(time.perf_counter() - start)
    return min(times) * 1e3


def test_return_delay_time_is_honoured(emulator, connect) -> None:
    """A ping takes Return_Delay_Time longer. Measured in alternating rounds, each setting's fastest ping: load
    only adds time, and a load that came during one setting's round alone (CI beside other work once read the
    undelayed ping's best of 10 as 0.65 ms) is met by the rounds after it."""
    port = connect(emulator)
    fast = slow = math.inf
    for _ in range(5):
        assert write(port, 1, "Return_Delay_Time", 0) == OK
        fast = min(fast, _min_ping_ms(port))
        assert write(port, 1, "Return_Delay_Time", 254) == OK  # 508 us
        slow = min(slow, _min_ping_ms(port))
        if slow - fast > 0.3:
            break
    assert slow >= 0.508
    assert slow - fast > 0.3


def test_gains_map_to_the_actuator_and_torque_off_is_passive(make_emulator, connect) -> None:
    emulator = make_emulator(physics=PhysicsOverrides(gain_scale=0.5))
    port = connect(emulator)
    assert emulator.state()[2].kp == 0.0  # torque off at power-up
    assert write(port, 2, "Torque_Enable", 1) == OK
    assert (emulator.state()[2].kp, emulator.state()[2].kv) == pytest.approx((3.0, 0.1))  # MJCF 6 / 0.2, halved
    assert write(port, 2, "Position_P_Gain", 1600) == OK
    assert write(port, 2, "Position_D_Gain", 80) == OK
    assert (emulator.state()[2].kp, emulator.state()[2].kv) == pytest.approx((6.0, 0.2))
    assert write(port, 2, "Torque_Enable", 0) == OK
    emulator.set_joint_positions({2: 0.5})
    for _ in range(10):
        goal(port, {2: rad_to_ticks(0.5)})
    assert emulator.state()[2].position > 0.6  # torque off: the shoulder falls under gravity


def test_heavier_reality_sags_more(make_emulator, connect) -> None:
    def sag(mass_scale: float) -> float:
        emulator = make_emulator(physics=PhysicsOverrides(mass_scale=mass_scale))
        port = connect(emulator)
        emulator.set_joint_positions({2: 0.6})
        assert write(port, 2, "Torque_Enable", 1) == OK
        for _ in range(50):
            goal(port, {2: rad_to_ticks(0.6)})
        return emulator.state()[2].position - 0.6

    assert sag(2.0) > 1.5 * sag(1.0) > 0


def test_actuation_latency_delays_the_goal(make_emulator, connect) -> None:
    emulator = make_emulator(physics=PhysicsOverrides(actuation_latency=0.1))
    port = connect(emulator)
    assert write(port, 1, "Torque_Enable", 1) == OK
    for _ in range(4):  # 80 ms simulated: the goal has not reached the motor yet
        goal(port, {1: rad_to_ticks(1.0)})
    assert abs(emulator.state()[1].position) < 1e-3
    for _ in range(20):
        goal(port, {1: rad_to_ticks(1.0)})
    assert emulator.state()[1].position > 0.5


def test_hardware_alert_sets_the_alert_bit_until_rebooted(make_emulator, connect) -> None:
    emulator = make_emulator(faults=Faults(hardware_alert={3: HW_OVERLOAD | HW_OVERHEATING}))
    port = connect(emulator)
    assert write(port, 3, "Torque_Enable", 1) == (sdk.COMM_SUCCESS, p.ERR_ALERT)
    assert read(port, 3, "Hardware_Error_Status") == (HW_OVERLOAD | HW_OVERHEATING, sdk.COMM_SUCCESS, p.ERR_ALERT)
    assert not emulator.state()[3].torque_enabled  # overload is a shutdown fault
    assert read(port, 2, "LED") == (0, *OK)  # the other servos are fine
    emulator.faults.hardware_alert.clear()
    assert PH.reboot(port, 3) == (sdk.COMM_SUCCESS, p.ERR_ALERT)  # answered before rebooting
    assert read(port, 3, "Hardware_Error_Status") == (0, *OK)


def test_bus_watchdog_stops_the_servo_when_the_host_goes_quiet(emulator, connect) -> None:
    port = connect(emulator)
    assert write(port, 1, "Torque_Enable", 1) == OK
    assert write(port, 1, "Bus_Watchdog", 2) == OK  # 40 ms
    goal(port, {1: rad_to_ticks(1.0)})
    # waited for: a 0.1 s sleep left the emulator's thread 60 ms past the window to wake in, which load outlasts
    deadline = time.monotonic() + 10
    while not emulator.state()[1].watchdog_tripped and time.monotonic() < deadline:
        time.sleep(0.005)
    assert emulator.state()[1].watchdog_tripped
    held = emulator.state()[1].goal
    assert held != pytest.approx(1.0, abs=1e-3)  # stopped where it was
    assert read(port, 1, "Bus_Watchdog") == (0xFF, *OK)
    assert write(port, 1, "Goal_Position", rad_to_ticks(0.5)) == (sdk.COMM_SUCCESS, p.ERR_DATA_RANGE)
    assert write(port, 1, "Bus_Watchdog", 0) == OK  # reset
    assert write(port, 1, "Goal_Position", rad_to_ticks(0.5)) == OK
    assert emulator.state()[1].goal == pytest.approx(0.5, abs=1e-3)


def test_realtime_physics_follows_the_wall_clock(make_emulator, connect) -> None:
    emulator = make_emulator(realtime=True)
    port = connect(emulator)
    assert write(port, 1, "Torque_Enable", 1) == OK
    assert write(port, 1, "Goal_Position", rad_to_ticks(0.8)) == OK
    time.sleep(0.5)  # at most 4.8 rad/s (the motor's no-load speed), then the PD's overshoot settles by ~0.35 s
    position, *_ = read(port, 1, "Present_Position")
    assert ticks_to_rad(position) == pytest.approx(0.8, abs=0.05)
    assert emulator.data.time >= 0.5 - 1e-9


def test_disconnect_closes_the_line(emulator, connect) -> None:
    port = connect(emulator)
    assert PH.ping(port, 1)[1] == sdk.COMM_SUCCESS
    emulator.disconnect()
    with pytest.raises((OSError, termios.error)):  # pyserial's tcflush raises termios.error
        PH.ping(port, 1)
    assert not emulator.running


def test_garbage_and_corrupt_instructions_are_ignored(emulator, connect) -> None:
    port = connect(emulator)
    port.writePort(b"\xff\xff\xfd\x00\x01\x50\x00garbage")  # a header with a length that never comes
    time.sleep(0.03)  # the emulator resyncs after the line goes quiet
    assert PH.ping(port, 1)[1] == sdk.COMM_SUCCESS
    bad = bytearray(p.encode_instruction(1, p.PING))
    bad[-1] ^= 0xFF
    port.writePort(bytes(bad))
    assert PH.ping(port, 1)[1] == sdk.COMM_SUCCESS
    assert emulator.parse_errors >= 1


def test_main_serves_the_robot_config(connect) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "hardware.dynamixel.emulator"],
        stdout=subprocess.PIPE, text=True, cwd=REPO,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("serving Dynamixel arm on /dev/pts/") and "(ids 1-4, 1000000 baud)" in line
        path = line.split(" on ")[1].split(" ")[0]
        port = SelectPortHandler(path, timeout_ms=200)
        assert port.openPort()
        assert PH.ping(port, 4) == (1020, sdk.COMM_SUCCESS, 0)
        port.closePort()
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0


def test_unknown_joint_is_an_error() -> None:
    with pytest.raises(ValueError, match="joint 'elbow'"):
        DynamixelEmulator(REPO / "sims/assets/dxl_arm.xml", {1: "elbow"})


def test_readings_saturate_like_the_servo_sensor() -> None:
    from hardware.dynamixel.emulator import _saturate

    assert _saturate(10**9, 2) == 32767 and _saturate(-(10**9), 2) == -32767 and _saturate(5, 4) == 5


def test_a_reality_gap_that_is_no_robot_is_refused(capsys):
    from robolearn.cli import main

    assert main(["emulate", "dynamixel", "--mass-scale", "-1"]) == 2  # the simulator refuses it too
    assert "mass_scale (--mass-scale) scales the MJCF's values and must be a finite number > 0, got -1" in \
        capsys.readouterr().err
    assert main(["emulate", "dynamixel", "--mass-scale", "inf"]) == 2  # (it had overflowed with a numpy warning)
    assert "must be a finite number > 0, got inf" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"actuation_latency \(--latency\) must be a finite number >= 0 s, got -0.01"):
        PhysicsOverrides(actuation_latency=-0.01)  # from Python, named as Python takes it (it had said --latency)
    with pytest.raises(ValueError, match=r"must be a finite number >= 0 s, got inf"):
        PhysicsOverrides(actuation_latency=math.inf)


# ---- lockstep timing -------------------------------------------------------------------------------


def arm_yaml(tmp_path: Path, **top: object) -> Path:
    """The shipped arm's robot YAML with top-level keys added."""
    data = yaml.safe_load((REPO / "configs/robots/dxl_arm.yaml").read_text())
    path = tmp_path / "arm.yaml"
    path.write_text(yaml.safe_dump({**data, **top}, sort_keys=False))
    return path


def physics_per_goal_write(emulator: DynamixelEmulator, connect: Callable[..., SelectPortHandler]) -> list[float]:
    """Simulated seconds each of three goal writes advances."""
    with emulator:
        port, times = connect(emulator), [emulator.data.time]
        for _ in range(3):
            goal(port, {1: rad_to_ticks(0.0)})
            times.append(emulator.data.time)
    return [b - a for a, b in zip(times, times[1:])]


def test_lockstep_advances_the_robot_configs_control_dt_or_the_override(tmp_path, connect) -> None:
    """A 100 Hz arm's lockstep once advanced 20 ms per goal write: its physics ran twice as fast as the controller."""
    fast = RobotConfig.load(arm_yaml(tmp_path, control_dt=0.01))
    assert physics_per_goal_write(DynamixelEmulator.from_config(fast, lockstep=True), connect) == \
        pytest.approx([0.01] * 3, abs=1e-12)
    assert physics_per_goal_write(DynamixelEmulator.from_config(fast, lockstep=True, step_dt=0.004), connect) == \
        pytest.approx([0.004] * 3, abs=1e-12)
    plain = RobotConfig.load(REPO / "configs/robots/dxl_arm.yaml")  # no control_dt: arm_reach's 0.02
    assert physics_per_goal_write(DynamixelEmulator.from_config(plain, lockstep=True), connect) == \
        pytest.approx([0.02] * 3, abs=1e-12)


@pytest.mark.parametrize("robot", ["dxl_arm", REPO / "configs/robots/dxl_arm.yaml"])
def test_from_config_takes_a_robot_as_deploy_does(robot, connect) -> None:
    """A name or a YAML path, as deploy(run, "dxl_arm") takes it: "'str' object has no attribute 'calibration'"."""
    emulator = DynamixelEmulator.from_config(robot, lockstep=True)
    assert sorted(emulator.state()) == [1, 2, 3, 4]
    assert physics_per_goal_write(emulator, connect) == pytest.approx([0.02] * 3, abs=1e-12)


@pytest.mark.parametrize("argv, error", [
    (["--step-dt", "0"], "must be a positive, finite number of seconds, got 0.0"),
    (["--step-dt", "-0.02"], "must be a positive, finite number of seconds, got -0.02"),
    (["--step-dt", "nan"], "must be a positive, finite number of seconds, got nan"),
    (["--step-dt", "inf"], "must be a positive, finite number of seconds, got inf"),
    (["--step-dt", "0.015"], "a lockstep step of 0.015 s is not a whole number of the model's 0.002 s timesteps: "
                             "set --step-dt or the robot config's control_dt to one, e.g. 0.014 or 0.016 s"),
    (["--step-dt", "0.0005"], "e.g. 0.002 s"),
    (["--robot", "CONFIG"], "a lockstep step of 0.015 s is not a whole number"),  # the config's control_dt
])
def test_a_bad_lockstep_step_is_refused(tmp_path, capsys, monkeypatch, argv: list[str], error: str) -> None:
    from robolearn.cli import main

    monkeypatch.setattr("hardware.dynamixel.emulator._wait_for_ctrl_c", lambda: None)  # served: return 0, not hang
    argv = [str(arm_yaml(tmp_path, control_dt=0.015)) if word == "CONFIG" else word for word in argv]
    assert main(["emulate", "dynamixel", "--lockstep", *argv]) == 2
    assert error in capsys.readouterr().err


def test_step_dt_without_lockstep_is_refused(capsys, monkeypatch) -> None:
    from robolearn.cli import main

    monkeypatch.setattr("hardware.dynamixel.emulator._wait_for_ctrl_c", lambda: None)
    assert main(["emulate", "dynamixel", "--step-dt", "0.01"]) == 2
    assert "--step-dt sets the physics per goal write in lockstep: add --lockstep" in capsys.readouterr().err


def test_cli_step_dt_reaches_the_emulator_and_its_serving_line(tmp_path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "robolearn", "emulate", "dynamixel", "--lockstep", "--step-dt",
                             "0.004", "--robot", str(arm_yaml(tmp_path, control_dt=0.01))],
                            stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        line = proc.stdout.readline()
        assert "(ids 1-4, 1000000 baud); lockstep: 0.004 s of physics per goal write; Ctrl+C" in line, line
        port = SelectPortHandler(line.split()[4], timeout_ms=200)
        assert port.openPort()
        for _ in range(5):
            goal(port, {1: rad_to_ticks(0.0)})
        assert read(port, 1, "Realtime_Tick")[0] in (19, 20)  # 20 ms in whole ms (float time may read 19.999...)
        port.closePort()
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0


# ---- the motor: torque falls with speed ------------------------------------------------------------


def test_torque_bounds_follow_the_dc_motor_line() -> None:
    w0 = NO_LOAD_SPEED
    for speed, (low, high) in {0.0: (-4.1, 4.1), w0 / 2: (-4.1, 2.05), w0: (-4.1, 0.0), -w0: (0.0, 4.1),
                               1.5 * w0: (-4.1, -2.05), 3 * w0: (-4.1, -4.1)}.items():
        assert motor_torque_bounds(speed, 4.1, w0) == pytest.approx((low, high)), speed


def peak_speed(emulator: DynamixelEmulator, connect: Callable[..., SelectPortHandler]) -> float:
    """The base joint's fastest |velocity| over 0.8 s after a 4.4 rad goal step (one physics step per write)."""
    port = connect(emulator)
    assert write(port, 1, "Return_Delay_Time", 0) == OK
    emulator.set_joint_positions({1: -2.0})
    assert write(port, 1, "Torque_Enable", 1) == OK
    peak = 0.0
    for _ in range(400):
        goal(port, {1: rad_to_ticks(2.4)})
        peak = max(peak, abs(emulator.state()[1].velocity))
    return peak


def test_a_large_step_never_beats_the_no_load_speed(make_emulator, connect) -> None:
    """The bare position actuator swung the base at 27 rad/s; an XM430-W350 turns at most 46 rpm (4.82 rad/s)."""
    assert peak_speed(make_emulator(step_dt=0.002, no_load_speed=math.inf), connect) > 3 * NO_LOAD_SPEED
    limited = peak_speed(make_emulator(step_dt=0.002), connect)
    assert 0.85 * NO_LOAD_SPEED < limited <= NO_LOAD_SPEED * 1.01  # damping keeps it a little below


@pytest.mark.parametrize("no_load_speed", [NO_LOAD_SPEED, math.inf])
def test_stall_torque_at_rest_falling_with_speed(make_emulator, connect, no_load_speed: float) -> None:
    emulator = make_emulator(step_dt=0.002, no_load_speed=no_load_speed)  # one physics step per goal write
    port = connect(emulator)
    assert write(port, 1, "Torque_Enable", 1) == OK
    goal(port, {1: rad_to_ticks(2.0)})  # 2 rad off: the PD asks 12 N m of a motor at rest
    stall = round(2.3 / CURRENT_UNIT_A)  # 4.1 N m draws the stall current
    assert read(port, 1, "Present_Current")[0] == stall
    for _ in range(15):
        goal(port, {1: rad_to_ticks(2.0)})
    state, current = emulator.state()[1], read(port, 1, "Present_Current")[0]
    assert state.velocity > 2.0 and state.kp * (2.0 - state.position) - state.kv * state.velocity > 4.1  # PD asks more
    if no_load_speed == math.inf:
        assert current == stall  # the bare actuator: full torque at any speed
    else:
        assert current == pytest.approx(stall * (1 - state.velocity / NO_LOAD_SPEED), abs=0.05 * stall)


# ---- Velocity_Limit and Profile_Velocity -----------------------------------------------------------


def test_profile_velocity_moves_the_goal_at_that_speed(emulator, connect) -> None:
    port = connect(emulator)
    speed = 50 * RAD_S_PER_VELOCITY_UNIT  # 1.2 rad/s
    assert write(port, 1, "Profile_Velocity", 50) == OK
    assert write(port, 1, "Torque_Enable", 1) == OK
    for n in range(1, 21):  # 0.4 s
        goal(port, {1: rad_to_ticks(1.0)})
        assert emulator.state()[1].target == pytest.approx(n * 0.02 * speed, abs=1e-9)
    assert read(port, 1, "Position_Trajectory")[0] == rad_to_ticks(0.4 * speed)
    assert emulator.state()[1].position < 0.5  # without a profile it is at 1.0 by now
    for _ in range(75):  # 1.5 s more
        goal(port, {1: rad_to_ticks(1.0)})
    assert emulator.state()[1].target == ticks_to_rad(rad_to_ticks(1.0))  # arrived: the goal, to the tick
    assert emulator.state()[1].position == pytest.approx(1.0, abs=0.02)


def test_velocity_limit_bounds_the_profile_not_the_joint(emulator, connect) -> None:
    port = connect(emulator)
    assert write(port, 1, "Velocity_Limit", 20) == OK  # 0.48 rad/s
    assert write(port, 1, "Profile_Velocity", 21) == (sdk.COMM_SUCCESS, p.ERR_DATA_LIMIT)
    assert write(port, 1, "Goal_Velocity", -21) == (sdk.COMM_SUCCESS, p.ERR_DATA_LIMIT)
    assert write(port, 1, "Goal_Velocity", -20) == OK
    assert write(port, 1, "Torque_Enable", 1) == OK
    for _ in range(10):  # 0.2 s; Profile_Velocity 0: the servo's own top speed
        goal(port, {1: rad_to_ticks(1.5)})
    assert emulator.state()[1].position > 0.5  # far beyond 0.48 rad/s
    # A profile set under a higher limit is clipped to a limit lowered later.
    assert write(port, 1, "Torque_Enable", 0) == OK
    assert write(port, 1, "Velocity_Limit", 200) == OK
    assert write(port, 1, "Profile_Velocity", 100) == OK
    assert write(port, 1, "Velocity_Limit", 20) == OK
    assert write(port, 1, "Torque_Enable", 1) == OK
    start = emulator.state()[1].target
    for _ in range(10):
        goal(port, {1: rad_to_ticks(-1.0)})
    assert start - emulator.state()[1].target == pytest.approx(0.2 * 20 * RAD_S_PER_VELOCITY_UNIT, abs=1e-9)


def test_starting_a_started_emulator_keeps_its_one_pty_and_thread() -> None:
    """`with emulator.start():` had opened a second pty and left the first one's thread and four fds behind."""
    import os
    import threading

    emulator = DynamixelEmulator(REPO / "sims/assets/dxl_arm.xml", {1: "j1"}, realtime=False)
    fds, threads = len(os.listdir("/proc/self/fd")), threading.active_count()
    with emulator.start() as again:
        assert again is emulator and threading.active_count() == threads + 1
        port = emulator.port
        assert emulator.start().port == port
    assert not emulator.running
    assert (len(os.listdir("/proc/self/fd")), threading.active_count()) == (fds, threads)


def test_an_operating_mode_that_is_no_mode_is_refused(emulator, connect) -> None:
    """X-series modes are 0, 1, 3, 4, 5 and 16: 2 had been taken (and run as position mode)."""
    port = connect(emulator)
    for mode in (2, 6, 15):
        assert write(port, 1, "Operating_Mode", mode) == (sdk.COMM_SUCCESS, p.ERR_DATA_RANGE)
    assert write(port, 1, "Operating_Mode", 4) == OK and emulator.register(1, "Operating_Mode") == 4


def test_a_write_to_an_address_no_item_has_is_an_access_error(emulator, connect) -> None:
    """Addresses 14..19 and 66..67 hold no item: a write there had been answered with success (nothing was
    written), as had one spanning such a gap; the e-Manual's access error is for an address "not defined"."""
    port = connect(emulator)
    assert PH.writeTxRx(port, 1, 14, 2, [0, 0]) == (sdk.COMM_SUCCESS, p.ERR_ACCESS)
    assert PH.writeTxRx(port, 1, 65, 4, [1, 0, 0, 2]) == (sdk.COMM_SUCCESS, p.ERR_ACCESS)  # LED, gap, SRL
    assert read(port, 1, "LED") == (0, *OK)  # nothing of a refused write is applied
    assert PH.writeTxRx(port, 1, 63, 3, [52, 0, 1]) == OK  # Shutdown, Torque_Enable, LED: no gap
    assert read(port, 1, "LED") == (1, *OK)


def test_a_broadcast_write_or_reboot_reaches_every_servo_and_none_answers(emulator, connect) -> None:
    """A WRITE or REBOOT to the broadcast id is carried out by every servo, with no status (the e-Manual's
    broadcast): the emulator had ignored both, so a host's broadcast torque off did nothing."""
    port = connect(emulator)
    for i in (1, 2, 3, 4):
        assert write(port, i, "Torque_Enable", 1) == OK
    assert PH.write1ByteTxRx(port, p.BROADCAST_ID, TABLE["Torque_Enable"].address, 0) == (sdk.COMM_SUCCESS, 0)
    assert PH.ping(port, 1)[1] == sdk.COMM_SUCCESS  # handled; and no status came before the ping's
    assert not any(s.torque_enabled for s in emulator.state().values())
    assert write(port, 2, "LED", 1) == OK
    replies = emulator.replies
    assert PH.reboot(port, p.BROADCAST_ID) == (sdk.COMM_SUCCESS, 0)
    assert read(port, 2, "LED") == (0, *OK)  # rebooted: RAM back to defaults
    assert emulator.replies == replies + 1  # the read's status only


def test_a_reply_the_host_has_read_is_counted(emulator, connect, monkeypatch) -> None:
    """The emulator counted a reply after writing it: a host that had read it and looked at ``replies`` at once could
    find it uncounted, the emulator's thread preempted between the write and the count (a broadcast test failed so
    under load). The emulator's thread is held up right after its write here, as a loaded machine may."""
    import os

    import hardware.dynamixel.emulator as served

    port = connect(emulator)

    class HeldAfterWrites:  # the emulator's os, whose writes return late
        def __getattr__(self, name: str):
            return getattr(os, name)

        @staticmethod
        def write(fd: int, data) -> int:
            written = os.write(fd, data)
            time.sleep(0.05)
            return written

    before = emulator.replies
    monkeypatch.setattr(served, "os", HeldAfterWrites())
    assert read(port, 2, "LED") == (0, *OK)
    assert emulator.replies == before + 1


def test_torque_stays_off_after_a_shutdown_until_a_reboot(make_emulator, connect) -> None:
    """The e-Manual's Shutdown: once a shutdown error is latched, Torque Enable cannot be set to 1 until a
    reboot. The emulator had turned torque on, and held it until the next packet cut it again: in real time
    the joint ran to its goal in between."""
    emulator = make_emulator(faults=Faults(hardware_alert={3: HW_OVERLOAD}))
    port = connect(emulator)
    assert PH.ping(port, 3)[2] == p.ERR_ALERT  # the overload is latched
    assert write(port, 3, "Torque_Enable", 1) == (sdk.COMM_SUCCESS, p.ERR_ALERT)
    state = emulator.state()[3]
    assert not state.torque_enabled and state.kp == 0.0
    emulator.faults.hardware_alert.clear()
    assert PH.reboot(port, 3)[0] == sdk.COMM_SUCCESS
    assert write(port, 3, "Torque_Enable", 1) == OK
    assert emulator.state()[3].torque_enabled


def test_sync_and_bulk_packets_whose_entries_do_not_fit_their_lengths_are_dropped_whole(emulator, connect) -> None:
    """A sync or bulk packet whose parameters are not whole entries of the lengths it declares has lost its
    framing (cut short, or a byte gained or lost). The emulator had written the entries that fit, or a cut
    entry's first bytes (a bulk write of Torque_Enable + LED cut after one byte turned torque on), and
    answered a bulk read's whole entries."""
    port = connect(emulator)

    def send(instruction: int, params: list[int]) -> None:
        port.writePort(p.encode_instruction(p.BROADCAST_ID, instruction, bytes(params)))
        assert PH.ping(port, 1) == (1020, sdk.COMM_SUCCESS, 0)  # handled; a status before it would be taken here

    send(p.BULK_WRITE, [3, 64, 0, 2, 0, 1])  # Torque_Enable + LED on servo 3, the LED byte missing
    assert not emulator.state()[3].torque_enabled
    send(p.SYNC_WRITE, [65, 0, 1, 0, 1, 1, 2, 1, 3])  # LED=1 on 1 and 2, then an id without its byte
    assert [read(port, i, "LED")[0] for i in (1, 2)] == [0, 0]
    send(p.BULK_READ, [1, 65, 0, 1, 0, 2, 65, 0])  # a second entry cut short: no status at all
    send(p.SYNC_WRITE, [65, 0, 1, 0, 1, 1, 2, 1])  # whole entries: written
    assert [read(port, i, "LED")[0] for i in (1, 2)] == [1, 1]


# ---- faults from the command line ------------------------------------------------------------------


@pytest.mark.parametrize("fault, error", [
    ("drop_reply=1.5", "--fault drop_reply=1.5: drop_reply is a probability, from 0 to 1, got 1.5"),
    ("drop_reply=often", "--fault drop_reply=often: drop_reply is a probability, from 0 to 1, got 'often'"),
    ("drop_next=-1", "--fault drop_next=-1: drop_next is a number of status packets, a whole number >= 0, got -1"),
    ("reply_latency=inf", "reply_latency is seconds, a finite number >= 0, got inf"),
    ("drop=0.3", "--fault drop=0.3: no fault 'drop'; the faults: drop_reply (a probability, from 0 to 1), "),
    ("drop_reply", "--fault drop_reply: give a fault as NAME=VALUE, e.g. drop_reply=0.3"),
])
def test_a_bad_fault_is_a_one_line_error_naming_it(capsys, monkeypatch, fault: str, error: str) -> None:
    from robolearn.cli import main

    monkeypatch.setattr("hardware.dynamixel.emulator._wait_for_ctrl_c", lambda: None)  # served: return 0, not hang
    assert main(["emulate", "dynamixel", "--fault", fault]) == 2
    err = capsys.readouterr().err
    assert error in err and err.count("\n") == 1, err


def serve_and_probe(capsys, monkeypatch, argv: list[str], probe: Callable[[SelectPortHandler], None]) -> str:
    """`robolearn emulate dynamixel ARGV`, in this process: ``probe`` talks to it at the pty its serving line names
    (where Ctrl+C would be waited for); returns that line."""
    from robolearn.cli import main

    lines: list[str] = []

    def talk() -> None:
        lines.append(capsys.readouterr().out)
        port = SelectPortHandler(lines[0].split()[4], timeout_ms=60)
        assert port.openPort()
        try:
            probe(port)
        finally:
            port.closePort()

    monkeypatch.setattr("hardware.dynamixel.emulator._wait_for_ctrl_c", talk)
    assert main(["emulate", "dynamixel", *argv]) == 0, capsys.readouterr().err
    return lines[0]


def test_a_fault_given_on_the_command_line_drops_the_replies(capsys, monkeypatch) -> None:
    results: list[int] = []
    line = serve_and_probe(capsys, monkeypatch, ["--fault", "drop_reply=1.0", "--fault", "reply_latency=0.001"],
                           lambda port: results.extend(PH.ping(port, 1)[1] for _ in range(3)))
    assert results == [sdk.COMM_RX_TIMEOUT] * 3
    assert "(ids 1-4, 1000000 baud); faults: drop_reply=1, reply_latency=0.001; Ctrl+C to stop" in line, line


def test_silent_after_drops_every_reply_from_then_on(capsys, monkeypatch) -> None:
    """A bus that goes quiet mid-run, as deploy's watchdog and blind park are to be rehearsed against."""
    results: list[int] = []

    def probe(port: SelectPortHandler) -> None:
        results.append(PH.ping(port, 1)[1])  # the first packet: the silence is timed from it
        time.sleep(0.4)
        results.extend(PH.ping(port, i)[1] for i in (1, 2))

    line = serve_and_probe(capsys, monkeypatch, ["--fault", "silent_after=0.3"], probe)
    assert results == [sdk.COMM_SUCCESS, sdk.COMM_RX_TIMEOUT, sdk.COMM_RX_TIMEOUT]
    assert "faults: silent_after=0.3 (no replies from 0.3 s after the first packet)" in line, line
