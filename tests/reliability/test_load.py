"""Load: N producers x M partitions x K consumers for a bounded time (quick: 2 x 4 x 1 for 10 s; long:
4 x 16 x 2 for 60 s), then every record is checked and the partition actors' processes are measured.

- Exactly once, in order: each consumer of one group reads its own slice of the partitions and commits as
  it goes; afterwards, per partition, the records consumed are exactly the log's records, offsets 0..end
  once each in offset order, each holding what a producer got acknowledged at that offset, and each
  producer's records in the order it sent them.
- Bounded resources, from /proc of every partition actor's process: measured once the actors have
  appended, rolled and served reads (baseline), after the run, and after the records were deleted
  (DeleteRecords to the end, then retention removes the old segments and the delayed deletes run):
  open file descriptors and memory mappings return to the baseline (an open segment costs 3 fds and 2
  mappings, so a leak of one segment shows), no descriptor points to a deleted file, and RSS grows by at
  most `RSS_GROWTH_BOUND`.

Also here, the regression test of a race the load found: index lookups (fetches) while the writer resizes
the index (a roll) failed with "index has no mapped entries".
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
import ray

from actors import Admin, Broker, Consumer, Producer
from storage.errors import BrokerNotAvailableError, RequestTimedOutError, StorageError
from storage.records.record_batch import RecordBatchBuilder
from storage.segment.offset_index import OffsetIndex
from tests.reliability.broker_support import (
    Acknowledgements,
    ProcessFigures,
    check_log_holds,
    process_figures,
    raw_append,
    read_partition,
    shared_broker,
    wait_for,
)
from tests.reliability.modes import scaled

pytestmark = pytest.mark.reliability

TOPIC = "load"
GROUP = "load-group"
PRODUCERS = scaled(2, 4)
PARTITIONS = scaled(4, 16)
CONSUMERS = scaled(1, 2)
DURATION_S = scaled(10, 60)
# Segments roll every ~64 KiB, so the run opens (and the cleanup deletes) dozens of segments per partition.
SEGMENT_BYTES = 64 * 1024
# A partition actor's RSS may grow this much over a run: allocator arenas and caches warmed by the load,
# not proportional to the records written (the long mode writes ~6x more and must stay within it too).
RSS_GROWTH_BOUND = 64 * 1024 * 1024
# fds and mappings may differ from the baseline by this many: Ray's own sockets and threads come and go.
FD_SLACK = 4
MAPS_SLACK = 8
RETRIABLE = (BrokerNotAvailableError, RequestTimedOutError)


@pytest.fixture(scope="module")
def broker(start_test_broker: Any) -> Broker:
    return shared_broker(start_test_broker)


def produce(producer: Producer, name: str, acks: Acknowledgements, stop: threading.Event) -> None:
    index = 0
    try:
        while not stop.is_set():
            value = f"{name}-{index:09d}".encode()
            acks.track(producer.send(TOPIC, value, partition=index % PARTITIONS), value)
            index += 1
    except BaseException as exc:  # `send` itself failed: the test fails
        acks.failures.append(exc)


def consume(
    broker: Broker,
    partitions: list[int],
    delivered: dict[int, list[tuple[int, bytes]]],
    stop: threading.Event,
    errors: list[BaseException],
) -> None:
    """Reads `partitions` in the group, committing after each poll, until `stop` and nothing is left."""
    try:
        with Consumer(broker, group_id=GROUP, auto_offset_reset="earliest") as consumer:
            consumer.assign([(TOPIC, p) for p in partitions])
            while True:
                try:
                    records = consumer.poll(timeout_ms=200)
                except RETRIABLE:
                    continue
                for record in records:
                    delivered.setdefault(record.partition, []).append((record.offset, record.value))
                if records:
                    consumer.commit({(TOPIC, p): entries[-1][0] + 1 for p, entries in delivered.items()})
                elif stop.is_set():
                    ends = ray.get([broker.partition(TOPIC, p).offsets.remote() for p in partitions])
                    if all(
                        consumer.position((TOPIC, p)) == end for p, (_, end, _) in zip(partitions, ends, strict=True)
                    ):
                        return
    except BaseException as exc:
        errors.append(exc)


def figures(pids: list[int]) -> list[ProcessFigures]:
    return [process_figures(pid) for pid in pids]


def summary(label: str, measured: list[ProcessFigures]) -> str:
    mib = 1024 * 1024
    return (
        f"{label}: RSS {sum(f.rss_bytes for f in measured) / mib:.0f} MiB, "
        f"fds {sum(f.fds for f in measured)} ({sum(f.deleted_fds for f in measured)} deleted), "
        f"maps {sum(f.maps for f in measured)}"
    )


@pytest.mark.ray
def test_load_is_consumed_exactly_once_in_order_with_bounded_resources(broker: Broker) -> None:
    """Slow by design: the load runs for `DURATION_S` (10 s quick), and the cleanup it measures waits for the
    broker's retention and delayed deletes (see the module docstring)."""
    admin = Admin(broker)
    admin.create_topic(TOPIC, PARTITIONS, {"segment.bytes": str(SEGMENT_BYTES)})
    handles = [broker.partition(TOPIC, p) for p in range(PARTITIONS)]
    # Warm-up: every actor appends, rolls and serves reads once, so the baseline has the code paths loaded.
    for handle in handles:
        for number in range(3):
            ray.get(handle.append.remote(warm_batch(number)))
        read_partition(handle)
    warm = {p: dict(read_partition(handles[p])) for p in range(PARTITIONS)}
    pids = [ray.get(handle.state.remote()).pid for handle in handles]
    baseline = figures(pids)

    acks = [Acknowledgements() for _ in range(PRODUCERS)]
    producers = [Producer(broker, linger_ms=5, batch_size=16 * 1024) for _ in range(PRODUCERS)]
    delivered: list[dict[int, list[tuple[int, bytes]]]] = [{} for _ in range(CONSUMERS)]
    stop_producing = threading.Event()
    stop_consuming = threading.Event()
    consumer_errors: list[BaseException] = []
    producer_threads = [
        threading.Thread(target=produce, args=(producer, f"p{n}", acks[n], stop_producing))
        for n, producer in enumerate(producers)
    ]
    consumer_threads = [
        threading.Thread(
            target=consume,
            args=(broker, list(range(k, PARTITIONS, CONSUMERS)), delivered[k], stop_consuming, consumer_errors),
        )
        for k in range(CONSUMERS)
    ]
    started = time.monotonic()
    for thread in producer_threads + consumer_threads:
        thread.start()
    try:
        time.sleep(DURATION_S)
    finally:
        stop_producing.set()
        for thread in producer_threads:
            thread.join(120)
        for producer in producers:
            producer.close(120)
        produced_s = time.monotonic() - started
        stop_consuming.set()
        for thread in consumer_threads:
            thread.join(180)
    assert not any(thread.is_alive() for thread in consumer_threads), "consumers did not catch up in 3 minutes"
    assert not consumer_errors, f"a consumer failed: {consumer_errors[0]!r}"
    after_run = figures(pids)

    total = 0
    for partition, handle in enumerate(handles):
        log = read_partition(handle)
        acked = dict(warm[partition])
        for n, ack in enumerate(acks):
            assert not ack.failures, f"producer {n}: {len(ack.failures)} failed, first {ack.failures[0]!r}"
            acked.update(ack.snapshot().get(partition, {}))
            offsets = [offset for offset, _ in ack.in_send_order().get(partition, [])]
            assert offsets == sorted(offsets), f"producer {n}'s records out of send order in {partition}"
        check_log_holds(log, acked)
        assert dict(log) == acked, f"partition {partition} holds records nobody got acknowledged"
        consumed = delivered[partition % CONSUMERS].get(partition, [])
        assert consumed == log, f"partition {partition}: consumed {len(consumed)} records, the log has {len(log)}"
        total += len(log) - len(warm[partition])
    assert total == sum(ack.sent for ack in acks)

    # DeleteRecords to the end; the scheduled retention (every 500 ms) drops the segments below the log
    # start, and the delayed deletes (log.segment.delete.delay.ms 500) close and unlink their files.
    segments_after_run = sum(ray.get(handle.state.remote()).segments for handle in handles)
    for partition, handle in enumerate(handles):
        admin.delete_records(TOPIC, partition, ray.get(handle.offsets.remote())[2])

    def cleaned_up() -> bool:
        states = ray.get([handle.state.remote() for handle in handles])
        return (
            all(state.segments == 1 for state in states)
            and all(f.deleted_fds == 0 for f in figures(pids))
            and not any(path.suffix == ".deleted" for path in segment_files(states))
        )

    wait_for(cleaned_up, 60, "retention to delete the old segments and their files")
    for handle in handles:
        raw_append(handle, b"after the cleanup")  # the logs still take appends
    after_cleanup = figures(pids)
    print(
        f"\nload: {PRODUCERS} producers x {PARTITIONS} partitions x {CONSUMERS} consumers, sending for {DURATION_S} s "
        f"(all acknowledged after {produced_s:.0f} s): {total} records verified ({total / produced_s:.0f}/s), "
        "0 lost, 0 duplicated, "
        f"{segments_after_run} segments before the cleanup\n  {summary('baseline', baseline)}\n  "
        f"{summary('after the run', after_run)}\n  {summary('after the cleanup', after_cleanup)}"
    )
    for partition, (before, after) in enumerate(zip(baseline, after_cleanup, strict=True)):
        assert after.fds <= before.fds + FD_SLACK, f"partition {partition}: fds {before.fds} -> {after.fds}"
        assert after.maps <= before.maps + MAPS_SLACK, f"partition {partition}: maps {before.maps} -> {after.maps}"
        assert after.deleted_fds == 0
        growth = after.rss_bytes - before.rss_bytes
        assert growth <= RSS_GROWTH_BOUND, f"partition {partition}: RSS grew {growth / 2**20:.0f} MiB"


