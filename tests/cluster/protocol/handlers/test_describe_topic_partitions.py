"""DescribeTopicPartitions without sockets, on an in-process broker, against Kafka's handler's rules: pages of at most
`response_partition_limit` partitions (and the broker's `max.request.partition.size.limit`) joined by their cursors
give exactly what Metadata describes, in topic-name order; a cursor's topic must be in the list; unknown and invalid
names, and topics the principal may not DESCRIBE, are answered with their errors, and never listed when every topic
is asked for."""

from __future__ import annotations

from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode

from actors.core.security.acl_bindings import AclOperation, ResourceType
from cluster.protocol.framing import decode_response, encode_response
from cluster.protocol.handlers.describe_topic_partitions import (
    DESCRIBE_TOPIC_PARTITIONS_KEY,
    DescribeTopicPartitionsHandler,
)
from cluster.protocol.handlers.metadata import METADATA_KEY, MetadataHandler
from cluster.protocol.messages import build
from cluster.protocol.security.access import AccessControl
from cluster.protocol.views.broker_view import BrokerEndpoint
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from cluster.protocol.views.security_view import SecurityView
from storage.config.broker_config import BrokerConfig
from tests.cluster.protocol.handlers.test_authorization import access_with, acl, ask
from tests.cluster.protocol.helpers import request, run

ENDPOINT = BrokerEndpoint(7, "broker.example", 19092)
TOPICS = {"alpha": 3, "beta": 1, "gamma": 4}


def created(view: InProcessBrokerView) -> None:
    for name, partitions in TOPICS.items():
        run(view.create_topic(name, partitions))


def describe(
    view: InProcessBrokerView,
    topics: list[str],
    limit: int = 2000,
    cursor: tuple[str, int] | None = None,
    broker_limit: int = 2000,
    access: AccessControl | None = None,
) -> Any:
    values = {
        "topics": [{"name": name} for name in topics],
        "response_partition_limit": limit,
        "cursor": None if cursor is None else {"topic_name": cursor[0], "partition_index": cursor[1]},
    }
    body = build(load_request_schema(DESCRIBE_TOPIC_PARTITIONS_KEY, 0), values)
    config = BrokerConfig.from_properties({"max.request.partition.size.limit": str(broker_limit)})
    response = run(DescribeTopicPartitionsHandler(view, ENDPOINT, config, access)(request(body)))
    encoded = encode_response(1, response)[4:]
    return decode_response(encoded, load_response_schema(DESCRIBE_TOPIC_PARTITIONS_KEY, 0))[1]


def metadata(view: InProcessBrokerView, topics: list[str]) -> dict[str, Any]:
    """What Metadata v12 describes of `topics`: each topic's id and partitions (index, leader, epoch, replicas, ISR)."""
    values = {
        "topics": [{"name": name, "topic_id": None} for name in topics],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }
    body = build(load_request_schema(METADATA_KEY, 12), values)
    response = run(MetadataHandler(view, ENDPOINT, False, 1)(request(body)))
    decoded = decode_response(encode_response(1, response)[4:], load_response_schema(METADATA_KEY, 12))[1]
    return {topic.name: (topic.topic_id, partition_rows(topic)) for topic in decoded.topics}


def partition_rows(topic: Any) -> list[tuple[Any, ...]]:
    return [
        (p.partition_index, p.leader_id, p.leader_epoch, tuple(p.replica_nodes), tuple(p.isr_nodes))
        for p in topic.partitions
    ]


def pages(view: InProcessBrokerView, topics: list[str], limit: int) -> tuple[dict[str, Any], int]:
    """Every page from the first cursor to the last: each topic's id and partitions, joined; and how many pages."""
    joined: dict[str, Any] = {}
    cursor = None
    count = 0
    while True:
        answer = describe(view, topics, limit, cursor)
        count += 1
        assert sum(len(topic.partitions) for topic in answer.topics) <= limit
        for topic in answer.topics:
            assert topic.error_code == ErrorCode.none
            assert all(p.eligible_leader_replicas == () and p.last_known_elr == () for p in topic.partitions)
            previous = joined.get(topic.name, (topic.topic_id, []))
            joined[topic.name] = (topic.topic_id, previous[1] + partition_rows(topic))
        if answer.next_cursor is None:
            return joined, count
        cursor = (answer.next_cursor.topic_name, answer.next_cursor.partition_index)


