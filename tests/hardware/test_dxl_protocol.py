"""Protocol 2.0 codec: CRC, stuffing, packets byte-identical to the vendor SDK, parser resync."""

from __future__ import annotations

import math
import random

import dynamixel_sdk as sdk
import pytest

from hardware.dynamixel import protocol as p
from hardware.dynamixel.control_table import (
    EEPROM_END,
    MODEL_NUMBERS,
    RAD_S_PER_VELOCITY_UNIT,
    TABLE,
    rad_to_ticks,
    ticks_to_rad,
)
from hardware.dynamixel.errors import CommTimeoutError, HardwareAlertError, ModelMismatchError, PacketError


class CapturePort(sdk.PortHandler):
    """A PortHandler that records what the SDK writes and never answers."""

    def __init__(self) -> None:
        super().__init__("capture")
        self.is_open, self.baudrate, self.tx_time_per_byte = True, 1_000_000, 0.01
        self.written: list[bytes] = []

    def clearPort(self) -> None:  # noqa: N802
        pass

    def writePort(self, packet: list[int]) -> int:  # noqa: N802
        self.written.append(bytes(packet))
        return len(packet)

    def readPort(self, length: int) -> bytes:  # noqa: N802
        return b""

    def isPacketTimeout(self) -> bool:  # noqa: N802
        return True


def test_ping_crc_matches_reference() -> None:
    packet = p.encode_instruction(1, p.PING)
    assert packet == bytes.fromhex("ff ff fd 00 01 03 00 01 19 4e")


def test_crc_matches_sdk_on_random_data() -> None:
    handler, rng = sdk.Protocol2PacketHandler(), random.Random(0)
    for _ in range(200):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(64)))
        assert p.crc16(data) == handler.updateCRC(0, list(data), len(data))


def test_stuffing_inserts_and_removes_fd() -> None:
    assert p.stuff(b"\xff\xff\xfd") == b"\xff\xff\xfd\xfd"
    assert p.stuff(b"\x01\xff\xff\xfd\xfd\x02") == b"\x01\xff\xff\xfd\xfd\xfd\x02"
    for body in (b"", b"\xff\xff\xfd", b"\xff\xff\xfd\xfd", b"\xff\xff\xfd\xff\xff\xfd", b"\xff\xff\xff\xfd"):
        assert p.unstuff(p.stuff(body)) == body


@pytest.mark.parametrize(
    "send, expected",
    [
        (lambda h, port: h.ping(port, 1), p.encode_instruction(1, p.PING)),
        (lambda h, port: h.readTxRx(port, 3, 132, 4), p.encode_instruction(3, p.READ, bytes([132, 0, 4, 0]))),
        (lambda h, port: h.write4ByteTxRx(port, 2, 116, 3000), p.encode_instruction(2, p.WRITE, bytes([116, 0, 0xB8, 0x0B, 0, 0]))),
        (lambda h, port: h.reboot(port, 4), p.encode_instruction(4, p.REBOOT)),
    ],
    ids=["ping", "read", "write", "reboot"],
)
def test_instructions_match_sdk_bytes(send, expected: bytes) -> None:
    port = CapturePort()
    send(sdk.PacketHandler(2.0), port)
    assert port.written == [expected]


def test_sync_write_matches_sdk_bytes() -> None:
    port = CapturePort()
    group = sdk.GroupSyncWrite(port, sdk.PacketHandler(2.0), 116, 4)
    group.addParam(1, [0x00, 0x08, 0x00, 0x00])
    group.addParam(2, [0xFF, 0x0F, 0x00, 0x00])
    group.txPacket()
    params = bytes([116, 0, 4, 0, 1, 0x00, 0x08, 0, 0, 2, 0xFF, 0x0F, 0, 0])
    assert port.written == [p.encode_instruction(p.BROADCAST_ID, p.SYNC_WRITE, params)]


def test_sdk_sends_payloads_unstuffed_and_the_parser_still_accepts_them() -> None:
    """dynamixel-sdk 4.1.0's txPacket drops addStuffing's result when stuffing grows the
    packet, so FF FF FD goes out unstuffed (with a CRC over those bytes). Goal positions
    (0..4095) never contain FF FF FD; the emulator, like a servo, still parses such packets."""
    port = CapturePort()
    sdk.PacketHandler(2.0).write4ByteTxRx(port, 2, 116, 0xFDFFFF)
    params = bytes([116, 0, 0xFF, 0xFF, 0xFD, 0])
    wire = port.written[0]
    assert wire != p.encode_instruction(2, p.WRITE, params)  # not stuffed...
    assert wire[5] == 3 + len(params) and p.crc16(wire[:-2]) == wire[-2] | wire[-1] << 8  # ...but consistent
    (packet,) = p.PacketParser().feed(wire)
    assert (packet.id, packet.instruction, packet.params) == (2, p.WRITE, params)


