"""Zig-zag varints, the integers of a v2 record: one value at a time, or one at every position of an array; and the
unsigned varints of Kafka's flexible message versions (lengths and tag counts of the internal topics' values).

A value is zig-zag mapped (`(v << 1) ^ (v >> 63)`: 0, -1, 1, -2 ... become 0, 1, 2, 3 ...) and written in
groups of 7 bits, least significant first, with the high bit set on every byte but the last. A varint (int32)
takes at most `VARINT32_MAX_BYTES` bytes, a varlong (int64) at most `VARINT64_MAX_BYTES`.

Decoding is strict, as for every byte read from a log or a fetch: a truncated or over-long encoding, or one whose
value does not fit in 32 / 64 bits (Java's reader silently drops those high bits; no Kafka writer sets them),
raises `CorruptRecordError`. Encoding a value outside int64 raises `InvalidRecordError` (a caller's bad input).
"""

from __future__ import annotations

import numpy as np

from storage.errors import CorruptRecordError, InvalidRecordError

VARINT32_MAX_BYTES = 5
VARINT64_MAX_BYTES = 10
# Zero bytes after a buffer let `decode_varints` read 10 bytes from any position inside it without bounds
# checks (a zero byte ends a varint).
PADDING = bytes(VARINT64_MAX_BYTES)


def encode_unsigned_varint(value: int) -> bytes:
    """A non-negative value in groups of 7 bits, least significant first, without the zig-zag mapping (the
    unsigned varints of Kafka's flexible versions)."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """Zig-zag + base-128 encoding of a signed 64-bit value; `InvalidRecordError` outside int64."""
    if not -(2**63) <= value < 2**63:
        raise InvalidRecordError(f"{value} does not fit in a varlong (int64)")
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while zigzag > 0x7F:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def varint_size(value: int) -> int:
    """Number of bytes `encode_varint(value)` takes."""
    zigzag = (value << 1) ^ (value >> 63)
    size = 1
    while zigzag > 0x7F:
        zigzag >>= 7
        size += 1
    return size


def decode_varint(buffer: bytes | memoryview, position: int, max_bytes: int = VARINT64_MAX_BYTES) -> tuple[int, int]:
    """The varint at `position` (`max_bytes` 5 for a varint, 10 for a varlong) and the position after it."""
    # 5 groups of 7 bits carry 35 bits for a 32-bit zig-zag value, 10 groups carry 70 for a 64-bit one.
    value_bits = 32 if max_bytes <= VARINT32_MAX_BYTES else 64
    result = 0
    shift = 0
    end = len(buffer)
    for _ in range(max_bytes):
        if position >= end:
            raise CorruptRecordError("varint runs past the end of the record data", position=position)
        byte = buffer[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            if result >> value_bits:
                raise CorruptRecordError(f"varint does not fit in {value_bits} bits", position=position)
            return (result >> 1) ^ -(result & 1), position
        shift += 7
    raise CorruptRecordError(f"varint longer than {max_bytes} bytes", position=position)


def decode_varints(data: np.ndarray, positions: np.ndarray, max_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """The varints at every position at once, as int64, and the positions after them (`decode_varint`'s rules).

    `data` (uint8) must extend at least `max_bytes` bytes past every position (see `PADDING`). The first byte of
    every varint is read at once; each later step reads only the varints still going, so a column of one- and
    two-byte varints (lengths, offset deltas) costs one step over all and one over the few that go on.
    """
    first = data[positions]
    result = (first & 0x7F).astype(np.uint64)
    ends = positions + np.int64(1)
    going = (first >= 0x80).nonzero()[0]
    index = 1
    while len(going):
        if index == max_bytes:
            raise CorruptRecordError(f"varint longer than {max_bytes} bytes")
        byte = data[positions[going] + index]
        if index == VARINT64_MAX_BYTES - 1 and bool(((byte & 0x7F) > 1).any()):
            raise CorruptRecordError("varint does not fit in 64 bits")
        result[going] |= (byte & 0x7F).astype(np.uint64) << np.uint64(7 * index)
        ends[going] += 1
        going = going[byte >= 0x80]
        index += 1
    # Four bytes carry 28 bits: only a column with a five-byte varint can pass 32 bits.
    if max_bytes <= VARINT32_MAX_BYTES and index == VARINT32_MAX_BYTES and bool((result >> np.uint64(32)).any()):
        raise CorruptRecordError("varint does not fit in 32 bits")
    # Zig-zag back in uint64 (`-(z & 1)` wraps to all ones), then the same bits read as int64.
    values = (result >> np.uint64(1)) ^ (np.uint64(0) - (result & np.uint64(1)))
    return values.view(np.int64), ends
