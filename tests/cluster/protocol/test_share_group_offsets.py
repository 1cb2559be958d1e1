"""Share groups' offset admin APIs, raybroker against Apache Kafka 4.2: DescribeShareGroupOffsets (90),
AlterShareGroupOffsets (91) and DeleteShareGroupOffsets (92) as raw requests to the group's coordinator, then Kafka's
own `kafka-share-groups.sh` (`ShareGroupCommand`), the same sequence on both brokers and the same answers.

The sequence: a member joins a share group on a one-partition topic, warms its share-partition up (it starts at the
high watermark) and accepts the warm-up records; five records are produced and acquired, the first two and the fourth
accepted. The offsets described then show the start offset as the share-partition last wrote it: Kafka writes before
it moves the start offset over what the write settled, so it is the start from before these acknowledgements, and the
lag (the high watermark less that start less the records done above it) is 2. The member then releases the third
record and accepts the fifth: start offset moved, lag 1. Also described: a topic the group never consumed and one
that does not exist (start offset -1, lag -1, no error), the "all topics" form, an unknown group and a consumer
group (no error either). While the member is in the group, Alter and Delete are NON_EMPTY_GROUP, and on the consumer
group GROUP_ID_NOT_FOUND; with an empty group id INVALID_GROUP_ID. Once the member left: Alter sets the start offsets
(a partition beyond the count and an unknown topic answer UNKNOWN_TOPIC_OR_PARTITION), and Delete drops a topic's
state (a topic the group has no state on answers UNKNOWN_TOPIC_OR_PARTITION too). Then Kafka's tool, on both brokers
at once: `--reset-offsets --to-earliest` and `--to-latest` (`--execute`), `--delete-offsets` and `--describe --offsets
--verbose`, printing the same lines on both once names are masked (the idle topic holds `IDLE` records, so
its latest offset is known). Last, DeleteGroups deletes the share group (and the consumer group) with its state: the
group made again by an Alter has only the start offset that Alter set.
"""

from __future__ import annotations

import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from benchmarks.kafka_broker import KAFKA_4_VERSION
from cluster.protocol.client import WireClient
from tests.cluster.protocol.helpers import GROUP_KEY, assigned_member, coordinator_client, topic_and_leader
from tests.cluster.protocol.kafka_tools import printed_lines, run_kafka_tool
from tests.cluster.protocol.test_share_group_wire import (
    Session,
    acquired,
    heartbeat,
    join_holding_partition_0,
    partition_codes,
)

pytestmark = pytest.mark.kafka

DESCRIBE, ALTER, DELETE = 90, 91, 92
DELETE_GROUPS = 42
ACCEPT, RELEASE = 1, 2
DEADLINE_S = 60.0
SHARE_GROUPS = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
# The records of the topic the group only gets offsets on by Alter (and `--reset-offsets --to-latest`).
IDLE = 3


def described(response: Any) -> list[tuple[Any, ...]]:
    """A DescribeShareGroupOffsets answer as sorted rows: (group, error, topic, has a topic id, partition, start
    offset, leader epoch, lag (None in v0), error)."""
    return sorted(
        (
            g.group_id,
            g.error_code,
            t.topic_name,
            t.topic_id is not None,
            p.partition_index,
            p.start_offset,
            p.leader_epoch,
            getattr(p, "lag", None),
            p.error_code,
        )
        for g in response.groups
        for t in g.topics
        for p in t.partitions
    )


def altered(response: Any) -> tuple[Any, ...]:
    rows = sorted(
        (t.topic_name, t.topic_id is not None, p.partition_index, p.error_code, p.error_message)
        for t in response.responses
        for p in t.partitions
    )
    return response.error_code, response.error_message, rows


def deleted(response: Any) -> tuple[Any, ...]:
    rows = sorted((t.topic_name, t.topic_id is not None, t.error_code, t.error_message) for t in response.responses)
    return response.error_code, response.error_message, rows


