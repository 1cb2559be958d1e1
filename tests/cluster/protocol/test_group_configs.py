"""Group configs, the GROUP config resource (type 32), against Apache Kafka 4.2 (`kafka4`) and a raybroker listener over
the in-process broker with the same group settings (`share_listener`): the same sequence on both, compared.

Over raw requests: DescribeConfigs (v4, synonyms and documentation) of a fresh group lists Kafka 4.2's eleven group
keys with the broker's values; then IncrementalAlterConfigs and AlterConfigs that Kafka refuses (a bad
`share.auto.offset.reset`, lock durations under the key's minimum and over `group.share.max.record.lock.duration.ms`,
an unknown key, APPEND, a null value, a key named twice, the default group "") answer Kafka's codes and messages, and a
validate_only set is accepted; none of them changes anything, as the DescribeConfigs after one accepted set shows.
ListConfigResources (v1) names the group among the GROUP resources, and answers UNSUPPORTED_VERSION for an unknown
type. Then Kafka 4.2's own `kafka-configs.sh --entity-type groups` adds `share.auto.offset.reset=earliest`, describes
the group, deletes the lock duration, and describes a group never configured ("doesn't exist"), printing the same on
both. Last, records produced before any member exists are read by a Java `KafkaShareConsumer` of that group
(`java/ShareGroupMember.java`): the group's `share.auto.offset.reset=earliest` starts its share-partition at the log
start, where Kafka's default (`latest`) would skip them.

Kafka applies a config change to its brokers' metadata a moment after answering, so a DescribeConfigs that must see
a change is asked again until it does (at most `DEADLINE_S`)."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.kafka_broker import KAFKA_4_VERSION
from cluster.protocol.client import WireClient
from storage.config.group_config import LATER_GROUP_CONFIG_NAMES
from tests.cluster.protocol.kafka_tools import CONFIGS, printed_lines, run_kafka_tool
from tests.cluster.protocol.test_share_group_clients import ShareMember, produce

pytestmark = pytest.mark.kafka

DEADLINE_S = 60.0
DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS, LIST_CONFIG_RESOURCES = 32, 33, 44, 74
GROUP = 32
SET, DELETE, APPEND = 0, 1, 2
RESET, LOCK = "share.auto.offset.reset", "share.record.lock.duration.ms"
EARLY_RECORDS = [f"early-{index}" for index in range(5)]


def describe(client: WireClient, group: str, later_keys: bool = False) -> list[tuple[Any, ...]]:
    """Every entry DescribeConfigs v4 gives for the group, with its synonyms and documentation, and the resource's
    code and message first; Kafka 4.2's keys only unless `later_keys` (raybroker also lists Kafka 4.3's
    `share.delivery.count.limit`)."""
    answer = client.request(
        DESCRIBE_CONFIGS,
        4,
        {
            "resources": [{"resource_type": GROUP, "resource_name": group, "configuration_keys": None}],
            "include_synonyms": True,
            "include_documentation": True,
        },
    )
    (result,) = answer.results
    return [
        (result.error_code, result.error_message),
        *(
            (
                entry.name,
                entry.value,
                entry.read_only,
                entry.config_source,
                entry.is_sensitive,
                entry.config_type,
                [(synonym.name, synonym.value, synonym.source) for synonym in entry.synonyms],
                entry.documentation,
            )
            for entry in result.configs
            if later_keys or entry.name not in LATER_GROUP_CONFIG_NAMES
        ),
    ]


def alter(client: WireClient, group: str, changes: list[tuple[str, int, str | None]], validate_only: bool) -> Any:
    """IncrementalAlterConfigs v1 of `changes` (name, operation, value) on the group: its code and message."""
    configs = [{"name": name, "config_operation": operation, "value": value} for name, operation, value in changes]
    answer = client.request(
        INCREMENTAL_ALTER_CONFIGS,
        1,
        {
            "resources": [{"resource_type": GROUP, "resource_name": group, "configs": configs}],
            "validate_only": validate_only,
        },
    )
    (response,) = answer.responses
    return response.error_code, response.error_message


def replace_configs(client: WireClient, group: str, configs: dict[str, str]) -> Any:
    """AlterConfigs v2 (the legacy replacement) of the group's configs: its code and message."""
    values = [{"name": name, "value": value} for name, value in configs.items()]
    answer = client.request(
        ALTER_CONFIGS,
        2,
        {"resources": [{"resource_type": GROUP, "resource_name": group, "configs": values}], "validate_only": False},
    )
    (response,) = answer.responses
    return response.error_code, response.error_message


