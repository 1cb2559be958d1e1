"""Planning a read of topics, on the Spark driver: Spark's Kafka-source option names translated into a request of
the read-planning core (`cluster.records.read_plan`), and its plan grouped into Spark tasks.

`plan_read` takes Spark's option names (`cluster.spark.kafka_source` lists them) and returns a `ReadPlan`. The core
asks every partition its offsets at once (and `list_offset` for timestamps); `latest` is the last stable offset at
that moment (`isolationLevel` read_committed, the default) or the high watermark (read_uncommitted;
`cluster.records.isolation`), and the end offsets are fixed there: a DataFrame over the plan reads exactly the
planned ranges however often it is evaluated and however much is written meanwhile (a consistent snapshot), and a
next read that starts from this one's end offsets (`ReadPlan.ending_offsets_json()`) neither skips nor repeats a
record. In offset JSON, -2 means earliest and -1 latest (the core's `EARLIEST` and `LATEST`); a JSON must name
every partition read (as Spark requires). A timestamp with no record at or after it ends a read at the latest
offset, or for a start fails it (`startingOffsetsByTimestampStrategy=error`, the default). Deviation from Spark:
`startingOffsets` may be `latest` (Spark refuses it for batch reads); the read is then empty.

Ranges are split when `minPartitions` asks for more ranges than there are partitions (the core's `min_ranges`:
each range in proportion to its share of the records), then packed, biggest first, into one Spark task per
executor core (more only when `minPartitions` asks). Measured with one executor of 2 cores: one Spark task per
partition degraded by 70-90 ms per task (1M records, 128 partitions: 15 s), against 1.9 s for 4 grouped tasks, and 2
tasks on its 2 cores beat 4 (`TASKS_PER_CORE`). Ranges are packed by their offset counts, which stand for their bytes as
long as the partitions' records are of similar sizes.

Data loss at planning time (the core's rule): a starting offset below the log start (records deleted by retention
or DeleteRecords) fails with `OffsetOutOfRangeError`, or with `failOnDataLoss=false` starts at the log start. An
ending offset past the latest offset is an `InvalidRequestError`, as every other option that cannot be read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from actors.clients.broker import Broker
from cluster.records.isolation import READ_COMMITTED, check_isolation
from cluster.records.offset_ranges import OffsetRange, group_ranges, partitions_of
from cluster.records.read_plan import (
    EARLIEST,
    LATEST,
    AtTimestamp,
    Dialect,
    PlanRequest,
    Position,
    plan_partitions,
)
from storage.arguments import is_int
from storage.errors import InvalidRequestError, UnknownTopicOrPartitionError
from storage.topic_partition import TopicPartition

TIMESTAMP_STRATEGIES = ("error", "latest")
# Spark tasks per executor core. 1M records in 8 partitions into a groupBy (best of 3-4, other jobs running): 2
# tasks on the executor's 2 cores 0.90-1.11 s, 4 tasks 1.13-2.03 s; 100k records 0.40 s against 0.66 s. Each task
# pays Spark's Python task set-up, and one wave of tasks keeps the read of every core going to the end.
TASKS_PER_CORE = 1
# The core's errors in Spark's option names.
DIALECT = Dialect(
    start="starting offset",
    end="ending offset",
    skip_lost="Set failOnDataLoss=false to skip them.",
    past_end_error=InvalidRequestError,
    start_at_end="startingOffsetsByTimestampStrategy=latest starts such partitions at the latest offset",
)


@dataclass(frozen=True, slots=True)
class ReadPlan:
    """A planned read: its ranges, how they are grouped into Spark tasks, and the offsets it starts and ends at."""

    ranges: tuple[OffsetRange, ...]
    tasks: tuple[tuple[int, ...], ...]
    start_offsets: dict[TopicPartition, int]
    end_offsets: dict[TopicPartition, int]
    fail_on_data_loss: bool
    isolation: str = READ_COMMITTED

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
                if not is_int(offset):
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
    return partitions_of(broker, names)


# --- planning --------------------------------------------------------------------------------------------


def _boolean_option(name: str, value: bool | str) -> bool:
    """A boolean option given as a bool or as Spark's option string ("true"/"false", any case)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise InvalidRequestError(f"{name} must be true or false, got {value!r}")


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
    failOnDataLoss: bool | str = True,
    isolationLevel: str = READ_COMMITTED,
    parallelism: int = 2,
    broker: Broker | None = None,
) -> ReadPlan:
    """Plans a read (see the module docstring); `parallelism` is the executors' total cores. Keyword names are
    Spark's option names; `failOnDataLoss` takes a bool or, as Spark's option does, "true"/"false"."""
    failOnDataLoss = _boolean_option("failOnDataLoss", failOnDataLoss)
    check_isolation(isolationLevel)
    if minPartitions is not None and (not is_int(minPartitions) or minPartitions < 1):
        raise InvalidRequestError(f"minPartitions must be a positive int, got {minPartitions!r}")
    if startingOffsetsByTimestampStrategy not in TIMESTAMP_STRATEGIES:
        raise InvalidRequestError(
            f"startingOffsetsByTimestampStrategy must be error or latest, got {startingOffsetsByTimestampStrategy!r}"
        )
    broker = broker or Broker.connect()
    tps = topic_partitions(broker, topics, assign)
    request = PlanRequest(
        _positions(
            tps,
            True,
            _timestamps(tps, startingTimestamp, startingOffsetsByTimestamp, "startingOffsetsByTimestamp"),
            startingOffsets,
        ),
        _positions(
            tps,
            False,
            _timestamps(tps, endingTimestamp, endingOffsetsByTimestamp, "endingOffsetsByTimestamp"),
            endingOffsets,
        ),
        isolationLevel,
        failOnDataLoss,
        DIALECT,
        fail_without_start_match=startingOffsetsByTimestampStrategy == "error",
        min_ranges=minPartitions,
    )
    plan = plan_partitions(request, broker)
    ranges = [planned.range for planned in plan.ranges]
    task_count = min(len(ranges), max(minPartitions or 0, TASKS_PER_CORE * max(1, parallelism)))
    return ReadPlan(
        tuple(ranges),
        group_ranges(ranges, task_count),
        plan.start_offsets,
        plan.end_offsets,
        failOnDataLoss,
        isolationLevel,
    )


