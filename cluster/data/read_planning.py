"""Planning a Ray Data read of topics, on the driver: `read_topic`'s bounds, in the forms `ray.data.read_kafka`
takes them, translated into a request of the read-planning core (`cluster.records.read_plan`: the partitions'
offsets asked at once, the end offsets fixed there, the data-loss rule), and the plan's ranges cut into read tasks.

| bound                     | start                                       | end (exclusive)                          |
|---------------------------|---------------------------------------------|------------------------------------------|
| `"earliest"`              | the log start offset (late-bound, as Spark) | refused                                  |
| `"latest"`                | where the end is (an empty read)            | where the isolation level ends a read    |
| an int                    | that offset of every partition              | that offset of every partition           |
| a `datetime` (naive: UTC) | the first record at or after it, per        | the same; the end when none is that new  |
|                           | partition; the end when none is that new    |                                          |
| `{topic: {partition: n}}` | n for those partitions, `earliest` for the  | n for those, `latest` for the others     |
|                           | others (as `read_kafka`)                    |                                          |

A Dataset over the plan reads exactly the planned offsets however often it is executed and however much is
written meanwhile, and a next read that starts at this one's `next_start()` neither skips nor repeats a record.
Refused before any partition is asked (`check_bound`, `InvalidRequestError` unless said): an unknown topic or
partition (`UnknownTopicOrPartitionError`), a negative offset, an end at `earliest`, and a datetime later than
now (a bounded read cannot wait for the future). Refused by the core once the partitions answered, in this front
end's words (`DIALECT`): a start below the log start (records deleted: `OffsetOutOfRangeError`, or with
`fail_on_data_loss=False` the read starts at the log start), an end past where a read may end
(`OffsetOutOfRangeError`), a start after the end (`InvalidRequestError`).

Read tasks (`task_groups`, run by every `get_read_tasks` call, deterministic): each range is cut into pieces of at
most `DataContext.target_max_block_size` estimated bytes (the core's estimate), so a hot partition reads in
parallel; pieces are cut again, biggest first, while Ray Data asks for more tasks than there are pieces and a
piece holds at least 2 x `MIN_TASK_BYTES`; and packed, heaviest first, into as many tasks as Ray Data asks for
when there are more.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from actors.clients.broker import Broker
from cluster.records.isolation import check_isolation
from cluster.records.offset_ranges import group_ranges, partitions_of
from cluster.records.read_plan import (
    EARLIEST,
    LATEST,
    AtTimestamp,
    Dialect,
    PlannedRange,
    PlanRequest,
    Position,
    TopicReadPlan,
    plan_partitions,
)
from storage.arguments import is_int
from storage.errors import InvalidRequestError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from storage.topic_partition import TopicPartition

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Bound = "earliest" | "latest" | int | datetime | {topic: {partition: offset}}
Bound = str | int | datetime | Mapping[str, Mapping[int, int]]
# The core's errors in `read_topic`'s words.
DIALECT = Dialect(
    start="start offset",
    end="end offset",
    skip_lost="Read with fail_on_data_loss=False to start at the log start.",
    past_end_error=OffsetOutOfRangeError,
)
# The smallest piece a range is cut into to give Ray Data more read tasks: each task costs a locate call, its own
# decode's fixed numpy steps and Ray Data's task overhead.
MIN_TASK_BYTES = 16 * 1024 * 1024


# --- translating bounds (no Ray) -------------------------------------------------------------------------


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


def positions(bound: Bound, side: str, tps: Sequence[TopicPartition]) -> dict[TopicPartition, Position]:
    """A checked bound as the core's position of each partition (see the module docstring's table)."""
    if isinstance(bound, Mapping):
        default = EARLIEST if side == "start" else LATEST
        given = {tp: bound.get(tp[0], {}).get(tp[1]) for tp in tps}
        return {tp: default if offset is None else offset for tp, offset in given.items()}
    position: Position
    if isinstance(bound, datetime):
        position = AtTimestamp(timestamp_ms(bound))
    elif isinstance(bound, str):
        position = EARLIEST if bound == "earliest" else LATEST
    else:
        position = bound
    return dict.fromkeys(tps, position)


def plan_request(
    tps: Sequence[TopicPartition], start: Bound, end: Bound, isolation: str, fail_on_data_loss: bool
) -> PlanRequest:
    """The core's request for a read of `tps` between checked bounds."""
    return PlanRequest(
        positions(start, "start", tps),
        positions(end, "end", tps),
        isolation,
        fail_on_data_loss,
        DIALECT,
    )


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
    return plan_partitions(plan_request(tps, start, end, isolation, fail_on_data_loss), broker)


__all__ = ["DIALECT", "MIN_TASK_BYTES", "Bound", "check_bound", "plan_request", "plan_topic_read", "task_groups"]
