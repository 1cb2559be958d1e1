"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs on the in-process broker: values, sources and synonyms
as Kafka reports them, Kafka's replace vs incremental semantics, validate_only, and the error of each refused
resource."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from cluster.protocol.config_entries import ConfigDescriber, ConfigSource, ConfigType
from cluster.protocol.handlers.configs import (
    ALTER_CONFIGS_KEY,
    DESCRIBE_CONFIGS_KEY,
    INCREMENTAL_ALTER_CONFIGS_KEY,
    LIST_CONFIG_RESOURCES_KEY,
    AlterConfigsHandler,
    DescribeConfigsHandler,
    ListConfigResourcesHandler,
    ResourceType,
)
from cluster.protocol.router import SERVED
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from storage.config.broker_config import BrokerConfig
from storage.config.group_config import LATER_GROUP_CONFIG_NAMES
from tests.cluster.protocol.helpers import answer, leader_log, run

NODE_ID = 2
BROKER_PROPERTIES = {"log.retention.hours": "24", "num.partitions": "4"}
BROKER_CONFIG = BrokerConfig.from_properties(BROKER_PROPERTIES)
TOPIC, BROKER = int(ResourceType.TOPIC), int(ResourceType.BROKER)
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def versions(api_key: int) -> range:
    return range(SERVED[api_key].min_version, SERVED[api_key].max_version + 1)


def describe(view: InProcessBrokerView, version: int, *resources: tuple[int, str, list[str] | None]) -> Any:
    handler = DescribeConfigsHandler(view, ConfigDescriber(BROKER_CONFIG, BROKER_PROPERTIES), NODE_ID)
    values = {
        "resources": [
            {"resource_type": kind, "resource_name": name, "configuration_keys": keys} for kind, name, keys in resources
        ],
        "include_synonyms": True,
        "include_documentation": True,
    }
    return answer(handler, DESCRIBE_CONFIGS_KEY, version, values)


