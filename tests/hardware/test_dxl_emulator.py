"""The emulator as a device: the vendor SDK talks to it over the pty, byte for byte."""

from __future__ import annotations

import signal
import subprocess
import sys
import termios
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import dynamixel_sdk as sdk
import pytest

from hardware.dynamixel import protocol as p
from hardware.dynamixel.bus import SelectPortHandler
from hardware.dynamixel.control_table import HW_OVERHEATING, HW_OVERLOAD, TABLE, rad_to_ticks, ticks_to_rad
from hardware.dynamixel.emulator import DynamixelEmulator, Faults, PhysicsOverrides

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


def test_broadcast_ping_gets_every_servo(emulator, connect) -> None:
    found, result = PH.broadcastPing(connect(emulator))
    assert result == sdk.COMM_SUCCESS and sorted(found) == [1, 2, 3, 4]
    assert all(model == 1020 for model, _firmware in found.values())


def test_wrong_baud_rate_gets_no_reply(emulator, connect) -> None:
    port = connect(emulator, baudrate=57_600)
    assert PH.ping(port, 1)[1] == sdk.COMM_RX_TIMEOUT


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
    port = connect(emulator)
    assert write(port, 1, "Return_Delay_Time", 0) == OK
    fast = _min_ping_ms(port)
    assert write(port, 1, "Return_Delay_Time", 254) == OK  # 508 us
    slow = _min_ping_ms(port)
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
    time.sleep(0.1)
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
    time.sleep(0.3)
    position, *_ = read(port, 1, "Present_Position")
    assert ticks_to_rad(position) == pytest.approx(0.8, abs=0.05)
    assert emulator.data.time >= 0.3 - 1e-9


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
    assert "--mass-scale scales the MJCF's values and must be > 0, got -1" in capsys.readouterr().err
