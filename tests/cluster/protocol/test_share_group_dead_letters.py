"""A share group's dead-letter topic (Kafka 4.4, KIP-1191), against Apache Kafka 4.4 (`kafka44`) and a raybroker
listener over the in-process broker (`share_listener`): the same sequence on both, the dead-letter topic read back on
both and compared record by record, headers and all (only the timestamps and the order of the records within a
dead-letter partition, which follow the members' timing, are left out).

The group's refused values first, with IncrementalAlterConfigs: a dead-letter topic name starting with `__` and a
copy flag that is not a boolean, each INVALID_CONFIG with Kafka 4.4's message. Then the group is given the topic
`dlq.<id>` (2 partitions, created with `errors.deadletterqueue.group.enable=true`), record copying, a delivery count
limit of 2 and `share.auto.offset.reset=earliest`, and a source topic of 3 partitions gets, in each partition p,
`reject-p`, `bounce-p` and `plain-p` (keyed `key-...`). One Java `KafkaShareConsumer` (`java/ShareGroupMember.java`)
REJECTs `reject-*`, RELEASEs `bounce-*` at every delivery and ACCEPTs `plain-*`: each `reject-p` is dead-lettered
with delivery count 1 and "Offset rejected by client.", each `bounce-p` after its second delivery with delivery count
2 and "Offset delivery count exceeded the threshold.", both to dead-letter partition p % 2, with the source record's
key and value; `plain-p` never. A second group whose dead-letter topic does not exist (the brokers' default
`errors.deadletterqueue.auto.create.topics.enable=false`) rejects a record: it is archived (never delivered again) and
the topic is not created."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cluster.protocol.client import WireClient
from tests.cluster.protocol.test_group_configs import SET, alter, described_once
from tests.cluster.protocol.test_share_group_clients import ShareMember

pytestmark = pytest.mark.kafka

DEADLINE_S = 60.0
# A record delivered more often than expected, or a dead letter written late, shows within this many seconds.
SETTLE_S = 3.0
PARTITIONS, DLQ_PARTITIONS = 3, 2
INVALID_CONFIG = 40
TOPIC_NAME = "errors.deadletterqueue.topic.name"
COPY_RECORD = "errors.deadletterqueue.copy.record.enable"
REFUSED = [
    (INVALID_CONFIG, "errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'"),
    (
        INVALID_CONFIG,
        "Invalid value maybe for configuration errors.deadletterqueue.copy.record.enable: Expected value to be either "
        "true or false",
    ),
]
REJECTED, EXCEEDED = "Offset rejected by client.", "Offset delivery count exceeded the threshold."
Deliveries = list[tuple[str, int, str]]
DeadLetter = tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


def expected_dead_letters(topic: str, group: str) -> list[DeadLetter]:
    """What the module docstring says the dead-letter topic holds, sorted."""
    found = []
    for partition in range(PARTITIONS):
        for prefix, count, message in (("reject", 1, REJECTED), ("bounce", 2, EXCEEDED)):
            offset = 0 if prefix == "reject" else 1
            headers = (
                ("__dlq.errors.topic", topic.encode()),
                ("__dlq.errors.partition", str(partition).encode()),
                ("__dlq.errors.offset", str(offset).encode()),
                ("__dlq.errors.group", group.encode()),
                ("__dlq.errors.delivery.count", str(count).encode()),
                ("__dlq.errors.message", message.encode()),
            )
            value = f"{prefix}-{partition}".encode()
            found.append((partition % DLQ_PARTITIONS, b"key-" + value, value, headers))
    return sorted(found)


def expected_deliveries() -> Deliveries:
    return sorted(
        [(f"reject-{p}", 1, "REJECT") for p in range(PARTITIONS)]
        + [(f"bounce-{p}", count, "RELEASE") for p in range(PARTITIONS) for count in (1, 2)]
        + [(f"plain-{p}", 1, "ACCEPT") for p in range(PARTITIONS)]
        + [("lost-0", 1, "REJECT")]
    )


def dead_letter_steps(classpath: str, bootstrap: str, folder: Path) -> dict[str, Any]:
    """The module docstring's sequence on one broker: the refusals, the member's deliveries, the dead letters read
    back (masked and sorted) and their group and source topic, and whether the missing topic was created."""
    tag = uuid.uuid4().hex[:8]
    topic, dlq, group = f"source-{tag}", f"dlq.{tag}", f"dead-{tag}"
    lost_topic, lost_group, missing = f"lost-{tag}", f"lost-{tag}", f"dlq.missing-{tag}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    created = admin.create_topics(
        [
            NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1),
            NewTopic(lost_topic, num_partitions=1, replication_factor=1),
            NewTopic(
                dlq,
                num_partitions=DLQ_PARTITIONS,
                replication_factor=1,
                config={"errors.deadletterqueue.group.enable": "true"},
            ),
        ]
    )
    for future in created.values():
        future.result(timeout=60)
    with WireClient(bootstrap.split(",")[0]) as client:
        refused = [
            alter(client, group, [(TOPIC_NAME, SET, "__consumer_offsets")], validate_only=False),
            alter(client, group, [(COPY_RECORD, SET, "maybe")], validate_only=False),
        ]
        common = [("share.delivery.count.limit", SET, "2"), ("share.auto.offset.reset", SET, "earliest")]
        accepted = [
            alter(client, group, [*common, (TOPIC_NAME, SET, dlq), (COPY_RECORD, SET, "true")], validate_only=False),
            alter(client, lost_group, [*common, (TOPIC_NAME, SET, missing)], validate_only=False),
        ]
    assert accepted == [(0, None), (0, None)]
    for server in bootstrap.split(","):
        with WireClient(server) as client:
            for named, name in ((group, dlq), (lost_group, missing)):
                described_once(client, named, lambda found, name=name: found[TOPIC_NAME][1] == name, later_keys=True)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": "5"})
    for partition in range(PARTITIONS):
        for prefix in ("reject", "bounce", "plain"):
            value = f"{prefix}-{partition}".encode()
            producer.produce(topic, key=b"key-" + value, value=value, partition=partition)
    producer.produce(lost_topic, key=b"key-lost-0", value=b"reject-lost-0", partition=0)
    assert producer.flush(30) == 0
    members = [
        ShareMember(classpath, bootstrap, topic, group, folder, f"dead-{tag}"),
        ShareMember(classpath, bootstrap, lost_topic, lost_group, folder, f"lost-{tag}"),
    ]
    wanted = len(expected_deliveries())
    try:
        deadline = time.monotonic() + DEADLINE_S
        while sum(len(m.deliveries()) for m in members) < wanted and time.monotonic() < deadline:
            time.sleep(0.3)
        time.sleep(SETTLE_S)
    finally:
        for member in members:
            member.close()
    deliveries = sorted(
        [*members[0].deliveries(), *[(v.replace("reject-", ""), c, k) for v, c, k in members[1].deliveries()]]
    )
    return {
        "refused": refused,
        "deliveries": deliveries,
        "dead_letters": read_dead_letters(bootstrap, dlq, len(expected_dead_letters(topic, group))),
        "expected": expected_dead_letters(topic, group),
        "missing_created": missing in admin.list_topics(timeout=30).topics,
    }


def read_dead_letters(bootstrap: str, dlq: str, count: int) -> list[DeadLetter]:
    """Every record of the dead-letter topic (waiting for `count` of them, then `SETTLE_S` more for any extra):
    its partition, key, value and headers, sorted; timestamps left out."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(dlq, p, 0) for p in range(DLQ_PARTITIONS)])
    found: list[DeadLetter] = []
    try:
        deadline = time.monotonic() + DEADLINE_S
        settle_until: float | None = None
        while time.monotonic() < deadline and (settle_until is None or time.monotonic() < settle_until):
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                headers = tuple((name, value) for name, value in message.headers() or [])
                found.append((message.partition(), message.key(), message.value(), headers))
            if len(found) >= count and settle_until is None:
                settle_until = time.monotonic() + SETTLE_S
    finally:
        consumer.close()
    return sorted(found)


def assert_as_kafka_writes_them(found: dict[str, Any]) -> None:
    """`dead_letter_steps`' result is what Kafka 4.4 gives (the module docstring's sequence)."""
    assert found["refused"] == REFUSED
    assert found["deliveries"] == expected_deliveries()
    assert found["dead_letters"] == found["expected"]
    assert found["missing_created"] is False


def test_dead_letters_are_written_with_kafkas_headers_as_on_kafka(
    share_classpath: str, share_listener: str, kafka44: str, tmp_path: Path
) -> None:
    assert_as_kafka_writes_them(dead_letter_steps(share_classpath, kafka44, tmp_path))
    assert_as_kafka_writes_them(dead_letter_steps(share_classpath, share_listener, tmp_path))