@pytest.mark.parametrize("version", versions(DESCRIBE_CONFIGS_KEY))
def test_a_topic_reports_its_overrides_and_the_brokers_defaults(view: InProcessBrokerView, version: int) -> None:
    run(view.create_topic("described", 1, {"segment.bytes": "1048576"}))
    (result,) = describe(view, version, (TOPIC, "described", None)).results
    assert result.error_code == ErrorCode.none
    entries = {entry.name: entry for entry in result.configs}
    assert len(entries) == len(BROKER_CONFIG.log_config.to_properties())
    segment, retention, policy = entries["segment.bytes"], entries["retention.ms"], entries["cleanup.policy"]
    assert (segment.value, segment.config_source, segment.read_only) == (
        "1048576",
        ConfigSource.DYNAMIC_TOPIC_CONFIG,
        False,
    )
    assert [(s.name, s.value, s.source) for s in segment.synonyms] == [
        ("segment.bytes", "1048576", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ("log.segment.bytes", "1073741824", ConfigSource.DEFAULT_CONFIG),
    ]
    # log.retention.hours=24 in the broker's properties: a static broker default, in ms.
    assert (retention.value, retention.config_source) == (str(24 * 3_600_000), ConfigSource.STATIC_BROKER_CONFIG)
    assert [(s.name, s.value, s.source) for s in retention.synonyms] == [
        ("log.retention.hours", "24", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    ]
    assert (policy.value, policy.config_source) == ("delete", ConfigSource.DEFAULT_CONFIG)
    if version >= 3:
        assert (policy.config_type, segment.config_type) == (ConfigType.LIST, ConfigType.INT)
        assert segment.documentation


def test_the_broker_reports_its_keys_read_only_and_keys_narrow_the_answer(view: InProcessBrokerView) -> None:
    response = describe(view, 4, (BROKER, str(NODE_ID), ["num.partitions", "delete.topic.enable", "no.such.key"]))
    (result,) = response.results
    assert [(e.name, e.value, e.config_source, e.read_only) for e in result.configs] == [
        ("num.partitions", "4", ConfigSource.STATIC_BROKER_CONFIG, True),
        ("delete.topic.enable", "true", ConfigSource.DEFAULT_CONFIG, True),
    ]


def test_refused_resources_get_their_own_codes(view: InProcessBrokerView) -> None:
    response = describe(
        view, 4, (TOPIC, "missing", None), (TOPIC, "bad name!", None), (BROKER, "99", None), (8, "root", None)
    )
    assert [r.error_code for r in response.results] == [
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.invalid_topic_exception,
        ErrorCode.invalid_request,
        ErrorCode.invalid_request,
    ]


def alter(
    view: InProcessBrokerView,
    version: int,
    resources: list[dict[str, Any]],
    incremental: bool,
    validate_only: bool = False,
) -> Any:
    handler = AlterConfigsHandler(view, NODE_ID, BROKER_CONFIG.log_config, incremental=incremental)
    key = INCREMENTAL_ALTER_CONFIGS_KEY if incremental else ALTER_CONFIGS_KEY
    return answer(handler, key, version, {"resources": resources, "validate_only": validate_only})


def topic(name: str, *configs: dict[str, Any]) -> dict[str, Any]:
    return {"resource_type": TOPIC, "resource_name": name, "configs": list(configs)}


@pytest.mark.parametrize("version", versions(ALTER_CONFIGS_KEY))
def test_alter_configs_replaces_every_override(view: InProcessBrokerView, version: int) -> None:
    run(view.create_topic("replaced", 1, {"retention.ms": "1000", "segment.bytes": "1048576"}))
    response = alter(view, version, [topic("replaced", {"name": "retention.ms", "value": "2000"})], incremental=False)
    assert [r.error_code for r in response.responses] == [ErrorCode.none]
    assert run(view.topic_config("replaced")) == {"retention.ms": "2000"}
    assert leader_log(view, "replaced", 0).config.retention_ms == 2000


@pytest.mark.parametrize("version", versions(INCREMENTAL_ALTER_CONFIGS_KEY))
def test_incremental_alter_sets_deletes_appends_and_subtracts(view: InProcessBrokerView, version: int) -> None:
    run(view.create_topic("changed", 1, {"retention.ms": "1000", "segment.bytes": "1048576"}))
    operations = [
        {"name": "retention.ms", "config_operation": SET, "value": "5000"},
        {"name": "segment.bytes", "config_operation": DELETE, "value": None},
        {"name": "cleanup.policy", "config_operation": APPEND, "value": "compact"},
    ]
    response = alter(view, version, [topic("changed", *operations)], incremental=True)
    assert [r.error_code for r in response.responses] == [ErrorCode.none]
    assert run(view.topic_config("changed")) == {"retention.ms": "5000", "cleanup.policy": "delete,compact"}
    subtract = {"name": "cleanup.policy", "config_operation": SUBTRACT, "value": "delete"}
    alter(view, version, [topic("changed", subtract)], incremental=True)
    assert run(view.topic_config("changed"))["cleanup.policy"] == "compact"


def test_validate_only_changes_nothing(view: InProcessBrokerView) -> None:
    run(view.create_topic("checked", 1, {"retention.ms": "1000"}))
    for incremental in (False, True):
        change = {"name": "retention.ms", "value": "9"} | ({"config_operation": SET} if incremental else {})
        response = alter(view, 1, [topic("checked", change)], incremental, validate_only=True)
        assert [r.error_code for r in response.responses] == [ErrorCode.none]
    assert run(view.topic_config("checked")) == {"retention.ms": "1000"}


def test_each_refused_resource_gets_kafkas_code(view: InProcessBrokerView) -> None:
    refused = [
        ({"name": "no.such.config", "config_operation": SET, "value": "1"}, ErrorCode.invalid_config),
        ({"name": "segment.bytes", "config_operation": SET, "value": "1"}, ErrorCode.invalid_config),
        ({"name": "retention.ms", "config_operation": SET, "value": None}, ErrorCode.invalid_request),
        ({"name": "retention.ms", "config_operation": APPEND, "value": "1"}, ErrorCode.invalid_config),
        ({"name": "retention.ms", "config_operation": 9, "value": "1"}, ErrorCode.invalid_request),
    ]
    for index in range(len(refused)):
        run(view.create_topic(f"target-{index}", 1))
    run(view.create_topic("twice", 1))
    resources = [topic(f"target-{index}", change) for index, (change, _) in enumerate(refused)]
    resources += [
        topic("missing", {"name": "retention.ms", "config_operation": SET, "value": "1"}),
        topic("twice"),
        topic("twice"),
        {
            "resource_type": BROKER,
            "resource_name": str(NODE_ID),
            "configs": [{"name": "log.retention.hours", "config_operation": SET, "value": "1"}],
        },
    ]
    response = alter(view, 1, resources, incremental=True)
    assert [r.error_code for r in response.responses] == [
        *(code for _, code in refused),
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.invalid_request,
        ErrorCode.invalid_request,
        ErrorCode.invalid_request,
    ]
    assert all(run(view.topic_config(f"target-{index}")) == {} for index in range(len(refused)))


def test_a_groups_configs_are_described_set_and_refused_as_kafka_answers(view: InProcessBrokerView) -> None:
    group = int(ResourceType.GROUP)
    fresh = describe(view, 4, (group, "g", None)).results[0]
    # Kafka 4.2's eleven group keys, Kafka 4.3's share.delivery.count.limit and Kafka 4.4's two dead-letter keys.
    assert (fresh.error_code, fresh.error_message, len(fresh.configs)) == (ErrorCode.none, "", 14)
    assert {entry.name for entry in fresh.configs} >= LATER_GROUP_CONFIG_NAMES
    assert {entry.config_source for entry in fresh.configs} == {ConfigSource.DEFAULT_CONFIG}
    refused: list[tuple[list[tuple[str, int, str | None]], ErrorCode]] = [
        ([("share.record.lock.duration.ms", SET, "500")], ErrorCode.invalid_config),
        ([("no.such.config", SET, "1")], ErrorCode.invalid_config),
        ([("share.auto.offset.reset", APPEND, "earliest")], ErrorCode.invalid_config),
        ([("share.auto.offset.reset", SET, None)], ErrorCode.invalid_request),
        (
            [("share.auto.offset.reset", SET, "earliest"), ("share.auto.offset.reset", DELETE, None)],
            ErrorCode.invalid_request,
        ),
    ]
    for changes, code in refused:
        configs = [{"name": name, "config_operation": operation, "value": value} for name, operation, value in changes]
        response = alter(view, 1, [{"resource_type": group, "resource_name": "g", "configs": configs}], True)
        assert response.responses[0].error_code == code, changes
    assert run(view.group_config("g"))[0] == {}
    configs = [{"name": "share.auto.offset.reset", "config_operation": SET, "value": "earliest"}]
    assert (
        alter(view, 1, [{"resource_type": group, "resource_name": "g", "configs": configs}], True)
        .responses[0]
        .error_code
        == 0
    )
    # AlterConfigs replaces the group's configs with those given.
    replaced = [{"name": "share.session.timeout.ms", "value": "50000"}]
    alter(view, 2, [{"resource_type": group, "resource_name": "g", "configs": replaced}], False)
    entries = {entry.name: entry for entry in describe(view, 4, (group, "g", None)).results[0].configs}
    assert (entries["share.session.timeout.ms"].value, entries["share.session.timeout.ms"].config_source) == (
        "50000",
        ConfigSource.GROUP_CONFIG,
    )
    assert (entries["share.auto.offset.reset"].value, entries["share.auto.offset.reset"].config_source) == (
        "latest",
        ConfigSource.DEFAULT_CONFIG,
    )


def test_list_config_resources_names_configured_groups_topics_and_brokers_as_kafka(view: InProcessBrokerView) -> None:
    run(view.create_topic("orders", 1))
    run(view.set_group_config("set", {"share.auto.offset.reset": "earliest"}))
    run(view.set_group_config("emptied", {"share.auto.offset.reset": "earliest"}))
    run(view.set_group_config("emptied", {}))
    handler = ListConfigResourcesHandler(view)

    def listed(version: int, types: list[int] | None) -> tuple[int, list[tuple[int, str]]]:
        listed = answer(handler, LIST_CONFIG_RESOURCES_KEY, version, {} if types is None else {"resource_types": types})
        return listed.error_code, [(r.resource_type, r.resource_name) for r in listed.config_resources]

    group = int(ResourceType.GROUP)
    assert listed(1, [group]) == (ErrorCode.none, [(group, "emptied"), (group, "set")])
    code, every = listed(1, [])
    assert code == ErrorCode.none and {(group, "set"), (TOPIC, "orders")} <= set(every)
    assert listed(1, [group, 99]) == (ErrorCode.unsupported_version, [])
    # v0 is ListClientMetricsResources: raybroker has no client metrics subscriptions.
    assert listed(0, None) == (ErrorCode.none, [])
