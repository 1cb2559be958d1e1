"""Share groups (KIP-932) on the broker of a real local Ray: the Java `KafkaShareConsumer` 4.2 sequence of
`test_share_group_clients` (whose deliveries Apache Kafka 4.2 gives there, `EXPECTED`) through a Kafka listener
over Ray's partition actors and group coordinator actor: each record accepted once, a RELEASEd one redelivered with
delivery count 2, a REJECTed one never again, one RELEASEd every time archived after the delivery limit, and the
group told over the wire as Kafka tells it. Then the group's offsets, which its partition's actor holds: described with
lag 0 (every record settled), altered to start at offset 1 (the rest of the log its lag) and deleted, as
`test_share_group_offsets` shows Kafka 4.2 answering. The broker runs with `kafka4`'s share settings (`group.share.*`
keys in its properties, as `server.properties` sets them)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from kio.schema.errors import ErrorCode

from cluster.protocol.client import WireClient
from cluster.protocol.listener import KafkaListener
from tests.cluster.protocol.conftest import SHARE_GROUP_SETTINGS
from tests.cluster.protocol.helpers import GROUP_KEY, coordinator_client
from tests.cluster.protocol.test_share_group_clients import EXPECTED, assert_told_as_kafka_tells_it, share_steps
from tests.cluster.protocol.test_share_group_offsets import ALTER, DELETE, DESCRIBE

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def ray_listener(start_test_broker: Callable[..., tuple[Any, Any]]) -> Iterator[KafkaListener]:
    start_test_broker(
        **{
            key.replace(".", "_"): value
            for key, value in SHARE_GROUP_SETTINGS.items()
            if key.startswith("group.share.")
        }
    )
    with KafkaListener({"listeners": "PLAINTEXT://127.0.0.1:0"}) as started:
        yield started


def test_two_share_consumers_accept_release_and_reject_on_ray_as_on_kafka(
    share_classpath: str, ray_listener: KafkaListener, tmp_path: Path
) -> None:
    bootstrap = ray_listener.bootstrap_servers
    deliveries, group = share_steps(share_classpath, bootstrap, tmp_path)
    assert deliveries == EXPECTED
    assert_told_as_kafka_tells_it(group)
    listed: Any = group["listed"]
    described: Any = group["described"]
    group_id: str = listed[0][0]
    topic: str = described[3][0][0][0]
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{group_id}-watermarks"})
    try:
        _, high_watermark = reader.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    finally:
        reader.close()
    with coordinator_client(bootstrap, group_id, GROUP_KEY) as coordinator:
        # Every record settled: no lag, wherever the share-partition's last write left its start offset.
        ((name, partition, start_offset, lag, code),) = offsets(coordinator, group_id)
        assert (name, partition, lag, code) == (topic, 0, 0, ErrorCode.none) and 0 < start_offset <= high_watermark
        altered_offsets = [{"partition_index": 0, "start_offset": 1}]
        alter = {"group_id": group_id, "topics": [{"topic_name": topic, "partitions": altered_offsets}]}
        deadline = time.monotonic() + 30  # the members' leaving heartbeats may still be on their way
        while (altered := coordinator.request(ALTER, 0, alter)).error_code == ErrorCode.non_empty_group:
            assert time.monotonic() < deadline, altered
            time.sleep(0.5)
        assert [p.error_code for t in altered.responses for p in t.partitions] == [ErrorCode.none]
        assert offsets(coordinator, group_id) == [(topic, 0, 1, high_watermark - 1, ErrorCode.none)]
        deleted = coordinator.request(DELETE, 0, {"group_id": group_id, "topics": [{"topic_name": topic}]})
        assert [t.error_code for t in deleted.responses] == [ErrorCode.none]
        assert offsets(coordinator, group_id) == []


def offsets(coordinator: WireClient, group_id: str) -> list[tuple[Any, ...]]:
    """DescribeShareGroupOffsets of every topic: (topic, partition, start offset, lag, error) per partition."""
    answer = coordinator.request(DESCRIBE, 1, {"groups": [{"group_id": group_id, "topics": None}]})
    return [
        (t.topic_name, p.partition_index, p.start_offset, p.lag, p.error_code)
        for g in answer.groups
        for t in g.topics
        for p in t.partitions
    ]
