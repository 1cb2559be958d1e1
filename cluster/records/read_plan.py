"""The one planner of bulk reads of topics, on the driver, for the Spark bridge (`cluster.spark.planning`) and Ray
Data (`cluster.data.read_planning`): where each partition's read starts and ends, the data-loss rule, and the offset
ranges with their leaders' nodes and estimated bytes. A front end translates its option names into a
`PlanRequest`, and the `TopicReadPlan` into its tasks (Spark tasks, Ray Data read tasks).

`plan_partitions` asks every partition's leader its offsets and log size at once (`snapshot_partitions`), and the
first offset at or after each timestamp asked for (`offsets_for_times`); a partition without a leader is asked
again once it has one, within `LEADER_WAIT_S`, as a read of it waits (`cluster.records.range_reading`). Each side
of each partition's range is a `Position`, resolved against that snapshot (`resolve_position`):

| position            | start                                          | end (exclusive)                          |
|---------------------|------------------------------------------------|------------------------------------------|
| `EARLIEST` (-2)     | the log start offset (late-bound, as Spark)    | refused by the front ends                |
| `LATEST` (-1)       | where the end is (an empty read)               | where the isolation level ends a read    |
| an offset >= 0      | that offset                                    | that offset                              |
| `AtTimestamp(ms)`   | the first offset at or after it, at most the   | the same; the end when none is that new  |
|                     | end; the end when none is that new (or refused |                                          |
|                     | with `fail_without_start_match`)               |                                          |

-2 and -1 are Kafka's ListOffsets timestamps for earliest and latest, which Spark's offset JSON takes too. "Where
the isolation level ends a read" is `cluster.records.isolation.readable_end`: the last stable offset for
`read_committed`, the high watermark for `read_uncommitted`. The end offsets are fixed here: a read of the plan
reads exactly the planned offsets however often it runs and however much is written meanwhile (a consistent
snapshot), and a next read that starts at this one's end offsets neither skips nor repeats a record.

Refused, partition by partition in (topic, partition) order, in the front end's words (`Dialect`): an end past
where the isolation level ends a read (the front end's error type); a start below the log start that was not
given as earliest (its records were deleted by retention or DeleteRecords: `OffsetOutOfRangeError`, or with
`fail_on_data_loss=False` the read starts at the log start: the data-loss rule, which the readers apply again to
records deleted after planning, `cluster.records.range_reading`); a start after the end (`InvalidRequestError`).

Ranges: one per partition with something to read, with the node its leader was on when planned (Ray Data pins
read tasks there) and its estimated bytes in Arrow: its offsets times the log's bytes per offset, plus what the
Arrow columns add per row (`ARROW_ROW_BYTES`) and the topic's name, uncompressed; compressed batches grow when
decoded, so their estimate is low by the compression ratio. `min_ranges` (Spark's `minPartitions`) cuts the ranges
until there are about that many, each in proportion to its share of the offsets.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from actors.calls import call
from actors.clients.broker import Broker
from cluster.records.isolation import check_isolation, readable_end
from cluster.records.offset_ranges import OffsetRange, partition_handle, split_range
from cluster.records.range_reading import LEADER_RETRY_S, LEADER_WAIT_S
from storage.arguments import is_int
from storage.errors import BrokerNotAvailableError, InvalidRequestError, OffsetOutOfRangeError, RaybrokerError
from storage.logdir.partition_handles import PartitionState
from storage.topic_partition import TopicPartition

EARLIEST = -2
LATEST = -1
# Bytes an Arrow row takes beyond its key and value (offsets of key, value and headers 12, partition 4, offset 8,
# timestamp 8, timestampType 4, topic offset 4), less the ~8 bytes of framing a Kafka record takes on disk; the
# topic's name is added per row.
ARROW_ROW_BYTES = 32


@dataclass(frozen=True, slots=True)
class AtTimestamp:
    """The first offset whose record's timestamp is at or after `timestamp_ms` (Kafka's ListOffsets)."""

    timestamp_ms: int


# One side of one partition's range as asked: EARLIEST, LATEST, an offset >= 0, or AtTimestamp.
Position = int | AtTimestamp


@dataclass(frozen=True, slots=True)
class Dialect:
    """A front end's words in the planner's errors: its names of the two sides of a range (`start`, `end`), the
    sentence that says how to skip deleted records (`skip_lost`), the error type of an end past where a read may
    end, and, for a front end that can refuse a start timestamp no record reaches, what starts such a read at the
    end instead (`start_at_end`)."""

    start: str
    end: str
    skip_lost: str
    past_end_error: type[RaybrokerError]
    start_at_end: str = ""


@dataclass(frozen=True, slots=True)
class PlanRequest:
    """What a front end asks for: each side of each partition's range (the partitions read are `start`'s keys,
    which `end` has too), the isolation level, the data-loss rule (`fail_on_data_loss`), whether a start timestamp
    with no record that new fails the read (`fail_without_start_match`) instead of starting it at the end, about
    how many ranges to cut the read into at least (`min_ranges`), and the words of the errors (`dialect`)."""

    start: Mapping[TopicPartition, Position]
    end: Mapping[TopicPartition, Position]
    isolation: str
    fail_on_data_loss: bool
    dialect: Dialect
    fail_without_start_match: bool = False
    min_ranges: int | None = None

    def __post_init__(self) -> None:
        check_isolation(self.isolation)
        if set(self.start) != set(self.end):
            raise InvalidRequestError("a read's start and end must name the same partitions")
        for position in (*self.start.values(), *self.end.values()):
            if isinstance(position, AtTimestamp):
                if not is_int(position.timestamp_ms) or position.timestamp_ms < 0:
                    raise InvalidRequestError(f"a timestamp must be ms >= 0, got {position.timestamp_ms!r}")
            elif not is_int(position) or position < EARLIEST:
                raise InvalidRequestError(f"a position must be an offset >= 0, -1 or -2, got {position!r}")
        if self.min_ranges is not None and (not is_int(self.min_ranges) or self.min_ranges < 1):
            raise InvalidRequestError(f"min_ranges must be a positive int, got {self.min_ranges!r}")

    @property
    def partitions(self) -> list[TopicPartition]:
        return sorted(self.start)


@dataclass(frozen=True, slots=True)
class PartitionSnapshot:
    """One partition as planning sees it: its leader's node, offsets and log size."""

    leader: str
    log_start_offset: int
    high_watermark: int
    log_end_offset: int
    size_bytes: int
    first_offset: int
    last_stable_offset: int

    @classmethod
    def of(cls, leader: str, state: PartitionState) -> PartitionSnapshot:
        return cls(
            leader,
            state.log_start_offset,
            state.high_watermark,
            state.log_end_offset,
            state.size_bytes,
            state.first_segment_base,
            state.last_stable_offset,
        )

    def readable_end(self, isolation: str) -> int:
        """Where a read at `isolation` ends (`cluster.records.isolation.readable_end`)."""
        return readable_end(isolation, self.high_watermark, self.last_stable_offset)

    @property
    def bytes_per_offset(self) -> float:
        """The log's bytes per offset (records, their batches' headers, and the gaps compaction left)."""
        return self.size_bytes / max(1, self.log_end_offset - self.first_offset)


