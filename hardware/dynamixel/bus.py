"""A chain of Dynamixel X-series servos in position mode, driven through the vendor SDK.

``DynamixelBus`` speaks joint radians (through a :class:`Calibration`) and hides
the SDK's integer result codes: every call is retried a bounded number of times
on transient failures (no reply, garbled reply), then raises a typed error. One
control step is one sync read (Present_Velocity + Present_Position, 8 bytes from
address 128) and one sync write (Goal_Position). ``torque_off`` and
``watchdog_tripped`` (a 1-byte sync read each) ask whether a servo stopped
following goals: torque off (a reboot, a shutdown), or its bus watchdog fired.

On connect the servos' Homing_Offset is set to 0 (calibration is applied in
software) and Return_Delay_Time to 0 (each reply comes 0.5 ms sooner than the
factory 500 us); torque goes off for these EEPROM writes only where one differs,
so an arm that a killed run left holding does not sag. Profile_Velocity is the
calibration's ``max_speed`` (0, no profile, without one): in position mode
Velocity_Limit caps no joint speed. Torque comes on at the measured pose; a limp
joint measured outside its limits is refused (torque on would snap it to the
limit at full speed), one holding torque there (sagged past it) is left holding.
The Bus_Watchdog stops the servos when this host goes quiet for longer than
``watchdog_ms``; ``enable_torque(True)`` re-arms it after a trip.

A reply that comes after its timeout would be read as the answer to the next
request (the SDK matches replies by servo id only): after a timeout the line is
drained until it is quiet (a reply seen come then, a status packet's header, is said as late, with when and
whose: not as none, which sends a person to check power and ids; a stray byte is no reply; another servo's is an
earlier request's, later than its own drain, and said so, but for a sync read's servo answering after the silent
one: that is its own reply, come late after the silence, and the silence is what is said), and a reply holding
another number of bytes than the request asked for counts as garbled (the SDK's readRx cuts a longer one to size).
A reply later than the drain after its own timeout cannot be told apart: it is taken for the answer to the next
request of that servo and length (the protocol numbers no request), or, of another length, as a garbled one.
So does a status too short to hold its error byte (``CheckedPacketHandler``).

SDK caveat (dynamixel-sdk 4.1.0): ``txPacket`` drops the result of byte stuffing,
so a payload containing FF FF FD goes out unstuffed. Nothing this driver writes
can contain it (positions are 0..4095, the other values are small).
"""

from __future__ import annotations

import fcntl
import math
import numbers
import select
import signal
import termios
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dynamixel_sdk as sdk
import numpy as np
from dynamixel_sdk.protocol2_packet_handler import (PKT_ERROR, PKT_ID, PKT_INSTRUCTION, PKT_LENGTH_H, PKT_LENGTH_L,
                                                  PKT_PARAMETER0, Protocol2PacketHandler)
from dynamixel_sdk.robotis_def import INST_PING, INST_READ, INST_REBOOT, INST_WRITE

from hardware.safety import add_to_message, outside_limits
from robolearn.runtime import stops_held

from . import protocol
from .calibration import Calibration
from .control_table import BAUD_CODES, OPERATING_MODE_POSITION, TABLE, WATCHDOG_TRIPPED, WATCHDOG_UNIT_S
from .errors import (
    CommTimeoutError,
    DynamixelError,
    HardwareAlertError,
    ModelMismatchError,
    NotConnectedError,
    OutsideLimitsError,
    PacketError,
)

STATE_ADDRESS = TABLE["Present_Velocity"].address  # 128: velocity (4) then position (4)
STATE_LENGTH = 8
GOAL = TABLE["Goal_Position"]

# A port that vanished (pty closed, USB unplugged): pyserial raises SerialException (an
# OSError) from reads and writes, but termios.error from the SDK's flush before each packet.
LINE_LOST = (OSError, termios.error)
LATE_BYTES_KEPT = 64  # the drain keeps the first bytes it drops, to tell a late reply (a status header) from noise

# What one try returns: (SDK comm result, status error byte, value, servo id it concerns).
_Attempt = tuple[int, int, Any, "int | None"]


