"""Dynamixel Protocol 2.0 packets: CRC, byte stuffing, encoding and a streaming parser.

The host side talks through the vendor SDK (``dynamixel_sdk``); this module is
the device side's codec (the emulator) and a reference for tests. Packet layout:

    FF FF FD 00 | ID | LEN_L LEN_H | INST | params (stuffed) | CRC_L CRC_H

LEN counts the stuffed body plus the two CRC bytes. A status packet is an
instruction packet with INST 0x55 whose first parameter is the error byte. The
CRC (poly 0x8005, init 0, unreflected) covers every byte before it, stuffed.
"""

from __future__ import annotations

from dataclasses import dataclass

HEADER = b"\xff\xff\xfd\x00"
BROADCAST_ID = 0xFE
MAX_ID = 0xFC
MAX_LENGTH = 1024  # the SDK's RXPACKET_MAX_LEN: a larger LEN is garbage, not a packet

# Instructions.
PING = 0x01
READ = 0x02
WRITE = 0x03
FACTORY_RESET = 0x06
REBOOT = 0x08
STATUS = 0x55
SYNC_READ = 0x82
SYNC_WRITE = 0x83
BULK_READ = 0x92
BULK_WRITE = 0x93

# Status error byte: bit 7 is the alert flag, bits 0-6 hold one error number.
ERR_ALERT = 0x80
ERR_RESULT_FAIL = 1
ERR_INSTRUCTION = 2
ERR_CRC = 3
ERR_DATA_RANGE = 4
ERR_DATA_LENGTH = 5
ERR_DATA_LIMIT = 6
ERR_ACCESS = 7

ERROR_NAMES = {
    ERR_RESULT_FAIL: "result fail",
    ERR_INSTRUCTION: "instruction error",
    ERR_CRC: "CRC error",
    ERR_DATA_RANGE: "data range error",
    ERR_DATA_LENGTH: "data length error",
    ERR_DATA_LIMIT: "data limit error",
    ERR_ACCESS: "access error",
}


def describe_error(error: int) -> str:
    """Human words for a status error byte, e.g. ``"alert + data limit error"``."""
    parts = ["alert"] if error & ERR_ALERT else []
    number = error & 0x7F
    if number:
        parts.append(ERROR_NAMES.get(number, f"unknown error {number}"))
    return " + ".join(parts) or "no error"


def _crc_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x8005) if crc & 0x8000 else (crc << 1)
        table.append(crc & 0xFFFF)
    return tuple(table)


_CRC_TABLE = _crc_table()


def crc16(data: bytes, crc: int = 0) -> int:
    """CRC-16 of ``data`` (poly 0x8005, MSB first), table-driven as in the SDK."""
    for byte in data:
        crc = ((crc << 8) ^ _CRC_TABLE[((crc >> 8) ^ byte) & 0xFF]) & 0xFFFF
    return crc


def stuff(body: bytes) -> bytes:
    """Insert an extra FD after every FF FF FD so a body never looks like a header."""
    out = bytearray()
    for i, byte in enumerate(body):
        out.append(byte)
        if byte == 0xFD and i >= 2 and body[i - 2] == 0xFF and body[i - 1] == 0xFF:
            out.append(0xFD)
    return bytes(out)


def unstuff(body: bytes) -> bytes:
    """Inverse of :func:`stuff`: drop the FD that follows each FF FF FD."""
    out = bytearray()
    i = 0
    while i < len(body):
        out.append(body[i])
        i += 1
        if out[-3:] == b"\xff\xff\xfd" and i < len(body) and body[i] == 0xFD:
            i += 1
    return bytes(out)


def _encode(packet_id: int, body: bytes) -> bytes:
    stuffed = stuff(body)
    length = len(stuffed) + 2
    head = HEADER + bytes([packet_id, length & 0xFF, length >> 8]) + stuffed
    crc = crc16(head)
    return head + bytes([crc & 0xFF, crc >> 8])


def encode_instruction(packet_id: int, instruction: int, params: bytes = b"") -> bytes:
    """An instruction packet, stuffed and with its CRC."""
    return _encode(packet_id, bytes([instruction]) + bytes(params))


def encode_status(packet_id: int, error: int, params: bytes = b"") -> bytes:
    """A status (reply) packet carrying ``error`` and ``params``."""
    return _encode(packet_id, bytes([STATUS, error]) + bytes(params))


@dataclass(frozen=True)
class Packet:
    """One decoded packet. ``error`` is set only for status packets; ``raw`` is the wire bytes."""

    id: int
    instruction: int
    params: bytes
    error: int | None
    raw: bytes


class PacketParser:
    """Streaming decoder: feed it bytes as they arrive, get whole packets back.

    It never raises on input: garbage before a header is skipped, and a header
    whose length is impossible or whose CRC fails is dropped by skipping one
    byte and searching again (resync). Rejections are counted.
    """

    def __init__(self, max_length: int = MAX_LENGTH) -> None:
        self.max_length = max_length
        self.buffer = bytearray()
        self.crc_errors = 0
        self.length_errors = 0
        self.skipped_bytes = 0

    def feed(self, data: bytes) -> list[Packet]:
        """Append ``data`` and return every complete, valid packet it finishes."""
        self.buffer += data
        packets = []
        while (packet := self._next()) is not None:
            packets.append(packet)
        return packets

    def timeout(self) -> list[Packet]:
        """The line went quiet mid-packet: that header was garbage; resync past it."""
        if not self.buffer:
            return []
        self._skip(1)
        return self.feed(b"")

    def _skip(self, count: int) -> None:
        del self.buffer[:count]
        self.skipped_bytes += count

    def _next(self) -> Packet | None:
        buf = self.buffer
        while True:
            start = buf.find(HEADER)
            if start < 0:
                # Keep a tail that may be the start of a header split across reads.
                keep = next((k for k in (3, 2, 1) if buf.endswith(HEADER[:k])), 0)
                self._skip(len(buf) - keep)
                return None
            self._skip(start)
            if len(buf) < 7:
                return None
            length = buf[5] | (buf[6] << 8)
            minimum = 3  # INST + CRC
            if length < minimum or length > self.max_length:
                self.length_errors += 1
                self._skip(1)
                continue
            total = 7 + length
            if len(buf) < total:
                return None
            raw = bytes(buf[:total])
            if crc16(raw[:-2]) != (raw[-2] | (raw[-1] << 8)):
                self.crc_errors += 1
                self._skip(1)
                continue
            body = unstuff(raw[7:-2])
            if body[0] == STATUS and len(body) < 2:
                self.length_errors += 1
                self._skip(1)
                continue
            del buf[:total]
            if body[0] == STATUS:
                return Packet(raw[4], STATUS, body[2:], body[1], raw)
            return Packet(raw[4], body[0], body[1:], None, raw)