@dataclass(frozen=True, slots=True)
class PlannedRange:
    """An offset range with the node its partition's leader was on when planned and its estimated Arrow bytes."""

    range: OffsetRange
    node: str
    estimated_bytes: int

    def split(self, count: int) -> list[PlannedRange]:
        """The range in `count` pieces (at most one per offset), bytes in proportion to their offsets."""
        size = max(1, self.range.size)
        return [
            PlannedRange(piece, self.node, self.estimated_bytes * piece.size // size)
            for piece in split_range(self.range, count)
        ]


@dataclass(frozen=True, slots=True)
class TopicReadPlan:
    """A planned read: its ranges (partitions with nothing to read have none), the offsets each partition starts
    and ends at, and each partition's leader's node."""

    ranges: tuple[PlannedRange, ...]
    start_offsets: dict[TopicPartition, int]
    end_offsets: dict[TopicPartition, int]
    isolation: str
    leaders: dict[TopicPartition, str] = field(default_factory=dict)

    @property
    def estimated_bytes(self) -> int:
        return sum(planned.estimated_bytes for planned in self.ranges)

    def next_start(self) -> dict[str, dict[int, int]]:
        """The end offsets as `{topic: {partition: offset}}`: where a next read starts to follow on from this one."""
        return offsets_by_topic(self.end_offsets)

    def by_node(self) -> dict[str, tuple[PlannedRange, ...]]:
        """The ranges by the node of their leader, nodes in order."""
        nodes: dict[str, list[PlannedRange]] = {}
        for planned in self.ranges:
            nodes.setdefault(planned.node, []).append(planned)
        return {node: tuple(nodes[node]) for node in sorted(nodes)}


def offsets_by_topic(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[int, int]]:
    """Per-partition offsets as `{topic: {partition: offset}}`, topics and partitions in order."""
    nested: dict[str, dict[int, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        nested.setdefault(topic, {})[partition] = offset
    return nested


# --- resolving positions and planning ranges (no Ray) ----------------------------------------------------


def resolve_position(
    position: Position, snapshot: PartitionSnapshot, isolation: str, found_by_time: int | None
) -> tuple[int, bool]:
    """(offset, given as earliest) of one side of one partition's range (see the module docstring).
    `found_by_time`: for an `AtTimestamp` position, the first offset at or after it (None when no record is that
    new)."""
    last = snapshot.readable_end(isolation)
    if isinstance(position, AtTimestamp):
        return (last if found_by_time is None else min(found_by_time, last)), False
    if position == EARLIEST:
        return snapshot.log_start_offset, True
    if position == LATEST:
        return last, False
    return position, False


def plan_ranges(
    snapshots: Mapping[TopicPartition, PartitionSnapshot],
    request: PlanRequest,
    found_by_time: Mapping[tuple[str, TopicPartition], int | None],
) -> TopicReadPlan:
    """The plan of `request` over the partitions' `snapshots` (see the module docstring).
    `found_by_time[(side, tp)]` ("start" or "end") answers the `AtTimestamp` positions."""
    isolation, words = request.isolation, request.dialect
    resolved: dict[tuple[str, TopicPartition], tuple[int, bool]] = {}
    for side, positions in (("start", request.start), ("end", request.end)):
        for tp in sorted(positions):
            position, found = positions[tp], found_by_time.get((side, tp))
            refused = found is None and request.fail_without_start_match
            if side == "start" and isinstance(position, AtTimestamp) and refused:
                raise InvalidRequestError(
                    f"no offset of {tp[0]}-{tp[1]} has a timestamp at or after {position.timestamp_ms} "
                    f"({words.start_at_end})"
                )
            resolved[(side, tp)] = resolve_position(position, snapshots[tp], isolation, found)
    ranges: list[PlannedRange] = []
    starts: dict[TopicPartition, int] = {}
    ends: dict[TopicPartition, int] = {}
    for tp in request.partitions:
        snapshot = snapshots[tp]
        (first, earliest), (last, _) = resolved[("start", tp)], resolved[("end", tp)]
        where = f"{tp[0]}-{tp[1]}"
        if last > snapshot.readable_end(isolation):
            raise words.past_end_error(
                f"{where}: {words.end} {last} is past the last offset a {isolation} read may reach, "
                f"{snapshot.readable_end(isolation)}",
                offset=last,
            )
        if first < snapshot.log_start_offset and not earliest:
            if request.fail_on_data_loss:
                raise OffsetOutOfRangeError(
                    f"{where}: {words.start} {first} is below the log start offset {snapshot.log_start_offset}: "
                    f"those records were deleted (retention or DeleteRecords). {words.skip_lost}",
                    offset=first,
                )
            first = min(snapshot.log_start_offset, last)
        if first > last:
            raise InvalidRequestError(f"{where}: {words.start} {first} is after the {words.end} {last}", offset=first)
        starts[tp], ends[tp] = first, last
        if last > first:
            offset_range = OffsetRange(tp[0], tp[1], first, last, earliest)
            row_bytes = snapshot.bytes_per_offset + ARROW_ROW_BYTES + len(tp[0].encode())
            ranges.append(PlannedRange(offset_range, snapshot.leader, math.ceil(offset_range.size * row_bytes)))
    leaders = {tp: snapshot.leader for tp, snapshot in snapshots.items()}
    return TopicReadPlan(tuple(split_ranges(ranges, request.min_ranges)), starts, ends, isolation, leaders)


def split_ranges(ranges: Sequence[PlannedRange], min_ranges: int | None) -> list[PlannedRange]:
    """Splits ranges so that there are about `min_ranges` of them, each range cut in proportion to its size (at
    least one piece each); nothing to do when there are already enough ranges."""
    if not min_ranges or len(ranges) >= min_ranges:
        return list(ranges)
    total = sum(planned.range.size for planned in ranges)
    return [piece for planned in ranges for piece in planned.split(round(planned.range.size * min_ranges / total))]


# --- asking the partitions (Ray) -------------------------------------------------------------------------


def plan_partitions(request: PlanRequest, broker: Broker) -> TopicReadPlan:
    """Plans `request` (see the module docstring): every partition's leader is asked its offsets, then the
    timestamps of each side, and every typed error is raised here, before anything is read."""
    snapshots = snapshot_partitions(broker, request.partitions)
    found_by_time: dict[tuple[str, TopicPartition], int | None] = {}
    for side, positions in (("start", request.start), ("end", request.end)):
        stamps = {tp: p.timestamp_ms for tp, p in positions.items() if isinstance(p, AtTimestamp)}
        if stamps:
            found_by_time.update(((side, tp), offset) for tp, offset in offsets_for_times(stamps).items())
    return plan_ranges(snapshots, request, found_by_time)


def snapshot_partitions(broker: Broker, tps: Sequence[TopicPartition]) -> dict[TopicPartition, PartitionSnapshot]:
    """Every partition's leader node, offsets and size, asked of all the leaders at once."""
    leaders: dict[str, dict[int, str]] = {}
    for topic in sorted({topic for topic, _ in tps}):
        leaders[topic] = broker.topic(topic).partitions
    states = _ask_leaders({tp: () for tp in tps}, "state")
    return {tp: PartitionSnapshot.of(leaders[tp[0]][tp[1]], states[tp]) for tp in tps}


def offsets_for_times(timestamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
    """The first offset of each partition whose record's timestamp is at or after the partition's timestamp in
    `timestamps` (Kafka's ListOffsets), None where no record is that new."""
    answers = _ask_leaders({tp: (timestamp,) for tp, timestamp in timestamps.items()}, "list_offset")
    return {tp: None if found is None else found.offset for tp, found in answers.items()}


def _ask_leaders(calls: Mapping[TopicPartition, tuple[Any, ...]], method: str) -> dict[TopicPartition, Any]:
    """`method(*calls[tp])` of every partition's leader, all in flight at once; a partition whose leader is gone
    is asked again once it has one (within `LEADER_WAIT_S`)."""
    deadline = time.monotonic() + LEADER_WAIT_S
    answers: dict[TopicPartition, Any] = {}
    pending = list(calls)
    refresh = False
    while pending:
        refs = {}
        failed: list[TopicPartition] = []
        last_error: BrokerNotAvailableError | None = None
        for tp in pending:
            try:
                refs[tp] = getattr(partition_handle(tp, refresh=refresh), method).remote(*calls[tp])
            except BrokerNotAvailableError as exc:
                failed.append(tp)
                last_error = exc
        for tp, ref in refs.items():
            try:
                answers[tp] = call(ref)
            except BrokerNotAvailableError as exc:
                failed.append(tp)
                last_error = exc
        if failed and time.monotonic() >= deadline:
            assert last_error is not None
            raise last_error
        if failed:
            time.sleep(LEADER_RETRY_S)
        pending, refresh = failed, True
    return answers
