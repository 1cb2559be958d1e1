"""The producer's record accumulator without Ray: linger, `batch_size`, `buffer_memory` blocking and its
timeout, flush, the order batches are drained in per partition, sticky placement of null keys, and the
columnar batches of `send_many`. Time is a `MockClock`; the oracle is the records appended, in order."""

from __future__ import annotations

import ast
import importlib
import itertools
import random
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from actors.clients.futures import RecordMetadata
from actors.clients.partitioner import StickyPartitionCache, partition_for_key
from actors.clients.producer_batch import RECORD_OVERHEAD_BOUND, BulkRecords, ProducerBatch, record_size_bound
from actors.clients.record_accumulator import RecordAccumulator
from storage.clock import MockClock
from storage.errors import RequestTimedOutError
from storage.records.compression import CompressionType
from storage.records.record_batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, RECORD_BATCH_OVERHEAD
from storage.records.record_batch import iter_batches as decode_batches
from storage.topic_partition import TopicPartition

TP: TopicPartition = ("t", 0)
NO_LIMIT = 1 << 30


class Harness:
    """An accumulator on a `MockClock`, counting its wake-ups of the (absent) sender."""

    def __init__(self, **options: Any) -> None:
        self.clock = MockClock()
        self.wakeups = 0
        settings: dict[str, Any] = {
            "batch_size": 16384,
            "linger_ms": 5,
            "buffer_memory": 1 << 20,
            "max_block_ms": 1000,
            "compression": CompressionType.NONE,
            "sticky": StickyPartitionCache(random.Random(7)),
        }
        settings.update(options)
        self.accumulator = RecordAccumulator(clock=self.clock, wakeup=self._wake, **settings)

    def _wake(self) -> None:
        self.wakeups += 1

    def send(
        self, value: bytes, partition: int | None = 0, num_partitions: int = 1, topic: str = "t"
    ) -> Future[RecordMetadata]:
        size = record_size_bound(None, value, ())
        return self.accumulator.append(topic, partition, num_partitions, None, value, 0, (), size)

    def send_many(
        self,
        values: list[bytes],
        keys: list[bytes | None] | None = None,
        partition: int | None = 0,
        num_partitions: int = 1,
    ) -> Any:
        sizes = RECORD_OVERHEAD_BOUND + np.array([len(v) for v in values], dtype=np.int64)
        if keys is not None:
            sizes += np.array([len(k or b"") for k in keys], dtype=np.int64)
        cumulative = np.concatenate((np.zeros(1, dtype=np.int64), np.cumsum(sizes)))
        records = BulkRecords(keys, values, list(range(len(values))), cumulative)
        return self.accumulator.append_many("t", partition, num_partitions, records)

    def drain_all(self, tp: TopicPartition = TP) -> list[ProducerBatch]:
        batches: list[ProducerBatch] = []
        while taken := self.accumulator.drain(tp, NO_LIMIT, NO_LIMIT):
            batches.extend(taken)
        return batches


def values_of(batch: ProducerBatch) -> list[bytes | None]:
    """The batch's values as its encoded bytes hold them."""
    (decoded,) = decode_batches(batch.encode(NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE))
    return [record.value for record in decoded.records()]


def expected_split(sizes: list[int], batch_size: int) -> list[list[int]]:
    """Oracle: record indices per batch of `send` when a batch closes once its bound reaches `batch_size` and
    a record that would pass it starts the next batch."""
    batches: list[list[int]] = []
    current: list[int] = []
    total = RECORD_BATCH_OVERHEAD
    for index, size in enumerate(sizes):
        if current and total + size > batch_size:
            batches.append(current)
            current, total = [], RECORD_BATCH_OVERHEAD
        current.append(index)
        total += size
        if total >= batch_size:
            batches.append(current)
            current, total = [], RECORD_BATCH_OVERHEAD
    if current:
        batches.append(current)
    return batches


def test_a_batch_stays_open_until_linger_ms_passes() -> None:
    harness = Harness(linger_ms=5)
    created_ns = harness.clock.nanoseconds()
    harness.send(b"a")
    check = harness.accumulator.ready(harness.clock.nanoseconds())
    assert check.partitions == []
    assert check.next_linger_deadline_ns == created_ns + 5_000_000
    harness.clock.sleep(4)
    assert harness.accumulator.ready(harness.clock.nanoseconds()).partitions == []
    harness.clock.sleep(1)
    check = harness.accumulator.ready(harness.clock.nanoseconds())
    assert check.partitions == [TP]
    assert check.next_linger_deadline_ns is None
    (batch,) = harness.drain_all()
    assert values_of(batch) == [b"a"]


