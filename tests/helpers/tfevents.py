"""A reader of TensorBoard event files written from the file format alone (no writer code shared).

A file is a sequence of TFRecords: uint64 length, uint32 masked CRC-32C of the length,
the payload, uint32 masked CRC-32C of the payload. Each payload is an ``Event`` proto:
1 wall_time (double), 2 step (int64), 3 file_version (string), 5 summary (Summary:
repeated 1 value (Value: 1 tag string, 2 simple_value float)).
"""

from __future__ import annotations

import struct


def _crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    crc = _crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(data: bytes) -> list[bytes]:
    """The payloads, each CRC checked as TensorBoard checks them."""
    out, at = [], 0
    while at < len(data):
        header = data[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        assert struct.unpack("<I", data[at + 8:at + 12])[0] == masked_crc(header), f"bad length CRC at {at}"
        body = data[at + 12:at + 12 + length]
        assert struct.unpack("<I", data[at + 12 + length:at + 16 + length])[0] == masked_crc(body), \
            f"bad payload CRC at {at}"
        out.append(body)
        at += 16 + length
    return out


def _fields(buf: bytes):
    """(field number, wire type, value) of a protobuf message; value is int, bytes or raw fixed bytes."""
    at = 0
    while at < len(buf):
        key, at = _varint(buf, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(buf, at)
        elif wire == 1:
            value, at = buf[at:at + 8], at + 8
        elif wire == 2:
            n, at = _varint(buf, at)
            value, at = buf[at:at + n], at + n
        elif wire == 5:
            value, at = buf[at:at + 4], at + 4
        else:
            raise ValueError(f"wire type {wire}")
        yield number, wire, value


def _varint(buf: bytes, at: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = buf[at]
        at += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return result, at


def scalars(path) -> tuple[str | None, dict]:
    """(file_version, {(step, tag): value}) of one event file."""
    version, out = None, {}
    for body in records(path.read_bytes()):
        step, values = 0, []
        for number, _, value in _fields(body):
            if number == 2:
                step = value
            elif number == 3:
                version = value.decode()
            elif number == 5:
                for n, _, v in _fields(value):
                    if n == 1:
                        item = dict((k, x) for k, _, x in _fields(v))
                        values.append((item[1].decode(), struct.unpack("<f", item[2])[0]))
        for tag, value in values:
            out[(step, tag)] = value
    return version, out
