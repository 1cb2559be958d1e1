"""Reading planned offset ranges into Arrow record batches: the read tasks inside Spark's Python workers.

`read_task` is the `mapInArrow` function of a read (`cluster.spark.kafka_source` builds the DataFrame): its input
rows are task numbers (`spark.range`), and each task attaches its worker to Ray once (`cluster.spark.worker`), fires
the first fetch of every range it owns at once, and then takes the ranges' fetches in turn, firing each range's next
fetch as its current one arrives, so fetching overlaps decoding. Fetches are decoded in groups of up to
`DECODE_GROUP_BYTES`, across ranges (`cluster.spark.arrow_records.decode_fetches`), as decoding costs a fixed number
of numpy steps per call. A fetch reads the segment file itself when the task runs on the partition's node
(`actors.clients.local_fetch`: the actor only says where the bytes lie), else it goes through the actor. Records
travel as Kafka batch bytes and as Arrow record batches into Spark, never as Python rows; the topic column leaves
Python as a 4-byte index into the plan's topics. As Spark's default isolation (`read_uncommitted`), records of
aborted transactions are read too; control batches are not. Measured on this 2-core machine (1 executor x 2 cores,
other jobs running, load 20-50): `read_ranges` alone 1.2-1.3M records/s in one process; 1M records of ~80 B (8
partitions) through Spark into a `groupBy(partition)` count and sums 0.9-1.1 s with 2 tasks, 1.1-2.0 s with 4.

Data loss (`failOnDataLoss`): records of a planned range that are gone when it is read (retention or
DeleteRecords moved the log start past them, or the log was truncated below the planned end) fail the read with
`OffsetOutOfRangeError`, or with `failOnDataLoss=false` are skipped. A start given as `earliest` is late-bound as
in Spark: a log start that moved on since planning is no loss. Offsets missing because compaction removed their
records are not data loss: those records are simply not there.

Importing this module loads the whole read path (numpy, pyarrow, the record decoders, the value decoders), which
is why the session's warm-up job runs `warm_up_task` from here.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from actors.calls import call
from actors.clients.local_fetch import PendingFetch, records_of
from cluster.spark.arrow_records import Fetched, decode_fetches
from cluster.spark.planning import OffsetRange, ReadPlan, partition_handle
from cluster.spark.value_formats import ArrowValueDecoder
from cluster.spark.worker import attach_worker_to_ray, keep_zip_directories
from storage.errors import CorruptRecordError, InvalidRequestError, OffsetOutOfRangeError

# The first fetch of a range asks for its offsets at `FIRST_FETCH_BYTES_PER_RECORD` (the benchmark's page views
# take 82); later ones are sized from the bytes per record seen so far, so that a range's last fetch does not read
# far past its end (the partition keeps going). Up to 16 MiB, as each decode costs a fixed ~200 numpy steps
# (`cluster.spark.arrow_records`, one per record of its 16 KiB batches): 125k records of 82 bytes took 0.80 s
# of CPU per 1M records in 1 MiB fetches, 0.31-0.38 s in 8 MiB ones, 0.25 s in one 16 MiB fetch.
FIRST_FETCH_BYTES_PER_RECORD = 128
MAX_FETCH_BYTES = 16 * 1024 * 1024
MIN_FETCH_BYTES = 64 * 1024
# Fetches are decoded together (across ranges) until they hold this many bytes, so that the decode's fixed ~200
# numpy steps are paid per 16 MiB rather than per fetch: 126k records of 82 bytes cut into 0.64 MB fetches (128
# partitions' size) took 0.91 s of CPU per 1M records decoded one fetch at a time, 0.27 s together, as much as in
# one 10 MB fetch. Not more: Spark gets a group's rows while the next group is decoded.
DECODE_GROUP_BYTES = 16 * 1024 * 1024


class _RangeReader:
    """Reads one range fetch by fetch, with the next fetch in flight while the current one is decoded."""

    def __init__(self, offset_range: OffsetRange, fail_on_data_loss: bool) -> None:
        self.range = offset_range
        self.handle = partition_handle((offset_range.topic, offset_range.partition))
        self.position = offset_range.start
        self.fail_on_data_loss = fail_on_data_loss
        self.max_bytes = _fetch_bytes(offset_range.size * FIRST_FETCH_BYTES_PER_RECORD)
        self.pending: PendingFetch | None = None
        self.node_id: str | None = None

    @property
    def done(self) -> bool:
        return self.position >= self.range.end

    def fire(self) -> None:
        # Zero copy: a local fetch maps the segment's pages instead of copying them (10 MB: ~1.3 ms against
        # ~7.5 ms for a `pread` here); the bytes are only held until their group is decoded.
        self.pending = PendingFetch(self.handle, self.position, self.max_bytes, node_id=self.node_id, zero_copy=True)

    def next_fetch(self) -> Fetched | None:
        """Waits for the fetch in flight and fires the next one unless the range is done; the fetched bytes, or
        None when there were none to decode (records deleted, or missing past the log's end)."""
        if self.pending is None:
            raise InvalidRequestError(f"{self.range.topic}-{self.range.partition}: no fetch in flight")
        try:
            result = self.pending.result()
            self.node_id = self.pending.node_id
        except OffsetOutOfRangeError:
            self._skip_deleted_records()
            return None
        records = records_of(result)
        if not records:
            self._records_missing(result.high_watermark)
            return None
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
        return Fetched(records, self.range.topic, self.range.partition, start, self.range.end)

    def _skip_deleted_records(self) -> None:
        log_start, high_watermark, _ = call(self.handle.offsets.remote())
        if self.position >= log_start:
            self._records_missing(high_watermark)
            return
        late_bound = self.range.start_is_earliest and self.position == self.range.start
        if self.fail_on_data_loss and not late_bound:
            raise OffsetOutOfRangeError(
                f"{self.range.topic}-{self.range.partition}: offsets {self.position} to {log_start - 1} were deleted "
                "(retention or DeleteRecords) before they were read; some data was lost. "
                "Set failOnDataLoss=false to skip such records.",
                offset=self.position,
            )
        self.position = min(log_start, self.range.end)
        if not self.done:
            self.fire()

    def _records_missing(self, high_watermark: int) -> None:
        """Nothing at or after the position, below the planned end: the log was truncated since planning."""
        if self.fail_on_data_loss:
            raise OffsetOutOfRangeError(
                f"{self.range.topic}-{self.range.partition}: offsets {self.position} to {self.range.end - 1} were "
                f"planned but the log now ends at {high_watermark}; some data was lost. "
                "Set failOnDataLoss=false to skip such records.",
                offset=self.position,
            )
        self.position = self.range.end


def _fetch_bytes(estimate: float) -> int:
    """A fetch's `max_bytes` for an estimate of the bytes left in a range, within the fetch size bounds."""
    return int(min(MAX_FETCH_BYTES, max(MIN_FETCH_BYTES, estimate)))


def read_ranges(
    ranges: Sequence[OffsetRange], *, fail_on_data_loss: bool = True, include_headers: bool = False
) -> Iterator[pa.RecordBatch]:
    """The records of `ranges` as Arrow batches in Spark's Kafka-source schema (this process must be attached to
    Ray): every range's first fetch at once, then the ranges' fetches in turn, decoded in groups of
    `DECODE_GROUP_BYTES` (see the module docstring)."""
    readers = [_RangeReader(offset_range, fail_on_data_loss) for offset_range in ranges]
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


def read_task(
    tasks: tuple[tuple[OffsetRange, ...], ...],
    topics: tuple[str, ...],
    topic_column: str,
    address: str,
    fail_on_data_loss: bool,
    include_headers: bool,
    decoder: ArrowValueDecoder | None,
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """The `mapInArrow` function: its input rows are task numbers (`spark.range`); the topic column of its output
    holds the topic's index in `topics` (`cluster.spark.kafka_source` turns it back into the name in the JVM)."""
    attach_worker_to_ray(address)
    keep_zip_directories()
    index_field = pa.field(topic_column, pa.int32())
    topic_names = pa.array(topics, type=pa.string())
    for batch in batches:
        for task in batch.column(0).to_pylist():
            for records in read_ranges(
                tasks[task], fail_on_data_loss=fail_on_data_loss, include_headers=include_headers
            ):
                output = records if decoder is None else decoder.assemble(records)
                position = output.schema.get_field_index(topic_column)
                indexes = pc.index_in(records.column("topic"), value_set=topic_names)
                yield output.set_column(position, index_field, indexes)


def sample_values(plan: ReadPlan, limit: int) -> list[bytes]:
    """Up to `limit` non-null values from the start of the plan's ranges (for schema inference), read here."""
    values: list[bytes] = []
    for batch in read_ranges(_heads(plan.ranges, limit), fail_on_data_loss=False):
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


def warm_up_task(address: str, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The session's warm-up job (`cluster.spark.session.warm_up_workers`): attaches this worker to Ray, and,
    being defined here, makes the worker import the read path now instead of in the first read."""
    attach_worker_to_ray(address)
    yield from batches