def test_parser_decodes_status_and_instruction_across_split_reads() -> None:
    stream = p.encode_status(3, p.ERR_ALERT | p.ERR_DATA_LIMIT, b"\xff\xff\xfd\x01") + p.encode_instruction(1, p.PING)
    parser = p.PacketParser()
    packets = [pkt for byte in stream for pkt in parser.feed(bytes([byte]))]
    assert [(k.id, k.instruction, k.error, k.params) for k in packets] == [
        (3, p.STATUS, p.ERR_ALERT | p.ERR_DATA_LIMIT, b"\xff\xff\xfd\x01"),
        (1, p.PING, None, b""),
    ]
    assert b"".join(k.raw for k in packets) == stream


def test_parser_resyncs_and_counts_rejects() -> None:
    good = p.encode_instruction(2, p.READ, bytes([132, 0, 4, 0]))
    bad_crc = good[:-1] + bytes([good[-1] ^ 1])
    bad_length = p.HEADER + bytes([1, 0xFF, 0xFF])  # LEN 65535: impossible
    parser = p.PacketParser()
    packets = parser.feed(b"\x00\xff\x13" + bad_crc + bad_length + b"\xff\xff" + good)
    assert [k.raw for k in packets] == [good]
    assert parser.crc_errors == 1 and parser.length_errors == 1


def test_parser_resyncs_one_byte_past_a_garbage_header_whose_length_spans_real_packets() -> None:
    """A header-like run of noise claiming LEN 12 swallows the next packet and part of another; its CRC fails, and
    the parser searches again from the byte after its start, so both real packets still come out."""
    ping, read = p.encode_instruction(1, p.PING), p.encode_instruction(2, p.READ, bytes([132, 0, 4, 0]))
    parser = p.PacketParser()
    packets = parser.feed(p.HEADER + bytes([1, 12, 0]) + ping + read)  # the claimed 19 bytes end inside `read`
    assert [k.raw for k in packets] == [ping, read]
    assert parser.crc_errors == 1 and parser.skipped_bytes == 7


def test_parser_timeout_skips_a_garbage_header_that_swallowed_a_packet() -> None:
    good = p.encode_instruction(1, p.PING)
    parser = p.PacketParser()
    assert parser.feed(p.HEADER + bytes([1, 200, 0]) + good) == []  # waits for 207 bytes
    assert [k.raw for k in parser.timeout()] == [good]


def test_control_table_matches_reference() -> None:
    expected = {
        "Model_Number": (0, 2), "ID": (7, 1), "Baud_Rate": (8, 1), "Return_Delay_Time": (9, 1),
        "Operating_Mode": (11, 1), "Homing_Offset": (20, 4), "Velocity_Limit": (44, 4),
        "Max_Position_Limit": (48, 4), "Min_Position_Limit": (52, 4), "Torque_Enable": (64, 1),
        "Status_Return_Level": (68, 1), "Hardware_Error_Status": (70, 1), "Position_D_Gain": (80, 2),
        "Position_I_Gain": (82, 2), "Position_P_Gain": (84, 2), "Bus_Watchdog": (98, 1),
        "Goal_Current": (102, 2), "Goal_Velocity": (104, 4), "Profile_Velocity": (112, 4),
        "Goal_Position": (116, 4), "Moving": (122, 1), "Present_Current": (126, 2),
        "Present_Velocity": (128, 4), "Present_Position": (132, 4), "Present_Input_Voltage": (144, 2),
        "Present_Temperature": (146, 1),
    }
    assert {name: (TABLE[name].address, TABLE[name].size) for name in expected} == expected
    assert TABLE["Velocity_Limit"].eeprom and not TABLE["Torque_Enable"].eeprom and EEPROM_END == 64
    assert MODEL_NUMBERS == {"XL330-M288": 1200, "XL430-W250": 1060, "XM430-W350": 1020}


def test_units() -> None:
    assert rad_to_ticks(0.0) == 2048 and rad_to_ticks(math.pi) == 4096 and rad_to_ticks(-math.pi / 2) == 1024
    assert ticks_to_rad(3072) == pytest.approx(math.pi / 2)
    assert RAD_S_PER_VELOCITY_UNIT == pytest.approx(0.229 * 2 * math.pi / 60)


def test_error_messages_say_what_to_fix() -> None:
    assert str(CommTimeoutError(3, "/dev/pts/5", 1_000_000)) == (
        "no reply from servo 3 on /dev/pts/5 at 1000000 baud: check power, id and baud rate"
    )
    assert "data limit error" in str(PacketError(2, "refused to write Goal_Position", p.ERR_DATA_LIMIT))
    alert = str(HardwareAlertError(4, 0x24))
    assert "servo 4" in alert and "overheating" in alert and "overload" in alert and "0x24" in alert
    assert "XL430-W250 (1060)" in str(ModelMismatchError(1, 1020, 1060))
