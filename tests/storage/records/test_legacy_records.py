"""Legacy (magic 0/1) message sets built by kafka-python, or packed here field by field, decode to their inputs."""

from __future__ import annotations

import struct
import zlib

import lz4.frame
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from storage.errors import CorruptRecordError
from storage.records.compression import CompressionType, compress, decompress
from storage.records.legacy_records import (
    HEADER_SIZE_UP_TO_MAGIC,
    RECORD_OVERHEAD_V0,
    RECORD_OVERHEAD_V1,
    LegacyBatch,
    LegacyRecord,
    iter_legacy_batches,
)

PATH = "/logs/t-0/00000000000000000000.log"
T0 = 1_600_000_000_000
MESSAGES = [
    (T0, b"k0", b"v0"),
    (T0 + 5, None, b"v1"),
    (T0 + 2, b"", None),
    (T0 + 9, b"k3", b""),
    (T0 + 1, None, None),
    (T0 + 7, b"key" * 50, bytes(range(256)) * 4),
]
CODEC_ATTRIBUTES = {CompressionType.GZIP: 1, CompressionType.SNAPPY: 2, CompressionType.LZ4: 3}
LOG_APPEND_TIME = 0x08


def kafka_python_set(magic: int, codec: int, offsets: list[int], messages: list[tuple] = MESSAGES) -> bytearray:
    builder = LegacyRecordBatchBuilder(magic, codec, 1 << 20)
    for offset, (timestamp, key, value) in zip(offsets, messages, strict=True):
        builder.append(offset, timestamp, key, value)
    return bytearray(builder.build())


def at_offset(entry: bytearray, offset: int) -> bytearray:
    """The broker stamps the wrapper's offset in place; the CRC does not cover it."""
    struct.pack_into(">q", entry, 0, offset)
    return entry


def pack_raw(offset: int, magic: int, attributes: int, body: bytes, *, size: int | None = None) -> bytes:
    """One log entry with a correct CRC over magic, attributes and an arbitrary `body`."""
    covered = struct.pack(">bb", magic, attributes) + body
    message = struct.pack(">I", zlib.crc32(covered)) + covered
    return struct.pack(">qi", offset, len(message) if size is None else size) + message


def pack_entry(
    offset: int, magic: int, attributes: int, timestamp: int, key: bytes | None, value: bytes | None
) -> bytes:
    body = struct.pack(">q", timestamp) if magic == 1 else b""
    for field in (key, value):
        body += struct.pack(">i", -1) if field is None else struct.pack(">i", len(field)) + field
    return pack_raw(offset, magic, attributes, body)


def old_kafka_lz4(data: bytes, *, store_size: bool = False) -> bytes:
    """An lz4 frame whose header checksum byte is wrong, as Kafka 0.8/0.9 wrote them for magic 0."""
    frame = bytearray(lz4.frame.compress(data, block_linked=False, store_size=store_size))
    checksum_at = 6 + (8 if store_size else 0)
    frame[checksum_at] ^= 0xA5
    return bytes(frame)


def hand_wrapper(
    magic: int,
    codec: CompressionType,
    inner_offsets: list[int],
    wrapper_offset: int,
    *,
    extra_attributes: int = 0,
    wrapper_timestamp: int = 0,
    messages: list[tuple] = MESSAGES,
) -> bytes:
    inner = bytes(kafka_python_set(magic, 0, inner_offsets, messages))
    value = old_kafka_lz4(inner) if (codec == CompressionType.LZ4 and magic == 0) else compress(codec, inner)
    return pack_entry(wrapper_offset, magic, codec | extra_attributes, wrapper_timestamp, None, value)


def expected(magic: int, offsets: list[int], messages: list[tuple] = MESSAGES) -> list[LegacyRecord]:
    return [
        LegacyRecord(offset, timestamp if magic == 1 else -1, key, value)
        for offset, (timestamp, key, value) in zip(offsets, messages, strict=True)
    ]


def only_batch(data: bytes | bytearray) -> LegacyBatch:
    (batch,) = iter_legacy_batches(bytes(data), path=PATH)
    return batch


