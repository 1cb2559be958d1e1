"""Topics -> a Spark DataFrame with Spark's Kafka-source schema, read from the partition actors (batch queries).

`read_topics(spark, topics=...)` is `spark.read.format("kafka")` for raybroker: the same option names and value
formats, the same columns (`key binary, value binary, topic string, partition int, offset long, timestamp
timestamp, timestampType int`, and `headers array<struct<key:string,value:binary>>` with `includeHeaders`).

| option                                | values                                             | default    |
|---------------------------------------|----------------------------------------------------|------------|
| `topics` (Spark: `subscribe`)         | a list, or one comma-separated string              | -          |
| `assign`                              | `{"t":[0,1]}` (JSON or a dict)                     | -          |
| `startingOffsets`                     | `earliest`, `latest`, `{"t":{"0":23,"1":-2}}`      | `earliest` |
| `endingOffsets`                       | `latest`, `{"t":{"0":50,"1":-1}}`                  | `latest`   |
| `startingTimestamp`/`endingTimestamp` | ms; every partition from/until the first record at | -          |
|                                       | or after it (wins over `...OffsetsByTimestamp`)    |            |
| `startingOffsetsByTimestamp`,         | `{"t":{"0":1700000000000}}`                        | -          |
| `endingOffsetsByTimestamp`            |                                                    |            |
| `startingOffsetsByTimestampStrategy`  | `error`, `latest`: when no record is that new      | `error`    |
| `minPartitions`                       | split big partitions into about this many ranges   | none       |
| `failOnDataLoss`                      | fail, or skip, when planned records were deleted   | true       |
| `includeHeaders`                      | add the `headers` column                           | false      |
| `valueFormat`, `valueSchema`          | decode values (`cluster.spark.value_formats`)            | `binary`   |

In offset JSON, -2 means earliest and -1 latest; a JSON must name every partition read (as Spark requires). A
timestamp with no record at or after it ends a read at the latest offset. Deviation from Spark: `startingOffsets`
may be `latest` (Spark refuses it for batch reads); the read is then empty.

Planning (`plan_read`, on the driver): every partition is asked its offsets at once (`offsets()`, `list_offset`
for timestamps). `latest` is the high watermark at that moment, and the end offsets are fixed there: the
DataFrame reads exactly the planned ranges however often it is evaluated and however much is written meanwhile
(a consistent snapshot), and a next read that starts from this one's end offsets (`planned_read(df).
ending_offsets_json()`) neither skips nor repeats a record. Ranges are split when `minPartitions` asks for more
ranges than there are partitions (each range in proportion to its share of the records), then packed, biggest
first, into one Spark task per executor core (more only when `minPartitions` asks): spark-bridge.md §3 measured
one Spark task per partition degrading by 70-90 ms per task (1M records, 128 partitions: 15 s), against 1.9 s for
4 grouped tasks, and 2 tasks on the 2 cores beat 4 (`TASKS_PER_CORE`). Ranges are packed by their offset counts,
which stand for their bytes as long as the partitions' records are of similar sizes.

Reading (inside Spark's Python workers, `mapInArrow` over a `spark.range` of task numbers): each task attaches its
worker to Ray once, fires the first fetch of every range it owns at once, and then, range by range, fires the next
fetch before decoding the current one (`cluster.spark.arrow_records`), so fetching overlaps decoding. A fetch reads the
segment file itself when the task runs on the partition's node (`actors.clients.local_fetch`: the actor only says where
the bytes lie), else it goes through the actor. Records travel as Kafka batch bytes and as Arrow record batches
into Spark, never as Python rows; the topic column leaves Python as a 4-byte index into the plan's topics and
becomes the name again in the JVM (`_topic_names`). As Spark's default isolation (`read_uncommitted`), records of
aborted transactions are read too; control batches are not. Measured on this 2-core box (1 executor x 2 cores,
other jobs running, load 20-50): `read_ranges` alone 1.2-1.3M records/s in one process; 1M records of ~80 B
(8 partitions) through Spark into a `groupBy(partition)` count and sums 0.9-1.1 s with 2 tasks, 1.1-2.0 s with 4.

Data loss (`failOnDataLoss`): records of a planned range that are gone when it is read (retention or DeleteRecords
moved the log start past them, or the log was truncated below the planned end) fail the read with
`OffsetOutOfRangeError`, or with `failOnDataLoss=false` are skipped. A start given as `earliest` is late-bound as
in Spark: a log start that moved on since planning is no loss. Offsets missing because compaction removed their
records are not data loss: those records are simply not there.
"""

