"""Real Kafka admin clients against a real broker over 127.0.0.1: confluent-kafka's AdminClient (librdkafka) and
kafka-python's KafkaAdminClient create, describe, alter and delete topics, grow partitions, delete records and
describe the cluster; refused requests come back as each client's typed error carrying Kafka's code.

The oracle is the broker itself, asked through raybroker's own `Admin` facade: what the wire clients changed is what
the controller and the partition actors hold.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)
from kafka.admin import ConfigResource as KafkaPythonConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient
from kafka.admin import NewTopic as KafkaPythonNewTopic
from kafka.errors import (
    InvalidConfigurationError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    TopicAlreadyExistsError,
)

from actors.clients.admin import Admin
from cluster.protocol.listener import KafkaListener

pytestmark = pytest.mark.ray

NUM_PARTITIONS = 2
TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def listener(start_test_broker: Callable[..., tuple[Any, Any]]) -> Iterator[KafkaListener]:
    start_test_broker(num_partitions=str(NUM_PARTITIONS))
    with KafkaListener({"listeners": "PLAINTEXT://127.0.0.1:0", "num.partitions": str(NUM_PARTITIONS)}) as started:
        yield started


@pytest.fixture(scope="module")
def admin(listener: KafkaListener) -> AdminClient:
    return AdminClient({"bootstrap.servers": listener.bootstrap_servers})


@pytest.fixture(scope="module")
def broker_admin(listener: KafkaListener) -> Admin:
    return Admin()


def result(futures: dict[Any, Any]) -> dict[Any, Any]:
    return {key: future.result(TIMEOUT_S) for key, future in futures.items()}


def error_of(future: Any) -> int:
    with pytest.raises(KafkaException) as raised:
        future.result(TIMEOUT_S)
    error: KafkaError = raised.value.args[0]
    return error.code()


def test_create_with_configs_and_validate_only(admin: AdminClient, broker_admin: Admin) -> None:
    topics = [
        NewTopic("ck-created", 3, 1, config={"retention.ms": "3600000", "cleanup.policy": "compact"}),
        NewTopic("ck-defaulted"),
    ]
    result(admin.create_topics(topics))
    result(admin.create_topics([NewTopic("ck-validated", 2)], validate_only=True))
    created = broker_admin.describe_topic("ck-created")
    assert (len(created.partitions), created.config) == (3, {"retention.ms": "3600000", "cleanup.policy": "compact"})
    assert len(broker_admin.describe_topic("ck-defaulted").partitions) == NUM_PARTITIONS
    assert "ck-validated" not in broker_admin.list_topics()
    listed = admin.list_topics(timeout=TIMEOUT_S).topics
    assert {"ck-created", "ck-defaulted"} <= set(listed) and "ck-validated" not in listed
    assert len(listed["ck-created"].partitions) == 3


def test_refused_creations_carry_kafkas_codes(admin: AdminClient) -> None:
    result(admin.create_topics([NewTopic("ck-existing", 1)]))
    futures = admin.create_topics(
        [
            NewTopic("ck-existing", 1),
            NewTopic("ck-bad-config", 1, config={"retention.ms": "soon"}),
            NewTopic("bad name!", 1),
            NewTopic("ck-replicated", 1, 3),
        ]
    )
    assert {topic: error_of(future) for topic, future in futures.items()} == {
        "ck-existing": KafkaError.TOPIC_ALREADY_EXISTS,
        "ck-bad-config": KafkaError.INVALID_CONFIG,
        "bad name!": KafkaError.TOPIC_EXCEPTION,
        "ck-replicated": KafkaError.INVALID_REPLICATION_FACTOR,
    }


def test_replication_factor_beyond_the_one_broker_is_refused_and_metadata_lists_the_one_replica(
    admin: AdminClient, broker_admin: Admin
) -> None:
    """Two replicas on one broker: INVALID_REPLICATION_FACTOR with the reason, nothing created. The default (-1) and
    1 give each partition this broker as leader, only replica and only in-sync replica, as Metadata lists them."""
    (refused,) = admin.create_topics([NewTopic("ck-two-replicas", 1, 2)]).values()
    with pytest.raises(KafkaException) as raised:
        refused.result(TIMEOUT_S)
    error: KafkaError = raised.value.args[0]
    assert error.code() == KafkaError.INVALID_REPLICATION_FACTOR
    assert "replication factor 2" in error.str()
    assert "ck-two-replicas" not in broker_admin.list_topics()

    result(admin.create_topics([NewTopic("ck-default-replicas", 2), NewTopic("ck-one-replica", 1, 1)]))
    (node,) = admin.describe_cluster().result(TIMEOUT_S).nodes
    (ray_node,) = broker_admin.describe_cluster().brokers
    assert broker_admin.describe_cluster().node_ids == {ray_node: node.id}
    listed = admin.list_topics(timeout=TIMEOUT_S).topics
    for name, count in (("ck-default-replicas", 2), ("ck-one-replica", 1)):
        partitions = listed[name].partitions
        assert {p: (m.leader, m.replicas, m.isrs, m.error) for p, m in partitions.items()} == {
            p: (node.id, [node.id], [node.id], None) for p in range(count)
        }
        assert broker_admin.describe_topic(name).replication_factor == 1


def test_describe_and_alter_configs(admin: AdminClient, broker_admin: Admin, listener: KafkaListener) -> None:
    result(admin.create_topics([NewTopic("ck-configs", 1, config={"retention.ms": "3600000"})]))
    topic = ConfigResource(ConfigResource.Type.TOPIC, "ck-configs")
    (entries,) = result(admin.describe_configs([topic])).values()
    assert entries["retention.ms"].value == "3600000"
    assert entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert (entries["segment.bytes"].value, entries["segment.bytes"].is_default) == ("1073741824", True)
    (broker_entries,) = result(admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "0")])).values()
    assert broker_entries["num.partitions"].value == str(NUM_PARTITIONS)
    assert broker_entries["num.partitions"].is_read_only

    increments = [
        ConfigEntry("segment.bytes", "1048576", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
    ]
    result(
        admin.incremental_alter_configs(
            [ConfigResource(ConfigResource.Type.TOPIC, "ck-configs", incremental_configs=increments)]
        )
    )
    assert broker_admin.describe_topic("ck-configs").config == {
        "retention.ms": "3600000",
        "segment.bytes": "1048576",
        "cleanup.policy": "delete,compact",
    }
    # AlterConfigs replaces the whole set of overrides, as Kafka's legacy API does (librdkafka deprecates it).
    replacing = ConfigResource(ConfigResource.Type.TOPIC, "ck-configs", set_config={"retention.ms": "60000"})
    bad = ConfigResource(ConfigResource.Type.TOPIC, "ck-configs", set_config={"no.such.config": "1"})
    with pytest.warns(DeprecationWarning):
        result(admin.alter_configs([replacing]))
        refused = admin.alter_configs([bad])[bad]
    assert broker_admin.describe_topic("ck-configs").config == {"retention.ms": "60000"}
    assert error_of(refused) == KafkaError.INVALID_CONFIG


def test_iceberg_topic_configs_are_taken_and_refused_with_the_reason(admin: AdminClient, broker_admin: Admin) -> None:
    iceberg = {
        "iceberg.mode": "key_value",
        "iceberg.table": "lake.ck_clicks",
        "iceberg.partition.spec": "day(timestamp)",
    }
    result(admin.create_topics([NewTopic("ck-iceberg", 1, config=iceberg)]))
    assert broker_admin.describe_topic("ck-iceberg").config == iceberg
    (entries,) = result(admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "ck-iceberg")])).values()
    assert entries["iceberg.target.lag.ms"].value == "60000" and entries["iceberg.mode"].value == "key_value"

    lag = [ConfigEntry("iceberg.target.lag.ms", "5000", incremental_operation=AlterConfigOpType.SET)]
    result(
        admin.incremental_alter_configs(
            [ConfigResource(ConfigResource.Type.TOPIC, "ck-iceberg", incremental_configs=lag)]
        )
    )
    assert broker_admin.describe_topic("ck-iceberg").config == {**iceberg, "iceberg.target.lag.ms": "5000"}

    bad_spec = [ConfigEntry("iceberg.partition.spec", "day(key)", incremental_operation=AlterConfigOpType.SET)]
    refused = admin.incremental_alter_configs(
        [ConfigResource(ConfigResource.Type.TOPIC, "ck-iceberg", incremental_configs=bad_spec)]
    )
    with pytest.raises(KafkaException) as raised:
        next(iter(refused.values())).result(TIMEOUT_S)
    error: KafkaError = raised.value.args[0]
    assert error.code() == KafkaError.INVALID_CONFIG and "key takes only identity" in error.str()
    futures = admin.create_topics([NewTopic("ck-iceberg-bad", 1, config={"iceberg.mode": "parquet"})])
    assert error_of(futures["ck-iceberg-bad"]) == KafkaError.INVALID_CONFIG
    assert "ck-iceberg-bad" not in broker_admin.list_topics()
    assert broker_admin.describe_topic("ck-iceberg").config["iceberg.partition.spec"] == "day(timestamp)"
    json_mode = {"iceberg.mode": "value_json", "iceberg.value.schema": "id BIGINT, payload MAP<STRING, INT>"}
    futures = admin.create_topics([NewTopic("ck-iceberg-json", 1, config=json_mode)])
    with pytest.raises(KafkaException) as raised:
        futures["ck-iceberg-json"].result(TIMEOUT_S)
    error = raised.value.args[0]
    assert error.code() == KafkaError.INVALID_CONFIG and "nested types (struct, list, map, array)" in error.str()
    json_mode["iceberg.value.schema"] = "id BIGINT NOT NULL, name STRING"
    result(admin.create_topics([NewTopic("ck-iceberg-json", 1, config=json_mode)]))
    assert broker_admin.describe_topic("ck-iceberg-json").config == json_mode


def test_create_partitions_delete_records_and_delete_topics(
    admin: AdminClient, broker_admin: Admin, listener: KafkaListener
) -> None:
    result(admin.create_topics([NewTopic("ck-trimmed", 1)]))
    producer = Producer({"bootstrap.servers": listener.bootstrap_servers})
    for index in range(10):
        producer.produce("ck-trimmed", value=b"record-%d" % index, partition=0)
    assert producer.flush(TIMEOUT_S) == 0

    result(admin.create_partitions([NewPartitions("ck-trimmed", 3)]))
    assert len(broker_admin.describe_topic("ck-trimmed").partitions) == 3
    (shrunk,) = admin.create_partitions([NewPartitions("ck-trimmed", 2)]).values()
    assert error_of(shrunk) == KafkaError.INVALID_PARTITIONS

    (deleted,) = result(admin.delete_records([TopicPartition("ck-trimmed", 0, 4)])).values()
    assert deleted.low_watermark == 4
    assert broker_admin.describe_topic("ck-trimmed").partitions[0].log_start_offset == 4

    result(admin.delete_topics(["ck-trimmed"]))
    assert "ck-trimmed" not in broker_admin.list_topics()
    (missing,) = admin.delete_topics(["ck-never-was"]).values()
    assert error_of(missing) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_describe_cluster(admin: AdminClient, listener: KafkaListener, broker_admin: Admin) -> None:
    cluster = admin.describe_cluster().result(TIMEOUT_S)
    assert [(node.host, node.port) for node in cluster.nodes] == [("127.0.0.1", listener.port)]
    assert cluster.controller.id == cluster.nodes[0].id
    assert cluster.cluster_id


def test_kafka_python_admin(listener: KafkaListener, broker_admin: Admin) -> None:
    client = KafkaAdminClient(bootstrap_servers=listener.bootstrap_servers, request_timeout_ms=30000)
    try:
        client.create_topics([KafkaPythonNewTopic("kp-admin", 2, 1, topic_configs={"retention.ms": "3600000"})])
        assert broker_admin.describe_topic("kp-admin").config == {"retention.ms": "3600000"}
        with pytest.raises(TopicAlreadyExistsError):
            client.create_topics([KafkaPythonNewTopic("kp-admin", 1, 1)])
        with pytest.raises(InvalidConfigurationError):
            client.create_topics([KafkaPythonNewTopic("kp-bad", 1, 1, topic_configs={"segment.bytes": "1"})])
        with pytest.raises(InvalidTopicError):
            client.create_topics([KafkaPythonNewTopic("bad name!", 1, 1)])
        with pytest.raises(InvalidReplicationFactorError):
            client.create_topics([KafkaPythonNewTopic("kp-replicated", 1, 2)])
        described = client.describe_configs([KafkaPythonConfigResource(ConfigResourceType.TOPIC, "kp-admin")])
        # kafka-python keeps only the modified configs by default: the one override, with its source.
        (modified,) = described["topic"].values()
        assert {name: (entry["value"], entry["config_source"]) for name, entry in modified.items()} == {
            "retention.ms": ("3600000", "DYNAMIC_TOPIC_CONFIG")
        }
        client.delete_topics(["kp-admin"])
        assert "kp-admin" not in broker_admin.list_topics()
    finally:
        client.close()
