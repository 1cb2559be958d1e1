"""BrokerConfig: Kafka's broker keys and defaults, synonyms and their precedence, server.properties loading."""

from __future__ import annotations

import dataclasses
import logging
import sys
from pathlib import Path
from typing import Any

import pytest

import storage.config.broker_config as broker_config_module
import storage.config.cleaner_config as cleaner_config_module
import storage.config.group_protocol_config as group_protocol_config_module
import storage.config.listener_config as listener_config_module
import storage.config.security_config as security_config_module
import storage.config.share_group_config as share_group_config_module
import storage.config.transaction_config as transaction_config_module
from storage.config.broker_config import IGNORED_KAFKA_KEYS, BrokerConfig, load_server_properties
from storage.config.cleaner_config import CleanerConfig
from storage.config.config_values import Password
from storage.config.listener_config import Endpoint, ListenerConfig
from storage.config.log_config import LONG_MAX, LogConfig
from storage.errors import InvalidConfigError
from storage.files.meta_properties import format_properties

# Kafka 3.x `config/server.properties` (ZooKeeper mode), comments and blank lines as shipped.
KAFKA_ZK_SERVER_PROPERTIES = """\
# Licensed to the Apache Software Foundation (ASF) under one or more
# contributor license agreements.  See the NOTICE file distributed with
# this work for additional information regarding copyright ownership.
# The ASF licenses this file to You under the Apache License, Version 2.0
# (the "License"); you may not use this file except in compliance with
# the License.  You may obtain a copy of the License at
#
#    http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

#
# This configuration file is intended for use in ZK mode, where Apache ZooKeeper is required.
# See kafka.server.KafkaConfig for additional details and defaults
#

############################# Server Basics #############################

# The id of the broker. This must be set to a unique integer for each broker.
broker.id=0

############################# Socket Server Settings #############################

# The address the socket server listens on. If not configured, the host name will be equal to the value of
# java.net.InetAddress.getCanonicalHostName(), with PLAINTEXT listener name, and port 9092.
#   FORMAT:
#     listeners = listener_name://host_name:port
#   EXAMPLE:
#     listeners = PLAINTEXT://your.host.name:9092
#listeners=PLAINTEXT://:9092

# Listener name, hostname and port the broker will advertise to clients.
# If not set, it uses the value for "listeners".
#advertised.listeners=PLAINTEXT://your.host.name:9092

# Maps listener names to security protocols, the default is for them to be the same. See the config
# documentation for more details
#listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL

# The number of threads that the server uses for receiving requests from the network and sending responses to
# the network
num.network.threads=3

# The number of threads that the server uses for processing requests, which may include disk I/O
num.io.threads=8

# The send buffer (SO_SNDBUF) used by the socket server
socket.send.buffer.bytes=102400

# The receive buffer (SO_RCVBUF) used by the socket server
socket.receive.buffer.bytes=102400

# The maximum size of a request that the socket server will accept (protection against OOM)
socket.request.max.bytes=104857600


############################# Log Basics #############################

# A comma separated list of directories under which to store log files
log.dirs=/tmp/kafka-logs

# The default number of log partitions per topic. More partitions allow greater
# parallelism for consumption, but this will also result in more files across
# the brokers.
num.partitions=1

# The number of threads per data directory to be used for log recovery at startup and flushing at shutdown.
# This value is recommended to be increased for installations with data dirs located in RAID array.
num.recovery.threads.per.data.dir=1

############################# Internal Topic Settings  #############################
# The replication factor for the group metadata internal topics "__consumer_offsets" and "__transaction_state"
# For anything other than development testing, a value greater than 1 is recommended to ensure availability such as 3.
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1

############################# Log Flush Policy #############################

# Messages are immediately written to the filesystem but by default we only fsync() to sync
# the OS cache lazily. The following configurations control the flush of data to disk.
# There are a few important trade-offs here:
#    1. Durability: Unflushed data may be lost if you are not using replication.
#    2. Latency: Very large flush intervals may lead to latency spikes when the flush does occur as there will be a
#       lot of data to flush.
#    3. Throughput: The flush is generally the most expensive operation, and a small flush interval may lead to
#       excessive seeks.
# The settings below allow one to configure the flush policy to flush data after a period of time or
# every N messages (or both). This can be done globally and overridden on a per-topic basis.

# The number of messages to accept before forcing a flush of data to disk
#log.flush.interval.messages=10000

# The maximum amount of time a message can sit in a log before we force a flush
#log.flush.interval.ms=1000

############################# Log Retention Policy #############################

# The following configurations control the disposal of log segments. The policy can
# be set to delete segments after a period of time, or after a given size has accumulated.
# A segment will be deleted whenever *either* of these criteria are met. Deletion always happens
# from the end of the log.

# The minimum age of a log file to be eligible for deletion due to age
log.retention.hours=168

# A size-based retention policy for logs. Segments are pruned from the log unless the remaining
# segments drop below log.retention.bytes. Functions independently of log.retention.hours.
#log.retention.bytes=1073741824

# The maximum size of a log segment file. When this size is reached a new log segment will be created.
#log.segment.bytes=1073741824

# The interval at which log segments are checked to see if they can be deleted according
# to the retention policies
log.retention.check.interval.ms=300000

############################# Zookeeper #############################

# Zookeeper connection string (see zookeeper docs for details).
# This is a comma separated host:port pairs, each corresponding to a zk
# server. e.g. "127.0.0.1:3000,127.0.0.1:3001,127.0.0.1:3002".
# You can also append an optional chroot string to the urls to specify the
# root directory for all kafka znodes.
zookeeper.connect=localhost:2181

# Timeout in ms for connecting to zookeeper
zookeeper.connection.timeout.ms=18000


############################# Group Coordinator Settings #############################

# The following configuration specifies the time, in milliseconds, that the GroupCoordinator will delay the
# initial consumer rebalance.
# The rebalance will be further delayed by the value of group.initial.rebalance.delay.ms as new members join the
# group, up to a maximum of max.poll.interval.ms.
# The default value for this is 3 seconds.
# We override this to 0 here as it makes for a better out-of-the-box experience for development and testing.
# However, in production environments the default value of 3 seconds is more suitable as this will help prevent
# unnecessary, and potentially expensive, rebalances during application startup.
group.initial.rebalance.delay.ms=0
"""

