"""Share groups (KIP-932) with librdkafka's share consumer (confluent-kafka's `ShareConsumer`, explicit
acknowledgement): `test_share_group_clients`' sequence with two such members, against a raybroker listener over
the in-process broker and against Apache Kafka 4.2. Each broker gives Kafka's deliveries (`EXPECTED`: each record
accepted once, a RELEASEd one back once with delivery count 2, a REJECTed one never, one RELEASEd every time archived
after the delivery limit) and tells the group over the wire as Kafka does."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from confluent_kafka import AcknowledgeType, ShareConsumer

from tests.cluster.protocol.test_share_group_clients import (
    EXPECTED,
    acknowledge_type,
    assert_told_as_kafka_tells_it,
    json_of,
    share_steps,
)

pytestmark = pytest.mark.kafka


class LibrdkafkaShareMember:
    """A confluent-kafka `ShareConsumer` doing what `java/ShareGroupMember.java` does (acknowledging each record by its
    value, a commit after every poll that returned records), on a thread of the test process."""

    def __init__(self, bootstrap: str, topic: str, group: str, name: str) -> None:
        self._consumer = ShareConsumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": f"librdkafka-{name}",
                "share.acknowledgement.mode": "explicit",
            }
        )
        self._consumer.subscribe([topic])
        self._found: list[tuple[str, int, str]] = []
        self._failure: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"librdkafka-share-member-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                records = [record for record in self._consumer.poll(0.2) if record.error() is None]
                for record in records:
                    value, count = record.value().decode(), record.delivery_count()
                    kind = acknowledge_type(value, count)
                    self._consumer.acknowledge(record, getattr(AcknowledgeType, kind))
                    self._found.append((value, count, kind))
                if records:
                    self._consumer.commit_sync()
        except BaseException as exc:  # reported by close() and tail()
            self._failure = exc
        finally:
            self._consumer.close()

    def deliveries(self) -> list[tuple[str, int, str]]:
        return list(self._found)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        if self._failure is not None:
            raise self._failure

    def tail(self) -> str:
        return f"--- librdkafka member: {self._found[-5:]} failure {self._failure!r}"


def test_librdkafka_share_consumers_get_kafkas_deliveries(share_listener: str, kafka4: str, tmp_path: Path) -> None:
    makers = (LibrdkafkaShareMember, LibrdkafkaShareMember)
    kafka_deliveries, kafka_group = share_steps(kafka4, makers)
    ours, our_group = share_steps(share_listener, makers)
    assert kafka_deliveries == EXPECTED
    assert ours == kafka_deliveries
    assert_told_as_kafka_tells_it(kafka_group)
    assert json_of(our_group) == json_of(kafka_group), (kafka_group, our_group)
