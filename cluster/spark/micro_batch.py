"""Incremental analytics: micro-batches over topics from a consumer group's committed offsets to the latest.

The model is Structured Streaming's Kafka source run with `trigger(availableNow=True)`: each `run()` takes the
latest offsets at its start as its target, processes everything from the group's committed offsets up to that
target in one or more batches, and stops; records written meanwhile wait for the next run. Where Spark keeps
offsets in a checkpoint directory, the runner keeps them where Kafka consumers do: committed offsets of the
consumer group (`actors.server.group_coordinator`, stored in `__consumer_offsets`).

Why not a real streaming source: Spark 3.5's Python API cannot define one. The Python Data Source API, with its
`DataSourceStreamReader` (`initialOffset`, `latestOffset`, `partitions`, `read`, `commit`), is new in Spark 4.0
(`SparkSession.dataSource`, "New in version 4.0.0"; pyspark 3.5.7 has no `pyspark.sql.datasource` module), and
Spark's own Kafka source speaks Kafka's wire protocol, which raybroker does not serve. So the runner drives
batch reads (`cluster.spark.planning.plan_read`, `cluster.spark.kafka_source.read_plan`) itself.

One run:

1. Partitions: every partition of the topics now (partitions added since the last run included), or `assign`.
2. Start of each partition: the group's committed offset; without one, `startingOffsets` (`earliest`, `latest`
   or Spark's offset JSON). A committed offset below the log start (records deleted) or above the latest offset
   (the log was truncated) is data loss: an `OffsetOutOfRangeError` with `failOnDataLoss`, else the read goes on
   from the log start, or from the latest offset.
3. Batches: up to the target, at most `maxOffsetsPerTrigger` offsets each, shared among partitions in proportion
   to how far behind each is (as Spark's rate limit does: a share under one offset is rounded up, others down).
4. Each batch: its DataFrame (Spark's Kafka-source schema, or decoded values with `valueFormat`) goes through the
   user's `transform(df)` or `sql` (the batch is the temp view `view`); the result goes to the sink (a callable
   `sink(result, info)`, or a Parquet directory); then, and only then, the batch's end offsets are committed.
   A failing transform or sink leaves the offsets where they were, and the next run processes that batch again.

Delivery: at least once into any sink, exactly once into an idempotent one. The Parquet sink is idempotent: it
overwrites `<path>/batch=<id>`, where the id is a digest of the group and the batch's start offsets, so a batch that is
processed again after a failure (same start) replaces its earlier output. `spark.read.parquet(path)` reads them
all. A `transform` that returns None has done its own output (a side effect) and needs no sink.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import DataType

from actors.clients.broker import Broker
from actors.clients.consumer import Consumer
from cluster.records.offset_ranges import partition_bounds
from cluster.records.range_reading import sample_values
from cluster.records.value_formats import DEFAULT_SAMPLE_SIZE, python_value
from cluster.spark.kafka_source import read_plan
from cluster.spark.planning import (
    EARLIEST,
    LATEST,
    ReadPlan,
    offsets_json,
    parse_partition_offsets,
    plan_read,
    topic_partitions,
)
from cluster.spark.session import typed_spark_error
from cluster.spark.value_formats import infer_value_type
from storage.arguments import is_int
from storage.errors import InvalidRequestError, OffsetOutOfRangeError
from storage.topic_partition import TopicPartition

# Hex digits of the batch id: 64 bits, so two different start offsets of one group never share a directory.
BATCH_ID_HEX_DIGITS = 16


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """One micro-batch: its id (a digest of the group and its start offsets) and its offsets, `[start, end)`."""

    batch_id: str
    start_offsets: dict[TopicPartition, int]
    end_offsets: dict[TopicPartition, int]

    @property
    def offset_count(self) -> int:
        return sum(self.end_offsets[tp] - self.start_offsets[tp] for tp in self.end_offsets)


Transform = Callable[["DataFrame"], "DataFrame | None"]
Sink = Callable[["DataFrame", BatchInfo], None]


def batch_id(group_id: str, start_offsets: Mapping[TopicPartition, int]) -> str:
    """A digest of the group and the batch's start offsets: the same batch processed again gets the same id."""
    digest = hashlib.sha256(f"{group_id}\n{offsets_json(start_offsets)}".encode())
    return digest.hexdigest()[:BATCH_ID_HEX_DIGITS]