# Kafka 3.x `config/kraft/server.properties` (combined broker and controller), settings part.
KAFKA_KRAFT_SERVER_PROPERTIES = """\
############################# Server Basics #############################

# The role of this server. Setting this puts us in KRaft mode
process.roles=broker,controller

# The node id associated with this instance's roles
node.id=1

# The connect string for the controller quorum
controller.quorum.voters=1@localhost:9093

############################# Socket Server Settings #############################

listeners=PLAINTEXT://:9092,CONTROLLER://:9093
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:9092
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600

############################# Log Basics #############################

# A comma separated list of directories under which to store log files
log.dirs=/tmp/kraft-combined-logs
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
"""


def write(tmp_path: Path, text: str, name: str = "server.properties") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# --- defaults ---------------------------------------------------------------------------------------


def test_defaults_are_kafkas_with_raybrokers_log_dir() -> None:
    config = BrokerConfig()
    assert config.node_id == 0
    assert config.log_dirs == ("/tmp/raybroker-logs",)
    assert config.num_recovery_threads_per_data_dir == 1
    assert config.num_partitions == 1
    assert config.log_retention_check_interval_ms == 300000
    assert config.log_flush_offset_checkpoint_interval_ms == 60000
    assert config.log_flush_start_offset_checkpoint_interval_ms == 60000
    assert config.replica_high_watermark_checkpoint_interval_ms == 5000
    assert config.log_flush_scheduler_interval_ms == LONG_MAX
    assert config.log_initial_task_delay_ms == 30000
    assert config.log_cleaner_io_max_bytes_per_second == sys.float_info.max
    assert config.offsets_topic_num_partitions == 50
    assert config.offsets_retention_minutes == 10080
    assert config.auto_create_topics_enable is True
    assert config.delete_topic_enable is True
    assert config.producer_id_expiration_ms == 86400000
    assert config.message_max_bytes == 1048588
    assert config.log_segment_delete_delay_ms == 60000
    assert config.ignored_keys == ()


