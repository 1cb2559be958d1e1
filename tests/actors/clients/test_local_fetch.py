"""`actors.clients.local_fetch` on a real broker, with the actor's own `fetch` as the oracle: the page-cache path
returns
the same bytes and offsets for every offset and size across segment rolls, falls back to the actor when the
located segment is deleted or swapped under it or its bytes are torn, and raises the same out-of-range errors.
`read_file_slice` is also checked on plain files (no Ray) for each reason to distrust a slice. Long polls
(`max_wait_ms`, `min_bytes`) are checked on the plain partition and host classes (no Ray: answered as soon as
an append brings enough bytes, empty when the wait expires, at once when every long-poll slot is taken) and
through a real partition's `locate` and `fetch`."""

from __future__ import annotations

import functools
import os
import pickle
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from actors.calls import this_node_id
from actors.clients import local_fetch
from actors.clients.local_fetch import (
    LocatedRead,
    PendingFetch,
    iter_fetches,
    read_file_slice,
    records_of,
)
from actors.core.replication.partition_server import LONG_POLL_SLOTS
from actors.server.partition_host import PartitionHostActor
from actors.server.partition_log import FetchResult, FileSlices, PartitionLogActor
from storage.errors import BrokerNotAvailableError, OffsetOutOfRangeError
from storage.partition.file_slices import FileSlice, read_located
from storage.records.file_records import iter_any_batches
from tests.storage.builders import simple_batch

TOPIC = "local-fetch"
SEGMENT_BYTES = 4096
SIZES = (1, 500, 3000, 10**6)


@pytest.fixture(scope="module")
def partition(start_test_broker: Any) -> Any:
    """Partition 0 of `local-fetch`: small segments (many rolls), no delete delay (a deleted file is gone),
    no time retention (the batches' timestamps are from 2023)."""
    from actors import Admin

    broker, _ = start_test_broker(log_dirs_count=1)
    Admin(broker).create_topic(
        TOPIC, 1, {"segment.bytes": str(SEGMENT_BYTES), "file.delete.delay.ms": "0", "retention.ms": "-1"}
    )
    return broker.partition(TOPIC, 0)


def append(handle: Any, batches: int, tag: int = 0) -> None:
    import ray

    for index in range(batches):
        batch = simple_batch(1 + index % 4, value_size=50 + 13 * (index % 20), tag=tag + index)
        ray.get(handle.append.remote(batch))


def actor_fetch(handle: Any, offset: int, max_bytes: int) -> Any:
    import ray

    return ray.get(handle.fetch.remote(offset, max_bytes))


def offsets(handle: Any) -> tuple[int, int, int]:
    import ray

    return ray.get(handle.offsets.remote())


@pytest.mark.ray
def test_local_reads_equal_the_actors_fetch_for_every_offset_across_segment_rolls(partition: Any) -> None:
    append(partition, 60)
    start, high_watermark, _ = offsets(partition)
    assert ray_state(partition).segments > 3
    before = local_fetch.statistics()
    compared = 0
    for offset in range(start, high_watermark + 1):
        for max_bytes in SIZES:
            expected = actor_fetch(partition, offset, max_bytes)
            copied = PendingFetch(partition, offset, max_bytes).result()
            assert isinstance(copied.records, bytes) and copied == expected
            mapped = PendingFetch(partition, offset, max_bytes, zero_copy=True).result()
            assert mapped.records == expected.records and mapped.high_watermark == expected.high_watermark
            compared += 2
    after = local_fetch.statistics()
    assert after.local_reads - before.local_reads == compared
    assert after.fallbacks == before.fallbacks and after.actor_fetches == before.actor_fetches


@pytest.mark.ray
def test_zero_copy_actor_fetches_equal_the_copied_ones(partition: Any) -> None:
    append(partition, 10)
    start, high_watermark, _ = offsets(partition)
    for offset in range(start, high_watermark, 7):
        for max_bytes in SIZES:
            expected = actor_fetch(partition, offset, max_bytes)
            remote = PendingFetch(partition, offset, max_bytes, prefer_local=False, zero_copy=True).result()
            assert isinstance(remote.records, memoryview) and remote.records.readonly
            assert bytes(remote.records) == expected.records
            assert (remote.high_watermark, remote.log_end_offset) == (expected.high_watermark, expected.log_end_offset)