def _timestamps(
    tps: list[TopicPartition], timestamp: int | None, by_partition: Any, option: str
) -> dict[TopicPartition, int] | None:
    """Per-partition timestamps from a global one or a JSON (the global one wins, as in Spark); None if neither."""
    if timestamp is not None:
        if not is_int(timestamp) or timestamp < 0:
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


def _positions(
    tps: list[TopicPartition], starting: bool, timestamps: dict[TopicPartition, int] | None, spec: Any
) -> dict[TopicPartition, Position]:
    """The core's position of each partition for one side of the read: the timestamps when given, else
    `startingOffsets`/`endingOffsets` (`earliest`, `latest`, or offset JSON with -2 and -1)."""
    if timestamps is not None:
        return {tp: AtTimestamp(stamp) for tp, stamp in timestamps.items()}
    option = "startingOffsets" if starting else "endingOffsets"
    if spec in ("earliest", "latest"):
        if spec == "earliest" and not starting:
            raise InvalidRequestError("endingOffsets cannot be earliest")
        return dict.fromkeys(tps, EARLIEST if spec == "earliest" else LATEST)
    offsets = parse_partition_offsets(spec, option)
    _check_covers(offsets, tps, option)
    for tp, offset in offsets.items():
        if offset == EARLIEST and not starting:
            raise InvalidRequestError(f"endingOffsets of {tp[0]}-{tp[1]} cannot be -2 (earliest)")
        if offset < EARLIEST:
            raise InvalidRequestError(f"{option} of {tp[0]}-{tp[1]} must be >= 0, -1 or -2, got {offset}")
    return dict(offsets)
