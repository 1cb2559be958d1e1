"""A share group's own delivery count limit (Kafka 4.3's `share.delivery.count.limit` group config), against Apache
Kafka 4.4 (`kafka44`, the first release in the test fixtures that has the key) and a raybroker listener over the
in-process broker (`share_listener`): the same sequence on both, compared.

The group's limit is set to 3 (the broker's `group.share.delivery.count.limit` is Kafka's default 5) with
IncrementalAlterConfigs, and values outside the broker's `group.share.min/max.delivery.count.limit` (2 and 10) or under
the key's minimum are refused with INVALID_CONFIG on both (the messages differ by release: Kafka 4.3's are raybroker's,
pinned in `tests/storage/config/test_group_config.py`; Kafka 4.4 rewrote them). Then one Java `KafkaShareConsumer`
(`java/ShareGroupMember.java`) releases `bounce-0` at every delivery and accepts `plain-0`: the group's limit archives
`bounce-0` after its third delivery, where the broker's would have delivered it five times."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from cluster.protocol.client import WireClient
from tests.cluster.protocol.test_group_configs import SET, alter, described_once
from tests.cluster.protocol.test_share_group_clients import ShareMember, produce

pytestmark = pytest.mark.kafka

DEADLINE_S = 60.0
# A record delivered more times than expected shows within this many seconds (the 5 s record lock of both brokers
# is not involved: the member releases at once).
SETTLE_S = 3.0
LIMIT = "share.delivery.count.limit"
INVALID_CONFIG = 40
EXPECTED = [
    ("bounce-0", 1, "RELEASE"),
    ("bounce-0", 2, "RELEASE"),
    ("bounce-0", 3, "RELEASE"),
    ("plain-0", 1, "ACCEPT"),
]


def limit_steps(classpath: str, bootstrap: str, folder: Path) -> tuple[list[int], list[tuple[str, int, str]]]:
    """The module docstring's sequence on one broker: the codes of the refused values, and the member's deliveries
    (value, delivery count, acknowledge type)."""
    topic, group = f"limit-{uuid.uuid4().hex[:8]}", f"limited-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(timeout=60)
    servers = bootstrap.split(",")
    with WireClient(servers[0]) as client:
        refused = [alter(client, group, [(LIMIT, SET, value)], validate_only=False)[0] for value in ("1", "11")]
        changes = [(LIMIT, SET, "3"), ("share.auto.offset.reset", SET, "earliest")]
        assert alter(client, group, changes, validate_only=False) == (0, None)
    for server in servers:
        with WireClient(server) as client:
            entries = described_once(client, group, lambda found: found[LIMIT][1] == "3", later_keys=True)
            assert (LIMIT, "3") in [entry[:2] for entry in entries[1:]]
    produce(bootstrap, topic, ["bounce-0", "plain-0"])
    member = ShareMember(classpath, bootstrap, topic, group, folder, group)
    try:
        deadline = time.monotonic() + DEADLINE_S
        while len(member.deliveries()) < len(EXPECTED) and time.monotonic() < deadline:
            time.sleep(0.3)
        time.sleep(SETTLE_S)
    finally:
        member.close()
    return refused, sorted(member.deliveries())


def test_a_groups_delivery_count_limit_archives_as_on_kafka(
    share_classpath: str, share_listener: str, kafka44: str, tmp_path: Path
) -> None:
    kafka = limit_steps(share_classpath, kafka44, tmp_path)
    ours = limit_steps(share_classpath, share_listener, tmp_path)
    assert kafka == ([INVALID_CONFIG, INVALID_CONFIG], EXPECTED)
    assert ours == kafka