def ray_state(handle: Any) -> Any:
    import ray

    return ray.get(handle.state.remote())


def whole_batches(chunks: list[Any]) -> list[bytes]:
    """The whole batches of successive fetch answers, each once (a batch cut at a fetch's end comes again)."""
    seen: dict[int, bytes] = {}
    for chunk in chunks:
        data = bytes(chunk.records)
        for batch in iter_any_batches(data):
            seen.setdefault(batch.base_offset, data[batch.position : batch.position + batch.size_in_bytes])
    return [seen[base] for base in sorted(seen)]


def batch_offsets(batch: bytes) -> tuple[int, int]:
    (only,) = iter_any_batches(batch)
    return only.base_offset, only.last_offset


@pytest.mark.ray
def test_iter_fetches_reads_a_range_locally_and_remotely_as_successive_actor_fetches(partition: Any) -> None:
    append(partition, 30)
    start, high_watermark, _ = offsets(partition)
    expected = []
    offset = start
    while offset < high_watermark:
        answer = actor_fetch(partition, offset, 10**6)
        expected.append(answer)
        offset = list(iter_any_batches(answer.records))[-1].last_offset + 1
    oracle = whole_batches(expected)
    for max_bytes in (100, 3000, 10**6):
        for prefer_local in (True, False):
            for zero_copy in (True, False):
                chunks = list(
                    iter_fetches(partition, start, None, max_bytes, prefer_local=prefer_local, zero_copy=zero_copy)
                )
                assert whole_batches(chunks) == oracle, (max_bytes, prefer_local, zero_copy)
    middle = start + (high_watermark - start) // 2
    # 100-byte fetches return one whole batch each (every batch is larger): exactly those holding the range.
    in_range = [batch for batch in oracle if batch_offsets(batch)[1] >= middle and batch_offsets(batch)[0] < middle + 5]
    for prefer_local in (True, False):
        chunks = list(iter_fetches(partition, middle, middle + 5, 100, prefer_local=prefer_local))
        assert [bytes(chunk.records) for chunk in chunks] == in_range
    assert list(iter_fetches(partition, high_watermark)) == []


@pytest.mark.ray
def test_out_of_range_offsets_raise_the_actors_error(partition: Any) -> None:
    append(partition, 3)
    end = offsets(partition)[2]
    for offset in (end + 1, -1):
        with pytest.raises(OffsetOutOfRangeError) as local:
            PendingFetch(partition, offset, 1000).result()
        assert local.value.offset == offset
        with pytest.raises(OffsetOutOfRangeError):
            PendingFetch(partition, offset, 1000, prefer_local=False).result()


@pytest.mark.ray
def test_a_segment_deleted_between_locate_and_read_falls_back_to_the_actor(partition: Any) -> None:
    import ray

    append(partition, 40)
    start, _, _ = offsets(partition)
    pending = PendingFetch(partition, start, 10**6)
    ray.wait([pending.ref])
    # Retention removes the located segment (file.delete.delay.ms=0: its file is unlinked at once); a fetch
    # never spans segments, so the end of a big one from the log start is the next segment's base.
    next_segment_base = list(iter_any_batches(actor_fetch(partition, start, 10**6).records))[-1].last_offset + 1
    ray.get(partition.delete_records.remote(next_segment_base))
    ray.get(partition.delete_old_segments.remote())
    assert ray_state(partition).first_segment_base == next_segment_base
    before = local_fetch.statistics()
    with pytest.raises(OffsetOutOfRangeError):
        pending.result()
    assert local_fetch.statistics().fallbacks == before.fallbacks + 1


