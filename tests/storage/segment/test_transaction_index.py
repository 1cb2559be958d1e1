"""Tests for `storage.segment.transaction_index`, after Kafka's TransactionIndexTest, and against the `.txnindex`
files Apache Kafka 3.9.1 wrote (tests/fixtures/kafka/kafka-3.9.1__transactions)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from storage.errors import CorruptIndexError, InvalidOffsetError, KafkaStorageError
from storage.segment.transaction_index import (
    ENTRY_SIZE,
    AbortedTxn,
    TransactionIndex,
    collect_aborted_transactions,
    read_entries,
)
from tests.conftest import KAFKA_SAMPLES_DIR

KAFKA_TXN_PARTITION = KAFKA_SAMPLES_DIR / "kafka-3.9.1__transactions" / "data" / "txn-0"
# Kafka's entries of TransactionIndexTest.testCollectAbortedTransactions.
FOUR = [AbortedTxn(0, 0, 10, 11), AbortedTxn(1, 5, 15, 13), AbortedTxn(2, 18, 35, 25), AbortedTxn(3, 32, 50, 40)]


def kafka_entry(producer_id: int, first: int, last: int, stable: int, version: int = 0) -> bytes:
    """Kafka's `AbortedTxn.toByteBuffer`, field by field."""
    return struct.pack(">hqqqq", version, producer_id, first, last, stable)


def index_with(path: Path, entries: list[AbortedTxn], base_offset: int = 0) -> TransactionIndex:
    index = TransactionIndex(path, base_offset)
    for entry in entries:
        index.append(entry)
    return index


def test_entry_is_kafkas_34_bytes(tmp_path: Path) -> None:
    index = index_with(tmp_path / "0.txnindex", [AbortedTxn(983493, 137, 299, 200)])
    assert ENTRY_SIZE == 34
    assert (tmp_path / "0.txnindex").read_bytes() == kafka_entry(983493, 137, 299, 200)
    index.close()


def test_reopened_index_appends_after_its_entries(tmp_path: Path) -> None:
    path = tmp_path / "0.txnindex"
    index_with(path, FOUR).close()
    reopened = TransactionIndex(path, 0)
    reopened.append(AbortedTxn(3, 50, 60, 55))
    assert reopened.entries == (*FOUR, AbortedTxn(3, 50, 60, 55))
    reopened.close()
    assert read_entries(path.read_bytes()) == [*FOUR, AbortedTxn(3, 50, 60, 55)]


def test_no_file_until_the_first_append(tmp_path: Path) -> None:
    path = tmp_path / "0.txnindex"
    index = TransactionIndex(path, 0)
    assert index.entries == ()
    index.flush()
    index.truncate_to(0)
    index.reset()
    assert not path.exists()
    index.append(AbortedTxn(0, 0, 10, 2))
    index.flush()
    assert path.stat().st_size == ENTRY_SIZE
    index.close()


def test_sanity_check_refuses_entries_below_the_base_offset(tmp_path: Path) -> None:
    index_with(tmp_path / "0.txnindex", FOUR).close()
    TransactionIndex(tmp_path / "0.txnindex", 0).sanity_check()
    with pytest.raises(CorruptIndexError):
        TransactionIndex(tmp_path / "0.txnindex", 100).sanity_check()


@pytest.mark.parametrize("last_offset", [15, 10])
def test_marker_offsets_must_increase(tmp_path: Path, last_offset: int) -> None:
    index = index_with(tmp_path / "0.txnindex", [AbortedTxn(1, 5, 15, 13)])
    with pytest.raises(InvalidOffsetError):
        index.append(AbortedTxn(0, 0, last_offset, 11))
    assert index.entries == (AbortedTxn(1, 5, 15, 13),)
    index.close()


def test_collect_aborted_transactions_as_kafka(tmp_path: Path) -> None:
    index = index_with(tmp_path / "0.txnindex", FOUR)
    cases = [((0, 100), FOUR, False), ((0, 32), FOUR[:3], True), ((0, 35), FOUR, True), ((10, 35), FOUR, True)]
    cases += [((11, 35), FOUR[1:], True), ((20, 41), FOUR[2:], False)]
    for (fetch_offset, upper), expected, complete in cases:
        result = index.collect(fetch_offset, upper)
        assert (list(result.aborted_transactions), result.complete) == (expected, complete), (fetch_offset, upper)
    index.close()


def test_truncate_drops_entries_whose_marker_is_at_or_past_the_offset(tmp_path: Path) -> None:
    entries = [AbortedTxn(0, 0, 10, 2), AbortedTxn(1, 5, 15, 16), AbortedTxn(2, 18, 35, 25), AbortedTxn(3, 32, 50, 40)]
    path = tmp_path / "0.txnindex"
    index = index_with(path, entries)
    index.truncate_to(51)
    assert list(index.collect(0, 100).aborted_transactions) == entries
    index.truncate_to(50)
    assert list(index.collect(0, 100).aborted_transactions) == entries[:3]
    assert path.stat().st_size == 3 * ENTRY_SIZE
    index.reset()
    assert index.collect(0, 100).aborted_transactions == ()
    assert path.stat().st_size == 0
    index.append(AbortedTxn(4, 1, 2, 3))
    index.close()
    assert read_entries(path.read_bytes()) == [AbortedTxn(4, 1, 2, 3)]


