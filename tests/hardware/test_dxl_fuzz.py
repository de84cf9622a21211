"""Property tests of the packet parser: arbitrary bytes never crash it or fool its CRC check."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hardware.dynamixel import protocol as p

# Payloads rich in FF and FD so that stuffing is exercised often.
payload = st.lists(st.sampled_from([0x00, 0x01, 0xFD, 0xFF, 0x55]) | st.integers(0, 255), max_size=40).map(bytes)
servo_id = st.integers(0, p.BROADCAST_ID)
instruction = st.sampled_from([p.PING, p.READ, p.WRITE, p.REBOOT, p.SYNC_READ, p.SYNC_WRITE, p.BULK_READ, p.BULK_WRITE])


@st.composite
def packets(draw: st.DrawFn) -> bytes:
    if draw(st.booleans()):
        return p.encode_status(draw(servo_id), draw(st.integers(0, 255)), draw(payload))
    return p.encode_instruction(draw(servo_id), draw(instruction), draw(payload))


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:])]


def assert_sound(packet: p.Packet) -> None:
    """A yielded packet's CRC is right and its fields agree with its raw bytes."""
    raw = packet.raw
    assert raw[:4] == p.HEADER and raw[4] == packet.id
    assert p.crc16(raw[:-2]) == raw[-2] | (raw[-1] << 8)
    assert len(raw) == 7 + (raw[5] | raw[6] << 8)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600), st.lists(st.integers(0, 600), max_size=8))
def test_random_bytes_never_raise_nor_yield_bad_packets(data: bytes, cuts: list[int]) -> None:
    parser = p.PacketParser()
    out = [k for chunk in chunked(data, cuts) for k in parser.feed(chunk)]
    out += parser.timeout()
    for packet in out:
        assert_sound(packet)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(packets(), min_size=1, max_size=4),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=6),
    st.lists(st.integers(0, 10_000), max_size=4),
)
def test_mutated_packets_never_yield_a_wrong_crc(
    stream: list[bytes], mutations: list[tuple[int, int]], cuts: list[int]
) -> None:
    data = bytearray(b"".join(stream))
    for where, value in mutations:
        data[where % len(data)] = value
    parser = p.PacketParser()
    for chunk in chunked(bytes(data), cuts):
        for packet in parser.feed(chunk):
            assert_sound(packet)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(servo_id, instruction, payload), min_size=1, max_size=5),
    st.lists(st.binary(max_size=12).map(lambda b: b.replace(b"\xff", b"")), min_size=6, max_size=6),
    st.lists(st.integers(0, 10_000), max_size=6),
)
def test_valid_packets_round_trip_through_garbage_and_split_reads(
    items: list[tuple[int, int, bytes]], garbage: list[bytes], cuts: list[int]
) -> None:
    stream = b"".join(garbage[i] + p.encode_instruction(*item) for i, item in enumerate(items)) + garbage[-1]
    parser = p.PacketParser()
    out = [k for chunk in chunked(stream, cuts) for k in parser.feed(chunk)]
    assert [(k.id, k.instruction, k.params, k.error) for k in out] == [(i, n, bytes(d), None) for i, n, d in items]
    assert parser.crc_errors == 0


@settings(max_examples=200, deadline=None)
@given(servo_id, st.integers(0, 255), payload)
def test_status_round_trip_and_stuffing_keeps_headers_out_of_the_body(sid: int, error: int, data: bytes) -> None:
    wire = p.encode_status(sid, error, data)
    assert p.HEADER not in wire[4:]  # stuffing: the body never contains a header
    (packet,) = p.PacketParser().feed(wire)
    assert (packet.id, packet.instruction, packet.error, packet.params) == (sid, p.STATUS, error, data)
    assert p.unstuff(p.stuff(data)) == data