def test_pages_joined_by_their_cursors_are_what_metadata_describes(view: InProcessBrokerView) -> None:
    created(view)
    oracle = metadata(view, list(TOPICS))
    for limit, expected_pages in ((1, 8), (2, 4), (3, 3), (4, 2), (8, 1), (2000, 1)):
        joined, count = pages(view, ["gamma", "alpha", "beta"], limit)
        assert joined == oracle, limit
        assert list(joined) == sorted(TOPICS)
        assert count == expected_pages, limit


def test_cursors_point_at_the_first_partition_left_out(view: InProcessBrokerView) -> None:
    created(view)
    cut = describe(view, list(TOPICS), limit=2)
    assert [(t.name, len(t.partitions)) for t in cut.topics] == [("alpha", 2)]
    assert (cut.next_cursor.topic_name, cut.next_cursor.partition_index) == ("alpha", 2)
    filled = describe(view, list(TOPICS), limit=3)
    assert [(t.name, len(t.partitions)) for t in filled.topics] == [("alpha", 3)]
    assert (filled.next_cursor.topic_name, filled.next_cursor.partition_index) == ("beta", 0)
    broker_capped = describe(view, list(TOPICS), limit=2000, broker_limit=4)
    assert [(t.name, len(t.partitions)) for t in broker_capped.topics] == [("alpha", 3), ("beta", 1)]
    assert (broker_capped.next_cursor.topic_name, broker_capped.next_cursor.partition_index) == ("gamma", 0)
    resumed = describe(view, list(TOPICS), cursor=("gamma", 1))
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in resumed.topics] == [("gamma", [1, 2, 3])]
    assert resumed.next_cursor is None


def test_every_topic_is_asked_with_an_empty_list(view: InProcessBrokerView) -> None:
    created(view)
    answer = describe(view, [])
    names = [topic.name for topic in answer.topics]
    assert names == sorted(names) and set(TOPICS) <= set(names)
    internal = {topic.name for topic in answer.topics if topic.is_internal}
    assert internal == {name for name in names if name.startswith("__")}


def test_unknown_invalid_and_cursor_errors(view: InProcessBrokerView) -> None:
    created(view)
    answer = describe(view, ["beta", "never-made", "bad/name"])
    codes = {topic.name: (topic.error_code, topic.topic_id, topic.partitions) for topic in answer.topics}
    assert codes["never-made"] == (ErrorCode.unknown_topic_or_partition, None, ())
    assert codes["bad/name"] == (ErrorCode.invalid_topic_exception, None, ())
    assert codes["beta"][0] == ErrorCode.none
    refused = describe(view, ["alpha", "beta"], cursor=("gamma", 0))
    assert [(t.name, t.error_code) for t in refused.topics] == [
        ("alpha", ErrorCode.invalid_request),
        ("beta", ErrorCode.invalid_request),
    ]


def test_only_topics_the_principal_may_describe(view: InProcessBrokerView, security: SecurityView) -> None:
    created(view)
    access = access_with(security, acl(ResourceType.TOPIC, "alpha", AclOperation.DESCRIBE))
    handler = DescribeTopicPartitionsHandler(view, ENDPOINT, BrokerConfig.from_properties({}), access)

    def as_alice(topics: list[str]) -> Any:
        values = {"topics": [{"name": name} for name in topics], "response_partition_limit": 2000, "cursor": None}
        return ask(handler, DESCRIBE_TOPIC_PARTITIONS_KEY, values)

    named = as_alice(["alpha", "beta", "never-made"])
    assert [(t.name, t.error_code) for t in named.topics] == [
        ("alpha", ErrorCode.none),
        ("beta", ErrorCode.topic_authorization_failed),
        ("never-made", ErrorCode.topic_authorization_failed),
    ]
    assert named.topics[1].topic_id is None
    assert named.topics[0].topic_authorized_operations == 1 << AclOperation.DESCRIBE
    assert [t.name for t in as_alice([]).topics] == ["alpha"]