def offsets_steps(bootstrap: str) -> tuple[list[tuple[str, object]], dict[str, str]]:
    """The module docstring's wire sequence on one broker: each step's name and answer, with the names used."""
    topic, other, group = (f"{kind}-{uuid.uuid4().hex[:8]}" for kind in ("kip932", "idle", "offsets"))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1), NewTopic(other, 1, 1)]).values():
        future.result(timeout=60)
    consumer_group = f"consumers-{uuid.uuid4().hex[:8]}"
    # The consumer group commits an offset: Kafka's group metadata cleanup (every `offsets.retention.check.interval.ms`)
    # deletes an empty group that has none, and the steps on it below would then answer as on an unknown group.
    member = assigned_member(bootstrap, consumer_group, other)
    member.commit(offsets=[TopicPartition(other, 0, 0)], asynchronous=False)
    member.close()
    producer = Producer({"bootstrap.servers": bootstrap})
    for index in range(IDLE):
        producer.produce(other, value=f"idle-{index}".encode())

    def produce(count: int) -> None:
        for index in range(count):
            producer.produce(topic, value=f"v{index}".encode())
        assert producer.flush(30) == 0

    topic_metadata, leader_address = topic_and_leader(bootstrap, topic)
    member = uuid.uuid4().hex[:22]
    steps: list[tuple[str, object]] = []
    with (
        coordinator_client(bootstrap, group, GROUP_KEY) as coordinator,
        WireClient(leader_address) as leader,
    ):

        def describe(topics: list[tuple[str, list[int]]] | None, group_id: str = group, version: int = 1) -> Any:
            asked = None if topics is None else [{"topic_name": n, "partitions": p} for n, p in topics]
            values = {"groups": [{"group_id": group_id, "topics": asked}]}
            return described(coordinator.request(DESCRIBE, version, values))

        def alter(group_id: str, offsets: list[tuple[str, int, int]]) -> Any:
            topics: dict[str, list[dict[str, int]]] = {}
            for name, partition, offset in offsets:
                topics.setdefault(name, []).append({"partition_index": partition, "start_offset": offset})
            values = {"group_id": group_id, "topics": [{"topic_name": n, "partitions": p} for n, p in topics.items()]}
            return altered(coordinator.request(ALTER, 0, values))

        def delete(group_id: str, names: list[str]) -> Any:
            values = {"group_id": group_id, "topics": [{"topic_name": name} for name in names]}
            return deleted(coordinator.request(DELETE, 0, values))

        deadline = time.monotonic() + DEADLINE_S
        join_holding_partition_0(coordinator, group, [member], topic, deadline)
        session = Session(leader, group, member, topic_metadata.topic_id)
        assert session.fetch().error_code == ErrorCode.none
        while not (warm := acquired(session.fetch())):
            assert time.monotonic() < deadline, "no warm-up record acquired"
            produce(1)
        assert partition_codes(session.acknowledge([(warm[0][0], warm[-1][1], [ACCEPT])])) == [ErrorCode.none]
        produce(5)
        held: list[tuple[int, int, int]] = []
        while sum(last - first + 1 for first, last, _ in held) < 5:
            assert time.monotonic() < deadline, f"five records not acquired: {held}"
            held += acquired(session.fetch())
        base = held[0][0]

        def relative(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
            """Start offsets of the consumed topic relative to the first of the five records."""
            return [(*r[:5], r[5] - base if r[2] == topic and r[5] >= 0 else r[5], *r[6:]) for r in rows]

        accepted = session.acknowledge([(base, base + 1, [ACCEPT]), (base + 3, base + 3, [ACCEPT])])
        assert partition_codes(accepted) == [ErrorCode.none]
        explicit = [(topic, [0]), (other, [0]), ("no-such-topic", [0, 1])]
        steps.append(("accepted 0, 1 and 3", relative(describe(explicit))))
        steps.append(("every topic", relative(describe(None))))
        steps.append(("v0, no lag", relative(describe([(topic, [0])], version=0))))
        released = session.acknowledge([(base + 2, base + 2, [RELEASE]), (base + 4, base + 4, [ACCEPT])])
        assert partition_codes(released) == [ErrorCode.none]
        steps.append(("released 2, accepted 4", relative(describe(None))))
        steps.append(("unknown group", describe([(topic, [0])], group_id="no-such-group")))
        steps.append(("unknown group, every topic", describe(None, group_id="no-such-group")))
        steps.append(("consumer group", describe(None, group_id=consumer_group)))
        steps.append(("alter with a member", alter(group, [(topic, 0, base)])))
        steps.append(("delete with a member", delete(group, [topic])))
        steps.append(("alter a consumer group", alter(consumer_group, [(other, 0, 0)])))
        steps.append(("delete a consumer group", delete(consumer_group, [other])))
        steps.append(("alter no group id", alter("", [(topic, 0, 0)])))
        steps.append(("delete no group id", delete("", [topic])))
        assert heartbeat(coordinator, group, member, -1, None).error_code == ErrorCode.none
        alter_offsets = [(topic, 0, base + 3), (topic, 5, 0), ("no-such-topic", 0, 0), (other, 0, 0)]
        steps.append(("alter", alter(group, alter_offsets)))
        steps.append(("altered", relative(describe(None))))
        steps.append(("delete", delete(group, [topic, "no-such-topic", "__consumer_offsets"])))
        steps.append(("deleted", relative(describe([(topic, [0]), (other, [0])]))))
        steps.append(("deleted, every topic", relative(describe(None))))
    return steps, {"topic": topic, "other": other, "group": group, "consumers": consumer_group}


def tool_lines(bootstrap: str, names: dict[str, str]) -> list[tuple[str, list[str]]]:
    """`kafka-share-groups.sh` on the group `offsets_steps` left (state on `other` only), each run's lines with the
    names, addresses and node ids masked."""
    group, topic, other = names["group"], names["topic"], names["other"]
    # Each run starts a JVM (~3 s): four, covering AlterShareGroupOffsets (both resets), DeleteShareGroupOffsets
    # and DescribeShareGroupOffsets (with the leader epochs).
    runs = [
        ["--reset-offsets", "--group", group, "--to-earliest", "--execute", "--topic", topic],
        ["--reset-offsets", "--group", group, "--to-latest", "--execute", "--topic", other],
        ["--delete-offsets", "--group", group, "--topic", topic],
        ["--describe", "--group", group, "--offsets", "--verbose"],
    ]
    masks = [(group, "GROUP"), (topic, "TOPIC"), (other, "OTHER")]

    def masked(line: str) -> str:
        for name, mask in masks:
            line = line.replace(name, mask)
        return re.sub(r"\S+:\d+\s+\(\d+\)", "HOST (ID)", re.sub(r" +", " ", line))

    printed = []
    for arguments in runs:
        ran = run_kafka_tool(SHARE_GROUPS, bootstrap, *arguments, version=KAFKA_4_VERSION)
        lines = [f"exit {ran.returncode}", *(masked(line) for line in printed_lines(ran))]
        printed.append((masked(" ".join(arguments)), lines))
    return printed


def deleted_group_steps(bootstrap: str, names: dict[str, str]) -> list[tuple[str, object]]:
    """The group `tool_lines` left (state on `other` only) deleted with DeleteGroups, then given a start offset on
    `topic` again (Alter creates it anew): every topic described shows that one start offset only, as the group's
    old state went with it. Lags left out: how many warm-up records each broker took differs."""
    group, topic = names["group"], names["topic"]
    with coordinator_client(bootstrap, group, GROUP_KEY) as coordinator:
        deletion = coordinator.request(DELETE_GROUPS, 2, {"groups_names": [group, names["consumers"]]})
        values = {
            "group_id": group,
            "topics": [{"topic_name": topic, "partitions": [{"partition_index": 0, "start_offset": 0}]}],
        }
        alter = altered(coordinator.request(ALTER, 0, values))
        rows = described(coordinator.request(DESCRIBE, 1, {"groups": [{"group_id": group, "topics": None}]}))
    return [
        ("delete groups", sorted((r.group_id, r.error_code) for r in deletion.results)),
        ("alter after the deletion", alter),
        ("described after the deletion", [(*row[:7], row[8]) for row in rows]),
    ]


def offsets_and_tool(bootstrap: str) -> tuple[list[tuple[str, object]], dict[str, str], list[tuple[str, list[str]]]]:
    """`offsets_steps`, then `tool_lines` on what it left, then `deleted_group_steps`."""
    steps, names = offsets_steps(bootstrap)
    printed = tool_lines(bootstrap, names)
    return [*steps, *deleted_group_steps(bootstrap, names)], names, printed


def test_share_group_offsets_answer_as_kafka(share_listener: str, kafka4: str) -> None:
    # Both brokers at once: most of the time is spent waiting on Kafka and on the tool's JVMs.
    with ThreadPoolExecutor(2) as pool:
        on_kafka, on_raybroker = pool.map(offsets_and_tool, [kafka4, share_listener])
    kafka_steps, kafka_names, kafka_tool = on_kafka
    raybroker_steps, raybroker_names, raybroker_tool = on_raybroker

    def masked(steps: list[tuple[str, object]], names: dict[str, str]) -> str:
        text = repr(steps)
        for key, name in names.items():
            text = text.replace(name, key.upper())
        return text

    assert masked(raybroker_steps, raybroker_names) == masked(kafka_steps, kafka_names)
    assert raybroker_tool == kafka_tool
    # What Kafka 4.2.2 answered (recorded), the rows as `described` gives them, start offsets relative to the first of
    # the five records.
    kafka = dict(kafka_steps)
    group, none = kafka_names["group"], ErrorCode.none
    consumed = (group, none, kafka_names["topic"], True, 0)
    assert kafka["every topic"] == [(*consumed, 0, 0, 2, none)]
    assert kafka["released 2, accepted 4"] == [(*consumed, 2, 0, 1, none)]
    assert kafka["unknown group, every topic"] == kafka["consumer group"] == []
    assert kafka["alter with a member"] == (ErrorCode.non_empty_group, "The group is not empty.", [])
    not_share = (ErrorCode.group_id_not_found, f"Group {kafka_names['consumers']} is not a share group.", [])
    assert kafka["alter a consumer group"] == kafka["delete a consumer group"] == not_share
    idle = (group, none, kafka_names["other"], True, 0, 0, 0, IDLE, none)
    assert kafka["altered"] == [idle, (*consumed, 3, 0, 2, none)]
    assert kafka["deleted, every topic"] == [idle]
    assert kafka["delete groups"] == sorted([(group, none), (kafka_names["consumers"], none)])
    assert kafka["described after the deletion"] == [(*consumed, 0, 0, none)]
    assert kafka_tool == [
        ("--reset-offsets --group GROUP --to-earliest --execute --topic TOPIC", ["exit 0", *reset("TOPIC 0 0")]),
        ("--reset-offsets --group GROUP --to-latest --execute --topic OTHER", ["exit 0", *reset(f"OTHER 0 {IDLE}")]),
        ("--delete-offsets --group GROUP --topic TOPIC", ["exit 0", "TOPIC STATUS", "TOPIC Successful"]),
        (
            "--describe --group GROUP --offsets --verbose",
            ["exit 0", "GROUP TOPIC PARTITION LEADER-EPOCH START-OFFSET LAG", f"GROUP OTHER 0 0 {IDLE} 0"],
        ),
    ]


def reset(row: str) -> list[str]:
    """What `--reset-offsets` prints for one partition's new offset."""
    return ["GROUP TOPIC PARTITION NEW-OFFSET", f"GROUP {row}"]