def warm_batch(number: int) -> bytes:
    """Half a segment: three of them roll the log once."""
    builder = RecordBatchBuilder()
    builder.append(None, b"%d" % number + b"w" * (SEGMENT_BYTES // 2), timestamp=int(time.time() * 1000))
    return builder.build()


def segment_files(states: list[Any]) -> list[Path]:
    return [path for state in states for path in Path(state.directory).iterdir()]


@pytest.mark.slow
def test_index_lookups_never_fail_while_the_writer_resizes(tmp_path: Path) -> None:
    """A fetch looks the index up on a read thread while the writer trims it at a roll (and grows it again
    when a segment becomes active): the lookups must always find a mapping."""
    index = OffsetIndex(tmp_path / "00000000000000000000.index", 0, max_index_size=65536)
    for entry in range(100):
        index.append(entry * 10, entry * 4096)
    failures: list[StorageError] = []
    stop = threading.Event()

    def look_up() -> None:
        while not stop.is_set():
            try:
                assert index.lookup(505).offset == 500
            except StorageError as exc:
                failures.append(exc)
                stop.set()

    reader = threading.Thread(target=look_up)
    reader.start()
    try:
        for _ in range(5000):
            if stop.is_set():
                break
            index.trim_to_valid_size()
            index.resize(65536)
    finally:
        stop.set()
        reader.join()
    assert not failures, failures[0]