def test_partitions_are_hosted_16_to_a_process_with_one_spare_host_by_default() -> None:
    """raybroker's own keys: their defaults, Kafka-style text loading, and the bounds (a host holds at least one
    partition; no spare at all is allowed, a negative count is not)."""
    config = BrokerConfig()
    assert (config.log_partitions_per_process, config.log_partitions_spare_processes) == (16, 1)
    loaded = BrokerConfig.from_properties({"log.partitions.per.process": "1", "log.partitions.spare.processes": "0"})
    assert (loaded.log_partitions_per_process, loaded.log_partitions_spare_processes) == (1, 0)
    for key, value in (("log.partitions.per.process", "0"), ("log.partitions.spare.processes", "-1")):
        with pytest.raises(InvalidConfigError, match=key.replace(".", r"\.")):
            BrokerConfig.from_properties({key: value})


def test_default_topic_and_cleaner_configs_are_kafkas() -> None:
    config = BrokerConfig()
    assert config.log_config == LogConfig()
    assert config.cleaner_config == CleanerConfig()


def test_to_properties_leaves_unset_synonyms_out_and_renders_kafka_text() -> None:
    rendered = BrokerConfig(log_dirs=("/a", "/b")).to_properties()
    assert rendered["log.dirs"] == "/a,/b"
    assert rendered["log.cleaner.enable"] == "true"
    assert rendered["log.retention.hours"] == "168"
    assert rendered["log.flush.scheduler.interval.ms"] == str(LONG_MAX)
    assert not {"log.retention.ms", "log.retention.minutes", "log.roll.ms", "log.flush.interval.ms"} & set(rendered)


def test_every_kafka_key_is_documented_in_the_module_docstring() -> None:
    """Every key is in the broker's table, or in the table of the sub-config that declares it (listener, cleaner,
    security, transactions, group protocol, share groups)."""
    modules = (
        broker_config_module,
        listener_config_module,
        cleaner_config_module,
        security_config_module,
        transaction_config_module,
        group_protocol_config_module,
        share_group_config_module,
    )
    documented = "".join(module.__doc__ or "" for module in modules)
    # A value of each optional key's type: an int, a string that reads as a listener, a password.
    values = {"int | None": 1, "str | None": "PLAINTEXT://broker.example:9092", "Password | None": Password("x")}
    every_optional_set = {
        spec.name: values[str(spec.type)] for spec in dataclasses.fields(BrokerConfig) if spec.default is None
    }
    keys = BrokerConfig(**every_optional_set).to_properties()
    assert [key for key in keys if key not in documented] == []


def test_config_is_frozen_and_replace_recomputes_derived_configs() -> None:
    config = BrokerConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.num_partitions = 3  # type: ignore[misc]
    changed = dataclasses.replace(config, log_segment_bytes=4096, log_cleaner_threads=2)
    assert changed.log_config.segment_bytes == 4096
    assert changed.cleaner_config.log_cleaner_threads == 2


# --- synonyms and precedence ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("properties", "retention_ms"),
    [
        ({}, 604800000),
        ({"log.retention.hours": "1"}, 3600000),
        ({"log.retention.minutes": "5", "log.retention.hours": "1"}, 300000),
        ({"log.retention.ms": "42", "log.retention.minutes": "5", "log.retention.hours": "1"}, 42),
        ({"log.retention.ms": "42", "log.retention.hours": "1"}, 42),
        ({"log.retention.hours": "-1"}, -1),
        ({"log.retention.minutes": "-3"}, -1),
        ({"log.retention.ms": "-7", "log.retention.hours": "5"}, -1),
    ],
)
def test_retention_ms_beats_minutes_beats_hours(properties: dict[str, str], retention_ms: int) -> None:
    assert BrokerConfig.from_properties(properties).log_config.retention_ms == retention_ms


@pytest.mark.parametrize(
    ("properties", "segment_ms", "segment_jitter_ms"),
    [
        ({}, 604800000, 0),
        ({"log.roll.hours": "2", "log.roll.jitter.hours": "1"}, 7200000, 3600000),
        (
            {"log.roll.ms": "1000", "log.roll.hours": "2", "log.roll.jitter.ms": "7", "log.roll.jitter.hours": "1"},
            1000,
            7,
        ),
    ],
)
def test_roll_ms_beats_roll_hours(properties: dict[str, str], segment_ms: int, segment_jitter_ms: int) -> None:
    log_config = BrokerConfig.from_properties(properties).log_config
    assert (log_config.segment_ms, log_config.segment_jitter_ms) == (segment_ms, segment_jitter_ms)