class SelectPortHandler(sdk.PortHandler):
    """The SDK's PortHandler, but reads wait in select() instead of spinning,
    and a reply may take ``timeout_ms`` (plus its wire time) to arrive. A read of no bytes returns at once: the SDK
    asks for a negative count once a status turns out shorter than the 11 bytes it read first (LENGTH 3, garbled),
    and the select had waited out the rest of the timeout for them, each such reply taking a whole timeout."""

    def __init__(self, port_name: str, timeout_ms: float) -> None:
        super().__init__(port_name)
        self.timeout_ms = timeout_ms

    def setPacketTimeout(self, packet_length: int) -> None:  # noqa: N802 (SDK name)
        self.packet_start_time = self.getCurrentTime()
        self.packet_timeout = self.tx_time_per_byte * packet_length + self.timeout_ms

    def readPort(self, length: int) -> bytes:  # noqa: N802 (SDK name)
        if length <= 0:
            return b""
        if self.ser.in_waiting == 0:
            remaining_ms = self.packet_timeout - self.getTimeSinceStart()
            if remaining_ms > 0:
                select.select([self.ser.fileno()], [], [], remaining_ms / 1000)
        return self.ser.read(length)

    def getCFlagBaud(self, baudrate: int) -> int:  # noqa: N802 (SDK name)
        """The SDK's rates stop at 4 Mbps (it refuses the rest: "TODO: setCustomBaudrate"); X-series servos run at
        4.5 Mbps too, which pyserial sets as a custom rate."""
        return baudrate if baudrate in BAUD_CODES else super().getCFlagBaud(baudrate)


def _data_length(packet: list[int]) -> int:
    """How many data bytes a status packet says it holds (LENGTH less instruction, error and CRC); < 0: none, and
    no error byte either."""
    return (packet[PKT_LENGTH_L] | packet[PKT_LENGTH_H] << 8) - 4


class CheckedPacketHandler(Protocol2PacketHandler):
    """The SDK's Protocol 2.0 packet handler, but a status too short to hold its error byte (LENGTH < 4), or holding
    other than the data its instruction returns (PING 3 bytes, READ the length asked, WRITE and REBOOT none; a
    refusal holds none), is garbled: COMM_RX_CORRUPT, as a bad CRC is, which the bus retries, then reports.

    Why not rely on the SDK here (dynamixel-sdk 4.1.0): its rxPacket takes a status of any LENGTH whose CRC checks,
    3 and less too (once a byte follows it on the line: it reads 11 bytes before it looks at LENGTH), and the error
    byte, a ping's model number and a read's data are then taken from fixed places: out of the CRC and the byte after
    it. A ping or read answered with fewer data bytes has them read out of the CRC too, and a longer read reply is
    cut to size. A noisy line or a misbehaving servo then reads as a refusal, an alert or data that no servo sent.
    Good packets go through the SDK's own code, unchanged: only its verdict on these is overruled."""

    _DATA_RETURNED = {INST_PING: 3, INST_WRITE: 0, INST_REBOOT: 0}  # (READ: the length it asks for)

    def rxPacket(self, port: Any, fast_option: bool) -> tuple[list[int], int]:  # noqa: N802 (SDK name)
        packet, result = super().rxPacket(port, fast_option)
        if result == sdk.COMM_SUCCESS and _data_length(packet) < 0:
            result = sdk.COMM_RX_CORRUPT
        return packet, result

    def txRxPacket(self, port: Any, txpacket: list[int]) -> tuple[list[int] | None, int, int]:  # noqa: N802
        rxpacket, result, error = super().txRxPacket(port, txpacket)
        instruction = txpacket[PKT_INSTRUCTION]
        if instruction == INST_READ:
            expected = txpacket[PKT_PARAMETER0 + 2] | txpacket[PKT_PARAMETER0 + 3] << 8
        else:
            expected = self._DATA_RETURNED.get(instruction)
        if (result == sdk.COMM_SUCCESS and rxpacket is not None and expected is not None
                and not error & ~protocol.ERR_ALERT and _data_length(rxpacket) != expected):
            return rxpacket, sdk.COMM_RX_CORRUPT, 0
        return rxpacket, result, error

    def readRx(self, port: Any, dxl_id: int, length: int) -> tuple[list[int], int, int]:  # noqa: N802 (SDK name)
        """The SDK's readRx (another servo's status is passed over), but a status holding other than ``length``
        bytes is garbled unless it is a refusal (which holds none)."""
        while True:
            packet, result = self.rxPacket(port, False)
            if result != sdk.COMM_SUCCESS or packet[PKT_ID] == dxl_id:
                break
        if result != sdk.COMM_SUCCESS:
            return [], result, 0
        if packet[PKT_ERROR] & ~protocol.ERR_ALERT:  # a refusal carries no data: said as the servo's error
            return [], result, packet[PKT_ERROR]
        if _data_length(packet) != length:
            return [], sdk.COMM_RX_CORRUPT, 0
        return packet[PKT_PARAMETER0 + 1:PKT_PARAMETER0 + 1 + length], result, packet[PKT_ERROR]


