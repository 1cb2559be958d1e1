"""Planning a Ray Data read of topics, on the driver: which offsets of which partitions, led from which node, and
how the offsets are cut into read tasks.

`plan_topic_read` takes `read_topic`'s bounds in the forms `ray.data.read_kafka` takes them, asks every partition's
leader its offsets and log size at once, and returns a `TopicReadPlan` whose end offsets are fixed there: a Dataset
over the plan reads exactly the planned offsets however often it is executed and however much is written
meanwhile, and a next read that starts at this one's `end_offsets` neither skips nor repeats a record.

| bound                     | start                                       | end (exclusive)                          |
|---------------------------|---------------------------------------------|------------------------------------------|
| `"earliest"`              | the log start offset (late-bound, as Spark) | refused                                  |
| `"latest"`                | where the end is (an empty read)            | where the isolation level ends a read    |
| an int                    | that offset of every partition              | that offset of every partition           |
| a `datetime` (naive: UTC) | the first record at or after it, per        | the same; the end when none is that new  |
|                           | partition; the end when none is that new    |                                          |
| `{topic: {partition: n}}` | n for those partitions, `earliest` for the  | n for those, `latest` for the others     |
|                           | others (as `read_kafka`)                    |                                          |

"Where the isolation level ends a read" is `cluster.records.isolation.readable_end`: the last stable offset for
`read_committed`, the high watermark for `read_uncommitted`. Refused before any task starts, with typed errors:
an unknown topic or partition (`UnknownTopicOrPartitionError`), a start below the log start (records deleted:
`OffsetOutOfRangeError`, or with `fail_on_data_loss=False` the read starts at the log start) or an end past
where a read may end (`OffsetOutOfRangeError`), a start after the end, a negative offset, and a datetime later
than now (`InvalidRequestError`: a bounded read cannot wait for the future).

Read tasks (`task_groups`, run by every `get_read_tasks` call, deterministic): each range is cut into pieces of at
most `DataContext.target_max_block_size` estimated bytes, so a hot partition reads in parallel; pieces are cut
again, biggest first, while Ray Data asks for more tasks than there are pieces and a piece holds at least
2 x `MIN_TASK_BYTES`; and packed, heaviest first, into as many tasks as Ray Data asks for when there are more.
A range's bytes are estimated from its partition's log: its offsets times the log's bytes per offset, plus what
the Arrow columns add per row (`ARROW_ROW_BYTES`), uncompressed; compressed batches grow when decoded, so their
estimate is low by the compression ratio.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from actors.calls import call
from actors.clients.broker import Broker
from cluster.records.isolation import check_isolation, readable_end
from cluster.records.offset_ranges import OffsetRange, group_ranges, partition_handle, partitions_of, split_range
from storage.arguments import is_int
from storage.errors import (
    BrokerNotAvailableError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from storage.logdir.partition_handles import PartitionState
from storage.topic_partition import TopicPartition

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Bound = "earliest" | "latest" | int | datetime | {topic: {partition: offset}}
Bound = str | int | datetime | Mapping[str, Mapping[int, int]]
# Bytes an Arrow row takes beyond its key and value (offsets of key, value and headers 12, partition 4, offset 8,
# timestamp 8, timestampType 4, topic offset 4), less the ~8 bytes of framing a Kafka record takes on disk; the
# topic's name is added per row.
ARROW_ROW_BYTES = 32
# The smallest piece a range is cut into to give Ray Data more read tasks: each task costs a locate call, its own
# decode's fixed numpy steps and Ray Data's task overhead.
MIN_TASK_BYTES = 16 * 1024 * 1024
# How long planning waits for a partition without a leader to get one (Kafka's `default.api.timeout.ms`).
LEADER_WAIT_S = 60.0
LEADER_RETRY_S = 0.2


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
    """A planned read: its ranges (partitions with nothing to read have none), and the offsets each partition
    starts and ends at."""

    ranges: tuple[PlannedRange, ...]
    start_offsets: dict[TopicPartition, int]
    end_offsets: dict[TopicPartition, int]
    isolation: str
    leaders: dict[TopicPartition, str] = field(default_factory=dict)

    @property
    def estimated_bytes(self) -> int:
        return sum(planned.estimated_bytes for planned in self.ranges)

    def next_start(self) -> dict[str, dict[int, int]]:
        """The end offsets as a `start` bound: a read from there starts where this one ended."""
        return offsets_by_topic(self.end_offsets)

    def by_node(self) -> dict[str, tuple[PlannedRange, ...]]:
        """The ranges by the node of their leader, nodes in order."""
        nodes: dict[str, list[PlannedRange]] = {}
        for planned in self.ranges:
            nodes.setdefault(planned.node, []).append(planned)
        return {node: tuple(nodes[node]) for node in sorted(nodes)}


def offsets_by_topic(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[int, int]]:
    """Per-partition offsets in the `{topic: {partition: offset}}` form bounds take."""
    nested: dict[str, dict[int, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        nested.setdefault(topic, {})[partition] = offset
    return nested


# --- resolving bounds (no Ray) ---------------------------------------------------------------------------


def timestamp_ms(moment: datetime) -> int:
    """A datetime as ms since the epoch; a naive one is UTC (as `read_kafka` takes it)."""
    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return (aware - EPOCH) // timedelta(milliseconds=1)


def check_bound(bound: Any, side: str, tps: Sequence[TopicPartition], now_ms: int) -> None:
    """Refuses a malformed bound before any partition is asked anything (see the module docstring)."""
    name = f"{side} offset"
    if isinstance(bound, str):
        if bound not in ("earliest", "latest"):
            raise InvalidRequestError(
                f"{name} must be earliest, latest, an offset, a datetime or a dict, not {bound!r}"
            )
        if bound == "earliest" and side == "end":
            raise InvalidRequestError("end offset cannot be earliest")
    elif isinstance(bound, datetime):
        if timestamp_ms(bound) > now_ms:
            raise InvalidRequestError(
                f"{name} {bound.isoformat()} is in the future: a bounded read ends with what the topics hold now "
                "(stream_topic follows them as they grow)"
            )
    elif isinstance(bound, Mapping):
        known = set(tps)
        for topic, partitions in bound.items():
            if not isinstance(partitions, Mapping):
                raise InvalidRequestError(f"{name} of topic {topic!r} must be a {{partition: offset}} dict")
            for partition, offset in partitions.items():
                if not is_int(partition) or (topic, partition) not in known:
                    raise UnknownTopicOrPartitionError(f"{name} names {topic}-{partition}, which this read does not")
                _check_offset(offset, name, (topic, partition))
    else:
        _check_offset(bound, name, None)


def _check_offset(offset: object, name: str, tp: TopicPartition | None) -> None:
    where = "" if tp is None else f" of {tp[0]}-{tp[1]}"
    if not is_int(offset) or offset < 0:
        raise InvalidRequestError(f"{name}{where} must be an int >= 0, got {offset!r}")


def resolve_bound(
    bound: Bound,
    side: str,
    tp: TopicPartition,
    snapshot: PartitionSnapshot,
    isolation: str,
    found_by_time: int | None,
) -> tuple[int, bool]:
    """(offset, given as earliest) of one side of one partition's range. `found_by_time`: for a datetime bound,
    the first offset at or after it (None when no record is that new)."""
    last = snapshot.readable_end(isolation)
    if isinstance(bound, Mapping):
        given = bound.get(tp[0], {}).get(tp[1])
        bound = ("earliest" if side == "start" else "latest") if given is None else given
    if bound == "earliest":
        return snapshot.log_start_offset, True
    if bound == "latest":
        return last, False
    if isinstance(bound, datetime):
        return (last if found_by_time is None else min(found_by_time, last)), False
    assert isinstance(bound, int)
    return bound, False


def plan_ranges(
    snapshots: Mapping[TopicPartition, PartitionSnapshot],
    start: Bound,
    end: Bound,
    isolation: str,
    fail_on_data_loss: bool,
    found_by_time: Mapping[tuple[str, TopicPartition], int | None],
) -> TopicReadPlan:
    """The plan of a read of `snapshots`' partitions (one range per partition with something to read).
    `found_by_time[(side, tp)]` answers datetime bounds."""
    ranges: list[PlannedRange] = []
    starts: dict[TopicPartition, int] = {}
    ends: dict[TopicPartition, int] = {}
    for tp, snapshot in sorted(snapshots.items()):
        first, earliest = resolve_bound(start, "start", tp, snapshot, isolation, found_by_time.get(("start", tp)))
        last, _ = resolve_bound(end, "end", tp, snapshot, isolation, found_by_time.get(("end", tp)))
        where = f"{tp[0]}-{tp[1]}"
        if last > snapshot.readable_end(isolation):
            raise OffsetOutOfRangeError(
                f"{where}: end offset {last} is past the last offset a {isolation} read may reach, "
                f"{snapshot.readable_end(isolation)}",
                offset=last,
            )
        if first < snapshot.log_start_offset and not earliest:
            if fail_on_data_loss:
                raise OffsetOutOfRangeError(
                    f"{where}: start offset {first} is below the log start offset {snapshot.log_start_offset}: "
                    "those records were deleted (retention or DeleteRecords); read with fail_on_data_loss=False "
                    "to start at the log start",
                    offset=first,
                )
            first = min(snapshot.log_start_offset, last)
        if first > last:
            raise InvalidRequestError(f"{where}: start offset {first} is after the end offset {last}", offset=first)
        starts[tp], ends[tp] = first, last
        if last > first:
            offset_range = OffsetRange(tp[0], tp[1], first, last, earliest)
            row_bytes = snapshot.bytes_per_offset + ARROW_ROW_BYTES + len(tp[0].encode())
            ranges.append(PlannedRange(offset_range, snapshot.leader, math.ceil(offset_range.size * row_bytes)))
    leaders = {tp: snapshot.leader for tp, snapshot in snapshots.items()}
    return TopicReadPlan(tuple(ranges), starts, ends, isolation, leaders)


# --- read tasks (no Ray) ---------------------------------------------------------------------------------


def task_groups(
    ranges: Sequence[PlannedRange], parallelism: int, max_block_bytes: int | None
) -> list[tuple[PlannedRange, ...]]:
    """The ranges of each read task (see the module docstring); deterministic for the same arguments."""
    pieces: list[PlannedRange] = []
    for planned in ranges:
        count = 1 if not max_block_bytes else math.ceil(planned.estimated_bytes / max_block_bytes)
        pieces.extend(planned.split(count))
    wanted = max(1, parallelism)
    while len(pieces) < wanted:
        biggest = max(range(len(pieces)), key=lambda i: (pieces[i].estimated_bytes, -i), default=None)
        if biggest is None:
            break
        piece = pieces[biggest]
        if piece.estimated_bytes < 2 * MIN_TASK_BYTES or piece.range.size < 2:
            break
        pieces[biggest : biggest + 1] = piece.split(2)
    if len(pieces) <= wanted:
        return [(piece,) for piece in pieces]
    weights = {id(piece.range): piece.estimated_bytes for piece in pieces}
    members = group_ranges([piece.range for piece in pieces], wanted, lambda r: weights[id(r)])
    return [tuple(pieces[index] for index in task) for task in members]


# --- asking the partitions (Ray) -------------------------------------------------------------------------


def plan_topic_read(
    topics: str | Sequence[str],
    *,
    start: Bound = "earliest",
    end: Bound = "latest",
    isolation: str = "read_committed",
    fail_on_data_loss: bool = True,
    broker: Broker | None = None,
    clock: Callable[[], float] = time.time,
) -> TopicReadPlan:
    """Plans a read (see the module docstring): every typed error is raised here, before any read task exists."""
    check_isolation(isolation)
    broker = broker or Broker.connect()
    tps = partitions_of(broker, [topics] if isinstance(topics, str) else list(topics))
    now_ms = math.floor(clock() * 1000)
    check_bound(start, "start", tps, now_ms)
    check_bound(end, "end", tps, now_ms)
    snapshots = snapshot_partitions(broker, tps)
    found_by_time: dict[tuple[str, TopicPartition], int | None] = {}
    for side, bound in (("start", start), ("end", end)):
        if isinstance(bound, datetime):
            for tp, offset in offsets_for_time(tps, timestamp_ms(bound)).items():
                found_by_time[(side, tp)] = offset
    return plan_ranges(snapshots, start, end, isolation, fail_on_data_loss, found_by_time)


def snapshot_partitions(broker: Broker, tps: Sequence[TopicPartition]) -> dict[TopicPartition, PartitionSnapshot]:
    """Every partition's leader node, offsets and size, asked of all the leaders at once."""
    leaders: dict[str, dict[int, str]] = {}
    for topic in sorted({topic for topic, _ in tps}):
        leaders[topic] = broker.topic(topic).partitions
    states = _ask_leaders(tps, "state")
    return {tp: PartitionSnapshot.of(leaders[tp[0]][tp[1]], states[tp]) for tp in tps}


