"""`cluster.demos.spark_demo.run_spark_analytics`: two reads of live partitions, the second continuing the first."""

from __future__ import annotations

import io
from typing import Any

import pytest

from actors.clients.admin import Admin
from cluster.demos.page_views import PAGES
from cluster.demos.spark_demo import run_spark_analytics
from tests.cluster.spark.helpers import unique_topic

pytestmark = [pytest.mark.ray, pytest.mark.spark]


def test_the_second_read_sees_only_new_records_and_none_twice(spark: Any, spark_broker: Any) -> None:
    topic = unique_topic("page-views")
    Admin().create_topic(topic, 4)
    out = io.StringIO()
    result = run_spark_analytics(spark, topic, rate=500, warm_up_s=1.5, pause_s=1.5, out=out)
    assert result.first.records > 0 and result.second.records > 0
    assert result.contiguous and result.exactly_once
    for snapshot in (result.first, result.second):
        assert sum(stats.views for stats in snapshot.pages) == snapshot.records
        assert {stats.page for stats in snapshot.pages} <= set(PAGES)
        assert all(5 <= stats.mean_latency_ms < 400 for stats in snapshot.pages)
        assert snapshot.records == sum(snapshot.end_offsets.values()) - sum(snapshot.start_offsets.values())
    for (_, partition), end in result.first.end_offsets.items():
        if partition in result.second.first_offsets:
            assert result.second.first_offsets[partition] == end
    assert result.first.records + result.second.records <= result.produced
    printed = out.getvalue()
    assert "read 1:" in printed and "read 2:" in printed and "none read twice, none skipped" in printed