@pytest.mark.parametrize("magic", [0, 1])
def test_uncompressed_set_yields_one_batch_per_message(magic: int) -> None:
    offsets = list(range(100, 100 + len(MESSAGES)))
    data = bytes(kafka_python_set(magic, 0, offsets))

    batches = list(iter_legacy_batches(data, path=PATH, base_position=4096))

    assert [record for batch in batches for record in batch.records()] == expected(magic, offsets)
    assert [batch.offset for batch in batches] == offsets
    assert [batch.base_offset for batch in batches] == offsets
    assert [batch.last_offset for batch in batches] == offsets
    assert sum(batch.size_in_bytes for batch in batches) == len(data)
    assert batches[0].position == 4096
    assert [b.position for b in batches[1:]] == [b.position + b.size_in_bytes for b in batches[:-1]]
    for batch, (timestamp, key, value) in zip(batches, MESSAGES, strict=True):
        assert batch.magic == magic
        assert batch.compression == CompressionType.NONE
        assert batch.is_valid()
        batch.ensure_valid()
        assert (batch.key, batch.value) == (key, value)
        assert batch.timestamp == (timestamp if magic == 1 else -1)
        assert batch.timestamp_type == 0
        assert batch.timestamp_type_name == ("CreateTime" if magic == 1 else "NoTimestampType")
        assert batch.size_in_bytes >= 12 + (RECORD_OVERHEAD_V1 if magic == 1 else RECORD_OVERHEAD_V0)


def test_minimum_messages_are_14_and_22_bytes() -> None:
    v0 = pack_entry(3, 0, 0, 0, None, None)
    v1 = pack_entry(4, 1, 0, T0, None, None)

    assert (len(v0), len(v1)) == (12 + RECORD_OVERHEAD_V0, 12 + RECORD_OVERHEAD_V1) == (26, 34)
    assert [b.records() for b in iter_legacy_batches(v0 + v1)] == [
        [LegacyRecord(3, -1, None, None)],
        [LegacyRecord(4, T0, None, None)],
    ]


@pytest.mark.parametrize(
    ("magic", "codec"),
    [(0, CompressionType.GZIP), (1, CompressionType.GZIP), (1, CompressionType.LZ4)],
)
def test_kafka_python_wrapper_yields_inner_records_at_absolute_offsets(magic: int, codec: CompressionType) -> None:
    last = 1000 + len(MESSAGES) - 1
    # kafka-python writes what a producer sends: magic 1 inner offsets relative, magic 0 absolute; wrapper 0.
    inner_offsets = list(range(len(MESSAGES))) if magic == 1 else list(range(1000, last + 1))
    wrapper = at_offset(kafka_python_set(magic, CODEC_ATTRIBUTES[codec], inner_offsets), last)

    batch = only_batch(wrapper)

    assert batch.compression == codec
    assert batch.is_valid()
    assert batch.key is None
    assert (batch.offset, batch.last_offset, batch.base_offset) == (last, last, 1000)
    assert batch.records() == expected(magic, list(range(1000, last + 1)))


@pytest.mark.parametrize("magic", [0, 1])
def test_kafka_python_snappy_wrapper_decodes(magic: int) -> None:
    pytest.importorskip("snappy", reason="kafka-python needs python-snappy to write snappy")
    inner_offsets = list(range(len(MESSAGES))) if magic == 1 else list(range(10, 10 + len(MESSAGES)))
    wrapper = at_offset(kafka_python_set(magic, 2, inner_offsets), 10 + len(MESSAGES) - 1)

    assert only_batch(wrapper).records() == expected(magic, list(range(10, 10 + len(MESSAGES))))


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4])
def test_hand_built_wrapper_yields_inner_records(magic: int, codec: CompressionType) -> None:
    absolute = list(range(7, 7 + len(MESSAGES)))
    inner_offsets = list(range(len(MESSAGES))) if magic == 1 else absolute
    data = hand_wrapper(magic, codec, inner_offsets, absolute[-1], wrapper_timestamp=T0 + 9)

    batch = only_batch(data)

    assert batch.compression == codec
    assert batch.timestamp_type_name == ("CreateTime" if magic == 1 else "NoTimestampType")
    assert batch.records() == expected(magic, absolute)


@pytest.mark.parametrize("store_size", [False, True])
def test_magic0_lz4_with_kafka_08_header_checksum_decodes(store_size: bool) -> None:
    inner = bytes(kafka_python_set(0, 0, [40, 41, 42], MESSAGES[:3]))
    frame = old_kafka_lz4(inner, store_size=store_size)
    with pytest.raises(CorruptRecordError):
        decompress(CompressionType.LZ4, frame)

    batch = only_batch(pack_entry(42, 0, 3, 0, None, frame))

    assert batch.records() == expected(0, [40, 41, 42], MESSAGES[:3])