def offsets_for_time(tps: Sequence[TopicPartition], timestamp: int) -> dict[TopicPartition, int | None]:
    """The first offset of each partition whose record's timestamp is at or after `timestamp` (Kafka's
    ListOffsets), None where no record is that new."""
    answers = _ask_leaders(tps, "list_offset", timestamp)
    return {tp: None if found is None else found.offset for tp, found in answers.items()}


def _ask_leaders(tps: Sequence[TopicPartition], method: str, *args: Any) -> dict[TopicPartition, Any]:
    """`method(*args)` of every partition's leader, all in flight at once; a partition whose leader is gone is
    asked again once it has one (within `LEADER_WAIT_S`)."""
    deadline = time.monotonic() + LEADER_WAIT_S
    answers: dict[TopicPartition, Any] = {}
    pending = list(tps)
    refresh = False
    while pending:
        refs = {}
        failed: list[TopicPartition] = []
        last_error: BrokerNotAvailableError | None = None
        for tp in pending:
            try:
                refs[tp] = getattr(partition_handle(tp, refresh=refresh), method).remote(*args)
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


__all__ = [
    "ARROW_ROW_BYTES",
    "MIN_TASK_BYTES",
    "Bound",
    "PartitionSnapshot",
    "PlannedRange",
    "TopicReadPlan",
    "plan_ranges",
    "plan_topic_read",
    "task_groups",
]