def test_records_are_cut_into_batches_at_batch_size_in_send_order() -> None:
    rng = random.Random(3)
    values = [bytes([65 + i % 26]) * rng.randrange(0, 300) for i in range(400)]
    sizes = [record_size_bound(None, value, ()) for value in values]
    harness = Harness(batch_size=1024, linger_ms=60_000)
    for value in values:
        harness.send(value)
    harness.clock.sleep(60_000)
    harness.accumulator.ready(harness.clock.nanoseconds())
    batches = harness.drain_all()
    assert [batch.values for batch in batches] == [[values[i] for i in run] for run in expected_split(sizes, 1024)]
    assert [value for batch in batches for value in values_of(batch)] == values


def test_a_record_larger_than_batch_size_gets_a_batch_of_its_own() -> None:
    harness = Harness(batch_size=200, linger_ms=60_000)
    for value in (b"s", b"B" * 500, b"t"):
        harness.send(value)
    check = harness.accumulator.ready(harness.clock.nanoseconds())
    assert check.partitions == [TP]
    assert [batch.values for batch in harness.drain_all()] == [[b"s"], [b"B" * 500]]


def test_the_sender_is_woken_for_a_new_or_closed_batch_not_for_each_record() -> None:
    harness = Harness(batch_size=RECORD_BATCH_OVERHEAD + 3 * record_size_bound(None, b"x", ()), linger_ms=60_000)
    harness.send(b"x")
    assert harness.wakeups == 1
    harness.send(b"x")
    assert harness.wakeups == 1
    harness.send(b"x")
    assert harness.wakeups == 2
    assert harness.accumulator.ready(harness.clock.nanoseconds()).partitions == [TP]


def test_drained_batches_keep_their_order_and_limits_and_reenqueued_ones_go_first() -> None:
    harness = Harness(batch_size=RECORD_BATCH_OVERHEAD + 2 * record_size_bound(None, b"0", ()))
    values = [str(i).encode() for i in range(10)]
    harness.send_many(values)
    first = harness.accumulator.drain(TP, 2, NO_LIMIT)
    assert [batch.bulk_indices for batch in first] == [range(0, 2), range(2, 4)]
    by_bytes = harness.accumulator.drain(TP, NO_LIMIT, first[0].estimated_bytes)
    assert [batch.bulk_indices for batch in by_bytes] == [range(4, 6)]
    harness.accumulator.reenqueue(TP, first)
    assert harness.accumulator.queued(TP)[:2] == first
    first[1].solo = True
    assert harness.accumulator.drain(TP, NO_LIMIT, NO_LIMIT) == [first[0]]
    assert harness.accumulator.drain(TP, NO_LIMIT, NO_LIMIT) == [first[1]]
    rest = harness.drain_all()
    assert [value for batch in rest for value in values_of(batch)] == values[6:]
    assert harness.accumulator.drain(TP, NO_LIMIT, NO_LIMIT) == []


def test_ready_lists_partitions_in_the_order_they_were_first_used() -> None:
    harness = Harness(linger_ms=0)
    for partition in (2, 0, 1):
        harness.send(b"v", partition=partition, num_partitions=3)
    check = harness.accumulator.ready(harness.clock.nanoseconds())
    assert check.partitions == [("t", 2), ("t", 0), ("t", 1)]


def test_send_many_cuts_columnar_batches_after_a_batch_send_left_open() -> None:
    batch_size = 4096
    harness = Harness(batch_size=batch_size, linger_ms=60_000)
    harness.send(b"single")
    values = [f"bulk-{i}".encode() * (i % 7) for i in range(2000)]
    future = harness.send_many(values)
    assert harness.accumulator.ready(harness.clock.nanoseconds()).partitions == [TP]
    batches = harness.drain_all()
    assert batches[0].values == [b"single"]
    bulk = batches[1:]
    assert all(batch.bulk_records is not None and isinstance(batch.bulk_indices, range) for batch in bulk)
    assert all(batch.estimated_bytes <= batch_size for batch in bulk)
    assert [value for batch in batches for value in values_of(batch)] == [b"single", *values]
    offset = 0
    for batch in batches:
        batch.complete(offset, -1)
        offset += batch.record_count
    harness.accumulator.deallocate(batches)
    assert [metadata.offset for metadata in future.result(timeout=1)] == list(range(1, 2001))
    assert harness.accumulator.buffered_bytes == 0


def test_null_key_records_stick_to_a_partition_until_its_batch_closes() -> None:
    per_batch = 4
    values = [f"{i:02d}".encode() for i in range(per_batch * 6)]
    harness = Harness(batch_size=RECORD_BATCH_OVERHEAD + per_batch * record_size_bound(None, values[0], ()))
    for value in values:
        harness.send(value, partition=None, num_partitions=3)
    harness.clock.sleep(5)
    check = harness.accumulator.ready(harness.clock.nanoseconds())
    batches = [batch for tp in check.partitions for batch in harness.drain_all(tp)]
    # In send order, each batch holds the next 4 records, on another partition than the batch before it.
    ordered = sorted(batches, key=lambda batch: batch.values[0] or b"")
    assert [batch.values for batch in ordered] == [values[i : i + per_batch] for i in range(0, 24, per_batch)]
    chosen = [batch.partition for batch in ordered]
    assert all(a != b for a, b in itertools.pairwise(chosen))


