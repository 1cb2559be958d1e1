"""`cluster.demos.streaming_demo.run_streaming_counts`: per-window counts of a Structured Streaming query over
Spark's Kafka source equal what the producer sent, trigger after trigger (run once, shortened: ~15 s here)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest

from actors.clients.admin import Admin
from cluster.demos.streaming_demo import run_streaming_counts
from cluster.protocol.listener import KafkaListener
from tests.cluster.spark.helpers import unique_topic

pytestmark = [pytest.mark.ray, pytest.mark.spark]


@pytest.fixture
def listener(spark_broker: Any) -> Iterator[KafkaListener]:
    with KafkaListener({"listeners": "PLAINTEXT://127.0.0.1:0"}) as started:
        yield started


def test_the_last_count_of_every_window_equals_what_was_produced_in_it(spark: Any, listener: KafkaListener) -> None:
    topic = unique_topic("page-view-stream")
    Admin().create_topic(topic, 2)
    out = io.StringIO()
    result = run_streaming_counts(
        spark, topic, listener.bootstrap_servers, rate=500, window_s=2, trigger_s=1, produce_s=4.0, out=out
    )
    assert result.error is None
    assert result.matches, (result.produced, result.counted)
    assert sum(result.produced.values()) >= 1000
    assert len(result.produced) >= 2 and result.triggers >= 2
    printed = out.getvalue()
    assert "trigger " in printed and "every window's last count equals the events sent in it" in printed