def described_once(
    client: WireClient, group: str, done: Callable[[dict[str, Any]], bool], later_keys: bool = False
) -> list[tuple[Any, ...]]:
    """The group's DescribeConfigs (`describe`) once `done(entries by name)` holds (see the module docstring)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        entries = describe(client, group, later_keys)
        if done({entry[0]: entry for entry in entries[1:]}) or time.monotonic() > deadline:
            return entries
        time.sleep(0.2)


def source_of(name: str) -> Callable[[dict[str, Any]], int]:
    return lambda entries: entries[name][3]


REFUSED: list[tuple[list[tuple[str, int, str | None]], bool]] = [
    ([(RESET, SET, "bogus")], False),
    ([(LOCK, SET, "500")], False),
    ([(LOCK, SET, "70000")], False),
    ([("no.such.config", SET, "1")], False),
    ([(RESET, APPEND, "earliest")], False),
    ([(RESET, SET, None)], False),
    ([(LOCK, SET, "20000"), (LOCK, DELETE, None)], False),
    ([(LOCK, SET, "20000")], True),
]


def config_steps(bootstrap: str, group: str) -> dict[str, object]:
    """The raw requests of the module docstring on one broker: every answer, masked of the group's name."""
    with WireClient(bootstrap.split(",")[0]) as client:
        fresh = describe(client, group)
        refused = [alter(client, group, changes, validate_only) for changes, validate_only in REFUSED]
        refused.append(alter(client, "", [(RESET, SET, "earliest")], False))
        refused.append(replace_configs(client, group, {"no.such.config": "1"}))
        accepted = alter(client, group, [(LOCK, SET, "20000")], False)
        after = described_once(client, group, lambda entries: entries[LOCK][1] == "20000")
        listed = [
            (answer.error_code, [r.resource_name for r in answer.config_resources if r.resource_name == group])
            for answer in (
                client.request(LIST_CONFIG_RESOURCES, 1, {"resource_types": [GROUP]}),
                client.request(LIST_CONFIG_RESOURCES, 1, {"resource_types": [GROUP, 99]}),
            )
        ]
    return {"fresh": fresh, "refused": refused, "accepted": accepted, "after": after, "listed": listed}


def tool(bootstrap: str, group: str, *arguments: str) -> list[str]:
    """Kafka 4.2's kafka-configs on the group: what it printed, the broker's address masked."""
    ran = run_kafka_tool(
        CONFIGS, bootstrap, "--entity-type", "groups", "--entity-name", group, *arguments, version=KAFKA_4_VERSION
    )
    return [line.replace(bootstrap, "<bootstrap>") for line in printed_lines(ran)] + [f"exit {ran.returncode}"]


def tool_steps(bootstrap: str, group: str) -> list[list[str]]:
    """kafka-configs' alter, describe and delete of the module docstring, in that order, and the describe of a group
    never configured (which the tool tells apart through ListConfigResources)."""
    added = tool(bootstrap, group, "--alter", "--add-config", f"{RESET}=earliest")
    with WireClient(bootstrap.split(",")[0]) as client:
        described_once(client, group, lambda entries: entries[RESET][1] == "earliest")
    described = tool(bootstrap, group, "--describe")
    deleted = tool(bootstrap, group, "--alter", "--delete-config", LOCK)
    never = tool(bootstrap, f"never-{group}", "--describe")
    return [added, described, deleted, never]


def read_from_the_beginning(classpath: str, bootstrap: str, group: str, folder: Path) -> list[str]:
    """Records produced to a new topic before the group's first member: the values its member got."""
    topic = f"early-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(timeout=60)
    produce(bootstrap, topic, EARLY_RECORDS)
    member = ShareMember(classpath, bootstrap, topic, group, folder, "early")
    try:
        deadline = time.monotonic() + DEADLINE_S
        while len(member.deliveries()) < len(EARLY_RECORDS) and time.monotonic() < deadline:
            time.sleep(0.3)
    finally:
        member.close()
    return sorted(value for value, _, _ in member.deliveries())


def test_group_configs_are_described_checked_altered_and_applied_as_on_kafka(
    share_classpath: str, share_listener: str, kafka4: str, tmp_path: Path
) -> None:
    outcomes = {}
    for name, bootstrap in (("kafka", kafka4), ("raybroker", share_listener)):
        group = f"configured-{uuid.uuid4().hex[:8]}"
        steps = config_steps(bootstrap, group)
        tools = tool_steps(bootstrap, group)
        folder = tmp_path / name
        folder.mkdir()
        read = read_from_the_beginning(share_classpath, bootstrap, group, folder)
        outcomes[name] = re.sub(group, "<group>", repr((steps, tools))), read
    kafka, raybroker = outcomes["kafka"], outcomes["raybroker"]
    assert kafka[1] == raybroker[1] == EARLY_RECORDS
    assert raybroker[0] == kafka[0]
    # Kafka's answers themselves, so that a change on both sides cannot pass unseen.
    assert "Invalid value 500 for configuration share.record.lock.duration.ms: Value must be at least 1000" in kafka[0]
    assert "share.auto.offset.reset=earliest sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:" in kafka[0]