def test_flush_interval_falls_back_to_the_flush_scheduler_interval() -> None:
    assert BrokerConfig.from_properties({"log.flush.scheduler.interval.ms": "2000"}).log_config.flush_ms == 2000
    both = {"log.flush.scheduler.interval.ms": "2000", "log.flush.interval.ms": "500"}
    assert BrokerConfig.from_properties(both).log_config.flush_ms == 500


def test_every_topic_config_synonym_reaches_log_config() -> None:
    properties = {
        "log.segment.bytes": "1048576",
        "log.roll.ms": "1000",
        "log.roll.jitter.ms": "10",
        "log.index.size.max.bytes": "8192",
        "log.index.interval.bytes": "128",
        "log.flush.interval.messages": "100",
        "log.flush.interval.ms": "50",
        "log.retention.ms": "60000",
        "log.retention.bytes": "1000000",
        "log.cleanup.policy": "compact,delete",
        "log.cleaner.min.cleanable.ratio": "0.25",
        "log.cleaner.min.compaction.lag.ms": "5",
        "log.cleaner.max.compaction.lag.ms": "500000",
        "log.cleaner.delete.retention.ms": "1000",
        "log.segment.delete.delay.ms": "10",
        "message.max.bytes": "2000000",
        "log.message.timestamp.type": "LogAppendTime",
        "log.message.timestamp.before.max.ms": "100000",
        "log.message.timestamp.after.max.ms": "3600000",
        "log.message.timestamp.difference.max.ms": "200000",
        "compression.type": "zstd",
        "compression.gzip.level": "5",
        "compression.lz4.level": "12",
        "compression.zstd.level": "7",
        "log.preallocate": "true",
        "min.insync.replicas": "2",
        "unclean.leader.election.enable": "true",
        "log.local.retention.ms": "1000",
        "log.local.retention.bytes": "2000",
    }
    expected = LogConfig(
        segment_bytes=1048576,
        segment_ms=1000,
        segment_jitter_ms=10,
        segment_index_bytes=8192,
        index_interval_bytes=128,
        flush_messages=100,
        flush_ms=50,
        retention_ms=60000,
        retention_bytes=1000000,
        cleanup_policy="compact,delete",
        min_cleanable_dirty_ratio=0.25,
        min_compaction_lag_ms=5,
        max_compaction_lag_ms=500000,
        delete_retention_ms=1000,
        file_delete_delay_ms=10,
        max_message_bytes=2000000,
        message_timestamp_type="LogAppendTime",
        message_timestamp_before_max_ms=100000,
        message_timestamp_after_max_ms=3600000,
        message_timestamp_difference_max_ms=200000,
        compression_type="zstd",
        compression_gzip_level=5,
        compression_lz4_level=12,
        compression_zstd_level=7,
        preallocate=True,
        min_insync_replicas=2,
        unclean_leader_election_enable=True,
        local_retention_ms=1000,
        local_retention_bytes=2000,
    )
    log_config = BrokerConfig.from_properties(properties).log_config
    assert log_config == expected
    default = LogConfig()
    unchanged = [
        spec.name
        for spec in dataclasses.fields(LogConfig)
        if getattr(log_config, spec.name) == getattr(default, spec.name)
    ]
    # Kafka's throttled-replicas lists, its dead-letter flag and raybroker's iceberg keys are topic configs without
    # a broker synonym.
    assert unchanged == [
        "leader_replication_throttled_replicas",
        "follower_replication_throttled_replicas",
        "errors_deadletterqueue_group_enable",
        "iceberg_mode",
        "iceberg_table",
        "iceberg_target_lag_ms",
        "iceberg_partition_spec",
        "iceberg_value_schema",
    ]


def test_broker_id_is_read_as_node_id() -> None:
    assert BrokerConfig.from_properties({"broker.id": "3"}).node_id == 3
    assert BrokerConfig.from_properties({"broker.id": "3", "node.id": "3"}).node_id == 3
    assert "broker.id" not in BrokerConfig.from_properties({"broker.id": "3"}).to_properties()


def test_different_broker_id_and_node_id_raise() -> None:
    with pytest.raises(InvalidConfigError, match=r"broker\.id \(3\) and node\.id"):
        BrokerConfig.from_properties({"broker.id": "3", "node.id": "4"})


def test_log_dir_is_used_only_when_log_dirs_is_absent() -> None:
    assert BrokerConfig.from_properties({"log.dir": "/data/one"}).log_dirs == ("/data/one",)
    both = {"log.dir": "/data/one", "log.dirs": "/data/two"}
    assert BrokerConfig.from_properties(both).log_dirs == ("/data/two",)


