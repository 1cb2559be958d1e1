"""`actors.clients.local_tail` with the partition actor's own `fetch` as the oracle. On the plain partition class
(no Ray): after every append the tail answers exactly the actor's bytes and offsets without a call, across segment
rolls (where it hands the fetch to the actor and follows on from the located answer); bytes in the segment file past
the published high watermark are never read; a seek, DeleteRecords, more than `max_bytes`, a closed log and a
damaged file hand the fetch to the actor, and fewer than `min_bytes` new bytes answer empty. On a real broker: a
consumer following a partition's tail while a producer writes gets every record once, in order, with far fewer
calls than polls, and a position that DeleteRecords passes is reset by the policy."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from actors.clients import local_fetch, local_tail
from actors.clients.local_tail import LocalTail
from actors.server.partition_log import FetchResult, FileSlices, PartitionLogActor
from storage import file_names
from storage.partition.file_slices import read_located
from tests.storage.builders import simple_batch

SMALL_SEGMENTS = {"segment.bytes": "2048", "segment.index.bytes": "4096", "retention.ms": "-1"}


def open_partition(tmp_path: Path, config: dict[str, str] | None = None) -> PartitionLogActor:
    return PartitionLogActor(str(tmp_path / "tail-0"), config if config is not None else SMALL_SEGMENTS)


def located_read(partition: PartitionLogActor, offset: int) -> tuple[FileSlices, int]:
    """The consumer's fallback: the actor's located answer and the offset after the batches read from it."""
    located = partition.locate(offset, 1 << 20)
    next_offset = offset
    for file_slice in located.slices:
        read = read_located(file_slice, next_offset)
        assert read is not None
        next_offset = read[1]
    return located, next_offset


def following(partition: PartitionLogActor, offset: int) -> LocalTail:
    located, next_offset = located_read(partition, offset)
    tail = LocalTail.open(located)
    assert tail is not None
    tail.follow(located, next_offset)
    assert tail.at(next_offset)
    return tail


def assert_same_answer(tail_answer: FetchResult | None, actor_answer: FetchResult) -> None:
    assert tail_answer is not None
    assert bytes(tail_answer.records) == bytes(actor_answer.records)
    assert (tail_answer.high_watermark, tail_answer.log_start_offset, tail_answer.log_end_offset) == (
        actor_answer.high_watermark,
        actor_answer.log_start_offset,
        actor_answer.log_end_offset,
    )


def test_every_append_is_read_from_the_tail_as_the_actor_fetch_answers_it_across_rolls(tmp_path: Path) -> None:
    partition = open_partition(tmp_path)
    tail = following(partition, 0)
    offset = 0
    answered_by_tail = handed_back = 0
    for index in range(60):
        assert_same_answer(tail.fetch(offset, 1 << 20), partition.fetch(offset, 1 << 20))  # nothing new yet
        partition.append(simple_batch(1 + index % 4, value_size=30 + 7 * (index % 9), tag=index))
        oracle = partition.fetch(offset, 1 << 20)
        answer = tail.fetch(offset, 1 << 20)
        if answer is None:
            handed_back += 1
            located, next_offset = located_read(partition, offset)
            tail.follow(located, next_offset)
        else:
            answered_by_tail += 1
            assert_same_answer(answer, oracle)
        offset = oracle.high_watermark
    assert partition.state().segments > 5
    assert handed_back <= partition.state().segments and answered_by_tail > 40
    tail.close()
    partition.close()


def test_bytes_in_the_segment_past_the_published_high_watermark_are_never_read(tmp_path: Path) -> None:
    partition = open_partition(tmp_path, {})
    partition.append(simple_batch(3, tag=1))
    tail = following(partition, 0)
    segment = file_names.log_file(tmp_path / "tail-0", 0)
    unpublished = simple_batch(5, tag=2)
    with open(segment, "r+b") as file:
        file.seek(0, 2)
        file.write(unpublished)
    answer = tail.fetch(3, 1 << 20)
    assert answer is not None and bytes(answer.records) == b"" and answer.high_watermark == 3
    partition.append(simple_batch(2, tag=3))
    assert_same_answer(tail.fetch(3, 1 << 20), partition.fetch(3, 1 << 20))
    tail.close()
    partition.close()


@pytest.mark.parametrize(
    "case", ["seek", "delete-records", "over-max-bytes", "closed", "damaged-file", "under-min-bytes"]
)
def test_what_the_file_cannot_answer_goes_to_the_actor(tmp_path: Path, case: str) -> None:
    partition = open_partition(tmp_path, {})
    partition.append(simple_batch(4, tag=1))
    tail = following(partition, 0)
    batch = simple_batch(4, value_size=200, tag=2)
    partition.append(batch)
    if case == "seek":
        assert tail.fetch(2, 1 << 20) is None and not tail.at(4)
    elif case == "delete-records":
        partition.delete_records(6)
        assert tail.fetch(4, 1 << 20) is None
    elif case == "over-max-bytes":
        assert tail.fetch(4, len(batch) - 1) is None
    elif case == "closed":
        partition.close()
        assert tail.fetch(4, 1 << 20) is None
    elif case == "damaged-file":
        path = file_names.high_watermark_file(tmp_path / "tail-0")
        damaged = bytearray(path.read_bytes())
        damaged[20] ^= 0xFF
        path.write_bytes(bytes(damaged))
        assert tail.fetch(4, 1 << 20) is None
    else:
        answer = tail.fetch(4, 1 << 20, min_bytes=len(batch) + 1)
        assert answer is not None and bytes(answer.records) == b"" and tail.at(4)
        assert_same_answer(tail.fetch(4, 1 << 20, min_bytes=len(batch)), partition.fetch(4, 1 << 20))
    tail.close()
    partition.close()


def test_a_partition_without_a_high_watermark_file_has_no_tail() -> None:
    assert LocalTail.open(FileSlices((), 0, 0, 0, "")) is None
    assert LocalTail.open(FileSlices((), 0, 0, 0, "", "/nonexistent/high-watermark.state")) is None


# --- on a real broker ------------------------------------------------------------------------------


@pytest.mark.ray
def test_a_consumer_following_the_tail_gets_every_record_once_in_order_with_few_calls(start_test_broker: Any) -> None:
    from actors import Admin, Consumer, Producer

    broker, _ = start_test_broker(log_dirs_count=1)
    # A roll every ~30 polls: each hands one fetch to the actor.
    Admin(broker).create_topic("tail", 1, {**SMALL_SEGMENTS, "segment.bytes": "8192"})
    sent: list[tuple[int, bytes]] = []

    def produce() -> None:
        with Producer(broker, linger_ms=1) as producer:
            for burst in range(150):
                values = [f"v{burst}-{i}".encode() for i in range(1 + burst % 7)]
                futures = [producer.send("tail", value, partition=0) for value in values]
                sent.extend((future.result().offset, value) for future, value in zip(futures, values, strict=True))
                time.sleep(0.002)

    got: list[tuple[int, bytes]] = []
    polls = 0
    with Consumer(broker, auto_offset_reset="earliest") as consumer:
        consumer.assign([("tail", 0)])
        consumer.poll(timeout_ms=100)
        calls_before = local_fetch.statistics()
        tail_before = local_tail.statistics()
        producing = threading.Thread(target=produce)
        producing.start()
        deadline = time.monotonic() + 60
        while (producing.is_alive() or len(got) < len(sent)) and time.monotonic() < deadline:
            records = consumer.poll(timeout_ms=200)
            polls += bool(records)
            got.extend((record.offset, record.value) for record in records)
        producing.join()
        calls_after = local_fetch.statistics()
        tail_after = local_tail.statistics()
    assert got == sent
    calls = (calls_after.local_reads + calls_after.actor_fetches) - (
        calls_before.local_reads + calls_before.actor_fetches
    )
    assert tail_after.reads - tail_before.reads > polls // 2
    assert calls < polls // 2, (calls, polls)


@pytest.mark.ray
def test_a_followed_position_passed_by_delete_records_is_reset_by_the_policy(start_test_broker: Any) -> None:
    from actors import Admin, Consumer, Producer

    broker, _ = start_test_broker(log_dirs_count=1)
    admin = Admin(broker)
    admin.create_topic("tail-deleted", 1)
    with Producer(broker, linger_ms=0) as producer:
        producer.send("tail-deleted", b"first", partition=0).result()
        with Consumer(broker, auto_offset_reset="earliest") as consumer:
            consumer.assign([("tail-deleted", 0)])
            assert [r.value for r in consumer.poll(timeout_ms=5000)] == [b"first"]
            assert consumer.poll(timeout_ms=50) == []
            offsets = [producer.send("tail-deleted", f"r{i}".encode(), partition=0).result().offset for i in range(6)]
            assert admin.delete_records("tail-deleted", 0, offsets[3]) == offsets[3]
            records: list[Any] = []
            deadline = time.monotonic() + 20
            while len(records) < 3 and time.monotonic() < deadline:
                records.extend(consumer.poll(timeout_ms=200))
    assert [(r.offset, r.value) for r in records] == [(offsets[i], f"r{i}".encode()) for i in (3, 4, 5)]