def test_rename_keeps_appending_to_the_moved_file(tmp_path: Path) -> None:
    index = index_with(tmp_path / "0.txnindex", [AbortedTxn(0, 0, 10, 2)])
    index.rename_to(tmp_path / "0.txnindex.swap")
    index.append(AbortedTxn(1, 5, 15, 16))
    assert [txn.first_offset for txn in index.collect(0, 100).aborted_transactions] == [0, 5]
    index.close()
    assert not (tmp_path / "0.txnindex").exists()
    assert len(read_entries((tmp_path / "0.txnindex.swap").read_bytes())) == 2


def test_a_torn_append_is_ignored_and_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "0.txnindex"
    path.write_bytes(kafka_entry(1, 0, 5, 6) + kafka_entry(2, 7, 9, 10)[:20])
    index = TransactionIndex(path, 0)
    assert index.entries == (AbortedTxn(1, 0, 5, 6),)
    index.append(AbortedTxn(2, 7, 9, 10))
    index.close()
    assert path.read_bytes() == kafka_entry(1, 0, 5, 6) + kafka_entry(2, 7, 9, 10)


def test_a_version_above_zero_is_corrupt_but_only_byte_zero_counts(tmp_path: Path) -> None:
    path = tmp_path / "0.txnindex"
    # Kafka reads the version as the entry's first byte: 0x0001 reads as 0, 0x0100 as 1.
    path.write_bytes(kafka_entry(1, 0, 5, 6, version=1))
    assert TransactionIndex(path, 0).entries == (AbortedTxn(1, 0, 5, 6, version=1),)
    path.write_bytes(kafka_entry(1, 0, 5, 6) + kafka_entry(2, 7, 9, 10, version=256))
    with pytest.raises(CorruptIndexError) as raised:
        TransactionIndex(path, 0).sanity_check()
    assert raised.value.position == ENTRY_SIZE


def test_read_only_index_never_writes(tmp_path: Path) -> None:
    path = tmp_path / "0.txnindex"
    index_with(path, [AbortedTxn(0, 0, 10, 2)]).close()
    index = TransactionIndex(path, 0, read_only=True)
    with pytest.raises(KafkaStorageError):
        index.append(AbortedTxn(1, 5, 15, 16))
    assert path.read_bytes() == kafka_entry(0, 0, 10, 2)


class _Segment:
    def __init__(self, base_offset: int, txn_index: TransactionIndex) -> None:
        self.base_offset = base_offset
        self.txn_index = txn_index


def test_search_starts_at_the_fetch_offsets_segment_and_walks_on_until_complete(tmp_path: Path) -> None:
    # A transaction of producer 7 from offset 2 aborted at 25, in the third segment: a fetch from 12 must find it.
    first = index_with(tmp_path / "0.txnindex", [AbortedTxn(1, 0, 4, 5)])
    second = TransactionIndex(tmp_path / "10.txnindex", 10)
    third = index_with(tmp_path / "20.txnindex", [AbortedTxn(7, 2, 25, 26), AbortedTxn(8, 27, 28, 29)], 20)
    segments = [_Segment(0, first), _Segment(10, second), _Segment(20, third)]
    assert collect_aborted_transactions(segments, 12, 20) == [AbortedTxn(7, 2, 25, 26)]
    assert collect_aborted_transactions(segments, 0, 6) == [AbortedTxn(1, 0, 4, 5), AbortedTxn(7, 2, 25, 26)]
    assert collect_aborted_transactions(segments, 26, 40) == [AbortedTxn(8, 27, 28, 29)]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("00000000000000000000.txnindex", [AbortedTxn(1, 3, 5, 6)]),
        ("00000000000000000007.txnindex", [AbortedTxn(0, 6, 9, 7)]),
        ("00000000000000000039.txnindex", [AbortedTxn(1, 14, 44, 45)]),
        ("00000000000000000045.txnindex", [AbortedTxn(0, 45, 46, 47)]),
    ],
)
def test_kafka_written_index_reads_and_rewrites_to_the_same_bytes(
    name: str, expected: list[AbortedTxn], tmp_path: Path
) -> None:
    kafka_bytes = (KAFKA_TXN_PARTITION / name).read_bytes()
    base = int(name.split(".")[0])
    assert list(TransactionIndex(KAFKA_TXN_PARTITION / name, base, read_only=True).entries) == expected
    rewritten = index_with(tmp_path / name, expected, base)
    rewritten.close()
    assert (tmp_path / name).read_bytes() == kafka_bytes