def test_log_dirs_is_a_trimmed_comma_list_without_empty_entries() -> None:
    config = BrokerConfig.from_properties({"log.dirs": " /d1 , /d2,,/d3 ,"})
    assert config.log_dirs == ("/d1", "/d2", "/d3")


def test_native_values_are_accepted_by_from_properties() -> None:
    config = BrokerConfig.from_properties({"num.partitions": 3, "log.dirs": ["/a", "/b"], "log.cleaner.enable": False})
    assert (config.num_partitions, config.log_dirs, config.log_cleaner_enable) == (3, ("/a", "/b"), False)


def test_properties_round_trip_through_a_file(tmp_path: Path) -> None:
    config = BrokerConfig(
        node_id=7,
        log_dirs=("/data/a", "/data/b"),
        log_retention_minutes=30,
        log_cleaner_io_buffer_load_factor=0.75,
        offsets_topic_num_partitions=4,
    )
    path = write(tmp_path, format_properties(config.to_properties(), epoch_ms=0))
    assert load_server_properties(path) == config


# --- real Kafka files -----------------------------------------------------------------------------------


def test_kafka_zookeeper_mode_server_properties_loads(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="storage.config.broker_config"):
        config = load_server_properties(write(tmp_path, KAFKA_ZK_SERVER_PROPERTIES))
    assert config.node_id == 0
    assert config.log_dirs == ("/tmp/kafka-logs",)
    assert config.num_partitions == 1
    assert config.log_config.retention_ms == 168 * 3600000
    assert config.log_retention_check_interval_ms == 300000
    assert (config.num_network_threads, config.socket_request_max_bytes) == (3, 104857600)
    # A Kafka file's replication keys are raybroker's too (its single-broker quickstart sets 1).
    assert config.offsets_topic_replication_factor == 1
    assert config.transaction_config.transaction_state_log_replication_factor == 1
    assert config.transaction_config.transaction_state_log_min_isr == 1
    assert config.listener_config.socket_send_buffer_bytes == 102400
    assert config.ignored_keys == (
        "num.io.threads",
        "socket.receive.buffer.bytes",
        "zookeeper.connect",
        "zookeeper.connection.timeout.ms",
    )
    # Kafka's single-broker quickstart starts a new group's first rebalance at once; raybroker's groups do too.
    assert config.group_initial_rebalance_delay_ms == 0
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "zookeeper.connect" in warnings[0]


def test_kafka_kraft_mode_server_properties_loads(tmp_path: Path) -> None:
    config = load_server_properties(write(tmp_path, KAFKA_KRAFT_SERVER_PROPERTIES))
    assert config.node_id == 1
    assert config.log_dirs == ("/tmp/kraft-combined-logs",)
    assert config.log_config.segment_bytes == 1073741824
    assert {"process.roles", "controller.quorum.voters", "controller.listener.names"} <= set(config.ignored_keys)
    # The KRaft controller's own listener is dropped: raybroker serves the broker's.
    assert (config.listeners, config.advertised_listeners) == ("PLAINTEXT://:9092", "PLAINTEXT://localhost:9092")
    assert set(config.ignored_keys) <= IGNORED_KAFKA_KEYS


def test_security_keys_raybroker_does_not_read_are_ignored_and_the_others_are_loaded() -> None:
    config = BrokerConfig.from_properties(
        {
            "ssl.keystore.location": "/ks.pem",
            "sasl.enabled.mechanisms": "PLAIN",
            "ssl.cipher.suites": "TLS_AES_128_GCM_SHA256",
            "listener.name.x.ssl.key.password": "p",
        }
    )
    assert config.ignored_keys == ("ssl.cipher.suites", "listener.name.x.ssl.key.password")
    assert config.security_config.ssl_keystore_location == "/ks.pem"
    assert config.security_config.sasl_enabled_mechanisms == ("PLAIN",)


def test_file_with_latin1_bytes_loads_as_kafka_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_bytes(b"log.dirs=/data/caf\xe9\n")
    assert load_server_properties(path).log_dirs == ("/data/caf\u00e9",)


