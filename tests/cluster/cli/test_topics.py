"""`raybroker topics --describe`'s lines against kafka-topics.sh's documented layout (the oracle): the topic line,
one line per partition with leader, replicas and ISR by broker id, `Leader: none` for an offline partition, and the
`--under-replicated-partitions` / `--unavailable-partitions` filters, which print only the partitions they select
and no topic line. Built from descriptions directly, without Ray; the command end to end is in
test_broker_commands.py."""

from __future__ import annotations

from actors.clients.admin import ClusterDescription, PartitionDescription, TopicDescription
from cluster.cli.topics_command import describe_lines

# Three brokers on Ray nodes "node-a", "node-b", "node-c"; only a and b run a Kafka listener (node.id 1 and 2).
CLUSTER = ClusterDescription(("node-a", "node-b", "node-c"), {"node-a": 1, "node-b": 2})
LOG = ("/data/a", 0, 5, 5, 420, 1)


def partition(index: int, leader: str, replicas: tuple[str, ...], isr: tuple[str, ...]) -> PartitionDescription:
    numbers = ("", -1, -1, -1, -1, -1) if leader == "" else LOG
    return PartitionDescription(index, leader, *numbers, 3, replicas, isr)


DESCRIPTION = TopicDescription(
    "orders",
    {"retention.ms": "60000", "cleanup.policy": "compact"},
    [
        partition(0, "node-a", ("node-a", "node-b", "node-c"), ("node-a", "node-b", "node-c")),
        partition(1, "node-b", ("node-b", "node-c", "node-a"), ("node-b", "node-a")),
        partition(2, "", ("node-c", "node-a", "node-b"), ("node-gone",)),
        partition(3, "node-gone", ("node-gone", "node-a", "node-b"), ("node-gone", "node-a", "node-b")),
    ],
    3,
    "nigi0dJNRASJVYh5eRn0Vg",
)


def kafka_fields(line: str) -> list[tuple[str, str]]:
    """The line's `Name: value` fields, in order, as kafka-topics separates them (tabs)."""
    return [tuple(field.split(": ", 1)) for field in line.strip("\t").split("\t")]  # type: ignore[misc]


def test_the_topic_line_has_kafkas_fields_in_kafkas_order() -> None:
    assert describe_lines(DESCRIPTION, CLUSTER)[0] == (
        "Topic: orders\tTopicId: nigi0dJNRASJVYh5eRn0Vg\tPartitionCount: 4\tReplicationFactor: 3"
        "\tConfigs: cleanup.policy=compact,retention.ms=60000"
    )


def test_each_partition_line_starts_with_kafkas_fields_naming_brokers_by_node_id() -> None:
    lines = describe_lines(DESCRIPTION, CLUSTER)[1:]
    assert all(line.startswith("\tTopic: orders\tPartition: ") for line in lines)
    assert [kafka_fields(line)[:5] for line in lines] == [
        [("Topic", "orders"), ("Partition", "0"), ("Leader", "1"), ("Replicas", "1,2,node-c"), ("Isr", "1,2,node-c")],
        [("Topic", "orders"), ("Partition", "1"), ("Leader", "2"), ("Replicas", "2,node-c,1"), ("Isr", "2,1")],
        [("Topic", "orders"), ("Partition", "2"), ("Leader", "none"), ("Replicas", "node-c,1,2"), ("Isr", "node-gone")],
        [
            ("Topic", "orders"),
            ("Partition", "3"),
            ("Leader", "node-gone"),
            ("Replicas", "node-gone,1,2"),
            ("Isr", "node-gone,1,2"),
        ],
    ]


def test_a_led_partition_line_goes_on_with_its_leaders_log_and_an_offline_one_ends_at_its_isr() -> None:
    lines = describe_lines(DESCRIPTION, CLUSTER)[1:]
    assert dict(kafka_fields(lines[0])[5:]) == {
        "Node": "node-a",
        "LogDir": "/data/a",
        "LogStartOffset": "0",
        "LogEndOffset": "5",
        "HighWatermark": "5",
        "SizeBytes": "420",
        "Segments": "1",
    }
    assert len(kafka_fields(lines[2])) == 5


def test_under_replicated_partitions_are_those_with_fewer_in_sync_than_assigned() -> None:
    lines = describe_lines(DESCRIPTION, CLUSTER, under_replicated=True)
    assert [kafka_fields(line)[1] for line in lines] == [("Partition", "1"), ("Partition", "2")]


def test_unavailable_partitions_are_those_without_a_running_leader() -> None:
    lines = describe_lines(DESCRIPTION, CLUSTER, unavailable=True)
    assert [kafka_fields(line)[1] for line in lines] == [("Partition", "2"), ("Partition", "3")]


def test_both_filters_select_what_either_selects() -> None:
    lines = describe_lines(DESCRIPTION, CLUSTER, under_replicated=True, unavailable=True)
    assert [kafka_fields(line)[1][1] for line in lines] == ["1", "2", "3"]


def test_a_healthy_topic_has_nothing_to_report_under_either_filter() -> None:
    healthy = TopicDescription("ok", {}, [partition(0, "node-a", ("node-a",), ("node-a",))], 1)
    assert describe_lines(healthy, CLUSTER, under_replicated=True, unavailable=True) == []
    assert describe_lines(healthy, CLUSTER)[0] == "Topic: ok\tPartitionCount: 1\tReplicationFactor: 1\tConfigs: "