def test_magic1_lz4_with_wrong_header_checksum_is_corrupt() -> None:
    inner = bytes(kafka_python_set(1, 0, [0, 1, 2], MESSAGES[:3]))
    batch = only_batch(pack_entry(2, 1, 3, 0, None, old_kafka_lz4(inner)))

    with pytest.raises(CorruptRecordError) as info:
        batch.records()
    assert (info.value.path, info.value.position) == (PATH, 0)


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.GZIP])
def test_log_append_time_gives_records_the_wrapper_timestamp(codec: CompressionType) -> None:
    stamp = T0 + 60_000
    if codec == CompressionType.NONE:
        data = pack_entry(5, 1, LOG_APPEND_TIME, stamp, b"k", b"v")
        offsets = [5]
    else:
        data = hand_wrapper(
            1, codec, [0, 1, 2], 7, extra_attributes=LOG_APPEND_TIME, wrapper_timestamp=stamp, messages=MESSAGES[:3]
        )
        offsets = [5, 6, 7]

    batch = only_batch(data)

    assert (batch.timestamp_type, batch.timestamp_type_name, batch.timestamp) == (1, "LogAppendTime", stamp)
    assert [record.timestamp for record in batch.records()] == [stamp] * len(offsets)
    assert [record.offset for record in batch.records()] == offsets


def test_magic0_ignores_the_timestamp_type_bit() -> None:
    batch = only_batch(pack_entry(0, 0, LOG_APPEND_TIME, 0, b"k", b"v"))

    assert (batch.timestamp_type, batch.timestamp_type_name, batch.timestamp) == (0, "NoTimestampType", -1)


def test_wrapper_offset_zero_reads_inner_offsets_from_zero() -> None:
    # Kafka's DeepRecordsIterator: some librdkafka versions left the magic 1 wrapper offset at 0.
    batch = only_batch(hand_wrapper(1, CompressionType.GZIP, [0, 1, 2], 0, messages=MESSAGES[:3]))

    assert [record.offset for record in batch.records()] == [0, 1, 2]


def mixed_set() -> tuple[bytes, list[int], list[list[int]]]:
    """Plain v1 entries, a v1 gzip wrapper, then plain v0: (bytes, entry starts, offsets per entry)."""
    entries = [
        bytes(kafka_python_set(1, 0, [0], MESSAGES[:1])),
        bytes(kafka_python_set(1, 0, [1], MESSAGES[1:2])),
        hand_wrapper(1, CompressionType.GZIP, [0, 1, 2], 4, messages=MESSAGES[2:5]),
        pack_entry(5, 0, 0, 0, b"x", b"y" * 40),
        pack_entry(6, 0, 0, 0, None, None),
    ]
    starts = [sum(len(e) for e in entries[:i]) for i in range(len(entries))]
    return b"".join(entries), starts, [[0], [1], [2, 3, 4], [5], [6]]


def test_truncated_tail_at_every_byte_yields_only_complete_entries() -> None:
    data, starts, offsets = mixed_set()
    ends = [*starts[1:], len(data)]

    for cut in range(len(data) + 1):
        batches = list(iter_legacy_batches(data[:cut], path=PATH, base_position=100))
        complete = [i for i, end in enumerate(ends) if end <= cut]
        assert [b.position for b in batches] == [100 + starts[i] for i in complete], cut
        assert [[r.offset for r in b.records()] for b in batches] == [offsets[i] for i in complete], cut


def test_tail_of_17_bytes_is_ignored_and_18_bytes_are_read_like_kafka() -> None:
    data, _, _ = mixed_set()

    assert len(list(iter_legacy_batches(data + bytes(HEADER_SIZE_UP_TO_MAGIC)))) == 5
    with pytest.raises(CorruptRecordError) as info:
        list(iter_legacy_batches(data + bytes(HEADER_SIZE_UP_TO_MAGIC + 1), path=PATH, base_position=8))
    assert (info.value.path, info.value.position) == (PATH, 8 + len(data))


@pytest.mark.parametrize("size", [-(2**31), -1, 0, 1, RECORD_OVERHEAD_V0 - 1])
def test_size_below_minimum_is_corrupt(size: int) -> None:
    good = pack_entry(0, 1, 0, T0, b"k", b"v")
    data = good + struct.pack(">qi", 1, size) + bytes(40)

    with pytest.raises(CorruptRecordError) as info:
        list(iter_legacy_batches(data, path=PATH))
    assert (info.value.path, info.value.position) == (PATH, len(good))