# --- errors ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "hint"),
    [
        ("log.retention.hour", "log.retention.hours"),
        ("num.partition", "num.partitions"),
        ("log.segments.bytes", "log.segment.bytes"),
    ],
)
def test_typo_raises_with_the_closest_key(key: str, hint: str) -> None:
    with pytest.raises(InvalidConfigError) as caught:
        BrokerConfig.from_properties({key: "1"})
    assert repr(key) in str(caught.value)
    assert repr(hint) in str(caught.value)


def test_topic_level_names_are_not_broker_keys() -> None:
    with pytest.raises(InvalidConfigError, match=r"'segment\.bytes'"):
        BrokerConfig.from_properties({"segment.bytes": "1048576"})


def test_typo_in_a_file_raises_with_the_path(tmp_path: Path) -> None:
    path = write(tmp_path, KAFKA_ZK_SERVER_PROPERTIES + "log.retention.hour=1\n")
    with pytest.raises(InvalidConfigError) as caught:
        load_server_properties(path)
    assert caught.value.path == str(path)
    assert "log.retention.hour" in caught.value.message


@pytest.mark.parametrize(
    ("properties", "fragment"),
    [
        ({"num.partitions": "two"}, "'two' for num.partitions"),
        ({"num.partitions": "1.5"}, "'1.5' for num.partitions"),
        ({"num.partitions": "1_000"}, "'1_000' for num.partitions"),
        ({"num.partitions": "0"}, "0 for num.partitions: must be at least 1"),
        ({"node.id": "2147483648"}, "2147483648 for node.id: expected a Java int"),
        ({"node.id": "-1"}, "-1 for node.id: must be at least 0"),
        ({"log.retention.ms": "9223372036854775808"}, "for log.retention.ms: expected a Java long"),
        ({"log.cleaner.enable": "yes"}, "'yes' for log.cleaner.enable: expected true or false"),
        ({"log.cleaner.min.cleanable.ratio": "half"}, "'half' for log.cleaner.min.cleanable.ratio"),
        ({"log.cleaner.min.cleanable.ratio": "1.5"}, "1.5 for log.cleaner.min.cleanable.ratio"),
        ({"log.segment.bytes": "3"}, "3 for log.segment.bytes (the broker default of topic config segment.bytes)"),
        ({"log.roll.hours": "0"}, "0 for log.roll.hours (the broker default of topic config segment.ms)"),
        ({"log.cleanup.policy": "archive"}, "'archive' for log.cleanup.policy"),
        ({"compression.type": "brotli"}, "'brotli' for compression.type"),
        ({"log.retention.check.interval.ms": "0"}, "0 for log.retention.check.interval.ms"),
        ({"log.dirs": " , "}, "for log.dirs: expected non-empty paths"),
        ({"log.cleaner.threads": "-1"}, "log.cleaner.threads"),
        (
            {"log.cleaner.min.compaction.lag.ms": "10", "log.cleaner.max.compaction.lag.ms": "5"},
            "inconsistent broker defaults of topic configs: max.compaction.lag.ms (5)",
        ),
    ],
)
def test_invalid_values_raise_naming_key_and_value(properties: dict[str, str], fragment: str) -> None:
    with pytest.raises(InvalidConfigError) as caught:
        BrokerConfig.from_properties(properties)
    assert fragment in str(caught.value)


@pytest.mark.parametrize(
    "fields",
    [
        {"num_partitions": True},
        {"num_partitions": "3"},
        {"log_dirs": ["/a"]},
        {"log_dirs": ("/a", 1)},
        {"log_cleaner_enable": 1},
        {"log_cleanup_policy": ["delete"]},
        {"log_cleaner_io_buffer_load_factor": float("nan")},
        {"log_retention_ms": 2**63},
        {"ignored_keys": ["listeners"]},
    ],
)
def test_wrong_python_types_raise(fields: dict[str, Any]) -> None:
    with pytest.raises(InvalidConfigError):
        BrokerConfig(**fields)


def test_missing_file_raises_invalid_config_with_path(tmp_path: Path) -> None:
    path = tmp_path / "absent.properties"
    with pytest.raises(InvalidConfigError) as caught:
        load_server_properties(path)
    assert caught.value.path == str(path)


def test_malformed_unicode_escape_raises_invalid_config_with_path(tmp_path: Path) -> None:
    path = write(tmp_path, "log.dirs=/data/\\u12\n")
    with pytest.raises(InvalidConfigError) as caught:
        load_server_properties(path)
    assert caught.value.path == str(path)


