"""Typed errors of the Dynamixel driver; each message says what to check or fix."""

from __future__ import annotations

from .control_table import MODEL_NAMES, describe_hardware_error
from .protocol import describe_error


class DynamixelError(RuntimeError):
    """Base of every error the Dynamixel driver raises."""


class NotConnectedError(DynamixelError):
    """The port is closed, could not be opened, or was lost mid-run (cable, power, pty)."""


class CommTimeoutError(DynamixelError):
    """A servo did not answer within the timeout, after every retry. ``late_ms``: where a reply came after all,
    past the timeout (the bus saw it as it drained the line), the ms after the request it came; None: none came.
    ``late_from``: the servo whose reply that was: another's is an earlier request's, come later still (the SDK
    matches replies by id only, and the protocol numbers no request), and had been said as this servo's.
    ``answered_before``: the servo answered earlier on this connection, so its id and baud rate are right (a servo
    silent at a bus losing a third of its replies had been told to check them)."""

    def __init__(self, servo_id: int | None, port: str, baudrate: int, what: str = "", late_ms: float | None = None,
                 late_from: int | None = None, timeout_ms: float | None = None, answered_before: bool = False) -> None:
        who = f"servo {servo_id}" if servo_id is not None else "the servos"
        doing = f" to {what}" if what else ""
        waits = f", past the {timeout_ms:g} ms the bus waits" if timeout_ms is not None else ""
        fix = ("check the USB adapter's latency timer (1 ms; FTDI's default is 16) and the servos' Return_Delay_Time, "
               "or give the bus a longer timeout_ms")
        if late_ms is None and answered_before:
            said = (f"no reply from {who}{doing} on {port}, which answered earlier on this connection: replies are "
                    "being lost; check the cable (loose, noisy) and the servos' power supply")
        elif late_ms is None:
            said = f"no reply from {who}{doing} on {port} at {baudrate} baud: check power, id and baud rate"
        # (a silent servo and a slow line want different fixes)
        elif late_from is None or servo_id is None or late_from == servo_id:
            said = f"late reply from {who}{doing} on {port} (after {late_ms:.0f} ms{waits}): {fix}"
        else:
            said = (f"no reply in time from {who}{doing} on {port}: servo {late_from}'s came instead, {late_ms:.0f} ms "
                    f"after this request{waits}, an earlier request's reply come late: {fix}")
        super().__init__(said)
        self.servo_id = servo_id
        self.late_ms = late_ms
        self.late_from = late_from


class PacketError(DynamixelError):
    """A reply was garbled (bad CRC or length) or carried an instruction error."""

    def __init__(self, servo_id: int | None, message: str, error: int = 0) -> None:
        who = f"servo {servo_id}" if servo_id is not None else "bus"
        detail = f" (status error 0x{error:02x}: {describe_error(error)})" if error else ""
        super().__init__(f"{who}: {message}{detail}")
        self.servo_id = servo_id
        self.error = error


def hardware_status_text(status: int | None) -> str:
    """A Hardware_Error_Status as a message says it; None: the servo did not answer its read, or refused it (which
    had read as "0x00 (none)", as if the servo had reported no cause, or as causes read out of the CRC)."""
    if status is None:
        return "Hardware_Error_Status unread (the servo did not answer its read, or refused it)"
    return f"Hardware_Error_Status=0x{status:02x} ({describe_hardware_error(status)})"


class HardwareAlertError(DynamixelError):
    """A servo set the alert bit; ``hardware_error`` is its Hardware_Error_Status (None when it could not be read)."""

    def __init__(self, servo_id: int, hardware_error: int | None) -> None:
        super().__init__(
            f"servo {servo_id} reports a hardware alert: {hardware_status_text(hardware_error)}; remove the cause "
            "(load, heat, supply), then reboot the servo to clear it"
        )
        self.servo_id = servo_id
        self.hardware_error = hardware_error


class ModelMismatchError(DynamixelError):
    """The servo at an id is not the model the calibration expects."""

    def __init__(self, servo_id: int, expected: int, found: int) -> None:
        def name(number: int) -> str:
            return f"{MODEL_NAMES.get(number, 'unknown model')} ({number})"

        super().__init__(
            f"servo {servo_id} is a {name(found)}, but the calibration expects a {name(expected)}: "
            "check the id assignment or fix the model in the robot config"
        )
        self.servo_id = servo_id
        self.expected = expected
        self.found = found


class OutsideLimitsError(DynamixelError):
    """A joint reads outside its limits at torque on, which would snap it to the limit at full speed."""

    def __init__(self, servo_id: int, joint: str, position: float, low: float, high: float) -> None:
        super().__init__(
            f"servo {servo_id} ({joint}) reads {position:.3f} rad, outside its limits [{low:.3f}, {high:.3f}] "
            "(min_position, max_position in the robot config): torque on would snap it to the limit at full speed, "
            "so torque stays off; move the joint within its limits by hand, or widen them, then connect again"
        )
        self.servo_id = servo_id
        self.position = position