@pytest.mark.ray
def test_reads_racing_retention_return_the_logs_bytes_or_the_actors_error(partition: Any) -> None:
    """A reader keeps fetching from the log start while retention moves it: each answer is either the
    out-of-range error or a prefix of the log's bytes from the batch holding the offset, never other bytes."""
    import ray

    append(partition, 80)
    start, high_watermark, _ = offsets(partition)
    stream = b""  # every batch from the log start, back to back (the oracle)
    batch_starts: dict[int, int] = {}  # last offset -> position in `stream`
    offset = start
    while offset < high_watermark:
        fetched = actor_fetch(partition, offset, 10**6).records
        for batch in iter_any_batches(fetched):
            batch_starts[batch.last_offset] = len(stream)
            stream += fetched[batch.position : batch.position + batch.size_in_bytes]
            offset = batch.last_offset + 1
    checked = 0
    for _ in range(40):
        start, high_watermark, _ = offsets(partition)
        if high_watermark - start < 10:
            break
        # The fetch is sent first, retention right behind it (other concurrency groups: no order between them).
        pending = PendingFetch(partition, start, 2000)
        retention = [partition.delete_records.remote(start + 2), partition.delete_old_segments.remote()]
        try:
            local = pending.result()
        except OffsetOutOfRangeError:
            continue
        finally:
            ray.get(retention)
        first = batch_starts[min(last for last in batch_starts if last >= start)]
        assert local.records and local.records == stream[first : first + len(local.records)]
        checked += 1
    assert checked > 0


@pytest.mark.ray
def test_a_partition_on_another_node_is_fetched_through_the_actor_in_one_call(partition: Any) -> None:
    append(partition, 2)
    start, _, _ = offsets(partition)
    before = local_fetch.statistics()
    result = PendingFetch(partition, start, 1000, node_id="another-node").result()
    assert result == actor_fetch(partition, start, 1000)
    forced = PendingFetch(partition, start, 1000, prefer_local=False).result()
    assert forced == result
    after = local_fetch.statistics()
    assert after.actor_fetches == before.actor_fetches + 2 and after.local_reads == before.local_reads


# --- read_file_slice on plain files (no Ray) -------------------------------------------------------------


def slice_of(path: Path, position: int = 0, length: int | None = None) -> FileSlice:
    status = os.stat(path)
    size = status.st_size if length is None else length
    return FileSlice(str(path), position, size, status.st_dev, status.st_ino)


def three_batches(path: Path) -> bytes:
    """Three batches at offsets 0, 1-2, 3-5 (assigned by rewriting their base offsets)."""
    from storage.records.record_batch import set_base_offset_and_epoch

    data = bytearray()
    base = 0
    for count in (1, 2, 3):
        batch = bytearray(simple_batch(count, tag=base))
        set_base_offset_and_epoch(batch, 0, base, 0)
        data += batch
        base += count
    path.write_bytes(bytes(data))
    return bytes(data)


def test_read_file_slice_returns_the_located_bytes(tmp_path: Path) -> None:
    data = three_batches(tmp_path / "00000000000000000000.log")
    assert read_file_slice(slice_of(tmp_path / "00000000000000000000.log"), 0) == data
    mapped = read_file_slice(slice_of(tmp_path / "00000000000000000000.log", position=0), 0, zero_copy=True)
    assert isinstance(mapped, memoryview) and mapped == data
    second = len(simple_batch(1, tag=0))  # where the second batch starts, inside the first page
    located = slice_of(tmp_path / "00000000000000000000.log", position=second, length=len(data) - second)
    assert read_file_slice(located, 1, zero_copy=True) == data[second:]
    assert read_file_slice(slice_of(tmp_path / "00000000000000000000.log"), 2) is None  # first batch ends at 0
    partial = slice_of(tmp_path / "00000000000000000000.log", length=len(data) - 5)
    assert read_file_slice(partial, 0) == data[:-5]  # a fetch may end mid-batch