def test_preallocated_zero_tail_is_corrupt() -> None:
    data, _, _ = mixed_set()

    with pytest.raises(CorruptRecordError):
        list(iter_legacy_batches(data + bytes(4096)))


@pytest.mark.parametrize("size", [RECORD_OVERHEAD_V0, RECORD_OVERHEAD_V1 - 1])
def test_magic1_message_shorter_than_22_bytes_is_corrupt(size: int) -> None:
    data = pack_raw(0, 1, 0, bytes(size - 6))

    with pytest.raises(CorruptRecordError):
        list(iter_legacy_batches(data))


@pytest.mark.parametrize("magic", [2, 3, -1])
def test_non_legacy_magic_is_corrupt(magic: int) -> None:
    with pytest.raises(CorruptRecordError):
        list(iter_legacy_batches(pack_raw(0, magic, 0, bytes(30))))


def test_batch_shorter_than_its_declared_size_is_corrupt() -> None:
    data = pack_entry(9, 1, 0, T0, b"k", b"value")

    with pytest.raises(CorruptRecordError) as info:
        LegacyBatch(data[:-1], path=PATH, file_position=777)
    assert (info.value.path, info.value.position) == (PATH, 777)
    with pytest.raises(CorruptRecordError):
        LegacyBatch(data[:10])


def test_batch_reads_at_a_position_inside_the_buffer() -> None:
    data, starts, _ = mixed_set()

    batch = LegacyBatch(memoryview(data), starts[2], file_position=starts[2])

    assert (batch.position, batch.offset, batch.base_offset) == (starts[2], 4, 2)


@pytest.mark.parametrize("magic", [0, 1])
def test_every_flipped_byte_after_the_size_is_detected(magic: int) -> None:
    entries = [
        pack_entry(3, magic, 0, T0, b"key", b"value"),
        hand_wrapper(magic, CompressionType.GZIP, [0, 1] if magic else [2, 3], 3, messages=MESSAGES[:2]),
    ]
    for entry in entries:
        for index in range(12, len(entry)):
            damaged = bytearray(entry)
            damaged[index] ^= 0x10
            try:
                batch = LegacyBatch(bytes(damaged), path=PATH, file_position=64)
            except CorruptRecordError:
                continue
            assert not batch.is_valid(), index
            with pytest.raises(CorruptRecordError) as info:
                batch.ensure_valid()
            assert (info.value.path, info.value.position) == (PATH, 64)


def test_crc_does_not_cover_the_offset() -> None:
    damaged = bytearray(pack_entry(3, 1, 0, T0, b"key", b"value"))
    damaged[7] ^= 0x01

    batch = only_batch(damaged)

    assert batch.is_valid()
    assert batch.offset == 2


V1_TS = struct.pack(">q", T0)


@pytest.mark.parametrize(
    "body",
    [
        V1_TS + struct.pack(">i", 2**31 - 1) + struct.pack(">i", -1),
        V1_TS + struct.pack(">i", -2) + struct.pack(">i", -1),
        V1_TS + struct.pack(">i", -1) + struct.pack(">i", 10) + b"abc",
        V1_TS + struct.pack(">i", -1) + struct.pack(">i", -7),
        V1_TS + struct.pack(">i", 8) + b"abcd" + struct.pack(">i", -1),
        V1_TS + struct.pack(">i", -1) + struct.pack(">i", 1) + b"ab",
    ],
    ids=["huge-key", "key-minus-2", "value-overruns", "value-minus-7", "key-eats-value-length", "trailing-byte"],
)
def test_bad_key_or_value_lengths_are_corrupt(body: bytes) -> None:
    batch = only_batch(pack_raw(0, 1, 0, body))

    assert batch.is_valid()
    for decode in (lambda: batch.key, lambda: batch.value, batch.records):
        with pytest.raises(CorruptRecordError) as info:
            decode()
        assert (info.value.path, info.value.position) == (PATH, 0)


@pytest.mark.parametrize("codec_id", [4, 5, 7])
def test_codec_ids_beyond_lz4_are_corrupt(codec_id: int) -> None:
    batch = only_batch(pack_entry(0, 1, codec_id, T0, None, compress(CompressionType.ZSTD, b"x")))

    with pytest.raises(CorruptRecordError):
        _ = batch.compression
    with pytest.raises(CorruptRecordError):
        batch.records()


def gzip_wrapper(magic: int, inner: bytes, offset: int = 10) -> bytes:
    return pack_entry(offset, magic, 1, T0, None, compress(CompressionType.GZIP, inner))


