"""`cluster.spark.micro_batch`: every record processed exactly once across runs, offsets committed only after the sink
succeeded, and the Parquet sink overwriting a batch that is processed again."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from actors.clients.admin import Admin
from actors.clients.consumer import Consumer
from cluster.spark.micro_batch import BatchInfo, MicroBatchRunner
from storage.errors import InvalidRequestError, OffsetOutOfRangeError
from tests.cluster.spark.helpers import append, unique_topic

pytestmark = [pytest.mark.ray, pytest.mark.spark]

NOW_MS = int(time.time() * 1000)


def produce(broker: Any, topic: str, partitions: int, count: int, tag: str) -> list[tuple[int, int]]:
    written = []
    for partition in range(partitions):
        records = [{"key": f"k{i}".encode(), "value": f"{tag}-{i}".encode(), "timestamp": NOW_MS} for i in range(count)]
        written += [(p.partition, p.offset) for p in append(broker, topic, partition, records)]
    return written


def new_topic(partitions: int) -> str:
    topic = unique_topic("stream")
    Admin().create_topic(topic, partitions)
    return topic


class Collector:
    """A sink that keeps the (partition, offset) rows of every batch, and can fail on purpose."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, int]] = []
        self.batches: list[BatchInfo] = []
        self.fail_next = False

    def __call__(self, df: Any, info: BatchInfo) -> None:
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("sink failed on purpose")
        table = df.toPandas()
        self.rows += list(zip(table["partition"].tolist(), table["offset"].tolist(), strict=True))
        self.batches.append(info)


def test_three_runs_with_a_producer_in_between_process_every_record_exactly_once(spark: Any, spark_broker: Any) -> None:
    topic = new_topic(2)
    group = unique_topic("group")
    sink = Collector()

    def runner(**options: Any) -> MicroBatchRunner:
        return MicroBatchRunner(
            spark, group, topics=topic, transform=lambda df: df.select("partition", "offset"), sink=sink, **options
        )

    written = produce(spark_broker, topic, 2, 50, "a")
    assert len(runner().run()) == 1
    written += produce(spark_broker, topic, 2, 30, "b")
    second = runner().run()
    assert len(second) == 1 and second[0].start_offsets == {(topic, 0): 50, (topic, 1): 50}
    written += produce(spark_broker, topic, 2, 40, "c")
    limited = runner(maxOffsetsPerTrigger=25).run()
    # 40 behind in each partition, 25 a batch: 12.5 each, rounded down as Spark's rate limit does.
    assert [info.offset_count for info in limited] == [24, 24, 24, 8]
    assert runner().run() == []
    assert sorted(sink.rows) == sorted(written)
    assert len(sink.rows) == len(set(sink.rows))
    assert runner().committed() == {(topic, 0): 120, (topic, 1): 120}


def test_offsets_are_committed_only_after_the_sink_succeeded(spark: Any, spark_broker: Any) -> None:
    topic = new_topic(1)
    group = unique_topic("group")
    sink = Collector()
    runner = MicroBatchRunner(spark, group, topics=topic, transform=lambda df: df, sink=sink)
    written = produce(spark_broker, topic, 1, 20, "x")
    sink.fail_next = True
    with pytest.raises(RuntimeError, match="on purpose"):
        runner.run()
    assert runner.committed() == {(topic, 0): None}
    retried = runner.run()
    assert sorted(sink.rows) == written
    assert retried[0].start_offsets == {(topic, 0): 0} and runner.committed() == {(topic, 0): 20}


def test_a_sql_batch_processed_again_overwrites_its_parquet_output(
    spark: Any, spark_broker: Any, tmp_path: Path
) -> None:
    topic = new_topic(2)
    group = unique_topic("group")
    out = tmp_path / "counts"
    runner = MicroBatchRunner(
        spark,
        group,
        topics=topic,
        sql="SELECT partition, count(*) AS n, max(offset) AS last FROM batch GROUP BY partition",
        sink=out,
    )
    produce(spark_broker, topic, 2, 15, "p")
    first = runner.run()
    # As if the driver died after writing but before committing: the group goes back to where the batch started.
    with Consumer(spark_broker, group_id=group) as consumer:
        consumer.commit({(topic, 0): 0, (topic, 1): 0})
    again = runner.run()
    assert [info.batch_id for info in again] == [info.batch_id for info in first]
    produce(spark_broker, topic, 2, 5, "q")
    runner.run()
    totals = spark.read.parquet(str(out)).groupBy("partition").sum("n").collect()
    assert {row["partition"]: row["sum(n)"] for row in totals} == {0: 20, 1: 20}
    assert len(list(out.glob("batch=*"))) == 2


def test_a_runner_needs_exactly_one_of_transform_and_sql_and_a_sink_for_sql(spark: Any, spark_broker: Any) -> None:
    with pytest.raises(InvalidRequestError):
        MicroBatchRunner(spark, "g", topics="t")
    with pytest.raises(InvalidRequestError):
        MicroBatchRunner(spark, "g", topics="t", sql="SELECT 1")
    with pytest.raises(InvalidRequestError):
        MicroBatchRunner(spark, "g", topics="t", transform=lambda df: df, maxOffsetsPerTrigger=0)


def test_a_committed_offset_whose_records_were_deleted_fails_or_resumes_at_the_log_start(
    spark: Any, spark_broker: Any
) -> None:
    topic = new_topic(1)
    group = unique_topic("group")
    produce(spark_broker, topic, 1, 30, "d")
    with Consumer(spark_broker, group_id=group) as consumer:
        consumer.commit({(topic, 0): 5})
    Admin().delete_records(topic, 0, 12)
    sink = Collector()
    with pytest.raises(OffsetOutOfRangeError, match="failOnDataLoss"):
        MicroBatchRunner(spark, group, topics=topic, transform=lambda df: df, sink=sink).run()
    MicroBatchRunner(spark, group, topics=topic, transform=lambda df: df, sink=sink, failOnDataLoss=False).run()
    assert sorted(sink.rows) == [(0, offset) for offset in range(12, 30)]
