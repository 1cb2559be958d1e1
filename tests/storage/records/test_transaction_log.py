"""`__transaction_state` records against Kafka's TransactionLogKey v0 / TransactionLogValue v0 and v1 schemas:
what raybroker writes is decoded here field by field with `struct`, as Kafka's generated reader walks the schema,
and a flexible v1 value with tagged fields (what Kafka 4 writes) built the same way by hand is read back."""

from __future__ import annotations

import dataclasses
import struct

import pytest

from storage.errors import CorruptRecordError
from storage.records.transaction_log import (
    TransactionLogValue,
    decode_transaction_log_key,
    decode_transaction_log_value,
    encode_transaction_log_key,
    encode_transaction_log_value,
)

ONGOING = TransactionLogValue(
    producer_id=4000,
    producer_epoch=7,
    transaction_timeout_ms=60_000,
    transaction_status=1,
    partitions=(("orders", 0), ("orders", 3), ("payments", 1)),
    last_update_timestamp_ms=1_700_000_000_123,
    start_timestamp_ms=1_700_000_000_000,
)


def test_key_is_version_0_then_an_int16_length_prefixed_utf8_id() -> None:
    key = encode_transaction_log_key("tx-\u00e9")
    assert key == b"\x00\x00" + struct.pack(">h", 5) + "tx-\u00e9".encode()
    assert decode_transaction_log_key(key) == "tx-\u00e9"
    assert decode_transaction_log_key(b"\x00\x01\x00\x01x") is None


def test_value_v0_reads_field_by_field_as_kafkas_schema_says() -> None:
    value = encode_transaction_log_value(ONGOING)
    position = 0

    def take(fmt: str) -> tuple[int, ...]:
        nonlocal position
        fields = struct.unpack_from(">" + fmt, value, position)
        position += struct.calcsize(">" + fmt)
        return fields

    def string() -> str:
        nonlocal position
        (length,) = take("h")
        text = value[position : position + length].decode()
        position += length
        return text

    assert take("hqhib") == (0, 4000, 7, 60_000, 1)
    (topics,) = take("i")
    partitions = []
    for _ in range(topics):
        topic = string()
        (count,) = take("i")
        partitions.extend((topic, partition) for partition in take("i" * count))
    assert tuple(partitions) == ONGOING.partitions
    assert take("qq") == (1_700_000_000_123, 1_700_000_000_000)
    assert position == len(value)
    assert decode_transaction_log_value(value) == ONGOING


def test_empty_writes_null_partitions_and_complete_an_empty_array() -> None:
    empty = TransactionLogValue(1, 0, 1000, 0, (), 5, -1)
    assert encode_transaction_log_value(empty)[17:21] == struct.pack(">i", -1)
    complete = TransactionLogValue(1, 0, 1000, 4, (), 5, 2)
    assert encode_transaction_log_value(complete)[17:21] == struct.pack(">i", 0)
    assert decode_transaction_log_value(encode_transaction_log_value(empty)) == empty


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def test_a_flexible_v1_value_with_tagged_fields_reads_back() -> None:
    body = struct.pack(">hqhib", 1, 4000, 7, 60_000, 1)
    body += uvarint(2 + 1)
    body += uvarint(len("orders") + 1) + b"orders" + uvarint(2 + 1) + struct.pack(">ii", 0, 3) + uvarint(0)
    # The second entry carries an unknown tagged field, which a reader skips.
    body += uvarint(len("payments") + 1) + b"payments" + uvarint(1 + 1) + struct.pack(">i", 1)
    body += uvarint(1) + uvarint(9) + uvarint(2) + b"\xab\xcd"
    body += struct.pack(">qq", 1_700_000_000_123, 1_700_000_000_000)
    # Kafka 4's value tags: 0 PreviousProducerId (int64), 2 ClientTransactionVersion (int16).
    body += uvarint(2) + uvarint(0) + uvarint(8) + struct.pack(">q", 3999) + uvarint(2) + uvarint(2) + b"\x00\x02"
    assert decode_transaction_log_value(body) == dataclasses.replace(
        ONGOING, previous_producer_id=3999, client_transaction_version=2
    )
    # The same value, written: v1 with exactly those tags, the unknown one gone.
    written = encode_transaction_log_value(decode_transaction_log_value(body))
    assert written == body.replace(uvarint(1) + uvarint(9) + uvarint(2) + b"\xab\xcd", uvarint(0))


def test_a_value_with_a_next_producer_id_is_written_as_v1_and_one_without_tags_as_v0() -> None:
    rotated = dataclasses.replace(ONGOING, next_producer_id=5000, client_transaction_version=2)
    data = encode_transaction_log_value(rotated)
    assert struct.unpack_from(">h", data)[0] == 1
    assert decode_transaction_log_value(data) == rotated
    assert struct.unpack_from(">h", encode_transaction_log_value(ONGOING))[0] == 0


@pytest.mark.parametrize(
    "garbage",
    [
        b"",
        b"\x00",
        b"\x00\x05" + bytes(30),
        encode_transaction_log_value(ONGOING)[:-1],
        struct.pack(">hqhib", 0, 1, 0, 1, 9) + struct.pack(">i", -1) + bytes(16),
        struct.pack(">hqhib", 0, 1, 0, 1, 1) + struct.pack(">i", 1) + struct.pack(">h", 400) + b"x",
        struct.pack(">hqhib", 1, 1, 0, 1, 1) + b"\xff\xff\xff\xff\xff\xff",
    ],
)
def test_malformed_values_raise_corrupt_record_error_only(garbage: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decode_transaction_log_value(garbage)


def test_dead_and_prepare_epoch_fence_are_never_written() -> None:
    for status in (6, 7):
        with pytest.raises(CorruptRecordError):
            encode_transaction_log_value(TransactionLogValue(1, 0, 1, status, (), 0, 0))
