"""Share groups (KIP-932) with librdkafka's share consumer (confluent-kafka's `ShareConsumer`, explicit
acknowledgement): `test_share_group_clients`' sequence with two such members, against a raybroker listener over
the in-process broker and against Apache Kafka 4.2. Each broker gives Kafka's deliveries (`EXPECTED`: each record
accepted once, a RELEASEd one back once with delivery count 2, a REJECTed one never, one RELEASEd every time archived
after the delivery limit) and tells the group over the wire as Kafka does."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import AcknowledgeType, ShareConsumer

from tests.cluster.protocol.test_share_group_clients import (
    EXPECTED,
    ThreadedMember,
    acknowledge_type,
    assert_told_as_kafka_tells_it,
    json_of,
    share_steps,
)

pytestmark = pytest.mark.kafka


class LibrdkafkaShareMember(ThreadedMember):
    """A confluent-kafka `ShareConsumer` as a `ThreadedMember`."""

    def __init__(self, bootstrap: str, topic: str, group: str, name: str) -> None:
        super().__init__(f"librdkafka-share-member-{name}")
        self._consumer = ShareConsumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": f"librdkafka-{name}",
                "share.acknowledgement.mode": "explicit",
            }
        )
        self._consumer.subscribe([topic])
        self.start()

    def poll_once(self) -> list[tuple[str, int, str]]:
        found = []
        records = [record for record in self._consumer.poll(0.2) if record.error() is None]
        for record in records:
            value, count = record.value().decode(), record.delivery_count()
            kind = acknowledge_type(value, count)
            self._consumer.acknowledge(record, getattr(AcknowledgeType, kind))
            found.append((value, count, kind))
        if records:
            self._consumer.commit_sync()
        return found

    def close_consumer(self) -> None:
        self._consumer.close()


def test_librdkafka_share_consumers_get_kafkas_deliveries(share_listener: str, kafka4: str, tmp_path: Path) -> None:
    makers = (LibrdkafkaShareMember, LibrdkafkaShareMember)
    kafka_deliveries, kafka_group = share_steps(kafka4, makers)
    ours, our_group = share_steps(share_listener, makers)
    assert kafka_deliveries == EXPECTED
    assert ours == kafka_deliveries
    assert_told_as_kafka_tells_it(kafka_group)
    assert json_of(our_group) == json_of(kafka_group), (kafka_group, our_group)