def v1_inner(offsets: list[int]) -> bytes:
    return bytes(kafka_python_set(1, 0, offsets, MESSAGES[: len(offsets)]))


@pytest.mark.parametrize(
    "wrapper",
    [
        pytest.param(
            gzip_wrapper(1, hand_wrapper(1, CompressionType.GZIP, [0], 0, messages=MESSAGES[:1])), id="nested"
        ),
        pytest.param(gzip_wrapper(1, v1_inner([0, 0])), id="v1-offsets-repeat"),
        pytest.param(gzip_wrapper(1, v1_inner([1, 0])), id="v1-offsets-decrease"),
        pytest.param(gzip_wrapper(0, bytes(kafka_python_set(0, 0, [5, 3], MESSAGES[:2]))), id="v0-offsets-decrease"),
        pytest.param(gzip_wrapper(0, bytes(kafka_python_set(0, 0, [-3, -2], MESSAGES[:2]))), id="v0-negative"),
        pytest.param(gzip_wrapper(1, v1_inner([0, 1, 2, 3]), offset=2), id="wrapper-below-last-inner"),
        pytest.param(pack_entry(10, 1, 1, T0, None, None), id="null-value"),
        pytest.param(gzip_wrapper(1, b""), id="no-inner-messages"),
        pytest.param(pack_entry(10, 1, 1, T0, None, b"not gzip at all"), id="bad-gzip"),
        pytest.param(
            pack_entry(10, 1, 2, T0, None, b"\x82SNAPPY\x00" + bytes(8) + b"\x00\x00\x00\x09"), id="bad-snappy"
        ),
        pytest.param(pack_entry(10, 0, 3, 0, None, b"\x04\x22\x4d\x18"), id="old-lz4-magic-only"),
        pytest.param(pack_entry(10, 0, 3, 0, None, b"\x04\x22\x4d\x18\x60"), id="short-old-lz4-header"),
        pytest.param(gzip_wrapper(1, v1_inner([0, 1])[:-1]), id="truncated-inner"),
        pytest.param(gzip_wrapper(1, v1_inner([0, 1]) + bytes(5)), id="inner-tail-garbage"),
        pytest.param(gzip_wrapper(1, bytes(kafka_python_set(0, 0, [0], MESSAGES[:1]))), id="inner-magic-differs"),
        pytest.param(gzip_wrapper(1, v1_inner([0])[:-1] + b"!"), id="inner-crc"),
    ],
)
def test_bad_wrapper_is_corrupt(wrapper: bytes) -> None:
    batch = only_batch(wrapper)

    assert batch.is_valid()
    with pytest.raises(CorruptRecordError) as info:
        batch.records()
    assert (info.value.path, info.value.position) == (PATH, 0)
    with pytest.raises(CorruptRecordError):
        _ = batch.base_offset


def exercise(data: bytes) -> None:
    """Decode everything; only CorruptRecordError may escape."""
    try:
        for batch in iter_legacy_batches(data, path=PATH):
            batch.is_valid()
            for decode in (
                batch.records,
                lambda b=batch: b.base_offset,
                lambda b=batch: (b.key, b.value),
                lambda b=batch: (b.compression, b.timestamp_type_name, b.last_offset),
            ):
                try:
                    decode()
                except CorruptRecordError as exc:
                    assert exc.path == PATH
    except CorruptRecordError as exc:
        assert exc.path == PATH


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_fuzz_arbitrary_bytes_raise_only_corrupt_record_error(data: bytes) -> None:
    exercise(data)


FUZZ_SEED, _, _ = mixed_set()


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, len(FUZZ_SEED) - 1), st.integers(0, 255)), min_size=1, max_size=4),
    st.integers(0, len(FUZZ_SEED)),
    st.booleans(),
)
def test_fuzz_mutated_sets_raise_only_corrupt_record_error(
    mutations: list[tuple[int, int]], cut: int, fix_crcs: bool
) -> None:
    data = bytearray(FUZZ_SEED)
    for index, byte in mutations:
        data[index] = byte
    if fix_crcs:
        position = 0
        # Re-sign each entry so the mutation reaches the decoders behind the CRC check.
        while len(data) - position >= 26:
            (size,) = struct.unpack_from(">i", data, position + 8)
            if size < 14 or position + 12 + size > len(data):
                break
            struct.pack_into(">I", data, position + 12, zlib.crc32(data[position + 16 : position + 12 + size]))
            position += 12 + size
    exercise(bytes(data[:cut]))
