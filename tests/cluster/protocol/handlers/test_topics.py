"""CreateTopics, DeleteTopics and CreatePartitions on the in-process broker: what is created, grown and deleted,
and Kafka's error code for each refused entry, in every served version."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from cluster.protocol.config_entries import ConfigDescriber, ConfigSource
from cluster.protocol.handlers.topics import (
    CREATE_PARTITIONS_KEY,
    CREATE_TOPICS_KEY,
    DELETE_TOPICS_KEY,
    CreatePartitionsHandler,
    CreateTopicsHandler,
    DeleteTopicsHandler,
)
from cluster.protocol.router import SERVED
from cluster.protocol.views.broker_view import BrokerEndpoint
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from storage.config.broker_config import BrokerConfig
from tests.cluster.protocol.helpers import answer, run, start_broker

NODE_ID = 0
NUM_PARTITIONS = 3


def versions(api_key: int) -> range:
    return range(SERVED[api_key].min_version, SERVED[api_key].max_version + 1)


def creatable(name: str, partitions: int = -1, factor: int = -1, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "num_partitions": partitions,
        "replication_factor": factor,
        "assignments": [],
        "configs": [],
    } | extra


def create(view: InProcessBrokerView, version: int, *topics: dict[str, Any], validate_only: bool = False) -> Any:
    describer = ConfigDescriber(BrokerConfig(num_partitions=NUM_PARTITIONS), {"num.partitions"})
    handler = CreateTopicsHandler(view, describer, NUM_PARTITIONS)
    return answer(
        handler, CREATE_TOPICS_KEY, version, {"topics": topics, "timeout": 30000, "validate_only": validate_only}
    )


def codes(response: Any) -> dict[str, ErrorCode]:
    return {topic.name: topic.error_code for topic in response.topics}


@pytest.mark.parametrize("version", versions(CREATE_TOPICS_KEY))
def test_create_takes_the_default_partition_count_and_the_given_configs(
    view: InProcessBrokerView, version: int
) -> None:
    config = [{"name": "retention.ms", "value": "1000"}, {"name": "cleanup.policy", "value": "compact"}]
    response = create(view, version, creatable("defaulted"), creatable("explicit", 2, 1, configs=config))
    assert codes(response) == {"defaulted": ErrorCode.none, "explicit": ErrorCode.none}
    assert run(view.topic("defaulted")).partition_count == NUM_PARTITIONS
    assert run(view.topic("explicit")).partition_count == 2
    assert run(view.topic_config("explicit")) == {"retention.ms": "1000", "cleanup.policy": "compact"}
    if version >= 5:
        explicit = response.topics[1]
        assert (explicit.num_partitions, explicit.replication_factor) == (2, 1)
        configs = {entry.name: (entry.value, entry.config_source) for entry in explicit.configs}
        assert configs["retention.ms"] == ("1000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
        assert configs["segment.bytes"] == ("1073741824", ConfigSource.DEFAULT_CONFIG)
    if version >= 7:
        assert [topic.topic_id for topic in response.topics] == [
            run(view.topic("defaulted")).topic_id,
            run(view.topic("explicit")).topic_id,
        ]
        assert None not in [topic.topic_id for topic in response.topics]


def test_validate_only_checks_and_creates_nothing(view: InProcessBrokerView) -> None:
    response = create(
        view, 7, creatable("checked", 2), creatable("bad", configs=[{"name": "x", "value": "1"}]), validate_only=True
    )
    assert [topic.topic_id for topic in response.topics] == [None, None]
    assert codes(response) == {"checked": ErrorCode.none, "bad": ErrorCode.invalid_config}
    assert run(view.topics()) == {}


def test_each_refused_entry_gets_kafkas_code(view: InProcessBrokerView) -> None:
    create(view, 7, creatable("existing"))
    response = create(
        view,
        7,
        creatable("existing"),
        creatable("bad name!"),
        creatable("unknown-config", configs=[{"name": "no.such.config", "value": "1"}]),
        creatable("out-of-range", configs=[{"name": "segment.bytes", "value": "1"}]),
        creatable("null-config", configs=[{"name": "retention.ms", "value": None}]),
        creatable("zero-partitions", 0),
        creatable("replicated", 1, 3),
        creatable("zero-replicas", 1, 0),
        creatable("twice"),
        creatable("twice"),
        creatable("assigned-and-counted", 2, assignments=[{"partition_index": 0, "broker_ids": [NODE_ID]}]),
        creatable("assigned-elsewhere", assignments=[{"partition_index": 0, "broker_ids": [NODE_ID + 1]}]),
        creatable("assigned-twice", assignments=[{"partition_index": 0, "broker_ids": [NODE_ID, NODE_ID + 1]}]),
    )
    assert [(topic.name, topic.error_code) for topic in response.topics] == [
        ("existing", ErrorCode.topic_already_exists),
        ("bad name!", ErrorCode.invalid_topic_exception),
        ("unknown-config", ErrorCode.invalid_config),
        ("out-of-range", ErrorCode.invalid_config),
        ("null-config", ErrorCode.invalid_config),
        ("zero-partitions", ErrorCode.invalid_partitions),
        ("replicated", ErrorCode.invalid_replication_factor),
        ("zero-replicas", ErrorCode.invalid_replication_factor),
        ("twice", ErrorCode.invalid_request),
        ("twice", ErrorCode.invalid_request),
        ("assigned-and-counted", ErrorCode.invalid_request),
        ("assigned-elsewhere", ErrorCode.invalid_replica_assignment),
        ("assigned-twice", ErrorCode.invalid_replica_assignment),
    ]
    assert all(topic.error_message for topic in response.topics)
    assert set(run(view.topics())) == {"existing"}


@pytest.mark.parametrize("version", versions(CREATE_TOPICS_KEY))
def test_a_replication_factor_beyond_the_brokers_is_refused_with_the_brokers_reason(
    view: InProcessBrokerView, version: int
) -> None:
    """The view is one broker: 2 replicas cannot be placed (INVALID_REPLICATION_FACTOR, the view's message); 1 and
    -1 (the default) can, and the v5+ answer says how many each partition got."""
    response = create(view, version, creatable("two", 1, 2), creatable("one", 1, 1), creatable("default", 1))
    assert codes(response) == {
        "two": ErrorCode.invalid_replication_factor,
        "one": ErrorCode.none,
        "default": ErrorCode.none,
    }
    assert "replication factor 2" in response.topics[0].error_message
    assert set(run(view.topics())) == {"one", "default"}
    if version >= 5:
        assert [topic.replication_factor for topic in response.topics[1:]] == [1, 1]


def test_manual_assignments_give_the_partition_count(view: InProcessBrokerView) -> None:
    run(view.announce(BrokerEndpoint(NODE_ID, "node-0", 9092)))
    assignments = [{"partition_index": index, "broker_ids": [NODE_ID]} for index in (1, 0)]
    assert codes(create(view, 4, creatable("assigned", assignments=assignments))) == {"assigned": ErrorCode.none}
    assert run(view.topic("assigned")).partition_count == 2


@pytest.fixture
def two_brokers(tmp_path: Path) -> Iterator[InProcessBrokerView]:
    """A broker on two nodes, `node.id` 10 and 11; the first node's listener's view."""
    running = start_broker(tmp_path / "two", nodes=2)
    try:
        views = {node: InProcessBrokerView(running, node) for node in ("node-0", "node-1")}
        for broker_id, (node, view) in enumerate(views.items(), start=10):
            run(view.announce(BrokerEndpoint(broker_id, node, 9092)))
        yield views["node-0"]
    finally:
        running.close()


def test_manual_assignments_place_each_replica_where_asked_and_are_checked_as_kafka_checks_them(
    two_brokers: InProcessBrokerView,
) -> None:
    """Kafka's controller's rules and messages: replicas (the first leading) on the named brokers; partitions named
    twice, numbered with a gap, an empty list, a broker twice or unknown, or partitions of unequal sizes are
    INVALID_REPLICA_ASSIGNMENT; CreatePartitions' assignments give one list per new partition with the topic's
    replication factor."""

    def assigned(name: str, *lists: list[int], indexes: list[int] | None = None) -> dict[str, Any]:
        numbers = indexes if indexes is not None else range(len(lists))
        entries = [{"partition_index": i, "broker_ids": brokers} for i, brokers in zip(numbers, lists, strict=True)]
        return creatable(name, assignments=entries)

    response = create(
        two_brokers,
        7,
        assigned("uneven", [11, 10], [10, 11], [11]),
        assigned("placed", [11, 10], [10, 11]),
        assigned("gap", [10], [11], indexes=[0, 2]),
        assigned("repeated", [10], [11], indexes=[0, 0]),
        assigned("empty", []),
        assigned("doubled", [10, 10]),
        assigned("unknown", [10, 12]),
    )
    messages = {(topic.name, topic.error_code): topic.error_message for topic in response.topics}
    uneven = (
        "The manual partition assignment includes a partition with 1 replica(s), but this is not consistent with "
        "previous partitions, which have 2 replica(s)."
    )
    assert messages == {
        ("uneven", ErrorCode.invalid_replica_assignment): uneven,
        ("placed", ErrorCode.none): None,
        ("gap", ErrorCode.invalid_replica_assignment): (
            "Attempted to create topic with non-consecutive partition ids: [0, 2] are not numbered 0..1"
        ),
        ("repeated", ErrorCode.invalid_replica_assignment): (
            "Found multiple manual partition assignments for partition 0"
        ),
        ("empty", ErrorCode.invalid_replica_assignment): (
            "The manual partition assignment includes an empty replica list."
        ),
        ("doubled", ErrorCode.invalid_replica_assignment): (
            "The manual partition assignment includes the broker 10 more than once."
        ),
        ("unknown", ErrorCode.invalid_replica_assignment): (
            "The manual partition assignment includes broker 12, but no such broker is registered."
        ),
    } or [r.error_code for r in response.topics]
    placed = run(two_brokers.topic("placed"))
    assert [(p.leader, p.replicas) for p in placed.partitions] == [(11, (11, 10)), (10, (10, 11))]

    grown = grow(
        two_brokers,
        3,
        [{"name": "placed", "count": 4, "assignments": [{"broker_ids": [10, 11]}]}],
    )
    assert [(r.error_code, r.error_message) for r in grown.results] == [
        (
            ErrorCode.invalid_replica_assignment,
            "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified.",
        )
    ]
    grown = grow(two_brokers, 3, [{"name": "placed", "count": 3, "assignments": [{"broker_ids": [10]}]}])
    assert [(r.error_code, r.error_message) for r in grown.results] == [(ErrorCode.invalid_replica_assignment, uneven)]
    grown = grow(two_brokers, 3, [{"name": "placed", "count": 3, "assignments": [{"broker_ids": [11, 10]}]}])
    assert [r.error_code for r in grown.results] == [ErrorCode.none]
    placed = run(two_brokers.topic("placed"))
    assert [p.replicas for p in placed.partitions] == [(11, 10), (10, 11), (11, 10)]


def delete(
    view: InProcessBrokerView,
    version: int,
    names: list[str | None],
    enabled: bool = True,
    ids: list[uuid.UUID | None] | None = None,
) -> Any:
    values: dict[str, Any] = {"timeout": 30000}
    if version >= 6:
        values["topics"] = [
            {"name": name, "topic_id": topic_id}
            for name, topic_id in zip(names, ids or [None] * len(names), strict=True)
        ]
    else:
        values["topic_names"] = names
    return answer(DeleteTopicsHandler(view, enabled), DELETE_TOPICS_KEY, version, values)


@pytest.mark.parametrize("version", versions(DELETE_TOPICS_KEY))
def test_delete_removes_the_topic_and_names_unknown_ones(view: InProcessBrokerView, version: int) -> None:
    doomed = run(view.create_topic("doomed", 2)).topic_id
    response = delete(view, version, ["doomed", "never-was"])
    assert [(r.name, r.error_code) for r in response.responses] == [
        ("doomed", ErrorCode.none),
        ("never-was", ErrorCode.unknown_topic_or_partition),
    ]
    if version >= 6:
        assert [r.topic_id for r in response.responses] == [doomed, None]
    assert run(view.topics()) == {}


def test_delete_by_topic_id_as_kafkas_controller(view: InProcessBrokerView) -> None:
    by_id = run(view.create_topic("by-id", 1)).topic_id
    kept = run(view.create_topic("kept", 1)).topic_id
    unknown = uuid.UUID(int=12345)
    response = delete(view, 6, [None, None, "kept", None], ids=[by_id, unknown, kept, None])
    assert [(r.name, r.topic_id, r.error_code) for r in response.responses] == [
        ("by-id", by_id, ErrorCode.none),
        (None, unknown, ErrorCode.unknown_topic_id),
        ("kept", kept, ErrorCode.invalid_request),  # a name and an id
        (None, None, ErrorCode.invalid_request),  # neither
    ]
    assert set(run(view.topics())) == {"kept"}
    # The topic created again under its name has a new id: the old one no longer deletes it.
    run(view.create_topic("by-id", 1))
    assert delete(view, 6, [None], ids=[by_id]).responses[0].error_code == ErrorCode.unknown_topic_id
    assert set(run(view.topics())) == {"kept", "by-id"}


def test_delete_is_refused_when_disabled(view: InProcessBrokerView) -> None:
    run(view.create_topic("kept", 1))
    response = delete(view, 6, ["kept", None], enabled=False)
    assert [r.error_code for r in response.responses] == [ErrorCode.topic_deletion_disabled] * 2
    assert set(run(view.topics())) == {"kept"}


def grow(view: InProcessBrokerView, version: int, topics: list[dict[str, Any]], validate_only: bool = False) -> Any:
    handler = CreatePartitionsHandler(view)
    return answer(
        handler, CREATE_PARTITIONS_KEY, version, {"topics": topics, "timeout": 30000, "validate_only": validate_only}
    )


@pytest.mark.parametrize("version", versions(CREATE_PARTITIONS_KEY))
def test_create_partitions_grows_only(view: InProcessBrokerView, version: int) -> None:
    run(view.create_topic("grown", 1))
    run(view.create_topic("kept", 2))
    response = grow(
        view,
        version,
        [
            {"name": "grown", "count": 3, "assignments": None},
            {"name": "kept", "count": 2, "assignments": None},
            {"name": "missing", "count": 2, "assignments": None},
        ],
    )
    assert [(r.name, r.error_code) for r in response.results] == [
        ("grown", ErrorCode.none),
        ("kept", ErrorCode.invalid_partitions),
        ("missing", ErrorCode.unknown_topic_or_partition),
    ]
    assert run(view.topic("grown")).partition_count == 3
    assert run(view.topic("kept")).partition_count == 2


def test_create_partitions_validate_only_and_assignments(view: InProcessBrokerView) -> None:
    """A validate-only growth changes nothing, with or without an assignment; an assignment for a topic that does
    not exist answers UNKNOWN_TOPIC_OR_PARTITION, as Kafka's controller looks the topic up first."""
    run(view.announce(BrokerEndpoint(NODE_ID, "node-0", 9092)))
    run(view.create_topic("checked", 1))
    for assignments in (None, [{"broker_ids": [NODE_ID]}, {"broker_ids": [NODE_ID]}, {"broker_ids": [NODE_ID]}]):
        response = grow(
            view,
            3,
            [
                {"name": "checked", "count": 4, "assignments": assignments},
                {"name": "missing", "count": 2, "assignments": [{"broker_ids": [7]}]},
            ],
            validate_only=True,
        )
        assert [r.error_code for r in response.results] == [ErrorCode.none, ErrorCode.unknown_topic_or_partition]
    assert run(view.topic("checked")).partition_count == 1