class MicroBatchRunner:
    """Runs a consumer group's micro-batches; see the module docstring. Keyword names follow Spark's options."""

    def __init__(
        self,
        spark: SparkSession,
        group_id: str,
        *,
        topics: str | Sequence[str] | None = None,
        assign: str | Mapping[str, Sequence[int]] | None = None,
        transform: Transform | None = None,
        sql: str | None = None,
        view: str = "batch",
        sink: Sink | str | Path | None = None,
        startingOffsets: str = "earliest",
        maxOffsetsPerTrigger: int | None = None,
        failOnDataLoss: bool = True,
        minPartitions: int | None = None,
        includeHeaders: bool = False,
        valueFormat: str = "binary",
        valueSchema: str | DataType | None = None,
        broker: Broker | None = None,
    ) -> None:
        if (transform is None) == (sql is None):
            raise InvalidRequestError("give exactly one of transform and sql")
        if sql is not None and sink is None:
            raise InvalidRequestError("a sql micro-batch needs a sink for its result")
        if maxOffsetsPerTrigger is not None and (not is_int(maxOffsetsPerTrigger) or maxOffsetsPerTrigger < 1):
            raise InvalidRequestError(f"maxOffsetsPerTrigger must be a positive int, got {maxOffsetsPerTrigger!r}")
        self._spark = spark
        self._group_id = group_id
        self._broker = broker or Broker.connect()
        self._consumer: Consumer = Consumer(self._broker, group_id=group_id)
        self._topics = topics
        self._assign = assign
        self._transform = transform
        self._sql = sql
        self._view = view
        self._sink = sink
        self._starting_offsets = startingOffsets
        self._max_offsets = maxOffsetsPerTrigger
        self._fail_on_data_loss = failOnDataLoss
        self._min_partitions = minPartitions
        self._include_headers = includeHeaders
        self._value_format = valueFormat
        self._value_schema = valueSchema

    def committed(self) -> dict[TopicPartition, int | None]:
        """The group's committed offset of every partition read (None where it has none)."""
        tps = topic_partitions(self._broker, self._topics, self._assign)
        return {tp: self._consumer.committed(tp) for tp in tps}

    def run(self) -> list[BatchInfo]:
        """One availableNow run: every batch up to the latest offsets at its start; returns the batches done."""
        committed = self.committed()
        tps = list(committed)
        bounds = partition_bounds(tps)
        starts = self._starts(committed, bounds)
        target = {tp: high_watermark for tp, (_, high_watermark) in bounds.items()}
        done: list[BatchInfo] = []
        while any(starts[tp] < target[tp] for tp in tps):
            ends = self._batch_ends(starts, target)
            done.append(self._run_batch(starts, ends))
            starts = ends
        return done

    def _starts(
        self, committed: Mapping[TopicPartition, int | None], bounds: Mapping[TopicPartition, tuple[int, int]]
    ) -> dict[TopicPartition, int]:
        missing = [tp for tp, offset in committed.items() if offset is None]
        initial = self._initial_offsets(missing, bounds)
        starts: dict[TopicPartition, int] = {}
        for tp, offset in committed.items():
            log_start, high_watermark = bounds[tp]
            start = initial[tp] if offset is None else offset
            if log_start <= start <= high_watermark:
                starts[tp] = start
                continue
            if self._fail_on_data_loss:
                raise OffsetOutOfRangeError(
                    f"{tp[0]}-{tp[1]}: group {self._group_id!r} is at offset {start}, outside the log's "
                    f"[{log_start}, {high_watermark}]; some data was lost. Set failOnDataLoss=false to go on.",
                    offset=start,
                )
            starts[tp] = log_start if start < log_start else high_watermark
        return starts

    def _initial_offsets(
        self, tps: Sequence[TopicPartition], bounds: Mapping[TopicPartition, tuple[int, int]]
    ) -> dict[TopicPartition, int]:
        if self._starting_offsets in ("earliest", "latest"):
            side = 0 if self._starting_offsets == "earliest" else 1
            return {tp: bounds[tp][side] for tp in tps}
        given = parse_partition_offsets(self._starting_offsets, "startingOffsets")
        initial = {}
        for tp in tps:
            if tp not in given:
                raise InvalidRequestError(f"startingOffsets names no offset for {tp[0]}-{tp[1]}")
            offset = given[tp]
            initial[tp] = bounds[tp][0] if offset == EARLIEST else bounds[tp][1] if offset == LATEST else offset
        return initial

    def _batch_ends(
        self, starts: Mapping[TopicPartition, int], target: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int]:
        lags = {tp: target[tp] - starts[tp] for tp in starts}
        total = sum(lags.values())
        if self._max_offsets is None or total <= self._max_offsets:
            return dict(target)
        ends = {}
        for tp, lag in lags.items():
            share = self._max_offsets * lag / total
            ends[tp] = starts[tp] + min(lag, math.ceil(share) if share < 1 else math.floor(share))
        return ends

    def _run_batch(self, starts: dict[TopicPartition, int], ends: dict[TopicPartition, int]) -> BatchInfo:
        info = BatchInfo(batch_id(self._group_id, starts), dict(starts), dict(ends))
        assign: dict[str, list[int]] = {}
        for topic, partition in starts:
            assign.setdefault(topic, []).append(partition)
        plan = plan_read(
            assign=assign,
            startingOffsets=offsets_json(starts),
            endingOffsets=offsets_json(ends),
            minPartitions=self._min_partitions,
            failOnDataLoss=self._fail_on_data_loss,
            parallelism=self._spark.sparkContext.defaultParallelism,
            broker=self._broker,
        )
        if self._value_schema is None and self._value_format in ("json", "msgpack"):
            self._value_schema = self._infer_schema(plan)
        df = read_plan(
            self._spark,
            plan,
            includeHeaders=self._include_headers,
            valueFormat=self._value_format,
            valueSchema=self._value_schema,
        )
        try:
            result = self._process(df)
            if result is not None:
                self._write(result, info)
        except Exception as exc:
            # A read task's typed error (data loss) reaches the driver as text in Spark's PythonException.
            typed = typed_spark_error(exc)
            if typed is None:
                raise
            raise typed from exc
        self._consumer.commit(ends)
        return info

    def _infer_schema(self, plan: ReadPlan) -> DataType | None:
        """The value type inferred from the first batch, kept for every later one (a stream has one schema)."""
        values = sample_values(plan.ranges, DEFAULT_SAMPLE_SIZE)
        return infer_value_type(python_value(self._value_format, data) for data in values)

    def _process(self, df: DataFrame) -> DataFrame | None:
        if self._transform is not None:
            return self._transform(df)
        df.createOrReplaceTempView(self._view)
        return self._spark.sql(self._sql or "")

    def _write(self, result: DataFrame, info: BatchInfo) -> None:
        if self._sink is None:
            raise InvalidRequestError("the transform returned a DataFrame but the runner has no sink")
        if callable(self._sink):
            self._sink(result, info)
            return
        result.write.mode("overwrite").parquet(str(Path(self._sink) / f"batch={info.batch_id}"))
