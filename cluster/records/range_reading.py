"""Reading planned offset ranges into Arrow record batches, in whatever process a read task runs (a Spark Python
worker, a Ray Data read task, a driver sampling values).

`read_ranges` fires the first fetch of every range it is given at once, and then takes the ranges' fetches in turn,
firing each range's next fetch as its current one arrives, so fetching overlaps decoding. Fetches are decoded in
groups of up to `DECODE_GROUP_BYTES`, across ranges (`cluster.records.arrow_records.decode_fetches`), as decoding
costs a fixed number of numpy steps per call. A fetch reads the segment file itself when the reader runs on the
partition's node (`actors.clients.local_fetch`: the actor only says where the bytes lie), else it goes through the
actor. Records travel as Kafka batch bytes and as Arrow record batches, never as Python rows. Control batches
(transaction markers) are never rows. A read_committed read (`isolation`, the default; `cluster.records.isolation`)
fetches below the last stable offset and drops the records of aborted transactions, as each fetch lists them.
Measured with other jobs running (load 20-50): `read_ranges` alone 1.2-1.3M records/s in one process.

Data loss (`fail_on_data_loss`, Spark's `failOnDataLoss`): records of a planned range that are gone when it is read
(retention or DeleteRecords moved the log start past them, or the log was truncated below the planned end) fail
the read with `OffsetOutOfRangeError`, or with `fail_on_data_loss=False` are skipped. A start given as `earliest`
is late-bound as in Spark: a log start that moved on since planning is no loss. Offsets missing because compaction
removed their records are not data loss: those records are simply not there.

Leader changes: a fetch that finds the partition's leader gone (its node died, or another replica leads now:
`BrokerNotAvailableError`) looks the leader up again and goes on from the same offset, through the actor when the
new leader is on another node, waiting up to `LEADER_WAIT_S` for an election, as a Kafka consumer retries within
`default.api.timeout.ms`; a read that starts while its partition has no leader (the controller still names one whose
node just died) waits for one the same way. A new leader may not yet have moved its high watermark up to what the
old one had published; a fetch that finds the planned records in its log but above its high watermark waits for it,
within the same bound, rather than taking them for lost.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from actors.calls import call
from actors.clients.local_fetch import PendingFetch, records_of
from cluster.records.arrow_records import Fetched, decode_fetches
from cluster.records.isolation import READ_COMMITTED, log_isolation
from cluster.records.offset_ranges import OffsetRange, partition_handle
from storage.errors import BrokerNotAvailableError, CorruptRecordError, InvalidRequestError, OffsetOutOfRangeError

# The first fetch of a range asks for its offsets at `FIRST_FETCH_BYTES_PER_RECORD` (the benchmark's page views
# take 82); later ones are sized from the bytes per record seen so far, so that a range's last fetch does not read
# far past its end (the partition keeps going). Up to 16 MiB, as each decode costs a fixed ~200 numpy steps
# (`cluster.records.arrow_records`, one per record of its 16 KiB batches): 125k records of 82 bytes took 0.80 s
# of CPU per 1M records in 1 MiB fetches, 0.31-0.38 s in 8 MiB ones, 0.25 s in one 16 MiB fetch.
FIRST_FETCH_BYTES_PER_RECORD = 128
MAX_FETCH_BYTES = 16 * 1024 * 1024
MIN_FETCH_BYTES = 64 * 1024
# Fetches are decoded together (across ranges) until they hold this many bytes, so that the decode's fixed ~200
# numpy steps are paid per 16 MiB rather than per fetch: 126k records of 82 bytes cut into 0.64 MB fetches (128
# partitions' size) took 0.91 s of CPU per 1M records decoded one fetch at a time, 0.27 s together, as much as in
# one 10 MB fetch. Not more: the engine gets a group's rows while the next group is decoded.
DECODE_GROUP_BYTES = 16 * 1024 * 1024
# How long a range waits for its partition to have a leader again, or for a new leader's high watermark to reach
# the planned end (Kafka's consumer `default.api.timeout.ms`), and how often it looks meanwhile. A failover here
# takes 1-3 s (the replication tests' node removals).
LEADER_WAIT_S = 60.0
# How a reader skips lost records instead: Spark's option, and Ray Data's argument.
SKIP_HINT = "Set failOnDataLoss=false (fail_on_data_loss=False in Ray Data) to skip such records."
LEADER_RETRY_S = 0.2


class _RangeReader:
    """Reads one range fetch by fetch, with the next fetch in flight while the current one is decoded."""

    def __init__(
        self,
        offset_range: OffsetRange,
        fail_on_data_loss: bool,
        node_id: str | None = None,
        isolation: str = READ_COMMITTED,
    ) -> None:
        self.range = offset_range
        self.isolation = log_isolation(isolation)
        self.position = offset_range.start
        self.fail_on_data_loss = fail_on_data_loss
        self.max_bytes = _fetch_bytes(offset_range.size * FIRST_FETCH_BYTES_PER_RECORD)
        self.pending: PendingFetch | None = None
        self.node_id = node_id
        # When the range last stopped making progress for want of a leader (monotonic s), None while it reads.
        self.stalled_since: float | None = None
        # A read task may start while its partition is between leaders (the controller still names a leader whose
        # node just died): it waits for the election as a fetch that finds its leader gone does.
        self.handle = self._leader_handle(refresh=False)

    @property
    def done(self) -> bool:
        return self.position >= self.range.end

    def fire(self) -> None:
        # Zero copy: a local fetch maps the segment's pages instead of copying them (10 MB: ~1.3 ms against
        # ~7.5 ms for a `pread` here); the bytes are only held until their group is decoded.
        self.pending = PendingFetch(
            self.handle,
            self.position,
            self.max_bytes,
            node_id=self.node_id,
            zero_copy=True,
            isolation=self.isolation,
        )

    def next_fetch(self) -> Fetched | None:
        """Waits for the fetch in flight and fires the next one unless the range is done; the fetched bytes, or
        None when there were none to decode (records deleted, missing past the log's end, or a leader gone)."""
        if self.pending is None:
            raise InvalidRequestError(f"{self.range.topic}-{self.range.partition}: no fetch in flight")
        try:
            result = self.pending.result()
            self.node_id = self.pending.node_id
        except OffsetOutOfRangeError:
            self._skip_deleted_records()
            return None
        except BrokerNotAvailableError as exc:
            self._follow_new_leader(exc)
            return None
        records = records_of(result)
        if not records:
            self._records_missing(result.high_watermark, result.log_end_offset)
            return None
        self.stalled_since = None
        start = self.position
        # The offset after the last whole batch, which the fetch found while checking the bytes walk as batches.
        next_offset = self.pending.next_offset
        if next_offset <= start:
            raise CorruptRecordError(
                f"{self.range.topic}-{self.range.partition}: a fetch at offset {start} returned no batch past it",
                offset=start,
            )
        records_per_byte = (next_offset - start) / len(records)
        remaining_bytes = (self.range.end - next_offset) / records_per_byte
        # 10 % above the estimate, so that one fetch usually finishes the range.
        self.max_bytes = _fetch_bytes(remaining_bytes * 1.1)
        self.position = next_offset
        if not self.done:
            self.fire()
        return Fetched(
            records, self.range.topic, self.range.partition, start, self.range.end, result.aborted_transactions
        )

    def _skip_deleted_records(self) -> None:
        log_start, high_watermark, log_end = call(self.handle.offsets.remote())
        if self.position >= log_start:
            self._records_missing(high_watermark, log_end)
            return
        late_bound = self.range.start_is_earliest and self.position == self.range.start
        if self.fail_on_data_loss and not late_bound:
            raise OffsetOutOfRangeError(
                f"{self.range.topic}-{self.range.partition}: offsets {self.position} to {log_start - 1} were deleted "
                "(retention or DeleteRecords) before they were read; some data was lost. " + SKIP_HINT,
                offset=self.position,
            )
        self.position = min(log_start, self.range.end)
        if not self.done:
            self.fire()

    def _records_missing(self, high_watermark: int, log_end_offset: int) -> None:
        """Nothing at or after the position, below the planned end: a new leader whose high watermark has not
        caught up yet (the records are in its log), or a log truncated since planning."""
        if log_end_offset >= self.range.end and self._wait_for_leader():
            self.fire()
            return
        if self.fail_on_data_loss:
            raise OffsetOutOfRangeError(
                f"{self.range.topic}-{self.range.partition}: offsets {self.position} to {self.range.end - 1} were "
                f"planned but the log now ends at {high_watermark}; some data was lost. " + SKIP_HINT,
                offset=self.position,
            )
        self.position = self.range.end

    def _follow_new_leader(self, cause: BrokerNotAvailableError) -> None:
        """The leader the fetch went to is gone or no longer leads: waits for the partition's leader and fires
        the same fetch there; raises `cause`'s kind once `LEADER_WAIT_S` passed without one."""
        if not self._wait_for_leader():
            raise self._no_leader(cause)
        self.handle = self._leader_handle(refresh=True)
        self.node_id = None
        self.fire()

    def _leader_handle(self, refresh: bool) -> Any:
        """The handle of the partition's leader replica (`refresh`: looked up again rather than this process's
        cached one), looked up every `LEADER_RETRY_S` while the partition has none; raises
        `BrokerNotAvailableError` once `LEADER_WAIT_S` passed without one."""
        tp = (self.range.topic, self.range.partition)
        while True:
            try:
                return partition_handle(tp, refresh=refresh)
            except BrokerNotAvailableError as exc:
                if not self._wait_for_leader():
                    raise self._no_leader(exc) from None

    def _no_leader(self, cause: BrokerNotAvailableError) -> BrokerNotAvailableError:
        """The error a range raises when it waited `LEADER_WAIT_S` for a leader: `cause`'s kind, naming it."""
        return type(cause)(
            f"{self.range.topic}-{self.range.partition}: no leader answered for {LEADER_WAIT_S:.0f} s: {cause}",
            offset=self.position,
        )

    def _wait_for_leader(self) -> bool:
        """Pauses `LEADER_RETRY_S` before looking again; False once the range has waited `LEADER_WAIT_S`."""
        now = time.monotonic()
        if self.stalled_since is None:
            self.stalled_since = now
        if now - self.stalled_since >= LEADER_WAIT_S:
            return False
        time.sleep(LEADER_RETRY_S)
        return True


def _fetch_bytes(estimate: float) -> int:
    """A fetch's `max_bytes` for an estimate of the bytes left in a range, within the fetch size bounds."""
    return int(min(MAX_FETCH_BYTES, max(MIN_FETCH_BYTES, estimate)))


def read_ranges(
    ranges: Sequence[OffsetRange],
    *,
    fail_on_data_loss: bool = True,
    include_headers: bool = False,
    node_ids: Sequence[str | None] | None = None,
    isolation: str = READ_COMMITTED,
) -> Iterator[pa.RecordBatch]:
    """The records of `ranges` as Arrow batches in the Kafka-source schema (`cluster.records.arrow_records`; this
    process must be attached to Ray): every range's first fetch at once, then the ranges' fetches in turn, decoded
    in groups of `DECODE_GROUP_BYTES` (see the module docstring). `node_ids[i]`, when known, is the node of range
    i's leader, which saves a remote range its first `locate` call. `isolation` is Kafka's level: the ranges must
    end at or below its end (`cluster.records.isolation.readable_end`)."""
    nodes = list(node_ids) if node_ids is not None else [None] * len(ranges)
    readers = [_RangeReader(r, fail_on_data_loss, node, isolation) for r, node in zip(ranges, nodes, strict=True)]
    for reader in readers:
        if not reader.done:
            reader.fire()
    waiting = deque(reader for reader in readers if not reader.done)
    while waiting:
        group: list[Fetched] = []
        group_bytes = 0
        while waiting and group_bytes < DECODE_GROUP_BYTES:
            reader = waiting.popleft()
            fetched = reader.next_fetch()
            if not reader.done:
                waiting.append(reader)
            if fetched is not None:
                group.append(fetched)
                group_bytes += len(fetched.records)
        if group:
            batch = decode_fetches(group, include_headers).batch
            if batch.num_rows:
                yield batch


def sample_values(ranges: Sequence[OffsetRange], limit: int, isolation: str = READ_COMMITTED) -> list[bytes]:
    """Up to `limit` non-null values from the start of `ranges` (for schema inference), read in this process at
    `isolation`."""
    values: list[bytes] = []
    for batch in read_ranges(_heads(ranges, limit), fail_on_data_loss=False, isolation=isolation):
        values.extend(value for value in batch.column("value").to_pylist() if value is not None)
        if len(values) >= limit:
            break
    return values[:limit]


def _heads(ranges: Sequence[OffsetRange], limit: int) -> list[OffsetRange]:
    """The first offsets of each range, `limit` spread over them (at least one each)."""
    share = max(1, -(-limit // max(1, len(ranges))))
    return [
        OffsetRange(r.topic, r.partition, r.start, min(r.end, r.start + share), r.start_is_earliest) for r in ranges
    ]
