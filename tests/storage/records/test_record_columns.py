"""Tests for `storage.records.record_columns`: the column decoder accepts, decodes and refuses exactly what the
per-record `decode_records` does (the oracle), on random record sets and on damaged sections."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.errors import CorruptRecordError
from storage.records.layout import RECORD_BATCH_OVERHEAD, TimestampType
from storage.records.record import Record
from storage.records.record_batch import RecordBatch, RecordBatchBuilder
from storage.records.record_columns import decode_records_columns, summarize_records_section
from storage.records.varint import (
    PADDING,
    VARINT32_MAX_BYTES,
    VARINT64_MAX_BYTES,
    decode_varint,
    decode_varints,
    encode_varint,
)
from tests.storage.builders import START_MS
from tests.storage.records.record_sets import builder_batch, oracle, record_sets

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


@pytest.mark.slow
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


@pytest.mark.slow
def test_layouts_known_from_an_intact_section_refuse_every_damaged_byte_of_the_next_as_the_record_decoder_does() -> (
    None
):
    # 300 records: runs start at record 0 and at record 64 (the offset delta widens), found by the layout of a
    # record seen before (the intact section's) rather than parsed; every byte of the records that start and end
    # those runs is damaged in turn.
    count = 300
    section, _ = uniform_section(count, 30)
    ends = decode_records_columns(section, count).body_ends.tolist()
    positions = [*range(0, ends[0]), *range(ends[62], ends[64])]
    for position in positions:
        for value in (0x00, 0x01, 0x7F, 0x80, 0xFF):
            damaged = bytearray(section)
            damaged[position] = value
            decode_records_columns(section, count)
            expected = decoder_outcome(bytes(damaged), count)
            assert columns_outcome(bytes(damaged), count) == expected, (position, value)


@pytest.mark.slow
def test_a_run_after_a_long_run_is_checked_whole_and_refuses_damage_far_past_its_start() -> None:
    # 400 records: the run from record 64 (its offset deltas a byte wider, 336 records, more than the 256 a probe
    # is for) follows a run of 64 records, so it is checked whole; every byte of record 350 is damaged in turn.
    count = 400
    section, _ = uniform_section(count, 30)
    ends = decode_records_columns(section, count).body_ends.tolist()
    for position in range(ends[349], ends[350]):
        for value in (0x00, 0x01, 0x7F, 0x80, 0xFF):
            damaged = bytearray(section)
            damaged[position] = value
            expected = decoder_outcome(bytes(damaged), count)
            assert columns_outcome(bytes(damaged), count) == expected, (position, value)
            try:
                summarize_records_section(bytes(damaged), count)
            except CorruptRecordError:
                assert expected is CorruptRecordError, (position, value)
            else:
                assert expected is not CorruptRecordError, (position, value)


def test_a_run_of_over_long_header_counts_refuses_a_record_whose_second_header_count_byte_differs() -> None:
    # headerCount 0 written in two bytes (0x80 0x00), which the decoder accepts; record 200's second byte claims
    # headers that do not fit. Every byte of the header count belongs to the layout, so the run ends there.
    def record(index: int, header_count: bytes) -> bytes:
        key = b"key%03d" % index
        body = b"\x00" + encode_varint(0) + encode_varint(index) + encode_varint(len(key)) + key
        body += encode_varint(30) + bytes(30) + header_count
        return encode_varint(len(body)) + body

    count = 300
    section = b"".join(record(index, b"\x80\x02" if index == 200 else b"\x80\x00") for index in range(count))
    assert decoder_outcome(section, count) is CorruptRecordError
    assert columns_outcome(section, count) is CorruptRecordError
    with pytest.raises(CorruptRecordError):
        summarize_records_section(section, count)
    intact = b"".join(record(index, b"\x80\x00") for index in range(count))
    assert columns_outcome(intact, count) == decoder_outcome(intact, count)


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


@pytest.mark.slow
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