from __future__ import annotations

import json
import sys
import weakref
import zipimport
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from storage.errors import (
    CorruptRecordError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

    from actors.clients.broker import Broker
    from actors.clients.local_fetch import PendingFetch
    from cluster.spark.value_formats import ArrowValueDecoder

TopicPartition = tuple[str, int]
EARLIEST = -2
LATEST = -1
TIMESTAMP_STRATEGIES = ("error", "latest")
# The first fetch of a range asks for its offsets at `FIRST_FETCH_BYTES_PER_RECORD` (the benchmark's page views
# take 82); later ones are sized from the bytes per record seen so far, so that a range's last fetch does not read
# far past its end (the partition keeps going). Up to 16 MiB, as each fetch costs a fixed ~200 numpy steps to
# decode (`cluster.spark.arrow_records`, one per record of its 16 KiB batches): 125k records of 82 bytes took 0.80 s of
# CPU per 1M records in 1 MiB fetches, 0.31-0.38 s in 8 MiB ones, 0.25 s in one 16 MiB fetch.
FIRST_FETCH_BYTES_PER_RECORD = 128
MAX_FETCH_BYTES = 16 * 1024 * 1024
MIN_FETCH_BYTES = 64 * 1024
# Spark tasks per executor core. 1M records in 8 partitions into a groupBy (best of 3-4, loaded box): 2 tasks on
# the 2 cores 0.90-1.11 s, 4 tasks 1.13-2.03 s; 100k records 0.40 s against 0.66 s. Each task pays Spark's Python
# task set-up, and one wave of tasks keeps the read of every core going to the end.
TASKS_PER_CORE = 1

_plans: weakref.WeakKeyDictionary[Any, ReadPlan] = weakref.WeakKeyDictionary()
_handles: dict[TopicPartition, Any] = {}


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Records `[start, end)` of one partition; `start_is_earliest`: the start was `earliest` (late-bound)."""

    topic: str
    partition: int
    start: int
    end: int
    start_is_earliest: bool = False

    @property
    def size(self) -> int:
        """Offsets in the range: an upper bound of its records (compaction leaves gaps)."""
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class ReadPlan:
    """A planned read: its ranges, how they are grouped into Spark tasks, and the offsets it starts and ends at."""

    ranges: tuple[OffsetRange, ...]
    tasks: tuple[tuple[int, ...], ...]
    start_offsets: dict[TopicPartition, int]
    end_offsets: dict[TopicPartition, int]
    fail_on_data_loss: bool

    @property
    def offset_count(self) -> int:
        """Offsets the read covers: the number of records unless compaction left gaps."""
        return sum(offset_range.size for offset_range in self.ranges)

    def ending_offsets_json(self) -> str:
        """The end offsets as Spark's offset JSON, to pass as `startingOffsets` of the next read."""
        return offsets_json(self.end_offsets)

    def starting_offsets_json(self) -> str:
        return offsets_json(self.start_offsets)


def offsets_json(offsets: Mapping[TopicPartition, int]) -> str:
    """`{"topic":{"partition":offset,...},...}`, Spark's format for per-partition offsets."""
    nested: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        nested.setdefault(topic, {})[str(partition)] = offset
    return json.dumps(nested, separators=(",", ":"))


# --- options ---------------------------------------------------------------------------------------------


def parse_partition_offsets(spec: str | Mapping[str, Mapping[str, int]], option: str) -> dict[TopicPartition, int]:
    """Spark's per-partition JSON (`{"t":{"0":23}}`), as text or as the parsed dict."""
    try:
        parsed = json.loads(spec) if isinstance(spec, str) else spec
        result: dict[TopicPartition, int] = {}
        for topic, partitions in parsed.items():
            for partition, offset in partitions.items():
                if not isinstance(offset, int) or isinstance(offset, bool):
                    raise TypeError(f"offset {offset!r} is not an int")
                result[(str(topic), int(partition))] = offset
    except (ValueError, TypeError, AttributeError) as exc:
        raise InvalidRequestError(
            f'{option} must be "earliest", "latest" or JSON like {{"t":{{"0":23}}}}: {exc}'
        ) from None
    return result


def _parse_assign(spec: str | Mapping[str, Sequence[int]]) -> list[TopicPartition]:
    try:
        parsed = json.loads(spec) if isinstance(spec, str) else spec
        wanted = [(str(topic), int(partition)) for topic, partitions in parsed.items() for partition in partitions]
    except (ValueError, TypeError, AttributeError) as exc:
        raise InvalidRequestError(f'assign must be JSON like {{"t":[0,1]}}: {exc}') from None
    if not wanted:
        raise InvalidRequestError("assign names no partition")
    return wanted


def topic_partitions(broker: Broker, topics: str | Sequence[str] | None, assign: Any) -> list[TopicPartition]:
    """The partitions a read covers, sorted: every partition of `topics`, or exactly `assign`'s."""
    if (topics is None) == (assign is None):
        raise InvalidRequestError("give exactly one of topics (Spark's subscribe) and assign")
    if assign is not None:
        wanted = _parse_assign(assign)
        for topic, partition in wanted:
            if partition not in broker.topic(topic).partitions:
                raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partition {partition}")
        return sorted(set(wanted))
    names = [name.strip() for name in topics.split(",")] if isinstance(topics, str) else list(topics or ())
    if not names or not all(names):
        raise InvalidRequestError(f"topics must name at least one topic, got {topics!r}")
    return sorted((name, partition) for name in dict.fromkeys(names) for partition in broker.topic(name).partitions)


# --- planning --------------------------------------------------------------------------------------------


def plan_read(
    *,
    topics: str | Sequence[str] | None = None,
    assign: str | Mapping[str, Sequence[int]] | None = None,
    startingOffsets: str | Mapping[str, Mapping[str, int]] = "earliest",
    endingOffsets: str | Mapping[str, Mapping[str, int]] = "latest",
    startingTimestamp: int | None = None,
    endingTimestamp: int | None = None,
    startingOffsetsByTimestamp: str | Mapping[str, Mapping[str, int]] | None = None,
    endingOffsetsByTimestamp: str | Mapping[str, Mapping[str, int]] | None = None,
    startingOffsetsByTimestampStrategy: str = "error",
    minPartitions: int | None = None,
    failOnDataLoss: bool = True,
    parallelism: int = 2,
    broker: Broker | None = None,
) -> ReadPlan:
    """Plans a read (see the module docstring); `parallelism` is the executors' total cores. Keyword names are
    Spark's option names."""
    from actors.clients.broker import Broker

    if minPartitions is not None and (not isinstance(minPartitions, int) or minPartitions < 1):
        raise InvalidRequestError(f"minPartitions must be a positive int, got {minPartitions!r}")
    if startingOffsetsByTimestampStrategy not in TIMESTAMP_STRATEGIES:
        raise InvalidRequestError(
            f"startingOffsetsByTimestampStrategy must be error or latest, got {startingOffsetsByTimestampStrategy!r}"
        )
    broker = broker or Broker.connect()
    tps = topic_partitions(broker, topics, assign)
    handles = {tp: partition_handle(tp) for tp in tps}
    bounds = partition_bounds(tps)
    starts = _resolve(
        handles,
        bounds,
        True,
        _timestamps(tps, startingTimestamp, startingOffsetsByTimestamp, "startingOffsetsByTimestamp"),
        startingOffsets,
        startingOffsetsByTimestampStrategy == "error",
    )
    ends = _resolve(
        handles,
        bounds,
        False,
        _timestamps(tps, endingTimestamp, endingOffsetsByTimestamp, "endingOffsetsByTimestamp"),
        endingOffsets,
        False,
    )
    ranges: list[OffsetRange] = []
    start_offsets: dict[TopicPartition, int] = {}
    for tp in tps:
        (start, earliest), (end, _) = starts[tp], ends[tp]
        log_start, high_watermark = bounds[tp]
        if start < log_start and not earliest:
            if failOnDataLoss:
                raise OffsetOutOfRangeError(
                    f"{tp[0]}-{tp[1]}: starting offset {start} is below the log start offset {log_start}: those "
                    "records were deleted (retention or DeleteRecords). Set failOnDataLoss=false to skip them.",
                    offset=start,
                )
            start = min(log_start, end)
        if end > high_watermark:
            raise InvalidRequestError(
                f"{tp[0]}-{tp[1]}: ending offset {end} is past the latest offset {high_watermark}", offset=end
            )
        if start > end:
            raise InvalidRequestError(
                f"{tp[0]}-{tp[1]}: starting offset {start} is after the ending offset {end}", offset=start
            )
        start_offsets[tp] = start
        if end > start:
            ranges.append(OffsetRange(tp[0], tp[1], start, end, earliest))
    ranges = split_ranges(ranges, minPartitions)
    task_count = min(len(ranges), max(minPartitions or 0, TASKS_PER_CORE * max(1, parallelism)))
    return ReadPlan(
        tuple(ranges),
        group_ranges(ranges, task_count),
        start_offsets,
        {tp: end for tp, (end, _) in ends.items()},
        failOnDataLoss,
    )


def partition_bounds(tps: Sequence[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
    """(log start offset, high watermark) of every partition, asked of all of them at once."""
    from actors.calls import call

    refs = {tp: partition_handle(tp).offsets.remote() for tp in tps}
    return {tp: tuple(call(ref)[:2]) for tp, ref in refs.items()}


def _timestamps(
    tps: list[TopicPartition], timestamp: int | None, by_partition: Any, option: str
) -> dict[TopicPartition, int] | None:
    """Per-partition timestamps from a global one or a JSON (the global one wins, as in Spark); None if neither."""
    if timestamp is not None:
        if not isinstance(timestamp, int) or isinstance(timestamp, bool) or timestamp < 0:
            raise InvalidRequestError(f"a timestamp option must be ms >= 0, got {timestamp!r}")
        return dict.fromkeys(tps, timestamp)
    if by_partition is None:
        return None
    stamps = parse_partition_offsets(by_partition, option)
    _check_covers(stamps, tps, option)
    if any(stamp < 0 for stamp in stamps.values()):
        raise InvalidRequestError(f"{option} timestamps must be ms >= 0")
    return stamps


def _check_covers(given: Mapping[TopicPartition, int], tps: list[TopicPartition], option: str) -> None:
    if set(given) != set(tps):
        raise InvalidRequestError(
            f"{option} must name every partition read, and only those (-1 for latest, -2 for earliest): "
            f"read {offsets_json(dict.fromkeys(tps, 0))}, given {offsets_json(given)}"
        )


def _resolve(
    handles: Mapping[TopicPartition, Any],
    bounds: Mapping[TopicPartition, tuple[int, int]],
    starting: bool,
    timestamps: dict[TopicPartition, int] | None,
    spec: Any,
    fail_without_match: bool,
) -> dict[TopicPartition, tuple[int, bool]]:
    """Per partition, (offset, given as earliest) for one side of the read."""
    from actors.calls import call

    option = "startingOffsets" if starting else "endingOffsets"
    tps = list(handles)
    if timestamps is not None:
        refs = {tp: handles[tp].list_offset.remote(stamp) for tp, stamp in timestamps.items()}
        resolved: dict[TopicPartition, tuple[int, bool]] = {}
        for tp, ref in refs.items():
            found = call(ref)
            if found is None and fail_without_match:
                raise InvalidRequestError(
                    f"no offset of {tp[0]}-{tp[1]} has a timestamp at or after {timestamps[tp]} "
                    "(startingOffsetsByTimestampStrategy=latest starts such partitions at the latest offset)"
                )
            offset = bounds[tp][1] if found is None else min(found.offset, bounds[tp][1])
            resolved[tp] = (offset, False)
        return resolved
    if spec in ("earliest", "latest"):
        if spec == "earliest" and not starting:
            raise InvalidRequestError("endingOffsets cannot be earliest")
        offsets = dict.fromkeys(tps, EARLIEST if spec == "earliest" else LATEST)
    else:
        offsets = parse_partition_offsets(spec, option)
        _check_covers(offsets, tps, option)
    resolved = {}
    for tp, offset in offsets.items():
        if offset == EARLIEST and not starting:
            raise InvalidRequestError(f"endingOffsets of {tp[0]}-{tp[1]} cannot be -2 (earliest)")
        if offset < EARLIEST:
            raise InvalidRequestError(f"{option} of {tp[0]}-{tp[1]} must be >= 0, -1 or -2, got {offset}")
        if offset == EARLIEST:
            resolved[tp] = (bounds[tp][0], True)
        elif offset == LATEST:
            resolved[tp] = (bounds[tp][1], False)
        else:
            resolved[tp] = (offset, False)
    return resolved


def split_ranges(ranges: Sequence[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Splits ranges so that there are about `min_partitions` of them, each range cut in proportion to its size
    (at least one piece each); nothing to do when there are already enough ranges."""
    if not min_partitions or len(ranges) >= min_partitions:
        return list(ranges)
    total = sum(offset_range.size for offset_range in ranges)
    pieces: list[OffsetRange] = []
    for offset_range in ranges:
        count = max(1, min(offset_range.size, round(offset_range.size * min_partitions / total)))
        start = offset_range.start
        for index in range(count):
            end = offset_range.start + offset_range.size * (index + 1) // count
            pieces.append(
                OffsetRange(
                    offset_range.topic,
                    offset_range.partition,
                    start,
                    end,
                    offset_range.start_is_earliest and index == 0,
                )
            )
            start = end
    return pieces


def group_ranges(ranges: Sequence[OffsetRange], task_count: int) -> tuple[tuple[int, ...], ...]:
    """Packs ranges into `task_count` Spark tasks, biggest range first onto the least loaded task; each task's
    ranges in (topic, partition, start) order."""
    if task_count <= 0:
        return ()
    loads = [0] * task_count
    members: list[list[int]] = [[] for _ in range(task_count)]
    for index in sorted(range(len(ranges)), key=lambda i: -ranges[i].size):
        task = loads.index(min(loads))
        loads[task] += ranges[index].size
        members[task].append(index)
    order = {index: (r.topic, r.partition, r.start) for index, r in enumerate(ranges)}
    return tuple(tuple(sorted(task, key=order.__getitem__)) for task in members if task)


# --- reading (driver or Spark worker) --------------------------------------------------------------------


def partition_handle(tp: TopicPartition) -> Any:
    """The partition actor's handle, looked up once per process (Spark's Python workers are reused)."""
    from actors.calls import partition_actor

    handle = _handles.get(tp)
    if handle is None:
        handle = partition_actor(*tp)
        _handles[tp] = handle
    return handle


class _RangeReader:
    """Reads one range fetch by fetch, with the next fetch in flight while the current one is decoded."""

    def __init__(self, offset_range: OffsetRange, fail_on_data_loss: bool, include_headers: bool) -> None:
        self.range = offset_range
        self.handle = partition_handle((offset_range.topic, offset_range.partition))
        self.position = offset_range.start
        self.fail_on_data_loss = fail_on_data_loss
        self.include_headers = include_headers
        self.max_bytes = _fetch_bytes(offset_range.size * FIRST_FETCH_BYTES_PER_RECORD)
        self.pending: PendingFetch | None = None
        self.node_id: str | None = None

    @property
    def done(self) -> bool:
        return self.position >= self.range.end

    def fire(self) -> None:
        from actors.clients.local_fetch import PendingFetch

        self.pending = PendingFetch(self.handle, self.position, self.max_bytes, node_id=self.node_id)

    def next_batch(self) -> pa.RecordBatch | None:
        """Waits for the fetch in flight, fires the next one unless the range is done, decodes this one."""
        from cluster.spark.arrow_records import decode_fetch

        if self.pending is None:
            raise InvalidRequestError(f"{self.range.topic}-{self.range.partition}: no fetch in flight")
        try:
            result = self.pending.result()
            self.node_id = self.pending.node_id
        except OffsetOutOfRangeError:
            self._skip_deleted_records()
            return None
        if not result.records:
            self._records_missing(result.high_watermark)
            return None
        start = self.position
        next_offset = _next_offset(result.records)
        if next_offset <= start:
            raise CorruptRecordError(
                f"{self.range.topic}-{self.range.partition}: a fetch at offset {start} returned no batch past it",
                offset=start,
            )
        records_per_byte = (next_offset - start) / len(result.records)
        remaining_bytes = (self.range.end - next_offset) / records_per_byte
        # 10 % above the estimate, so that one fetch usually finishes the range.
        self.max_bytes = _fetch_bytes(remaining_bytes * 1.1)
        self.position = next_offset
        if not self.done:
            self.fire()
        decoded = decode_fetch(
            result.records,
            self.range.topic,
            self.range.partition,
            start,
            self.range.end,
            include_headers=self.include_headers,
        )
        return decoded.batch

    def _skip_deleted_records(self) -> None:
        from actors.calls import call

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


def _next_offset(records: bytes) -> int:
    """One past the last offset of the whole batches in fetched bytes (headers only; records are not decoded)."""
    from storage.records.file_records import iter_any_batches

    return max((batch.last_offset + 1 for batch in iter_any_batches(records)), default=-1)


def read_ranges(
    ranges: Sequence[OffsetRange], *, fail_on_data_loss: bool = True, include_headers: bool = False
) -> Iterator[pa.RecordBatch]:
    """The records of `ranges` as Arrow batches in Spark's Kafka-source schema (this process must be attached to
    Ray): every range's first fetch at once, then range by range (see the module docstring)."""
    readers = [_RangeReader(offset_range, fail_on_data_loss, include_headers) for offset_range in ranges]
    for reader in readers:
        if not reader.done:
            reader.fire()
    for reader in readers:
        while not reader.done:
            batch = reader.next_batch()
            if batch is not None and batch.num_rows:
                yield batch


def _read_task(
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
    holds the topic's index in `topics` (see `_topic_names`)."""
    import numpy as np
    import pyarrow as pa

    from cluster.spark.session import attach_worker_to_ray

    attach_worker_to_ray(address)
    keep_zip_directories()
    index_field = pa.field(topic_column, pa.int32())
    for batch in batches:
        for task in batch.column(0).to_pylist():
            for records in read_ranges(
                tasks[task], fail_on_data_loss=fail_on_data_loss, include_headers=include_headers
            ):
                topic_index = topics.index(records.column("topic")[0].as_py())
                output = records if decoder is None else decoder.assemble(records)
                position = output.schema.get_field_index(topic_column)
                yield output.set_column(
                    position, index_field, pa.array(np.full(output.num_rows, topic_index, dtype=np.int32))
                )


def _with_topic_index(schema: StructType, topic_column: str) -> StructType:
    """The read task's output schema: `schema` with an int topic index in place of the topic name."""
    from pyspark.sql import types as T

    return T.StructType(
        [T.StructField(topic_column, T.IntegerType()) if field.name == topic_column else field for field in schema]
    )


def _topic_names(topics: tuple[str, ...], topic_column: str) -> Column:
    """The topic names back from the read task's indexes, computed in the JVM.

    A topic name per row costs its bytes on the way from Python to the JVM and again in each row there: 29 of the
    ~140 bytes a row of the benchmark's records took. As an expression over a 4-byte index it costs nothing when
    the query does not use it (Spark prunes it) and one array lookup when it does.
    """
    from pyspark.sql import functions as F

    if len(topics) == 1:
        return F.lit(topics[0])
    return F.element_at(F.array(*[F.lit(topic) for topic in topics]), F.col(topic_column) + 1)


class _StableZipImporter(zipimport.zipimporter):
    """A zip on `sys.path` whose directory is read once for the life of the process."""

    def invalidate_caches(self) -> None:
        """Keeps the directory: Spark's zips (`pyspark.zip`, py4j's) do not change while a worker runs."""


def keep_zip_directories() -> None:
    """Stops Spark's Python worker from re-reading its zips before every task.

    The worker calls `importlib.invalidate_caches()` at the start of each task, and on Python 3.10+ that makes
    every zip importer on `sys.path` read its zip's whole directory again: `pyspark.zip` (2.4 MB, ~1000
    entries). py-spy over the read tasks of 1M records (8 partitions, 4 tasks) found 23 % of the workers'
    samples there, more than fetching and decoding took together. Swapping the importers for ones that keep
    their directory makes later tasks of this (reused) worker skip it; imports from the zips still work.
    """
    for path, finder in list(sys.path_importer_cache.items()):
        if type(finder) is zipimport.zipimporter:
            try:
                sys.path_importer_cache[path] = _StableZipImporter(path)
            except zipimport.ZipImportError:
                continue


# --- the DataFrame ---------------------------------------------------------------------------------------


def kafka_spark_schema(include_headers: bool = False) -> StructType:
    """Spark's Kafka-source schema."""
    from pyspark.sql import types as T

    fields = [
        T.StructField("key", T.BinaryType()),
        T.StructField("value", T.BinaryType()),
        T.StructField("topic", T.StringType()),
        T.StructField("partition", T.IntegerType()),
        T.StructField("offset", T.LongType()),
        T.StructField("timestamp", T.TimestampType()),
        T.StructField("timestampType", T.IntegerType()),
    ]
    if include_headers:
        header = T.StructType([T.StructField("key", T.StringType()), T.StructField("value", T.BinaryType())])
        fields.append(T.StructField("headers", T.ArrayType(header)))
    return T.StructType(fields)


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


def read_plan(
    spark: SparkSession,
    plan: ReadPlan,
    *,
    includeHeaders: bool = False,
    valueFormat: str = "binary",
    valueSchema: str | DataType | None = None,
    sampleSize: int = 1000,
) -> DataFrame:
    """The DataFrame of a planned read (see the module docstring); `planned_read(df)` gives the plan back."""
    from cluster.spark.session import gcs_address
    from cluster.spark.value_formats import (
        PYTHON_FORMATS,
        ArrowValueDecoder,
        check_value_format,
        infer_value_type,
        json_columns,
        parse_schema,
        python_value,
        value_layout,
    )

    check_value_format(valueFormat)
    kafka_schema = kafka_spark_schema(includeHeaders)
    value_type: DataType | None = None
    if valueFormat in ("json", "msgpack"):
        if valueSchema is not None:
            value_type = parse_schema(valueSchema)
        else:
            value_type = infer_value_type(python_value(valueFormat, data) for data in sample_values(plan, sampleSize))
    layout = None if value_type is None else value_layout(kafka_schema, value_type)
    decoder = None
    schema = kafka_schema
    if layout is not None and valueFormat in PYTHON_FORMATS:
        decoder = ArrowValueDecoder.for_layout(valueFormat, layout)
        schema = layout.spark_schema
    tasks = tuple(tuple(plan.ranges[index] for index in task) for task in plan.tasks)
    topics = tuple(sorted({offset_range.topic for offset_range in plan.ranges}))
    topic_column = "topic" if decoder is None or layout is None else layout.names[layout.sources.index("topic")]
    read = partial(
        _read_task, tasks, topics, topic_column, gcs_address(), plan.fail_on_data_loss, includeHeaders, decoder
    )
    task_count = max(1, len(tasks))
    df = spark.range(0, len(tasks), 1, task_count).mapInArrow(read, _with_topic_index(schema, topic_column))
    df = df.withColumn(topic_column, _topic_names(topics, topic_column))
    if valueFormat == "string":
        from pyspark.sql import functions as F

        df = df.withColumn("value", F.col("value").cast("string"))
    elif layout is not None and value_type is not None and valueFormat not in PYTHON_FORMATS:
        df = df.select(*json_columns(value_type, layout))
    _plans[df] = plan
    return df


def read_topics(
    spark: SparkSession,
    *,
    topics: str | Sequence[str] | None = None,
    assign: str | Mapping[str, Sequence[int]] | None = None,
    includeHeaders: bool = False,
    valueFormat: str = "binary",
    valueSchema: str | DataType | None = None,
    sampleSize: int = 1000,
    **options: Any,
) -> DataFrame:
    """`spark.read.format("kafka")` over raybroker's topics: `plan_read` with the session's cores, then
    `read_plan`. `options` are `plan_read`'s (`startingOffsets`, `endingOffsets`, `minPartitions`, ...)."""
    plan = plan_read(topics=topics, assign=assign, parallelism=spark.sparkContext.defaultParallelism, **options)
    return read_plan(
        spark,
        plan,
        includeHeaders=includeHeaders,
        valueFormat=valueFormat,
        valueSchema=valueSchema,
        sampleSize=sampleSize,
    )


def planned_read(df: DataFrame) -> ReadPlan:
    """The plan of a DataFrame made by `read_topics`/`read_plan` (its fixed start and end offsets)."""
    plan = _plans.get(df)
    if plan is None:
        raise InvalidRequestError(
            "this DataFrame was not made by read_topics or read_plan (derived DataFrames lose it)"
        )
    return plan
