"""The X-series control table (Protocol 2.0) and its units.

Each item is a little-endian register at a fixed address. Items below address 64
live in EEPROM and can be written only while torque is off. The ranges are the
e-Manual's for the XM430-W350; the emulator enforces them, the driver uses the
addresses and sizes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

EEPROM_END = 64  # addresses below this are EEPROM

MODEL_NUMBERS = {"XL330-M288": 1200, "XL430-W250": 1060, "XM430-W350": 1020}
MODEL_NAMES = {number: name for name, number in MODEL_NUMBERS.items()}

OPERATING_MODE_POSITION = 3
OPERATING_MODES = (0, 1, 3, 4, 5, 16)  # current, velocity, position, extended position, current-based position, PWM
# Baud_Rate codes (e-Manual, XM430-W350 and XL430-W250: 7 is 4.5 Mbps; the XL330/XC330 and XM335 stop at 6).
BAUD_RATES = {0: 9_600, 1: 57_600, 2: 115_200, 3: 1_000_000, 4: 2_000_000, 5: 3_000_000, 6: 4_000_000,
              7: 4_500_000}
BAUD_CODES = {baud: code for code, baud in BAUD_RATES.items()}
TOP_BAUD_CODE = {"XL330-M288": 6, "XL430-W250": 7, "XM430-W350": 7}  # each model's fastest Baud_Rate code


def top_baud_code(model_number: int) -> int:
    """The fastest Baud_Rate code a servo of ``model_number`` takes (7, 4.5 Mbps, for a model not listed)."""
    return TOP_BAUD_CODE.get(MODEL_NAMES.get(model_number, ""), 7)

# Units.
TICKS_PER_REV = 4096
CENTER_TICKS = 2048  # Present_Position of the joint at 0 rad
TICKS_PER_RAD = TICKS_PER_REV / (2 * math.pi)
VELOCITY_UNIT_RPM = 0.229  # one unit of Present/Goal_Velocity and Velocity_Limit
RAD_S_PER_VELOCITY_UNIT = VELOCITY_UNIT_RPM * 2 * math.pi / 60
CURRENT_UNIT_A = 0.00269  # one unit of Present_Current (XM430)
WATCHDOG_UNIT_S = 0.020  # one unit of Bus_Watchdog
RETURN_DELAY_UNIT_S = 2e-6  # one unit of Return_Delay_Time
WATCHDOG_TRIPPED = 0xFF  # Bus_Watchdog reads -1 after it fired

# Hardware_Error_Status bits (set together with the alert bit of every status).
HW_INPUT_VOLTAGE = 0x01
HW_OVERHEATING = 0x04
HW_ENCODER = 0x08
HW_ELECTRICAL_SHOCK = 0x10
HW_OVERLOAD = 0x20
HARDWARE_ERROR_NAMES = {
    HW_INPUT_VOLTAGE: "input voltage",
    HW_OVERHEATING: "overheating",
    HW_ENCODER: "motor encoder",
    HW_ELECTRICAL_SHOCK: "electrical shock",
    HW_OVERLOAD: "overload",
}


def describe_hardware_error(status: int) -> str:
    """Names of the bits set in a Hardware_Error_Status byte."""
    names = [name for bit, name in HARDWARE_ERROR_NAMES.items() if status & bit]
    return ", ".join(names) or "none"


@dataclass(frozen=True)
class Item:
    """One register: where, how wide, who may write it, and its allowed values."""

    name: str
    address: int
    size: int
    writable: bool = False
    default: int = 0
    minimum: int = 0
    maximum: int = 0
    signed: bool = False

    @property
    def eeprom(self) -> bool:
        return self.address < EEPROM_END

    def to_bytes(self, value: int) -> bytes:
        return int(value).to_bytes(self.size, "little", signed=self.signed)

    def from_bytes(self, data: bytes) -> int:
        return int.from_bytes(data, "little", signed=self.signed)


_RW = {"writable": True}
ITEMS = [
    # EEPROM
    Item("Model_Number", 0, 2, default=1020),
    Item("Model_Information", 2, 4),
    Item("Firmware_Version", 6, 1, default=48),
    Item("ID", 7, 1, **_RW, default=1, maximum=252),
    Item("Baud_Rate", 8, 1, **_RW, default=3, maximum=7),
    Item("Return_Delay_Time", 9, 1, **_RW, default=250, maximum=254),
    Item("Drive_Mode", 10, 1, **_RW, maximum=13),
    Item("Operating_Mode", 11, 1, **_RW, default=3, maximum=16),
    Item("Secondary_ID", 12, 1, **_RW, default=255, maximum=255),
    Item("Protocol_Type", 13, 1, **_RW, default=2, minimum=1, maximum=2),
    Item("Homing_Offset", 20, 4, **_RW, minimum=-1_044_479, maximum=1_044_479, signed=True),
    Item("Moving_Threshold", 24, 4, **_RW, default=10, maximum=1023),
    Item("Temperature_Limit", 31, 1, **_RW, default=80, maximum=100),
    Item("Max_Voltage_Limit", 32, 2, **_RW, default=160, minimum=95, maximum=160),
    Item("Min_Voltage_Limit", 34, 2, **_RW, default=95, minimum=95, maximum=160),
    Item("PWM_Limit", 36, 2, **_RW, default=885, maximum=885),
    Item("Current_Limit", 38, 2, **_RW, default=1193, maximum=1193),
    Item("Velocity_Limit", 44, 4, **_RW, default=200, maximum=1023),
    Item("Max_Position_Limit", 48, 4, **_RW, default=4095, maximum=4095),
    Item("Min_Position_Limit", 52, 4, **_RW, default=0, maximum=4095),
    Item("Shutdown", 63, 1, **_RW, default=52, maximum=255),
    # RAM
    Item("Torque_Enable", 64, 1, **_RW, maximum=1),
    Item("LED", 65, 1, **_RW, maximum=1),
    Item("Status_Return_Level", 68, 1, **_RW, default=2, maximum=2),
    Item("Registered_Instruction", 69, 1),
    Item("Hardware_Error_Status", 70, 1),
    Item("Velocity_I_Gain", 76, 2, **_RW, default=1920, maximum=16383),
    Item("Velocity_P_Gain", 78, 2, **_RW, default=100, maximum=16383),
    Item("Position_D_Gain", 80, 2, **_RW, default=0, maximum=16383),
    Item("Position_I_Gain", 82, 2, **_RW, default=0, maximum=16383),
    Item("Position_P_Gain", 84, 2, **_RW, default=800, maximum=16383),
    Item("Bus_Watchdog", 98, 1, **_RW, maximum=127),
    Item("Goal_PWM", 100, 2, **_RW, minimum=-885, maximum=885, signed=True),
    Item("Goal_Current", 102, 2, **_RW, minimum=-1193, maximum=1193, signed=True),
    Item("Goal_Velocity", 104, 4, **_RW, minimum=-1023, maximum=1023, signed=True),
    Item("Profile_Acceleration", 108, 4, **_RW, maximum=32767),
    Item("Profile_Velocity", 112, 4, **_RW, maximum=32767),
    Item("Goal_Position", 116, 4, **_RW, default=2048, minimum=-1_048_575, maximum=1_048_575, signed=True),
    Item("Realtime_Tick", 120, 2),
    Item("Moving", 122, 1),
    Item("Moving_Status", 123, 1),
    Item("Present_PWM", 124, 2, signed=True),
    Item("Present_Current", 126, 2, signed=True),
    Item("Present_Velocity", 128, 4, signed=True),
    Item("Present_Position", 132, 4, default=2048, signed=True),
    Item("Velocity_Trajectory", 136, 4, signed=True),
    Item("Position_Trajectory", 140, 4, signed=True),
    Item("Present_Input_Voltage", 144, 2, default=120),
    Item("Present_Temperature", 146, 1, default=35),
]
TABLE = {item.name: item for item in ITEMS}
BY_ADDRESS = {item.address: item for item in ITEMS}
TABLE_SIZE = max(item.address + item.size for item in ITEMS)


def rad_to_ticks(rad: float) -> int:
    """Servo position ticks for a shaft angle in rad (0 rad = 2048)."""
    return round(CENTER_TICKS + rad * TICKS_PER_RAD)


def ticks_to_rad(ticks: float) -> float:
    """Shaft angle in rad for servo position ticks."""
    return (ticks - CENTER_TICKS) / TICKS_PER_RAD