# --- the Kafka-protocol listener's keys -----------------------------------------------------------------


def test_listener_keys_default_to_a_loopback_listener_and_kafkas_limits() -> None:
    config = BrokerConfig()
    assert config.listener_config == ListenerConfig()
    assert config.listener_config.endpoints == (Endpoint("PLAINTEXT", "127.0.0.1", 9092),)
    assert config.listener_config.advertised({"PLAINTEXT": 9092}) == config.listener_config.endpoints
    assert config.num_network_threads == 1
    assert (config.socket_request_max_bytes, config.connections_max_idle_ms) == (104857600, 600000)
    assert config.max_connections == config.max_connections_per_ip == 2**31 - 1
    assert config.listener_config.queued_max_requests == 500


def test_listener_keys_are_read_from_properties_into_the_listener_config() -> None:
    config = BrokerConfig.from_properties(
        {
            "listeners": "PLAINTEXT://127.0.0.1:19092",
            "advertised.listeners": "PLAINTEXT://broker.example:29092",
            "num.network.threads": "2",
            "socket.request.max.bytes": "1048576",
            "connections.max.idle.ms": "1000",
            "max.connections": "100",
            "max.connections.per.ip": "10",
        }
    )
    assert config.ignored_keys == ()
    assert config.num_network_threads == 2
    assert config.listener_config == ListenerConfig(
        "PLAINTEXT://127.0.0.1:19092", "PLAINTEXT://broker.example:29092", 1048576, 1000, 100, 10
    )
    assert config.listener_config.advertised({"PLAINTEXT": 19092}) == (Endpoint("PLAINTEXT", "broker.example", 29092),)
    assert BrokerConfig.from_properties(config.to_properties()) == config


@pytest.mark.parametrize(
    ("properties", "fragment"),
    [
        ({"listeners": "127.0.0.1:9092"}, "listeners"),
        ({"listeners": "SSL://127.0.0.1:9093"}, "ssl.keystore.location"),
        ({"listeners": "CLIENT://127.0.0.1:9093"}, "listener.security.protocol.map"),
        ({"advertised.listeners": "PLAINTEXT://host"}, "advertised.listeners"),
        ({"num.network.threads": "0"}, "num.network.threads"),
        ({"socket.request.max.bytes": "0"}, "socket.request.max.bytes"),
        ({"max.connections.per.ip": "many"}, "max.connections.per.ip"),
    ],
)
def test_bad_listener_keys_raise_naming_the_key(properties: dict[str, str], fragment: str) -> None:
    with pytest.raises(InvalidConfigError, match=fragment):
        BrokerConfig.from_properties(properties)


@pytest.mark.parametrize(
    ("listeners", "exposed_hosts"),
    [
        ("PLAINTEXT://127.0.0.1:9092", []),
        ("PLAINTEXT://localhost:9092", []),
        ("PLAINTEXT://[::1]:9092", []),
        ("PLAINTEXT://:9092", [""]),
        ("PLAINTEXT://0.0.0.0:9092", ["0.0.0.0"]),
        ("PLAINTEXT://broker.example:9092", ["broker.example"]),
    ],
)
def test_exposed_endpoints_are_those_other_machines_may_reach(listeners: str, exposed_hosts: list[str]) -> None:
    config = BrokerConfig.from_properties({"listeners": listeners}).listener_config
    assert [endpoint.host for endpoint in config.exposed_endpoints()] == exposed_hosts


def test_iceberg_catalog_properties_are_kept_verbatim_and_round_trip() -> None:
    config = BrokerConfig.from_properties(
        {"iceberg.catalog.type": "rest", "iceberg.catalog.uri": " http://catalog:8181 ", "iceberg.catalog.s3.region": 1}
    )
    assert config.iceberg_catalog == (("type", "rest"), ("uri", "http://catalog:8181"), ("s3.region", "1"))
    assert BrokerConfig.from_properties(config.to_properties()) == config
    assert BrokerConfig.from_properties({}).iceberg_catalog == ()


def test_iceberg_catalog_property_without_a_key_is_refused() -> None:
    with pytest.raises(InvalidConfigError, match="needs a name"):
        BrokerConfig.from_properties({"iceberg.catalog.": "x"})
    with pytest.raises(InvalidConfigError, match="expected a string"):
        BrokerConfig.from_properties({"iceberg.catalog.uri": ["a"]})
