"""A share group's `share.isolation.level` (KIP-932's group config) applied, against Apache Kafka 4.2 (`kafka4`) and a
raybroker listener over the in-process broker (`share_listener`): the same sequence on both, compared.

A transactional producer commits a transaction, aborts one, commits another, a plain producer writes a record, then
the transactional producer leaves a transaction open and the plain producer writes one record more after it. Two
share groups, one `read_committed`, one `read_uncommitted` (each with `share.auto.offset.reset=earliest`), each read
the topic with one Java `KafkaShareConsumer` (`java/ShareGroupMember.java`) accepting every record. Kafka's
deliveries (`EXPECTED`): the read_committed group gets the committed and plain records below the open transaction
(its last stable offset stops the read there, and the aborted transaction's records are archived, never delivered);
the read_uncommitted one gets every record, the aborted and open transactions' too, each once."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from cluster.protocol.client import WireClient
from tests.cluster.protocol.test_group_configs import SET, alter, described_once
from tests.cluster.protocol.test_share_group_clients import ShareMember, produce

pytestmark = pytest.mark.kafka

DEADLINE_S = 60.0
# Anything delivered beyond what is expected shows within this many seconds after the expected records.
SETTLE_S = 3.0
COMMITTED = ["committed-0", "committed-1", "committed-2"]
ABORTED = ["aborted-0", "aborted-1"]
EXPECTED = {
    "read_committed": sorted([*COMMITTED, "plain-0"]),
    "read_uncommitted": sorted([*COMMITTED, *ABORTED, "plain-0", "open-0", "plain-1"]),
}


def configure_group(bootstrap: str, group: str, isolation: str) -> None:
    """The group's `share.isolation.level` and `share.auto.offset.reset=earliest`, seen by every broker."""
    changes = [("share.isolation.level", SET, isolation), ("share.auto.offset.reset", SET, "earliest")]
    servers = bootstrap.split(",")
    with WireClient(servers[0]) as client:
        assert alter(client, group, changes, validate_only=False) == (0, None)
    for server in servers:
        with WireClient(server) as client:
            entries = described_once(client, group, lambda found: found["share.isolation.level"][1] == isolation)
            assert ("share.isolation.level", isolation) in [entry[:2] for entry in entries[1:]]


def write_transactions(bootstrap: str, topic: str) -> Producer:
    """The module docstring's records; answers the producer whose transaction is still open."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"txn-{topic}",
            "linger.ms": "5",
            "transaction.timeout.ms": "300000",
        }
    )
    producer.init_transactions(30)
    for values, commit in ((COMMITTED[:2], True), (ABORTED, False), (COMMITTED[2:], True)):
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value=value.encode())
        # Flushed first: librdkafka's abort drops what it has not sent yet, and the aborted records must be in the log.
        assert producer.flush(30) == 0
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    produce(bootstrap, topic, ["plain-0"])
    producer.begin_transaction()
    producer.produce(topic, value=b"open-0")
    assert producer.flush(30) == 0
    produce(bootstrap, topic, ["plain-1"])
    return producer


def read_groups(
    classpath: str, bootstrap: str, topic: str, groups: dict[str, str], folder: Path
) -> dict[str, list[tuple[str, int]]]:
    """The (value, delivery count) of every record each group's Java share consumer got (each accepted), by the
    group's isolation level: polled until the expected records came and `SETTLE_S` more."""
    members = {
        isolation: ShareMember(classpath, bootstrap, topic, group, folder, f"{isolation}-{group}")
        for isolation, group in groups.items()
    }
    try:
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline and any(
            len(member.deliveries()) < len(EXPECTED[isolation]) for isolation, member in members.items()
        ):
            time.sleep(0.3)
        time.sleep(SETTLE_S)
    finally:
        for member in members.values():
            member.close()
    return {
        isolation: sorted((value, count) for value, count, _ in member.deliveries())
        for isolation, member in members.items()
    }


def isolation_steps(classpath: str, bootstrap: str, folder: Path) -> dict[str, list[tuple[str, int]]]:
    """The module docstring's sequence on one broker: each group's deliveries, by its isolation level."""
    topic = f"isolation-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(timeout=60)
    groups = {isolation: f"{isolation}-{uuid.uuid4().hex[:8]}" for isolation in EXPECTED}
    for isolation, group in groups.items():
        configure_group(bootstrap, group, isolation)
    producer = write_transactions(bootstrap, topic)
    try:
        return read_groups(classpath, bootstrap, topic, groups, folder)
    finally:
        producer.abort_transaction(30)


def test_share_groups_read_committed_and_uncommitted_records_as_on_kafka(
    share_classpath: str, share_listener: str, kafka4: str, tmp_path: Path
) -> None:
    kafka = isolation_steps(share_classpath, kafka4, tmp_path)
    ours = isolation_steps(share_classpath, share_listener, tmp_path)
    assert kafka == {isolation: [(value, 1) for value in values] for isolation, values in EXPECTED.items()}
    assert ours == kafka
