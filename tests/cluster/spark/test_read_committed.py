"""The Spark bridge and the isolation levels: the transaction scenario (`tests.transaction_scenario`: commits,
aborts, interleaved and open transactions on three partitions, written into the partition actors) read by
`read_topics` by default (read_committed) and with `isolationLevel="read_uncommitted"` (Spark's own default),
compared with the scenario's model, and the plan's end offsets at each level's end."""

from __future__ import annotations

from typing import Any

import pytest

from cluster.spark.kafka_source import planned_read, read_topics
from tests.transaction_scenario import PARTITIONS, Scenario, write_through_actors

pytestmark = [pytest.mark.ray, pytest.mark.spark]

TOPIC = "spark-isolation"


@pytest.fixture(scope="module")
def scenario(spark_broker: Any) -> Scenario:
    from actors.clients.admin import Admin

    Admin(spark_broker).create_topic(TOPIC, PARTITIONS)
    return write_through_actors(TOPIC)


@pytest.mark.parametrize("isolation", [None, "read_committed", "read_uncommitted"])
def test_read_topics_reads_what_its_isolation_level_allows(
    spark: Any, scenario: Scenario, isolation: str | None
) -> None:
    options = {} if isolation is None else {"isolationLevel": isolation}
    df = read_topics(spark, topics=TOPIC, **options)
    level = isolation or "read_committed"
    rows = [
        (int(row.partition), int(row.offset), bytes(row.value))
        for row in df.select("partition", "offset", "value").collect()
    ]
    assert sorted(rows) == sorted(scenario.read(level))
    assert planned_read(df).end_offsets == {(TOPIC, p): scenario.end(p, level) for p in range(PARTITIONS)}
