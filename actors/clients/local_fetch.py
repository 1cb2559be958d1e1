"""Fetching a partition without moving its bytes through Ray when the reader shares the partition's node.

The actor path (`handle.fetch.remote`) has the partition actor `pread` the batches, pickle them into Ray's
object store and the reader copy them out again. A reader on the actor's own node asks the actor only where the
bytes lie (`handle.locate.remote`, a few hundred bytes: `FileSlices` naming `.log` files, byte positions,
lengths, and each file's device and inode) and reads them from the page cache itself (`pread`, or `mmap`):
Kafka's `sendfile` idea in Ray's terms. Remote readers keep the actor path.

Public API (stable; `cluster.spark.kafka_source` builds on it):

- `iter_fetches(handle, offset, end_offset=None, max_bytes=64 MiB, *, node_id=None, prefer_local=True,
  zero_copy=False, timeout_s=None) -> Iterator[FetchResult]`: for bulk readers of an offset range (a Spark
  task): the successive fetches from `offset` to `end_offset` (default: the high watermark when it starts),
  the next one in flight while the caller parses the current one; locally one call locates up to
  `max_bytes` across up to `MAX_SLICES_PER_LOCATE` segments.
- `PendingFetch(handle, offset, max_bytes=1 MiB, *, node_id=None, prefer_local=True, zero_copy=False,
  max_slices=1, max_wait_ms=0, min_bytes=1, isolation="high_watermark", populate=True)`: one fetch started now
  and finished by `.result(timeout_s)` (or `.results(timeout_s)` for several slices), so one reader can have fetches
  to many partitions in flight at once (`.ref` is the call in flight, for `ray.wait`). `.result()` is the same
  answer as `handle.fetch.remote(offset, max_bytes)` (bytes, high watermark, log start, log end), with the same
  typed errors (`OffsetOutOfRangeError` ...), read locally when possible. `node_id` is the partition's node if the
  caller knows it (`Broker.node_of`, topic metadata): a remote partition then costs one call, not two;
  `prefer_local=False` forces the actor path. `zero_copy=True` (for bulk readers that parse the batches and drop
  them: Spark tasks, benchmarks) makes `records` a read-only `memoryview` instead of `bytes`: locally over the
  segment file's pages (`mmap`, no copy at all), remotely over Ray's object store (one copy, not three); hold it
  only while parsing. `.node_id` is the partition's node once the actor told it (pass it to the next fetch),
  `.next_offset` the offset after the answer's last whole batch, `.located` the actor's `FileSlices` answer when
  the bytes were read locally (`actors.clients.local_tail` follows on from it). With `max_wait_ms` > 0 it is a
  long poll (Kafka's `fetch.max.wait.ms` / `fetch.min.bytes`): the actor answers once `min_bytes` are there or
  the wait expired (`actors.server.partition_log`), the locate and the fetch alike; a fetch falling back to the
  actor after a located read failed does not wait again. `isolation="txn_committed"` is a read_committed
  consumer's fetch: up to the last stable offset, with the aborted transactions in each answer. `populate=False`
  hands out zero-copy views with only the pages the batch walk touched faulted in, for a caller that prefaults the
  rest later (`storage.partition.file_slices.populate_pages`; `iter_fetches` does, once the next call is in
  flight).
- `read_file_slice(file_slice, offset, *, zero_copy=False) -> bytes | memoryview | None`: the located bytes,
  or None when they cannot be trusted (the caller then uses the actor path).
- `BULK_FETCH_MAX_BYTES` (64 MiB): the `max_bytes` bulk readers should ask for; each call measured 1-3 ms of Ray
  round trip with every core busy, which 1 MiB fetches cannot amortize.
- `statistics() -> LocalFetchStatistics` (local reads, fallbacks, actor fetches of this process).

Why the local bytes equal the actor's: the slice is computed by `storage.partition.file_slices` step for step like the
actor's `Log.read`, and names the file by inode. The reader opens the path, checks the inode (a segment deleted
by retention is missing; one swapped for its compacted copy is another inode), reads exactly `length` bytes,
and checks they walk as batches whose first one holds `offset`. Any failure falls back to the actor path; an
opened (or mapped) file stays readable even if it is unlinked afterwards.

A zero-copy view maps only bytes below the file's size at the time of the read; a mapped page that a later
truncation cuts off would fault (SIGBUS) when touched (see `storage.partition.file_slices`: it does not happen with one
replica), which is why zero copy is opt-in and the consumer, which keeps records for a while, copies.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Generic, TypeVar

from actors.calls import call, this_node_id
from actors.clients.read_counts import ReadCounts
from actors.server.partition_log import FetchResult, FileSlices
from storage.partition.file_slices import FileSlice, offset_after, populate_pages, read_located
from storage.partition.log import DEFAULT_FETCH_MAX_BYTES

# The max_bytes of bulk reads: a Ray round trip measured 1-3 ms with every core busy, mapping 8 MiB from the
# page cache 0.6 ms; through the actor, 16 MiB fetches ran at 900 MB/s against 180 MB/s at 1 MiB.
BULK_FETCH_MAX_BYTES = 64 * 1024 * 1024
# What a `LocatedRead` hands out of a slice: bytes or a memoryview (`PendingFetch`), a file region (the listener).
Records = TypeVar("Records")

# Segments one bulk `locate` may cover (each a slice): with Kafka's 1 GiB segments one suffices; small segments
# would otherwise cost a round trip each.
MAX_SLICES_PER_LOCATE = 16


@dataclass(frozen=True, slots=True)
class LocalFetchStatistics:
    """Fetches made by this process: read locally, located but fallen back to the actor, through the actor."""

    local_reads: int
    fallbacks: int
    actor_fetches: int


_counts = ReadCounts(LocalFetchStatistics)


def statistics() -> LocalFetchStatistics:
    return _counts.statistics()


def read_file_slice(file_slice: FileSlice, offset: int, *, zero_copy: bool = False) -> bytes | memoryview | None:
    """The `length` bytes of the slice (a read-only view of the file's pages with `zero_copy`), if its file is
    still the located one and they walk as batches from the one holding `offset`; None otherwise (file gone
    or replaced, shorter than located, torn bytes)."""
    read = read_located(file_slice, offset, zero_copy=zero_copy)
    return None if read is None else read[0]


class LocatedRead(Generic[Records]):
    """The locate-then-read fetch of one partition from `offset`, without the calls that drive it: the one reader
    of located bytes, driven by `PendingFetch` (blocking, on Ray's `ObjectRef`s) and by the Kafka listener
    (`cluster.protocol.views.ray_broker_view`, awaited on its event loop).

    `locating` says whether to ask the partition's actor where the bytes lie (`locate`) or to fetch them through
    it; `read(located)` reads the located slices with `read_slice` (which answers the bytes it read and the offset
    after their last whole batch, or None when they cannot be trusted), up to the first it cannot trust, or answers
    None when the caller must fetch through the actor after all: the partition is on another node, or the first
    slice's file changed. Such a fetch must not wait again (`max_wait_ms` 0): `locate` waited already.
    `actor_fetched()` counts a fetch made through the actor. The process's `statistics` count each outcome."""

    def __init__(
        self,
        offset: int,
        read_slice: Callable[[FileSlice, int], tuple[Records, int | None] | None],
        *,
        node_id: str | None = None,
        prefer_local: bool = True,
    ) -> None:
        self._read_slice = read_slice
        self.locating = prefer_local and (node_id is None or node_id == this_node_id())
        # The partition's node once the actor told it.
        self.node_id = node_id
        # The offset after the last whole batch read (None: the reader could not tell).
        self.next_offset: int | None = offset

    def read(self, located: FileSlices) -> list[Records | bytes] | None:
        """The located bytes, slice after slice (`[b""]` when nothing was located), or None: fetch through the actor."""
        self.node_id = located.node_id
        if located.node_id != this_node_id():
            self.actor_fetched()
            return None
        if not located.slices:
            _counts.count("local_reads")
            return [b""]
        read: list[Records | bytes] = []
        for file_slice in located.slices:
            if self.next_offset is None:
                break
            answer = self._read_slice(file_slice, self.next_offset)
            if answer is None:
                break
            read.append(answer[0])
            self.next_offset = answer[1]
        _counts.count("local_reads" if read else "fallbacks")
        return read or None

    @staticmethod
    def actor_fetched() -> None:
        _counts.count("actor_fetches")


class PendingFetch:
    """One fetch in flight: `locate` when the partition may be on this node, else `fetch`; see the module."""

    def __init__(
        self,
        handle: Any,
        offset: int,
        max_bytes: int = DEFAULT_FETCH_MAX_BYTES,
        *,
        node_id: str | None = None,
        prefer_local: bool = True,
        zero_copy: bool = False,
        max_slices: int = 1,
        max_wait_ms: int = 0,
        min_bytes: int = 1,
        isolation: str = "high_watermark",
        populate: bool = True,
    ) -> None:
        self._handle = handle
        self._isolation = isolation
        self._offset = offset
        self._max_bytes = max_bytes
        self._zero_copy = zero_copy
        self._read = LocatedRead(
            offset,
            partial(read_located, zero_copy=zero_copy, populate=populate),
            node_id=node_id,
            prefer_local=prefer_local,
        )
        # The offset after the last whole batch of the answer, once `results` returned it.
        self.next_offset = offset
        # The actor's answer to `locate`, once `results` read its slices locally.
        self.located: FileSlices | None = None
        if self._read.locating:
            self.ref = handle.locate.remote(offset, max_bytes, max_slices, max_wait_ms, min_bytes, isolation)
        else:
            self.ref = self._fetch(max_wait_ms, min_bytes)

    @property
    def node_id(self) -> str | None:
        """The partition's node, as the caller said or the actor told (pass it to the next fetch)."""
        return self._read.node_id

    def _fetch(self, max_wait_ms: int = 0, min_bytes: int = 1) -> Any:
        return self._handle.fetch.remote(
            self._offset, self._max_bytes, self._zero_copy, max_wait_ms, min_bytes, self._isolation
        )

    def result(self, timeout_s: float | None = None) -> FetchResult:
        """The fetch's answer; the actor's typed errors are raised as they are (`actors.calls.call`)."""
        return self.results(timeout_s)[0]

    def results(self, timeout_s: float | None = None) -> list[FetchResult]:
        """The fetch's answer, then (`max_slices` > 1, read locally) the answers of fetches of the following
        segments, each from the offset after the one before."""
        answer = call(self.ref, timeout_s)
        if not self._read.locating:
            self._read.actor_fetched()
            return [self._from_actor(answer)]
        located: FileSlices = answer
        read = self._read.read(located)
        if read is None:
            return [self._from_actor(call(self._fetch(), timeout_s))]
        self.located = located
        self.next_offset = self._read.next_offset if self._read.next_offset is not None else self._offset
        return [FetchResult(records, *located.offsets, located.aborted_transactions) for records in read]

    def _from_actor(self, answer: FetchResult) -> FetchResult:
        """Out-of-band bytes arrive as a Ray buffer over the object store: handed out as a memoryview."""
        if self._zero_copy:
            answer = replace(answer, records=memoryview(answer.records))
        next_offset = offset_after(records_of(answer), self._offset)
        self.next_offset = self._offset if next_offset is None else next_offset
        return answer


def records_of(result: FetchResult) -> bytes | memoryview:
    """The batch bytes of an answer a `PendingFetch` handed out: `bytes`, or a memoryview. (`FetchResult`'s type
    also admits the `pickle.PickleBuffer` an actor sends out of band; Ray gives the reader a buffer in its place,
    which is wrapped in a memoryview here.)"""
    records = result.records
    return records if isinstance(records, bytes | memoryview) else memoryview(records)


def iter_fetches(
    handle: Any,
    offset: int,
    end_offset: int | None = None,
    max_bytes: int = BULK_FETCH_MAX_BYTES,
    *,
    node_id: str | None = None,
    prefer_local: bool = True,
    zero_copy: bool = False,
    timeout_s: float | None = None,
) -> Iterator[FetchResult]:
    """The fetches that read the partition from `offset` until `end_offset` (default: the high watermark of the
    first answer), in order, each from the offset after the last whole batch of the one before; the next call
    is in flight while the caller handles an answer. Read locally, one call locates up to `max_bytes` over up to
    `MAX_SLICES_PER_LOCATE` segments. The first answer's first batch may start below `offset` and the last
    one's batches may reach past `end_offset`, as with any fetch; it stops early at the high watermark."""

    def fetch_from(start: int, node: str | None) -> PendingFetch:
        """The fetch from `start` (the partition's node as `node`, if known), each of this read's fetches alike:
        located over up to `MAX_SLICES_PER_LOCATE` segments, its pages populated below, not as it is read."""
        return PendingFetch(
            handle,
            start,
            max_bytes,
            node_id=node,
            prefer_local=prefer_local,
            zero_copy=zero_copy,
            max_slices=MAX_SLICES_PER_LOCATE,
            populate=False,
        )

    pending = fetch_from(offset, node_id)
    limit = end_offset
    while True:
        results = pending.results(timeout_s)
        limit = results[0].high_watermark if limit is None else limit
        next_offset = pending.next_offset
        more = offset < next_offset < limit
        if more:
            pending = fetch_from(next_offset, pending.node_id)
        # Mapped views are prefaulted only now, while the next locate is in flight: the walk that found
        # `next_offset` touched a page per batch; the rest (~1.3-4 ms per 64 MiB) overlaps the Ray round trip.
        for result in results:
            populate_pages(records_of(result))
        yield from (result for result in results if len(records_of(result)))
        if not more:
            return
        offset = next_offset


__all__ = [
    "BULK_FETCH_MAX_BYTES",
    "MAX_SLICES_PER_LOCATE",
    "LocalFetchStatistics",
    "LocatedRead",
    "PendingFetch",
    "iter_fetches",
    "read_file_slice",
    "records_of",
    "statistics",
]