def test_read_file_slice_distrusts_a_vanished_swapped_short_or_torn_file(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    data = three_batches(path)
    located = slice_of(path)
    swapped = tmp_path / "swap"
    swapped.write_bytes(data)
    os.replace(swapped, path)
    assert read_file_slice(located, 0) is None  # same name and bytes, another inode: a compaction swap
    located = slice_of(path)
    os.truncate(path, len(data) - 10)
    assert read_file_slice(located, 0) is None  # shorter than located
    assert read_file_slice(slice_of(path, position=7, length=40), 0) is None  # not at a batch boundary
    path.unlink()
    assert read_file_slice(located, 0) is None  # deleted by retention
    assert read_file_slice(FileSlice(str(path), 0, 0, 0, 0), 0) == b""  # an empty fetch reads nothing


def test_a_located_read_reads_slices_up_to_the_first_untrusted_one_and_else_sends_the_caller_to_the_actor(
    tmp_path: Path,
) -> None:
    """`LocatedRead`'s decisions on plain files (no Ray: this process's node id is then "")."""
    path = tmp_path / "00000000000000000000.log"
    data = three_batches(path)
    here, before = this_node_id(), local_fetch.statistics()

    def located(*slices: FileSlice, node_id: str = here) -> FileSlices:
        return FileSlices(slices, 6, 0, 6, node_id)

    def reader(offset: int = 0) -> LocatedRead[bytes | memoryview]:
        return LocatedRead(offset, functools.partial(read_located, zero_copy=False))

    read = reader()
    assert read.locating and read.read(located(slice_of(path), slice_of(path, length=0))) == [data, b""]
    assert read.next_offset == 6
    untrusted = slice_of(path, position=7, length=40)
    read = reader()
    assert read.read(located(slice_of(path), untrusted)) == [data] and read.next_offset == 6
    assert reader().read(located(untrusted, slice_of(path))) is None  # the first slice's file changed
    assert reader().read(located()) == [b""]  # nothing to fetch yet
    elsewhere = reader()
    assert elsewhere.read(located(slice_of(path), node_id="another-node")) is None
    assert elsewhere.node_id == "another-node"
    assert not LocatedRead(0, read_located, node_id="another-node").locating
    assert not LocatedRead(0, read_located, prefer_local=False).locating
    after = local_fetch.statistics()
    assert (after.local_reads - before.local_reads, after.fallbacks - before.fallbacks) == (3, 1)
    assert after.actor_fetches - before.actor_fetches == 1


def test_records_of_an_answer_are_its_bytes_or_a_view_of_its_buffer() -> None:
    data = simple_batch(2, tag=0)
    assert records_of(FetchResult(data, 2, 0, 2, 2)) is data
    view = records_of(FetchResult(pickle.PickleBuffer(bytearray(data)), 2, 0, 2, 2))
    assert isinstance(view, memoryview) and view == data


@pytest.mark.ray
def test_a_long_poll_through_a_real_partition_answers_when_a_record_arrives(partition: Any) -> None:
    """Locally (`locate` waits, then the bytes are read from the page cache) and through the actor's `fetch`."""
    for prefer_local in (True, False):
        end = offsets(partition)[2]
        before = local_fetch.statistics()
        pending = PendingFetch(partition, end, 10**6, prefer_local=prefer_local, max_wait_ms=20_000)
        started = time.monotonic()
        threading.Timer(0.3, append, [partition, 1, 7000]).start()
        result = pending.result()
        assert 0.2 < time.monotonic() - started < 10
        assert [batch.base_offset for batch in iter_any_batches(result.records)] == [end]
        assert result.high_watermark > end
        after = local_fetch.statistics()
        assert (after.local_reads - before.local_reads, after.actor_fetches - before.actor_fetches) == (
            (1, 0) if prefer_local else (0, 1)
        )


# --- long polls on the plain partition and host classes (no Ray) ------------------------------------------


class WatchedSlots(threading.BoundedSemaphore):
    """A long-poll slot pool that tells how many slots are taken."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.taken = 0

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        acquired = super().acquire(blocking, timeout)
        self.taken += acquired
        return acquired

    def release(self, n: int = 1) -> None:
        self.taken -= n
        super().release(n)


def wait_until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.01)


def timed(call: Callable[[], Any]) -> tuple[Any, float]:
    started = time.monotonic()
    answer = call()
    return answer, time.monotonic() - started


def in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Runs `call` in a started thread; the list gets its answer or error."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(call())
        except Exception as exc:
            out.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def test_a_long_poll_answers_as_soon_as_an_append_brings_data(tmp_path: Path) -> None:
    log = PartitionLogActor(str(tmp_path / "long-poll-0"), {})
    try:
        for method in ("fetch", "locate"):
            end = log.ready()
            batch = simple_batch(2, tag=end)
            threading.Timer(0.3, log.append, [batch]).start()
            answer, elapsed = timed(functools.partial(getattr(log, method), end, 10**6, max_wait_ms=20_000))
            assert 0.2 < elapsed < 10, method
            assert answer.high_watermark == end + 2
            if method == "fetch":
                assert [b.base_offset for b in iter_any_batches(answer.records)] == [end]
            else:
                assert sum(file_slice.length for file_slice in answer.slices) == len(batch)
    finally:
        log.close()


def test_a_long_poll_answers_empty_when_its_wait_expires_and_at_once_without_waiting(tmp_path: Path) -> None:
    log = PartitionLogActor(str(tmp_path / "long-poll-0"), {})
    try:
        log.append(simple_batch(3))
        answer, elapsed = timed(lambda: log.fetch(3, 10**6, max_wait_ms=300))
        assert (answer.records, answer.high_watermark) == (b"", 3) and 0.29 < elapsed < 5
        located, elapsed = timed(lambda: log.locate(3, 10**6, max_wait_ms=300))
        assert (located.slices, located.high_watermark) == ((), 3) and 0.29 < elapsed < 5
        answer, elapsed = timed(lambda: log.fetch(0, 10**6, max_wait_ms=20_000))
        assert len(answer.records) == len(simple_batch(3)) and elapsed < 5  # data there: no wait
        assert timed(lambda: log.fetch(3, 10**6))[1] < 5  # max_wait_ms=0: never waits
        with pytest.raises(OffsetOutOfRangeError):
            log.fetch(4, 10**6, max_wait_ms=20_000)  # past the log end: the error at once, no wait
    finally:
        log.close()


def test_a_long_poll_waits_for_min_bytes_and_ends_when_the_log_closes(tmp_path: Path) -> None:
    log = PartitionLogActor(str(tmp_path / "long-poll-0"), {})
    first, second = simple_batch(1, tag=0), simple_batch(1, tag=1)
    threading.Timer(0.2, log.append, [first]).start()
    threading.Timer(0.6, log.append, [second]).start()
    answer, elapsed = timed(lambda: log.fetch(0, 10**6, max_wait_ms=20_000, min_bytes=len(first) + 1))
    assert 0.5 < elapsed < 10
    assert [batch.base_offset for batch in iter_any_batches(answer.records)] == [0, 1]
    thread, out = in_thread(lambda: log.fetch(2, 10**6, max_wait_ms=20_000))
    time.sleep(0.2)
    log.close()
    thread.join(10)
    assert not thread.is_alive() and isinstance(out[0], BrokerNotAvailableError)


def test_long_polls_beyond_the_slots_answer_at_once_and_leave_read_threads_free(tmp_path: Path) -> None:
    slots = WatchedSlots(LONG_POLL_SLOTS)
    log = PartitionLogActor(str(tmp_path / "long-poll-0"), {}, long_poll_slots=slots)
    try:
        waiters = [in_thread(lambda: log.fetch(0, 10**6, max_wait_ms=20_000)) for _ in range(LONG_POLL_SLOTS)]
        wait_until(lambda: slots.taken == LONG_POLL_SLOTS, "every slot is taken")
        answer, elapsed = timed(lambda: log.fetch(0, 10**6, max_wait_ms=20_000))
        assert answer.records == b"" and elapsed < 5
        log.append(simple_batch(1))
        for thread, out in waiters:
            thread.join(10)
            assert [batch.base_offset for batch in iter_any_batches(out[0].records)] == [0]
        assert slots.taken == 0
    finally:
        log.close()


def test_a_hosts_partitions_share_its_long_poll_slots(tmp_path: Path) -> None:
    """Long polls on one partition of a host take its slots: another partition's long poll answers at once
    rather than taking a read thread the host's other partitions need."""
    host = PartitionHostActor("host-under-test", {})
    slots = host._long_poll_slots = WatchedSlots(LONG_POLL_SLOTS)  # watched: created before any partition opens
    for partition in (0, 1):
        host.open_partition("t", partition, str(tmp_path / f"t-{partition}"), {})
    try:
        waiters = [
            in_thread(lambda: host.read("t", 0, "fetch", 0, 10**6, max_wait_ms=20_000)) for _ in range(LONG_POLL_SLOTS)
        ]
        wait_until(lambda: slots.taken == LONG_POLL_SLOTS, "every slot is taken")
        answer, elapsed = timed(lambda: host.read("t", 1, "locate", 0, 10**6, max_wait_ms=20_000))
        assert answer.slices == () and elapsed < 5
        host.write("t", 0, "append", simple_batch(1))
        for thread, out in waiters:
            thread.join(10)
            assert [batch.base_offset for batch in iter_any_batches(out[0].records)] == [0]
    finally:
        for partition in (0, 1):
            host.remove_partition("t", partition)