@dataclass
class BusStats:
    """Telemetry: how often the bus had to retry and why."""

    retries: int = 0
    timeouts: int = 0  # attempts that got no reply
    crc_errors: int = 0  # attempts whose reply was garbled
    sync_reads: int = 0
    sync_writes: int = 0


class DynamixelBus:
    """Servos of ``calibration`` on ``port``; ``connect()`` first, or use ``with``."""

    def __init__(
        self,
        port: str,
        calibration: Calibration,
        baudrate: int = 1_000_000,
        retries: int = 3,
        timeout_ms: float = 34.0,
        watchdog_ms: int = 100,
        backoff_s: float = 0.002,
    ) -> None:
        if isinstance(retries, bool) or not isinstance(retries, numbers.Integral) or retries < 0:
            # (1.5 had failed inside connect(), said as a torque-off that failed: "cut their power")
            raise ValueError(f"retries must be a whole number >= 0, got {retries!r}")
        if baudrate not in BAUD_CODES:
            raise ValueError(f"baudrate {baudrate!r} is not one X-series servos support: {', '.join(map(str, BAUD_CODES))}")
        if not 0 <= watchdog_ms <= 127 * WATCHDOG_UNIT_S * 1000:
            raise ValueError(f"watchdog_ms must be 0 (off) .. 2540, got {watchdog_ms}")
        self.port = port
        self.calibration = calibration
        self.baudrate = baudrate
        self.retries = int(retries)
        self.timeout_ms = timeout_ms
        self.watchdog_ms = watchdog_ms
        self.backoff_s = backoff_s
        self.stats = BusStats()
        self._ids = calibration.ids
        self._port: SelectPortHandler | None = None
        self._packet = CheckedPacketHandler()
        self._sync_read: sdk.GroupSyncRead | None = None
        self._item_reads: dict[str, sdk.GroupSyncRead] = {}  # one sync read per control-table item read from all
        self.alerted: dict[int, int | None] = {}  # id -> Hardware_Error_Status (None: unread), of the last
        # read_state(allow_alerts=True)
        self._sync_write: sdk.GroupSyncWrite | None = None
        self._heard: set[int] = set()  # the servos that answered since the port opened: one silent later lost replies

    # -------------------------------------------------------------- lifecycle

    @property
    def is_connected(self) -> bool:
        return self._port is not None and self._port.is_open

    def connect(self) -> None:
        """Open the port, check every servo, configure position mode and limits, torque on."""
        if self.is_connected:
            return
        port = SelectPortHandler(self.port, self.timeout_ms)
        try:
            opened = port.openPort()
        except LINE_LOST as exc:
            if self.port.startswith("/dev/pts/"):  # a pseudo-terminal: an emulator's, gone when it stops
                hint = ("a pseudo-terminal is served by `robolearn emulate dynamixel` while it runs: start it "
                        "(again) and use the port it prints")
            else:
                hint = "check the adapter is plugged in and you may use it (Linux: the dialout group)"
            raise NotConnectedError(f"cannot open {self.port}: {exc}; {hint}") from exc
        if not opened or not port.setBaudRate(self.baudrate):
            if opened:  # opened, but not at that rate: give the port back
                port.closePort()
            raise NotConnectedError(f"cannot open {self.port} at {self.baudrate} baud: unsupported baud rate?")
        try:  # one process per bus: a second one's connect() would turn the first's torque off mid-run
            fcntl.flock(port.ser.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            port.closePort()
            raise NotConnectedError(f"{self.port} is in use by another process (another deploy or replay?); "
                                    "one process drives a bus at a time") from None
        self._port, self._heard = port, set()
        self._sync_read = self._group_read(STATE_ADDRESS, STATE_LENGTH)
        self._item_reads = {name: self._group_read(TABLE[name].address, TABLE[name].size)
                            for name in ("Torque_Enable", "Bus_Watchdog")}
        self._sync_write = sdk.GroupSyncWrite(port, self._packet, GOAL.address, GOAL.size)
        answered: set[int] = set()  # servos that answered this connect: the others had nothing turned on by it
        try:
            for motor in self.calibration.motors:
                found = self.ping(motor.id)
                answered.add(motor.id)
                if found != motor.model_number:
                    raise ModelMismatchError(motor.id, motor.model_number, found)
                self._check_status_replies(motor.id)
            differing = {motor.id: changes for motor in self.calibration.motors
                         if (changes := {name: value for name, value in self._eeprom_settings(motor).items()
                                         if self.read(motor.id, name) != value})}
            if differing:  # EEPROM takes writes with torque off only
                self.enable_torque(False)
                for servo_id, changes in differing.items():
                    for name, value in changes.items():
                        self.write(servo_id, name, value)
            for motor in self.calibration.motors:  # (RAM: another program's may be there; enable_torque rewrites
                self.write(motor.id, "Profile_Velocity", Calibration.profile_velocity_raw(motor))  # it after reboots)
            self.enable_torque(True)
        except BaseException as err:  # (a stop signal too) torque off where it may be on already, then the port back
            # A stop signal during it (a second Ctrl+C) had cut the torque-off short: held, as the connect ends anyway,
            # then raised, with what failed the connect (held and dropped, it had ended an interrupted deploy as the
            # connect's failure alone: status 2, not 130)
            with stops_held() as held:
                try:
                    self.enable_torque(False)
                except Exception as failed:  # noqa: BLE001 (the error that ended the connect is the one raised)
                    # (one silent or garbled from the start, a missing id or a wrong baud rate, is no news: the
                    # error says so)
                    if not (isinstance(failed, (CommTimeoutError, PacketError)) and failed.servo_id not in answered):
                        add_to_message(err, f"turning torque off after it then failed too ({type(failed).__name__}: "
                                            f"{failed}): the servos may hold torque; cut their power before touching "
                                            "the arm")
                finally:
                    self._close_port()
            if held and not isinstance(err, KeyboardInterrupt):
                raise KeyboardInterrupt(f"{signal.Signals(held[0]).name}; connecting had failed already: "
                                        f"{type(err).__name__}: {err}") from err
            raise

    @staticmethod
    def _eeprom_settings(motor: Any) -> dict[str, int]:
        """The EEPROM items connect() sets on one servo: position mode, limits, no delay, no homing offset."""
        low, high = Calibration.position_limit_ticks(motor)
        return {"Operating_Mode": OPERATING_MODE_POSITION, "Return_Delay_Time": 0, "Homing_Offset": 0,
                "Min_Position_Limit": low, "Max_Position_Limit": high,
                "Velocity_Limit": Calibration.velocity_limit_raw(motor)}

    def _check_status_replies(self, servo_id: int) -> None:
        """Refuse a servo that does not answer every instruction (Status_Return_Level 2, its power-on value):
        without replies a write cannot be confirmed, and would be taken for a servo gone silent."""
        try:
            level = self.read(servo_id, "Status_Return_Level")
        except CommTimeoutError as err:  # it answered a ping: level 0 answers nothing else (or the line lost the
            if err.late_ms is not None:  # replies); a reply that came late is no level 0: said as late
                raise
            raise DynamixelError(f"servo {servo_id} answered a ping but no read: its Status_Return_Level is 0 "
                                 "(pings only), or the line loses replies; set the level to 2 (Dynamixel Wizard, or "
                                 "power-cycle the servo: 2 is its power-on value), or check the wiring") from None
        if level != 2:
            raise DynamixelError(f"servo {servo_id} answers pings and reads, not writes (Status_Return_Level {level}): "
                                 "set it to 2 (Dynamixel Wizard, or power-cycle the servo: 2 is its power-on value)")

    def close(self) -> None:
        """Torque off if the servos still answer, then close the port. Safe to call twice."""
        if self._port is None:
            return
        try:
            self.enable_torque(False)
        except DynamixelError:
            pass  # lost or faulty bus: nothing more we can tell the servos
        finally:
            self._close_port()

    def __enter__(self) -> DynamixelBus:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _close_port(self) -> None:
        port, self._port = self._port, None
        if port is not None and port.ser is not None:
            try:
                port.closePort()
            except LINE_LOST:
                pass

    # ----------------------------------------------------------- control step

    def read_state(self, allow_alerts: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Joint positions (rad) and velocities (rad/s), from one sync read.

        A servo in a hardware alert raises :class:`HardwareAlertError`; with ``allow_alerts`` its state is
        still taken (the alert bit flags the servo, the data is its own) and ``alerted`` names such servos
        with their Hardware_Error_Status: a robot parks the others rather than dropping the whole arm."""
        alerted: list[int] = []
        data = self._retry("read the joint state", lambda: self._sync_read_once(
            self._sync_read, STATE_LENGTH, alerted if allow_alerts else None), in_turn=True)
        raw = np.frombuffer(b"".join(data[i] for i in self._ids), dtype="<i4").reshape(-1, 2)
        self.stats.sync_reads += 1
        if allow_alerts:
            self.alerted = {i: self.alerted.get(i) or self._hardware_error(i) for i in sorted(set(alerted))}
        return self.calibration.to_radians(raw[:, 1]), self.calibration.velocity_to_rad_s(raw[:, 0])

    def write_goal(self, positions: np.ndarray) -> np.ndarray:
        """Send goal positions (rad), clamped to the calibrated limits, in one sync write.

        Returns the positions actually sent (after clamping), to record beside the command.
        """
        positions = np.asarray(positions, dtype=np.float64)
        if positions.shape != (len(self._ids),) or not np.isfinite(positions).all():
            raise ValueError(f"expected {len(self._ids)} finite goal positions, got {positions!r}")
        sent = np.clip(positions, self.calibration.min_positions, self.calibration.max_positions)
        ticks = self.calibration.to_ticks(sent)
        self._send_goal_ticks(ticks)
        return sent

    # ------------------------------------------------------------- servo ops

    def enable_torque(self, on: bool, skip: set[int] | frozenset[int] = frozenset(),
                      leave_outside: bool = False) -> list[int]:
        """Torque on (holding the present pose, watchdog re-armed) or off, on every servo; torque on leaves out
        ``skip`` (servos in a hardware alert: a robot parks the others). A limp servo that reads outside its
        limits is refused (:class:`OutsideLimitsError`), or with ``leave_outside`` left limp; returns their ids."""
        if not on:  # every servo, even if one fails: a limp arm is the safe state
            errors = []
            for servo_id in self._ids:
                try:
                    self.write(servo_id, "Torque_Enable", 0)
                except NotConnectedError:
                    raise
                except DynamixelError as exc:
                    errors.append(exc)
            # an alert-only status is a write done (the bit flags the servo, which the run reports): not raised
            failed = [e for e in errors if not isinstance(e, HardwareAlertError)]
            if len(failed) > 1:  # (the first one's error alone had named one servo of a bus on which all failed)
                others = [str(e.servo_id) for e in failed[1:]]
                add_to_message(failed[0], f"servo{'s' * (len(others) > 1)} {', '.join(others)} did not confirm "
                                          "the torque-off either")
            if failed:
                raise failed[0]
            return []
        positions, _ = self.read_state(allow_alerts=bool(skip))
        limp = set(self.torque_off())
        outside = self._outside_limits(positions, limp - set(skip))  # (one holding torque there snaps nowhere)
        if outside and not leave_outside:
            raise next(iter(outside.values()))
        armed = [servo_id for servo_id in self._ids if servo_id not in skip and servo_id not in outside]
        for servo_id in armed:
            self.write(servo_id, "Bus_Watchdog", 0)  # clears a tripped watchdog, which blocks goals
        for motor in self.calibration.motors:  # a reboot put Profile_Velocity back to 0
            if motor.id in limp and motor.id in armed:
                self.write(motor.id, "Profile_Velocity", Calibration.profile_velocity_raw(motor))
        self.write_goal(positions)
        for servo_id in armed:
            self.write(servo_id, "Torque_Enable", 1)
        # whole 20 ms units, rounded up (1..10 ms had rounded to 0, which turns the watchdog off)
        units = math.ceil(self.watchdog_ms / 1000 / WATCHDOG_UNIT_S - 1e-9) if self.watchdog_ms else 0
        if units:
            for servo_id in armed:
                self.write(servo_id, "Bus_Watchdog", units)
        return sorted(outside)

    def _outside_limits(self, positions: np.ndarray, limp: set[int]) -> dict[int, OutsideLimitsError]:
        """The limp servos whose joint reads outside its limits, by id: torque on would send the goal to the
        limit, reached at the motor's full speed rather than at a ramp's."""
        low, high, motors = self.calibration.min_positions, self.calibration.max_positions, self.calibration.motors
        return {motors[i].id: OutsideLimitsError(motors[i].id, motors[i].joint, float(positions[i]), low[i], high[i])
                for i in outside_limits(positions, low, high) if motors[i].id in limp}

    def watchdog_tripped(self) -> list[int]:
        """The ids whose Bus_Watchdog fired (it reads -1 until cleared; such a servo ignores goals), from one
        sync read. ``enable_torque(True)`` re-arms them."""
        return [i for i, value in self.read_all("Bus_Watchdog").items() if value in (WATCHDOG_TRIPPED, -1)]

    def torque_off(self) -> list[int]:
        """The ids with torque off (a reboot after a power dip, or a shutdown alert), from one sync read."""
        return [i for i, value in self.read_all("Torque_Enable").items() if value == 0]

    def read_all(self, name: str) -> dict[int, int]:
        """One control-table item (Torque_Enable or Bus_Watchdog) of every servo, in one sync read."""
        item = TABLE[name]
        self._need_port()
        group = self._item_reads[name]
        alerted: list[int] = []  # (their replies are theirs: the alert bit only flags the servo)
        data = self._retry(f"read {name}", lambda: self._sync_read_once(group, item.size, alerted), in_turn=True)
        self.stats.sync_reads += 1
        return {i: item.from_bytes(data[i]) for i in self._ids}

    def reboot(self, servo_id: int, boot_timeout_s: float = 2.0) -> None:
        """Reboot one servo (clears a hardware alert) and wait until it answers again.

        It comes back with torque off and RAM items at their defaults.
        """

        def attempt() -> _Attempt:
            result, error = self._packet.reboot(self._need_port(), servo_id)
            return result, error & ~protocol.ERR_ALERT, None, servo_id  # answered before rebooting

        self._retry("reboot", attempt)
        deadline = time.monotonic() + boot_timeout_s
        while True:
            try:
                self.ping(servo_id)
                return
            except (CommTimeoutError, PacketError):  # silent, or a garbled reply while it boots: ask again
                if time.monotonic() > deadline:
                    raise

    def ping(self, servo_id: int) -> int:
        """The servo's model number."""

        def attempt() -> _Attempt:
            model, result, error = self._packet.ping(self._need_port(), servo_id)
            return result, error, model, servo_id

        return self._retry("answer a ping", attempt)

    def read(self, servo_id: int, name: str) -> int:
        """One control-table item of one servo, as a signed or unsigned integer."""
        item = TABLE[name]

        def attempt() -> _Attempt:
            port = self._need_port()
            result = self._packet.readTx(port, servo_id, item.address, item.size)
            if result != sdk.COMM_SUCCESS:
                return result, 0, None, servo_id
            data, result, error = self._reply(port, servo_id, item.size)
            value = item.from_bytes(data) if result == sdk.COMM_SUCCESS else 0
            return result, error, value, servo_id

        return self._retry(f"read {name}", attempt)

    def write(self, servo_id: int, name: str, value: int) -> None:
        """One control-table item of one servo; the servo's reply is checked."""
        item = TABLE[name]
        data = list(item.to_bytes(value))

        def attempt() -> _Attempt:
            result, error = self._packet.writeTxRx(self._need_port(), servo_id, item.address, item.size, data)
            return result, error, None, servo_id

        self._retry(f"write {name}={value}", attempt)

    # --------------------------------------------------------------- plumbing

    def _need_port(self) -> SelectPortHandler:
        if self._port is None:
            raise NotConnectedError(f"bus on {self.port} is not connected: call connect() first")
        return self._port

    def _group_read(self, address: int, length: int) -> sdk.GroupSyncRead:
        group = sdk.GroupSyncRead(self._need_port(), self._packet, address, length)
        for servo_id in self._ids:
            group.addParam(servo_id)
        return group

    def _sync_read_once(self, group: sdk.GroupSyncRead, length: int, alerted: list[int] | None = None) -> _Attempt:
        """One sync read keeping every servo's error byte (GroupSyncRead.rxPacket drops them). A reply whose only
        error is the alert bit is kept when ``alerted`` is given, and its id added there."""
        port = self._need_port()
        result = group.txPacket()
        if result != sdk.COMM_SUCCESS:
            return result, 0, None, None
        data = {}
        for servo_id in self._ids:
            payload, result, error = self._reply(port, servo_id, length)
            if result == sdk.COMM_SUCCESS and error == protocol.ERR_ALERT and alerted is not None:
                alerted.append(servo_id)
            elif result != sdk.COMM_SUCCESS or error:
                return result, error, None, servo_id
            data[servo_id] = bytes(payload)
        return result, 0, data, None

    def _reply(self, port: SelectPortHandler, servo_id: int, length: int) -> tuple[bytes, int, int]:
        """``servo_id``'s status to a read of ``length`` bytes: (data, SDK result, error byte), others' replies passed
        over. A status holding another number of bytes, another request's come late, is garbled (the SDK's readRx
        cuts it to size, and a late longer reply had been read as the answer): ``CheckedPacketHandler.readRx``."""
        data, result, error = self._packet.readRx(port, servo_id, length)
        if result == sdk.COMM_SUCCESS:
            self._heard.add(servo_id)
        return bytes(data), result, error

    def _send_goal_ticks(self, ticks: np.ndarray) -> None:
        self._need_port()
        sync_write = self._sync_write
        sync_write.clearParam()
        for servo_id, value in zip(self._ids, ticks):
            sync_write.addParam(servo_id, list(GOAL.to_bytes(int(value))))
        self._retry("write goal positions", lambda: (sync_write.txPacket(), 0, None, None))
        self.stats.sync_writes += 1

    def _abandon_exchange(self) -> None:
        """Ready the port for the next packet after an exchange cut short (a Ctrl+C, or a kill or hang-up
        taken as one, raised inside the SDK): the SDK marks its port busy for an exchange and would answer
        every later one, the safe stop's too, "Port is in use!". The replies still on their way are
        drained until the line has been quiet for a reply timeout: read later, they would be taken for the
        replies to the next packets."""
        if self._port is not None:
            self._port.is_using = False
            self._drain()

    def _drain(self) -> tuple[float, int | None] | None:
        """Drop what the line holds until it has been quiet for a reply timeout: replies come late after a
        timeout too, and the SDK would take one for the answer to the next request of the same servo. Returns
        when the first of those late bytes was seen, in ms after the request went out, and the id of the first
        status among them (None: none came, or what came holds no status packet's header: a stray byte or noise,
        not a reply), so that a late reply is said as one, not as none, and as whose: one later than this drain
        lands in the next exchange, and another servo's seen here is an earlier request's. Only the wait for that
        first byte ends as it comes: after it the line is cleared once a timeout until quiet, as a reply that
        trickles in (a slow baud rate, an adapter passing bytes on as they come) would otherwise wake each of the
        20 rounds with a byte or two, ending the drain with the rest of it on the line, read later as the answer
        to the next request."""
        port, first_ms, seen = self._port, None, bytearray()  # (seen: the first bytes dropped, to tell a reply)
        if port is None:
            return None

        def drop() -> None:  # read, not flushed: a flush after the count drops unseen what came in between
            if waiting := port.getBytesAvailable():  # (the reply this drain is for, which then went unsaid)
                seen.extend(port.readPort(waiting)[: max(0, LATE_BYTES_KEPT - len(seen))])

        try:
            for _ in range(20):  # a servo answers within a timeout; a line that never falls quiet is not ours to fix
                if first_ms is None and port.getBytesAvailable():
                    first_ms = port.getCurrentTime() - port.packet_start_time
                drop()
                if first_ms is None:  # woken by the first byte that comes (to time it), else quiet for a timeout
                    if not select.select([port.ser.fileno()], [], [], self.timeout_ms / 1000)[0]:
                        break
                    first_ms = port.getCurrentTime() - port.packet_start_time
                else:  # a reply coming: the rest of it comes within a timeout
                    time.sleep(self.timeout_ms / 1000)
                    if not port.getBytesAvailable():
                        break
        except LINE_LOST:
            self._close_port()  # the next exchange says the bus is not connected
        if first_ms is None or (start := seen.find(protocol.HEADER)) < 0:
            return None
        return first_ms, (seen[start + 4] if len(seen) > start + 4 else None)

    def _drop_pending(self) -> None:
        """Drop what has arrived, without waiting (after a garbled reply: the rest of a sync read's replies
        would be read as the next one's)."""
        try:
            if self._port is not None:
                self._port.clearPort()
        except LINE_LOST:
            self._close_port()

    def _retry(self, what: str, attempt: Callable[[], _Attempt], in_turn: bool = False) -> Any:
        """Run ``attempt`` until it succeeds, at most ``retries`` extra times, else raise. ``in_turn``: a sync read,
        whose servos answer one after another: a status of one after the servo that gave none, seen in the drain,
        is this request's own come late, not an earlier request's (servo 4's, where servo 3 had fallen silent, had
        been said as an earlier request's, with a latency fix): the silent servo is said as one.

        No reply and garbled replies are retried; a status error other than the
        servo's own CRC error is not (repeating a refused write changes nothing).
        A hardware alert (a status whose only error is the alert bit: the instruction
        was carried out) is raised at once with the servo's Hardware_Error_Status.
        """
        late = None  # (the last timeout's reply, where it came late: when, and whose)
        for tries in range(self.retries + 1):
            try:
                result, error, value, servo_id = attempt()
            except LINE_LOST as exc:
                self._close_port()
                raise NotConnectedError(
                    f"lost the connection on {self.port} while trying to {what}: {exc}; {self._lost_line_hint()}"
                ) from exc
            except BaseException:
                self._abandon_exchange()
                raise
            if result == sdk.COMM_SUCCESS:
                if servo_id is not None:  # (a sync read's servos are heard in _reply)
                    self._heard.add(servo_id)
                if not error:
                    return value
                rest = error & ~protocol.ERR_ALERT  # the alert bit only flags the servo: judge the rest first
                if not rest:
                    raise HardwareAlertError(servo_id, self._hardware_error(servo_id))
                if rest != protocol.ERR_CRC:
                    raise PacketError(servo_id, f"refused to {what}", error)
            elif result == sdk.COMM_RX_TIMEOUT:
                self.stats.timeouts += 1
                late = self._drain()
            elif result == sdk.COMM_RX_CORRUPT:
                self.stats.crc_errors += 1
                self._drop_pending()
            if tries < self.retries:
                self.stats.retries += 1
                time.sleep(self.backoff_s * (tries + 1))
        if result == sdk.COMM_RX_TIMEOUT:
            late_ms, late_from = late or (None, None)
            if in_turn and servo_id in self._ids and late_from in self._ids[self._ids.index(servo_id) + 1:]:
                late_ms = late_from = None
            raise CommTimeoutError(servo_id, self.port, self.baudrate, what, late_ms, late_from, self.timeout_ms,
                                   answered_before=servo_id in self._heard)
        if result == sdk.COMM_RX_CORRUPT:  # (one that answered cleanly before rules out the baud rate and the port)
            check = ("it answered cleanly earlier on this connection, so replies are being corrupted on the way: "
                     "check the cable and its connectors (loose, noisy) and the servos' power supply"
                     if servo_id in self._heard else
                     "check the baud rate (the servos' and the robot config's), the wiring, and that the port is a "
                     "Dynamixel bus")
            raise PacketError(servo_id, f"garbled reply (bad CRC or length) to {what}, {self.retries} retries, on "
                                        f"{self.port} at {self.baudrate} baud: {check}")
        if result == sdk.COMM_SUCCESS:
            raise PacketError(servo_id, f"failed to {what} after {self.retries} retries", error)
        raise PacketError(servo_id, f"failed to {what}: {self._packet.getTxRxResult(result)}")

    def _lost_line_hint(self) -> str:
        """What to check when the line went away mid-run: an emulator's pseudo-terminal closes when the emulator
        stops (a USB cable and servo power, as for a real adapter, had been said of it)."""
        if self.port.startswith("/dev/pts/"):
            return ("a pseudo-terminal closes when `robolearn emulate dynamixel`, which serves it, stops: start it "
                    "again and use the port it prints")
        return "check the USB cable and the servo power, then reconnect"

    def _hardware_error(self, servo_id: int) -> int | None:
        """Hardware_Error_Status of a servo that raised its alert bit (None if it cannot be read), read as
        :meth:`_retry` reads: no reply or a garbled one drained and retried after a backoff (they had been
        resent at once, into the echo of the last), the line's loss said as such.

        The alert bit is on every status of such a servo, so it is no refusal here. A reply whose error byte holds
        more is one: it carries no data (the SDK's read1ByteTxRx would read its value out of the CRC)."""
        item = TABLE["Hardware_Error_Status"]

        def attempt() -> _Attempt:
            value, result, error = self._packet.read1ByteTxRx(self._need_port(), servo_id, item.address)
            return result, error & ~protocol.ERR_ALERT, value, servo_id

        try:
            return self._retry("read Hardware_Error_Status", attempt)
        except (CommTimeoutError, PacketError):
            return None
