"""Share groups' metrics (Kafka 4.2's `ShareGroupMetrics` and `SharePartitionMetrics` names) with a real share
consumer: librdkafka's (confluent-kafka's `ShareConsumer`, explicit acknowledgement) over a raybroker listener on the
in-process broker, which records into one `MetricsRecorder`. The consumer accepts the `a` records, releases each `l`
record on its first delivery and accepts it on the second, and rejects the `r` records; the oracle is that plan:
`RecordAcknowledgementsPerSec` counts each type's records, the share fetch and acknowledgement request meters count
the topic with no failure, and the share-partition's gauges, read as an export reads
them, show nothing in flight and no backlog once every record is settled, then the backlog of records produced after;
its counters, the `l` records redelivered and the `r` records archived by rejection.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from actors.core.in_process_broker import InProcessBroker
from actors.metrics.gauges import share_partition_samples
from actors.metrics.names import (
    FAILED_SHARE_ACKNOWLEDGEMENT_REQUESTS,
    FAILED_SHARE_FETCH_REQUESTS,
    SHARE_ACKNOWLEDGEMENT_REQUESTS,
    SHARE_ARCHIVED,
    SHARE_BACKLOG,
    SHARE_FETCH_REQUESTS,
    SHARE_IN_FLIGHT_BATCHES,
    SHARE_IN_FLIGHT_MESSAGES,
    SHARE_LOCK_TIMEOUTS,
    SHARE_RECORD_ACKNOWLEDGEMENTS,
    SHARE_REDELIVERED,
)
from actors.metrics.recorder import MetricsRecorder
from cluster.protocol.client import WireClient
from storage.clock import SYSTEM_CLOCK
from tests.cluster.protocol.conftest import CONSUMER_HEARTBEAT, SHARE_GROUP_SETTINGS
from tests.cluster.protocol.helpers import start_broker, start_local_listener
from tests.cluster.protocol.test_group_configs import RESET, SET, alter

DEADLINE_S = 30.0
VALUES = ["a0", "l0", "r0", "a1", "a2", "l1", "r1", "a3"]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, InProcessBroker, MetricsRecorder]]:
    metrics = MetricsRecorder()
    settings = {
        key.replace(".", "_"): value
        for key, value in {**SHARE_GROUP_SETTINGS, **CONSUMER_HEARTBEAT}.items()
        if key.startswith("group.")
    }
    broker = start_broker(tmp_path / "broker", clock=SYSTEM_CLOCK, metrics=metrics, **settings)
    try:
        with start_local_listener(broker, metrics) as listener:
            yield listener.bootstrap_servers, broker, metrics
    finally:
        broker.close()


def test_acknowledgements_are_counted_by_type_and_the_share_partition_shows_its_backlog(
    served: tuple[str, InProcessBroker, MetricsRecorder],
) -> None:
    bootstrap, broker, metrics = served
    topic, group = f"tasks-{uuid.uuid4().hex[:8]}", f"workers-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    with WireClient(bootstrap) as client:
        assert alter(client, group, [(RESET, SET, "earliest")], False) == (ErrorCode.none, None)
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in VALUES:
        producer.produce(topic, value=value.encode())
    assert producer.flush(30) == 0
    consumer = ShareConsumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"}
    )
    consumer.subscribe([topic])

    def gauges() -> dict[str, float]:
        """The share-partition's gauges and counter totals as an export of the leader's metrics reads them, by name
        (and an archiving's reason)."""
        samples = share_partition_samples(topic, 0, broker.leader(topic, 0).share_statistics())
        assert {labels[:3] for _, labels, _ in samples} == {(group, topic, "0")}
        return {":".join((spec.name, *labels[3:])): value for spec, labels, value in samples}

    settled: list[str] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(settled) < len(VALUES):
            assert time.monotonic() < deadline, f"only {settled} settled"
            records = [record for record in consumer.poll(0.5) if record.error() is None]
            if records and not settled:
                # Acquired, not yet acknowledged: in flight.
                held = gauges()
                assert held[SHARE_IN_FLIGHT_MESSAGES.name] >= len(records)
                assert held[SHARE_IN_FLIGHT_BATCHES.name] >= 1
                assert held[SHARE_BACKLOG.name] == len(VALUES)
            for record in records:
                value = record.value().decode()
                if value.startswith("r"):
                    consumer.acknowledge(record, AcknowledgeType.REJECT)
                    settled.append(value)
                elif value.startswith("l") and record.delivery_count() == 1:
                    consumer.acknowledge(record, AcknowledgeType.RELEASE)
                else:
                    consumer.acknowledge(record, AcknowledgeType.ACCEPT)
                    settled.append(value)
            if records:
                consumer.commit_sync()
    finally:
        consumer.close()
    assert sorted(settled) == sorted(VALUES)
    kinds = [value[0] for value in VALUES]
    assert metrics.value(SHARE_RECORD_ACKNOWLEDGEMENTS, "Accept") == kinds.count("a") + kinds.count("l")
    assert metrics.value(SHARE_RECORD_ACKNOWLEDGEMENTS, "Release") == kinds.count("l")
    assert metrics.value(SHARE_RECORD_ACKNOWLEDGEMENTS, "Reject") == kinds.count("r")
    # Every request fetched or acknowledged on the one topic and none failed: the topic's series is the total.
    for total, failed in (
        (SHARE_FETCH_REQUESTS, FAILED_SHARE_FETCH_REQUESTS),
        (SHARE_ACKNOWLEDGEMENT_REQUESTS, FAILED_SHARE_ACKNOWLEDGEMENT_REQUESTS),
    ):
        assert metrics.value(total, topic) == metrics.value(total, "") >= 1
        assert metrics.value(failed, "") == 0

    # Each `l` record was delivered twice, each `r` archived by its rejection; no lock expired, no limit reached.
    settled_gauges = {
        SHARE_IN_FLIGHT_MESSAGES.name: 0,
        SHARE_IN_FLIGHT_BATCHES.name: 0,
        SHARE_BACKLOG.name: 0,
        SHARE_LOCK_TIMEOUTS.name: 0,
        SHARE_REDELIVERED.name: kinds.count("l"),
        f"{SHARE_ARCHIVED.name}:reject": kinds.count("r"),
        f"{SHARE_ARCHIVED.name}:delivery_limit": 0,
    }
    assert gauges() == settled_gauges
    for index in range(3):
        producer.produce(topic, value=f"late{index}".encode())
    assert producer.flush(30) == 0
    assert gauges() == {**settled_gauges, SHARE_BACKLOG.name: 3}
