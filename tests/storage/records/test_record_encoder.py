"""Tests for `storage.records.record_encoder`: the column encoder writes exactly the bytes of `RecordBatchBuilder`
and of kafka-python's builder, on random record sets, through both of its paths."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.errors import InvalidRecordError
from storage.records import record_encoder
from storage.records.compression import CompressionType
from storage.records.layout import RECORD_BATCH_OVERHEAD
from storage.records.record_batch import RecordBatch, RecordBatchBuilder
from storage.records.record_encoder import build_batch_from_columns, encode_records_section
from tests.storage.builders import START_MS, Rec, kafka_batch
from tests.storage.records.record_sets import blobs, builder_batch, record_sets, timestamps

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
        patched.setattr(record_encoder, "FIXED_LAYOUT_MIN_RECORDS", min_records)
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
    return record_encoder._encode_fixed_layout(values, keys, stamps, base) is not None


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
    monkeypatch.setattr(record_encoder, "FIXED_LAYOUT_MIN_RECORDS", 1 << 62)
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
