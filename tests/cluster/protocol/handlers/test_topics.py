"""CreateTopics, DeleteTopics and CreatePartitions on the in-process broker: what is created, grown and deleted,
and Kafka's error code for each refused entry, in every served version."""

from __future__ import annotations

import uuid
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
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from storage.config.broker_config import BrokerConfig
from tests.cluster.protocol.helpers import answer, run

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
    handler = CreateTopicsHandler(view, describer, NODE_ID, NUM_PARTITIONS)
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
        ("assigned-twice", ErrorCode.invalid_request),
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
    assignments = [{"partition_index": index, "broker_ids": [NODE_ID]} for index in (1, 0)]
    assert codes(create(view, 4, creatable("assigned", assignments=assignments))) == {"assigned": ErrorCode.none}
    assert run(view.topic("assigned")).partition_count == 2


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
    handler = CreatePartitionsHandler(view, NODE_ID)
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
    run(view.create_topic("checked", 1))
    response = grow(
        view,
        3,
        [
            {"name": "checked", "count": 4, "assignments": None},
            {"name": "checked-elsewhere", "count": 2, "assignments": [{"broker_ids": [7]}]},
            {"name": "checked-twice", "count": 2, "assignments": [{"broker_ids": [NODE_ID, 7]}]},
        ],
        validate_only=True,
    )
    assert [r.error_code for r in response.results] == [
        ErrorCode.none,
        ErrorCode.invalid_replica_assignment,
        ErrorCode.invalid_request,
    ]
    assert run(view.topic("checked")).partition_count == 1