def test_send_many_places_keyed_records_by_murmur2_and_null_keys_a_batch_at_a_time() -> None:
    harness = Harness(batch_size=RECORD_BATCH_OVERHEAD + 10 * (RECORD_OVERHEAD_BOUND + 8))
    keys: list[bytes | None] = [None if i % 3 == 0 else f"k{i:06d}".encode() for i in range(300)]
    values = [f"v{i:07d}".encode() for i in range(300)]
    harness.send_many(values, keys=keys, partition=None, num_partitions=4)
    placed: dict[bytes, int] = {}
    for tp in harness.accumulator.ready(harness.clock.nanoseconds()).partitions:
        for batch in harness.drain_all(tp):
            assert batch.bulk_records is not None
            for index in batch.bulk_indices:
                placed[values[index]] = tp[1]
    assert len(placed) == 300
    for key, value in zip(keys, values, strict=True):
        if key is not None:
            assert placed[value] == partition_for_key(key, 4)
    unkeyed = [placed[value] for key, value in zip(keys, values, strict=True) if key is None]
    runs = [unkeyed[i : i + 10] for i in range(0, len(unkeyed), 10)]
    assert all(len(set(run)) == 1 for run in runs)
    assert all(a[0] != b[0] for a, b in itertools.pairwise(runs))


def test_a_full_buffer_makes_append_wait_and_push_the_open_batches_out() -> None:
    size = record_size_bound(None, b"x" * 100, ())
    harness = Harness(buffer_memory=2 * size, linger_ms=60_000, max_block_ms=10_000)
    harness.send(b"x" * 100)
    harness.send(b"x" * 100)
    assert harness.accumulator.buffered_bytes == 2 * size
    appended = threading.Event()
    blocked = threading.Thread(target=lambda: (harness.send(b"x" * 100), appended.set()))
    blocked.start()
    # The waiting append asks for the open batch to be sent although its linger is far off.
    while not harness.accumulator.ready(harness.clock.nanoseconds()).partitions:
        assert not appended.wait(0.001)
    (batch,) = harness.drain_all()
    assert not appended.is_set()
    batch.complete(0, -1)
    harness.accumulator.deallocate([batch])
    assert appended.wait(5)
    blocked.join()
    assert harness.accumulator.buffered_bytes == size


def test_append_times_out_after_max_block_ms_but_one_record_may_always_go() -> None:
    harness = Harness(buffer_memory=100, max_block_ms=20)
    first = harness.send(b"y" * 500)
    assert harness.accumulator.buffered_bytes > 100
    with pytest.raises(RequestTimedOutError):
        harness.send(b"z")
    assert not first.done()


def test_flush_closes_open_batches_and_waits_for_them() -> None:
    harness = Harness(linger_ms=60_000)
    future = harness.send(b"f")
    assert harness.accumulator.flush(0.01) is False
    flushed: list[bool] = []
    flusher = threading.Thread(target=lambda: flushed.append(harness.accumulator.flush(10)))
    flusher.start()
    while not harness.accumulator.ready(harness.clock.nanoseconds()).partitions:
        time.sleep(0.001)
    (batch,) = harness.drain_all()
    batch.complete(41, -1)
    harness.accumulator.deallocate([batch])
    flusher.join()
    assert flushed == [True]
    assert future.result(timeout=0) == RecordMetadata("t", 0, 41, 0)


def test_abort_fails_every_incomplete_batch_and_releases_its_bytes() -> None:
    harness = Harness(linger_ms=0)
    sent = harness.send(b"drained")
    harness.accumulator.ready(harness.clock.nanoseconds())
    harness.drain_all()
    lingering = harness.send(b"open", partition=1, num_partitions=2)
    many = harness.send_many([b"a", b"b"])
    error = RequestTimedOutError("closed")
    harness.accumulator.abort_incomplete_batches(error)
    assert sent.exception(timeout=0) is error
    assert lingering.exception(timeout=0) is error
    assert many.exception(timeout=0) is error
    assert harness.accumulator.buffered_bytes == 0


def imported_modules(module_name: str) -> set[str]:
    """The modules `module_name`'s source imports, anywhere in it."""
    source = Path(importlib.import_module(module_name).__file__ or "").read_text()
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names.add(node.module)
    return names


def test_the_accumulator_and_what_it_imports_from_actors_need_no_ray() -> None:
    seen: set[str] = set()
    pending = ["actors.clients.record_accumulator"]
    while pending:
        module = pending.pop()
        seen.add(module)
        imported = imported_modules(module)
        assert not {name for name in imported if name == "ray" or name.startswith("ray.")}, module
        pending.extend(name for name in imported if name.startswith("actors.") and name not in seen)
    assert "actors.clients.producer_batch" in seen
