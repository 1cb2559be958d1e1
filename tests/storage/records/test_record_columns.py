"""Tests for `storage.records.record_columns`: the column encoder writes exactly the bytes of `RecordBatchBuilder` and
of kafka-python's builder, and the column decoder accepts, decodes and refuses exactly what the per-record
`decode_records` does (the oracle), on random record sets and on damaged sections."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.errors import CorruptRecordError, InvalidRecordError
from storage.records import record_columns
from storage.records.compression import CompressionType
from storage.records.layout import RECORD_BATCH_OVERHEAD, TimestampType
from storage.records.record import Record
from storage.records.record_batch import RecordBatch, RecordBatchBuilder
from storage.records.record_columns import (
    build_batch_from_columns,
    decode_records,
    decode_records_columns,
    encode_records_section,
    summarize_records_section,
)
from storage.records.varint import (
    PADDING,
    VARINT32_MAX_BYTES,
    VARINT64_MAX_BYTES,
    decode_varint,
    decode_varints,
    encode_varint,
)
from tests.storage.builders import START_MS, Rec, kafka_batch

Header = tuple[str, bytes | None]

blobs = st.one_of(st.none(), st.binary(max_size=40), st.sampled_from([b"", b"x" * 300, b"y" * 9000]))
timestamps = st.integers(START_MS - 10**6, START_MS + 10**9)


def builder_batch(
    values: list[bytes | None],
    keys: list[bytes | None] | None,
    stamps: list[int],
    headers: list[tuple[Header, ...]] | None = None,
    **options: object,
) -> bytes:
    builder = RecordBatchBuilder(**options)  # type: ignore[arg-type]
    for index, value in enumerate(values):
        key = None if keys is None else keys[index]
        builder.append(key, value, timestamp=stamps[index], headers=() if headers is None else headers[index])
    return builder.build()


def oracle(section: bytes, count: int) -> list[Record]:
    return decode_records(section, count, 0, 0, None)


@st.composite
def record_sets(draw: st.DrawFn) -> tuple[list[bytes | None], list[bytes | None] | None, list[int]]:
    count = draw(st.integers(0, 80))
    values = draw(st.lists(blobs, min_size=count, max_size=count))
    keys = draw(st.one_of(st.none(), st.lists(blobs, min_size=count, max_size=count)))
    stamps = draw(st.lists(timestamps, min_size=count, max_size=count))
    return values, keys, stamps


# --- encoding ----------------------------------------------------------------------------------------


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record_sets())
def test_column_batch_is_byte_identical_to_the_builder(records: tuple) -> None:
    values, keys, stamps = records
    assert build_batch_from_columns(values, keys, stamps) == builder_batch(values, keys, stamps)


@settings(max_examples=30, deadline=None)
@given(record_sets(), st.sampled_from(list(CompressionType)), st.integers(0, 2**40), st.integers(0, 2**20))
def test_column_batch_matches_builder_with_codec_and_producer_fields(
    records: tuple, compression: CompressionType, producer_id: int, base_sequence: int
) -> None:
    values, keys, stamps = records
    options = {
        "compression": compression,
        "producer_id": producer_id,
        "producer_epoch": 3,
        "base_sequence": base_sequence,
        "is_transactional": True,
        "partition_leader_epoch": 7,
        "base_offset": 42,
    }
    ours = build_batch_from_columns(values, keys, stamps, **options)  # type: ignore[arg-type]
    if compression == CompressionType.NONE:
        assert ours == builder_batch(values, keys, stamps, **options)
    else:
        assert RecordBatch(ours).records() == RecordBatch(builder_batch(values, keys, stamps, **options)).records()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(blobs, blobs, timestamps), max_size=60))
def test_column_batch_is_byte_identical_to_kafka_python(rows: list[tuple]) -> None:
    keys = [key for key, _, _ in rows]
    values = [value for _, value, _ in rows]
    stamps = [stamp for _, _, stamp in rows]
    if rows:
        expected = kafka_batch([Rec(key, value, stamp) for key, value, stamp in rows])
        assert build_batch_from_columns(values, keys, stamps, partition_leader_epoch=0) == expected


def test_one_timestamp_for_every_record_and_numpy_timestamps() -> None:
    values = [b"a", None, b""]
    expected = builder_batch(values, None, [START_MS] * 3)
    assert build_batch_from_columns(values, None, START_MS) == expected
    assert build_batch_from_columns(values, None, np.array([START_MS] * 3, dtype=np.int64)) == expected


def test_empty_column_batch_matches_an_empty_builder() -> None:
    assert build_batch_from_columns([], None, []) == RecordBatchBuilder().build()


def test_timestamps_below_minus_one_keep_max_timestamp_at_minus_one_like_the_builder() -> None:
    stamps = [-5, -3]
    assert build_batch_from_columns([b"v", b"w"], None, stamps) == builder_batch([b"v", b"w"], None, stamps)


def test_big_values_and_many_records_use_wide_varints_identically() -> None:
    values = [bytes([index % 251]) * (index * 37 % 70_000) for index in range(40)]
    keys = [b"k" * (index * 131 % 9000) for index in range(40)]
    stamps = [START_MS + index * 10**7 for index in range(40)]
    assert build_batch_from_columns(values, keys, stamps) == builder_batch(values, keys, stamps)
    many = [b"v" * 10] * 20_000
    many_stamps = [START_MS - index for index in range(20_000)]
    assert build_batch_from_columns(many, None, many_stamps) == builder_batch(many, None, many_stamps)


def test_records_section_equals_the_builder_section() -> None:
    values, keys, deltas = [b"a", b"bb", None], [None, b"k", b""], [0, -70, 10**12]
    built = builder_batch(values, keys, [START_MS + delta for delta in deltas])
    assert encode_records_section(values, keys, deltas) == built[RECORD_BATCH_OVERHEAD:]
    assert encode_records_section([b"x", b"y"]) == builder_batch([b"x", b"y"], None, [1, 1])[RECORD_BATCH_OVERHEAD:]


@pytest.mark.parametrize(
    ("values", "keys", "stamps"),
    [
        ([b"a", b"b"], [b"k"], [1, 2]),
        ([b"a", b"b"], None, [1]),
        (["text"], None, [1]),
        ([b"a"], [17], [1]),
        ([b"a"], None, ["soon"]),
        ([b"a", b"b"], None, [-(2**63), 2**63 - 1]),
    ],
    ids=["short_keys", "short_timestamps", "str_value", "int_key", "str_timestamp", "delta_overflows_int64"],
)
def test_bad_columns_raise_invalid_record(values: list, keys: list | None, stamps: list) -> None:
    with pytest.raises(InvalidRecordError):
        build_batch_from_columns(values, keys, stamps)


# --- encoding: the fixed-layout fast path -----------------------------------------------------------


def batch_from(min_records: int, *args: object) -> bytes:
    """`build_batch_from_columns` with the fixed layout tried from `min_records` records on."""
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(record_columns, "FIXED_LAYOUT_MIN_RECORDS", min_records)
        return build_batch_from_columns(*args)  # type: ignore[arg-type]


def per_record_batch(*args: object) -> bytes:
    return batch_from(1 << 62, *args)


def fixed_layout_batch(*args: object) -> bytes:
    """Through the fixed layout whenever the columns allow it, whatever their size."""
    return batch_from(1, *args)


def takes_fast_path(values: list, keys: list | None, stamps: int | list, base: int | None = None) -> bool:
    """Whether the fixed-layout writer takes these columns (base: the first timestamp unless given)."""
    if base is None:
        base = stamps if isinstance(stamps, int) else stamps[0]
    return record_columns._encode_fixed_layout(values, keys, stamps, base) is not None


KEY_KINDS = {
    "null_column": lambda count: None,
    "null_keys": lambda count: [None] * count,
    "fixed_keys": lambda count: [b"key-%012d" % index for index in range(count)],
}
STAMP_KINDS = {
    "one_timestamp": lambda count: START_MS,
    "one_per_record": lambda count: [START_MS] * count,
    "spread_63ms": lambda count: [START_MS + (index * 7) % 64 for index in range(count)],
    "falling_63ms": lambda count: [START_MS - index % 64 for index in range(count)],
    "growing_past_8s": lambda count: [START_MS + index * 3 for index in range(count)],
}


@pytest.mark.parametrize("count", [63, 64, 65, 8191, 8192, 8193])
@pytest.mark.parametrize("key_kind", list(KEY_KINDS))
@pytest.mark.parametrize("value_size", [0, 100])
@pytest.mark.parametrize("stamp_kind", list(STAMP_KINDS))
def test_fixed_layout_runs_across_offset_width_boundaries_match_per_record_path_and_builder(
    count: int, key_kind: str, value_size: int, stamp_kind: str
) -> None:
    values = [bytes([index % 251]) * value_size for index in range(count)]
    keys = KEY_KINDS[key_kind](count)
    stamps = STAMP_KINDS[stamp_kind](count)
    assert takes_fast_path(values, keys, stamps)
    fast = fixed_layout_batch(values, keys, stamps)
    per_stamp = [stamps] * count if isinstance(stamps, int) else stamps
    assert fast == per_record_batch(values, keys, stamps) == builder_batch(values, keys, per_stamp)


def test_fixed_layout_of_tombstones_and_big_values_matches_the_builder() -> None:
    tombstones = [None] * 200
    keys = [b"k" * 9000] * 200
    assert takes_fast_path(tombstones, keys, START_MS)
    assert fixed_layout_batch(tombstones, keys, START_MS) == builder_batch(tombstones, keys, [START_MS] * 200)
    big = [b"v" * 70_000] * 100
    assert takes_fast_path(big, None, START_MS)
    assert fixed_layout_batch(big, None, START_MS) == builder_batch(big, None, [START_MS] * 100)


def test_fixed_layout_batch_is_byte_identical_to_kafka_python() -> None:
    values = [bytes([index % 256]) * 100 for index in range(9000)]
    stamps = [START_MS + index % 50 for index in range(9000)]
    expected = kafka_batch([Rec(None, value, stamp) for value, stamp in zip(values, stamps, strict=True)])
    assert takes_fast_path(values, None, stamps)
    assert build_batch_from_columns(values, None, stamps, partition_leader_epoch=0) == expected


@pytest.mark.parametrize(
    "deltas",
    [
        [-(index % 64) for index in range(300)],
        [-100 - (index * 997) % 8000 for index in range(300)],
        [10**12 + index for index in range(300)],
    ],
    ids=["one_byte", "two_bytes", "six_bytes"],
)
def test_fixed_layout_records_section_with_wide_timestamp_deltas_matches_the_per_record_path(
    monkeypatch: pytest.MonkeyPatch, deltas: list[int]
) -> None:
    values = [b"x" * 30] * 300
    assert takes_fast_path(values, None, deltas, base=0)
    fast = encode_records_section(values, None, deltas)
    monkeypatch.setattr(record_columns, "FIXED_LAYOUT_MIN_RECORDS", 1 << 62)
    assert fast == encode_records_section(values, None, deltas)
    # The builder writes deltas from the first timestamp: only the one-byte set starts at delta 0.
    if deltas[0] == 0:
        built = builder_batch(values, None, [START_MS + delta for delta in deltas])
        assert fast == built[RECORD_BATCH_OVERHEAD:]
    assert encode_records_section(values) == builder_batch(values, None, [1] * 300)[RECORD_BATCH_OVERHEAD:]


MIXED = {
    "value_lengths_differ": ([b"a"] * 199 + [b"bb"], None, START_MS),
    "one_null_value": ([b"a"] * 199 + [None], None, START_MS),
    "key_lengths_differ": ([b"a"] * 200, [b"k"] * 199 + [b""], START_MS),
    "one_null_key": ([b"a"] * 200, [b"k"] * 199 + [None], START_MS),
    "width_changes_9_times": ([b"a"] * 200, None, [START_MS + 64 * (index // 20 % 2) for index in range(200)]),
    "width_changes_every_record": ([b"a"] * 200, None, [START_MS - 65 * (index % 2) for index in range(200)]),
}


@pytest.mark.parametrize("name", list(MIXED))
def test_mixed_layouts_fall_back_to_the_per_record_path(name: str) -> None:
    values, keys, stamps = MIXED[name]
    assert not takes_fast_path(values, keys, stamps)
    per_stamp = [stamps] * len(values) if isinstance(stamps, int) else stamps
    assert build_batch_from_columns(values, keys, stamps) == builder_batch(values, keys, per_stamp)


@pytest.mark.parametrize(
    ("values", "keys", "stamps"),
    [
        (["text"] * 200, None, [1] * 200),
        ([b"a"] * 200, [17] * 200, [1] * 200),
        ([b"a"] * 200, None, [1.5] * 200),
        ([b"a"] * 200, None, [-(2**63)] + [2**63 - 1] * 199),
        ([b"a"] * 200, None, [b"a"] * 200),
    ],
    ids=["str_values", "int_keys", "float_timestamps", "delta_overflows_int64", "bytes_timestamps"],
)
def test_bad_uniform_columns_raise_invalid_record_like_the_per_record_path(
    values: list, keys: list | None, stamps: list
) -> None:
    assert not takes_fast_path(values, keys, stamps)
    with pytest.raises(InvalidRecordError):
        build_batch_from_columns(values, keys, stamps)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    count=st.one_of(st.integers(0, 300), st.sampled_from([63, 64, 65, 8191, 8192, 8193])),
    value_size=st.one_of(st.none(), st.integers(0, 200)),
    key_size=st.one_of(st.none(), st.integers(0, 40)),
    spread_ms=st.sampled_from([0, 1, 63, 64, 8191, 10**12]),
    data=st.data(),
)
def test_uniform_columns_of_any_size_match_the_per_record_path(
    count: int,
    value_size: int | None,
    key_size: int | None,
    spread_ms: int,
    data: st.DataObject,
) -> None:
    values = [None if value_size is None else bytes([index % 256]) * value_size for index in range(count)]
    keys = [None if key_size is None else b"k" * key_size for _ in range(count)]
    stamps = [START_MS + data.draw(st.integers(-spread_ms, spread_ms)) for _ in range(min(count, 5))]
    stamps += [START_MS] * (count - len(stamps))
    expected = per_record_batch(values, keys, stamps)
    assert fixed_layout_batch(values, keys, stamps) == expected
    assert build_batch_from_columns(values, keys, stamps) == expected
    if count <= 300:
        assert expected == builder_batch(values, keys, stamps)


# --- decoding ----------------------------------------------------------------------------------------


@st.composite
def sections(draw: st.DrawFn) -> tuple[bytes, int]:
    """A records section from the builder: random records, some with headers (the generic decoding path)."""
    values, keys, stamps = draw(record_sets())
    header_lists = st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))), max_size=2)
    headers = [tuple(draw(header_lists)) for _ in values]
    data = builder_batch(values, keys, stamps, headers=headers)
    return data[RECORD_BATCH_OVERHEAD:], len(values)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sections())
def test_columns_decode_what_the_record_decoder_decodes(section_and_count: tuple[bytes, int]) -> None:
    section, count = section_and_count
    assert decode_records_columns(section, count).records(0, 0, None) == oracle(section, count)
    assert decode_records_columns(memoryview(section), count).records(0, 0, None) == oracle(section, count)


def uniform_section(count: int, value_size: int, *, keyed: bool = True, step_ms: int = 1) -> tuple[bytes, list[int]]:
    values = [bytes([index % 256]) * value_size for index in range(count)]
    keys = [b"key-%06d" % index for index in range(count)] if keyed else None
    stamps = [START_MS + index * step_ms for index in range(count)]
    return builder_batch(values, keys, stamps)[RECORD_BATCH_OVERHEAD:], stamps


@pytest.mark.parametrize("count", [1, 15, 16, 63, 64, 65, 300, 9_000])
def test_runs_of_same_sized_records_decode_like_the_record_decoder(count: int) -> None:
    section, _ = uniform_section(count, 100)
    columns = decode_records_columns(section, count)
    assert columns.records(0, 0, None) == oracle(section, count)
    assert columns.keys()[-1] == b"key-%06d" % (count - 1)
    assert (columns.offset_deltas == np.arange(count)).all()


def test_runs_broken_by_one_odd_record_in_the_middle() -> None:
    values = [b"v" * 50] * 500
    values[250] = None
    values[251] = b"w" * 8000
    stamps = [START_MS + index for index in range(500)]
    section = builder_batch(values, [b"k"] * 500, stamps)[RECORD_BATCH_OVERHEAD:]
    assert decode_records_columns(section, 500).records(0, 0, None) == oracle(section, 500)


def test_records_apply_base_offset_base_timestamp_and_log_append_time() -> None:
    section, stamps = uniform_section(40, 3)
    columns = decode_records_columns(section, 40)
    records = columns.records(1000, START_MS, None)
    assert [record.offset for record in records] == list(range(1000, 1040))
    assert [record.timestamp - START_MS for record in records] == [stamp - START_MS for stamp in stamps]
    assert {record.timestamp for record in columns.records(0, START_MS, 99)} == {99}


def test_record_batch_records_use_columns_for_big_batches_with_log_append_time() -> None:
    builder = RecordBatchBuilder(timestamp_type=TimestampType.LOG_APPEND_TIME)
    for index in range(100):
        builder.append(None, b"v%d" % index, timestamp=START_MS + index)
    batch = RecordBatch(builder.build())
    assert [record.timestamp for record in batch.records()] == [batch.max_timestamp] * 100
    assert [record.value for record in batch.records()] == [b"v%d" % index for index in range(100)]


def test_body_starts_and_lengths_frame_every_record() -> None:
    section, _ = uniform_section(70, 20)
    columns = decode_records_columns(section, 70)
    starts, lengths = columns.body_starts, columns.body_ends - columns.body_starts
    assert starts[-1] + lengths[-1] == len(section)
    assert (starts[1:] > starts[:-1] + lengths[:-1]).all()


def test_summary_gives_timestamp_deltas_and_first_null_key() -> None:
    values = [b"v"] * 100
    keys: list[bytes | None] = [b"k"] * 100
    keys[77] = None
    stamps = [START_MS + (index * 7919) % 1000 - 500 for index in range(100)]
    section = builder_batch(values, keys, stamps)[RECORD_BATCH_OVERHEAD:]
    summary = summarize_records_section(section, 100)
    assert summary.timestamp_deltas.tolist() == [stamp - stamps[0] for stamp in stamps]
    assert summary.first_null_key == 77
    all_keyed, _ = uniform_section(100, 5)
    assert summarize_records_section(all_keyed, 100).first_null_key is None


def decoder_outcome(section: bytes, count: int) -> list[Record] | type[Exception]:
    try:
        return oracle(section, count)
    except CorruptRecordError:
        return CorruptRecordError


def columns_outcome(section: bytes, count: int) -> list[Record] | type[Exception]:
    try:
        return decode_records_columns(section, count).records(0, 0, None)
    except CorruptRecordError:
        return CorruptRecordError


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sections(), st.data())
def test_damaged_sections_are_refused_exactly_when_the_record_decoder_refuses(
    section_and_count: tuple[bytes, int], data: st.DataObject
) -> None:
    section, count = section_and_count
    damaged = bytearray(section)
    for _ in range(data.draw(st.integers(1, 3))):
        if damaged:
            damaged[data.draw(st.integers(0, len(damaged) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(damaged)))
    damaged_bytes = bytes(damaged[: data.draw(st.sampled_from([cut, len(damaged)]))])
    claimed = count + data.draw(st.integers(-1, 1))
    assert columns_outcome(damaged_bytes, claimed) == decoder_outcome(damaged_bytes, claimed)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2_000), st.integers(0, 5), st.data())
def test_damaged_uniform_runs_are_refused_exactly_when_the_record_decoder_refuses(
    count: int, flips: int, data: st.DataObject
) -> None:
    section, _ = uniform_section(count, 30)
    damaged = bytearray(section)
    for _ in range(flips):
        if damaged:
            damaged[data.draw(st.integers(0, len(damaged) - 1))] = data.draw(st.integers(0, 255))
    assert columns_outcome(bytes(damaged), count) == decoder_outcome(bytes(damaged), count)


@pytest.mark.parametrize(
    ("section", "count"),
    [
        (b"", 1),
        (b"\x00" * 14, -1),
        (b"\x00" * 14, 3),
        (encode_varint(-3) + b"\x00" * 10, 1),
        (encode_varint(10) + b"\x00" + b"\xff" * 9, 1),
        (uniform_section(20, 4)[0] + b"\x00", 20),
    ],
    ids=["empty", "negative_count", "more_records_than_bytes", "negative_length", "overlong_varint", "trailing"],
)
def test_malformed_sections_raise_corrupt_record(section: bytes, count: int) -> None:
    with pytest.raises(CorruptRecordError):
        decode_records_columns(section, count)
    with pytest.raises(CorruptRecordError):
        summarize_records_section(section, count)


def test_vectorized_varints_match_the_scalar_decoder() -> None:
    numbers = [0, 1, -1, 63, -64, 64, 8191, 8192, 2**31 - 1, -(2**31), 2**62, -(2**63), 2**63 - 1]
    encoded = b"".join(encode_varint(number) for number in numbers)
    positions = np.cumsum([0, *[len(encode_varint(number)) for number in numbers[:-1]]])
    data = np.frombuffer(encoded + PADDING, dtype=np.uint8)
    values, ends = decode_varints(data, positions, 10)
    assert values.tolist() == numbers
    assert ends[-1] == len(encoded)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.integers(-(2**63), 2**63 - 1).map(encode_varint),
            st.integers(-70, 70).map(encode_varint),
            st.binary(min_size=1, max_size=12),
        ),
        max_size=30,
    ),
    st.sampled_from([VARINT32_MAX_BYTES, VARINT64_MAX_BYTES]),
)
def test_vectorized_varints_decode_or_refuse_as_the_scalar_decoder_does_at_every_position(
    pieces: list[bytes], max_bytes: int
) -> None:
    """Varints of one to ten bytes side by side with arbitrary bytes (over-long, above 32 or 64 bits): the
    vectorized decoder gives every value and end the scalar one gives, or raises where any position makes it."""
    joined = b"".join(pieces)
    positions = np.cumsum([0, *[len(piece) for piece in pieces[:-1]]]).astype(np.int64)[: len(pieces)]
    expected: list[tuple[int, int]] | None = []
    for position in positions.tolist():
        try:
            expected.append(decode_varint(joined + PADDING, position, max_bytes))
        except CorruptRecordError:
            expected = None
            break
    data = np.frombuffer(joined + PADDING, dtype=np.uint8)
    if expected is None:
        with pytest.raises(CorruptRecordError):
            decode_varints(data, positions, max_bytes)
        return
    values, ends = decode_varints(data, positions, max_bytes)
    assert values.dtype == np.int64 and ends.dtype == np.int64
    assert list(zip(values.tolist(), ends.tolist(), strict=True)) == expected


@pytest.mark.parametrize(
    ("raw", "max_bytes"),
    [(b"\xff" * 5 + b"\x01", 5), (b"\xff\xff\xff\xff\x7f", 5), (b"\xff" * 9 + b"\x02", 10), (b"\x80" * 10, 10)],
    ids=["longer_than_5", "above_32_bits", "above_64_bits", "longer_than_10"],
)
def test_vectorized_varints_refuse_what_the_scalar_decoder_refuses(raw: bytes, max_bytes: int) -> None:
    data = np.frombuffer(raw + PADDING, dtype=np.uint8)
    with pytest.raises(CorruptRecordError):
        decode_varints(data, np.array([0]), max_bytes)
