"""Following topics with Ray Data: `stream_topic` yields successive bounded Datasets and commits a consumer group's
offsets as the caller finishes each.

Ray Data 2.60 has only bounded reads, so a live topic is a series of them, driven here on the driver: each batch is a
`read_topic` plan from where the previous batch ended to the offsets latest when it is planned (its end offsets are
fixed then, so a batch is a consistent snapshot however long it takes), at most one batch per `interval_s`, and a
plan with nothing new waits for the next interval instead of yielding an empty Dataset. The first batch of a
partition starts at the group's committed offset, or by `start` (`earliest`, `latest`, or `read_topic`'s
per-partition dict) where the group has none; partitions added to a topic later start at their earliest.

Offsets are committed where Kafka consumers keep them (the group coordinator, `__consumer_offsets`), when the
caller is done with a batch: asking for the next one, `commit()`, or leaving a `with` block without an exception.
A batch whose processing failed is not committed, and the next stream of the group reads it again: delivery is at
least once. Exactly once needs the output and the offsets committed together: a `write_topic` with transactions
(not in raybroker yet) that sends the batch's end offsets to its transaction, as Kafka's consume-transform-produce
loop does.

Feeding Ray Train: each batch is an ordinary Dataset, so `TorchTrainer(..., datasets={"train": batch})` trains on
it (the workers' `ray.train.get_dataset_shard("train").iter_torch_batches(...)`, binary columns decoded first, e.g.
`value_format="msgpack"`), resuming from the previous fit's checkpoint; the batch is committed once the fit
returned.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import pyarrow as pa
from ray.data import Dataset

from actors.clients.broker import Broker
from actors.clients.consumer import Consumer
from cluster.data.datasource import ReadSettings, read_plan, read_settings
from cluster.data.read_planning import Bound, plan_topic_read
from cluster.records.isolation import check_isolation
from cluster.records.offset_ranges import partitions_of
from cluster.records.read_plan import (
    EARLIEST,
    LATEST,
    TopicReadPlan,
    offsets_by_topic,
    resolve_position,
    snapshot_partitions,
)
from storage.errors import InvalidRequestError
from storage.topic_partition import TopicPartition


@dataclass(frozen=True, slots=True)
class StreamBatch:
    """One batch of a stream: its number (from 0) and the offsets it reads, `[start, end)` per partition."""

    index: int
    start_offsets: dict[TopicPartition, int]
    end_offsets: dict[TopicPartition, int]

    @property
    def offset_count(self) -> int:
        return sum(self.end_offsets[tp] - self.start_offsets[tp] for tp in self.end_offsets)


class TopicStream:
    """Successive Datasets over topics for a consumer group (see the module docstring); an iterator and a context
    manager. Not thread-safe."""

    def __init__(
        self,
        topics: str | Sequence[str],
        *,
        group_id: str,
        interval_s: float = 1.0,
        start: Bound = "earliest",
        isolation: str = "read_committed",
        columns: Sequence[str] | None = None,
        value_format: str = "binary",
        value_schema: pa.DataType | pa.Schema | None = None,
        fail_on_data_loss: bool = True,
        max_batches: int | None = None,
        idle_timeout_s: float | None = None,
        broker: Broker | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not isinstance(group_id, str) or not group_id:
            raise InvalidRequestError(f"stream_topic needs a group_id, got {group_id!r}")
        if not isinstance(interval_s, int | float) or interval_s < 0:
            raise InvalidRequestError(f"interval_s must be a number >= 0, got {interval_s!r}")
        if start not in ("earliest", "latest") and not isinstance(start, Mapping):
            raise InvalidRequestError(f"start must be earliest, latest or a per-partition dict, got {start!r}")
        check_isolation(isolation)
        self._topics = [topics] if isinstance(topics, str) else list(topics)
        self._group_id = group_id
        self._interval_s = interval_s
        self._start = start
        self._isolation = isolation
        self._columns = columns
        self._value_format = value_format
        self._value_schema = value_schema
        self._fail_on_data_loss = fail_on_data_loss
        # The rows' schema and decoding, decided with the first batch (a schema inferred then is kept).
        self._settings: ReadSettings | None = None
        self._max_batches = max_batches
        self._idle_timeout_s = idle_timeout_s
        self._broker = broker or Broker.connect()
        self._consumer = Consumer(self._broker, group_id=group_id)
        self._clock = clock
        self._sleep = sleep
        self._positions: dict[TopicPartition, int] | None = None
        self._last_start_s: float | None = None
        self.batch: StreamBatch | None = None
        self._committed = True
        self._closed = False

    def __iter__(self) -> Iterator[Dataset]:
        return self

    def __next__(self) -> Dataset:
        """The next batch's Dataset, once the previous one is committed; waits for new records."""
        if self._closed:
            raise StopIteration
        self.commit()
        if self._max_batches is not None and self.batch is not None and self.batch.index + 1 >= self._max_batches:
            raise StopIteration
        idle_since = self._clock()
        while True:
            if self._last_start_s is not None:
                self._sleep(max(0.0, self._last_start_s + self._interval_s - self._clock()))
            self._last_start_s = self._clock()
            plan = self._plan()
            if plan.ranges:
                return self._begin(plan)
            if self._idle_timeout_s is not None and self._clock() - idle_since >= self._idle_timeout_s:
                self._closed = True
                raise StopIteration

    def _plan(self) -> TopicReadPlan:
        positions = self._positions if self._positions is not None else self._initial_positions()
        self._positions = positions
        return plan_topic_read(
            self._topics,
            start=offsets_by_topic(positions),
            end="latest",
            isolation=self._isolation,
            fail_on_data_loss=self._fail_on_data_loss,
            broker=self._broker,
        )

    def _initial_positions(self) -> dict[TopicPartition, int]:
        """The group's committed offsets, and `start` for the partitions without one."""
        tps = partitions_of(self._broker, self._topics)
        positions = {tp: offset for tp in tps if (offset := self._consumer.committed(tp)) is not None}
        missing = [tp for tp in tps if tp not in positions]
        if not missing:
            return positions
        start = self._start
        if isinstance(start, Mapping):
            given = {(topic, int(p)): offset for topic, offsets in start.items() for p, offset in offsets.items()}
            positions.update({tp: given[tp] for tp in missing if tp in given})
            missing = [tp for tp in missing if tp not in given]
            start = "earliest"
        if missing:
            snapshots = snapshot_partitions(self._broker, missing)
            position = EARLIEST if start == "earliest" else LATEST
            for tp in missing:
                positions[tp], _ = resolve_position(position, snapshots[tp], self._isolation, None)
        return positions

    def _begin(self, plan: TopicReadPlan) -> Dataset:
        index = 0 if self.batch is None else self.batch.index + 1
        if self._settings is None:
            self._settings = read_settings(
                plan,
                columns=self._columns,
                value_format=self._value_format,
                value_schema=self._value_schema,
                fail_on_data_loss=self._fail_on_data_loss,
            )
        dataset = read_plan(plan, self._settings)
        self.batch = StreamBatch(index, dict(plan.start_offsets), dict(plan.end_offsets))
        self._positions = dict(plan.end_offsets)
        self._committed = False
        return dataset

    def commit(self) -> None:
        """Commits the current batch's end offsets for the group (nothing if it is committed already)."""
        if self._committed or self.batch is None:
            return
        self._consumer.commit(self.batch.end_offsets)
        self._committed = True

    def close(self) -> None:
        """Ends the stream without committing the current batch. Idempotent."""
        if not self._closed:
            self._closed = True
            self._consumer.close()

    def __enter__(self) -> TopicStream:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        """Commits the current batch when the block ended without an exception, then closes."""
        if exc_type is None:
            self.commit()
        self.close()


def stream_topic(topics: str | Sequence[str], *, group_id: str, interval_s: float = 1.0, **options: Any) -> TopicStream:
    """Successive bounded Datasets over `topics` for consumer group `group_id` (see the module docstring);
    `options` are `TopicStream`'s (`start`, `isolation`, `columns`, `value_format`, `value_schema`,
    `fail_on_data_loss`, `max_batches`, `idle_timeout_s`)."""
    return TopicStream(topics, group_id=group_id, interval_s=interval_s, **options)


__all__ = ["StreamBatch", "TopicStream", "stream_topic"]
