"""The admin facade on a real broker: topic lifecycle, descriptions with live partition state and replication,
configs, partitions, DeleteRecords and ListOffsets (oracle: what was produced), and the typed errors of bad calls.
The broker is one node, so a replication factor above 1 is refused as Kafka refuses it (more replicas than
brokers); several brokers' replication is tested in the multi-node suite."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from storage.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    OffsetOutOfRangeError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def admin_and_dirs(start_test_broker: Any) -> tuple[Any, list[Path]]:
    from actors import Admin

    broker, log_dirs = start_test_broker(log_dirs_count=2)
    return Admin(broker), log_dirs


def produce(topic: str, timestamps: list[int], partition: int = 0) -> list[int]:
    from actors import Producer

    with Producer(linger_ms=0) as producer:
        futures = [
            producer.send(topic, f"v{i}", partition=partition, timestamp_ms=ts) for i, ts in enumerate(timestamps)
        ]
    return [future.result().offset for future in futures]


def test_a_topic_is_created_described_altered_grown_and_deleted(admin_and_dirs: tuple[Any, list[Path]]) -> None:
    from actors import Broker

    admin, log_dirs = admin_and_dirs
    created = admin.create_topic("life", 2, {"retention.ms": "3600000"})
    assert created.name == "life"
    assert created.config == {"retention.ms": "3600000"}
    assert [p.partition for p in created.partitions] == [0, 1]
    assert {p.log_dir for p in created.partitions} == {str(d.resolve()) for d in log_dirs}
    assert all((p.log_start_offset, p.log_end_offset, p.high_watermark) == (0, 0, 0) for p in created.partitions)
    assert [p.node_id for p in created.partitions] == [Broker.connect().node_of("life", p) for p in (0, 1)]

    now_ms = time.time_ns() // 1_000_000
    produce("life", [now_ms] * 7, partition=1)
    described = admin.describe_topic("life")
    assert (described.partitions[1].log_end_offset, described.partitions[1].high_watermark) == (7, 7)
    assert described.partitions[1].size_bytes > 0 and described.partitions[1].segments == 1
    assert described.partitions[0].size_bytes == 0

    altered = admin.alter_topic_config("life", {"cleanup.policy": "delete", "retention.ms": "7200000"})
    assert altered.config == {"retention.ms": "7200000", "cleanup.policy": "delete"}
    assert admin.describe_topic("life").config == altered.config

    grown = admin.add_partitions("life", 3)
    assert [p.partition for p in grown.partitions] == [0, 1, 2]
    assert grown.partitions[1].log_end_offset == 7

    assert "life" in admin.list_topics()
    admin.delete_topic("life")
    assert "life" not in admin.list_topics()
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.describe_topic("life")


def test_internal_topics_are_listed_only_on_request(admin_and_dirs: tuple[Any, list[Path]]) -> None:
    admin, _ = admin_and_dirs
    assert "__consumer_offsets" not in admin.list_topics()
    assert "__consumer_offsets" in admin.list_topics(include_internal=True)
    assert len(admin.describe_topic("__consumer_offsets").partitions) == 2


def test_delete_records_and_list_offsets_agree_with_what_was_produced(admin_and_dirs: tuple[Any, list[Path]]) -> None:
    admin, _ = admin_and_dirs
    admin.create_topic("offsets", 1)
    base_ms = time.time_ns() // 1_000_000 - 60_000
    # Timestamps go up and down so that the max timestamp is not the last record.
    timestamps = [base_ms + delta for delta in (0, 10, 30, 20, 40, 25)]
    offsets = produce("offsets", timestamps)
    assert admin.list_offsets("offsets", "earliest") == {0: (0, -1)}
    assert admin.list_offsets("offsets", "latest") == {0: (6, -1)}
    assert admin.list_offsets("offsets", "max-timestamp") == {0: (offsets[4], base_ms + 40)}
    assert admin.list_offsets("offsets", base_ms + 15) == {0: (offsets[2], base_ms + 30)}
    assert admin.list_offsets("offsets", str(base_ms + 15)) == {0: (offsets[2], base_ms + 30)}
    assert admin.list_offsets("offsets", base_ms + 41) == {0: None}

    assert admin.delete_records("offsets", 0, 3) == 3
    assert admin.describe_topic("offsets").partitions[0].log_start_offset == 3
    assert admin.list_offsets("offsets", "earliest") == {0: (3, -1)}
    with pytest.raises(OffsetOutOfRangeError):
        admin.delete_records("offsets", 0, 99)


@pytest.mark.parametrize("spec", ["first", "-1", -2, 1.5, True])
def test_bad_offset_specs_raise_invalid_request(admin_and_dirs: tuple[Any, list[Path]], spec: Any) -> None:
    admin, _ = admin_and_dirs
    with pytest.raises(InvalidRequestError):
        admin.list_offsets("__consumer_offsets", spec)


def test_bad_admin_calls_raise_typed_errors(admin_and_dirs: tuple[Any, list[Path]]) -> None:
    admin, _ = admin_and_dirs
    admin.create_topic("taken", 1)
    with pytest.raises(TopicExistsError):
        admin.create_topic("taken", 1)
    with pytest.raises(InvalidTopicError):
        admin.create_topic("bad/name", 1)
    with pytest.raises(InvalidPartitionsError):
        admin.create_topic("zero", 0)
    with pytest.raises(InvalidConfigError):
        admin.create_topic("configured", 1, {"retention.ms": "soon"})
    with pytest.raises(InvalidConfigError):
        admin.alter_topic_config("taken", {"no.such.config": "1"})
    with pytest.raises(InvalidPartitionsError):
        admin.add_partitions("taken", 1)
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.describe_topic("missing")
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_topic("missing")
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.list_offsets("missing", "latest")
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_records("taken", 1, 0)
    assert admin.list_topics() == sorted(admin.list_topics())
    assert "zero" not in admin.list_topics() and "configured" not in admin.list_topics()


@pytest.mark.parametrize("factor", [None, -1, 1])
def test_a_single_broker_topic_has_one_replica_leading_in_sync_in_epoch_0(
    admin_and_dirs: tuple[Any, list[Path]], factor: int | None
) -> None:
    from actors import Broker

    admin, _ = admin_and_dirs
    name = f"one-replica-{factor}"
    created = admin.create_topic(name, 2, replication_factor=factor)
    (node,) = admin.describe_cluster().brokers
    assert created.replication_factor == 1
    for p in (*created.partitions, *admin.describe_topic(name).partitions):
        assert (p.node_id, p.leader_epoch, p.replicas, p.isr) == (node, 0, (node,), (node,))
        assert not p.offline and not p.under_replicated
        assert p.node_id == Broker.connect().node_of(name, p.partition)


@pytest.mark.parametrize("factor", [2, 0, -2])
def test_a_replication_factor_one_broker_cannot_place_is_refused_and_creates_nothing(
    admin_and_dirs: tuple[Any, list[Path]], factor: int
) -> None:
    admin, _ = admin_and_dirs
    with pytest.raises(InvalidReplicationFactorError, match=f"replication factor.* {factor}"):
        admin.create_topic(f"replicated{factor}", 1, replication_factor=factor)
    assert f"replicated{factor}" not in admin.list_topics()


def test_a_leader_replica_gone_before_it_answers_is_described_with_unknown_numbers(
    admin_and_dirs: tuple[Any, list[Path]],
) -> None:
    """A partition whose leader replica went away between the controller's answer and its own (a reassignment that
    completed removes the old replica so) is still described, with its replication state and -1 for the numbers
    only that replica knows, as a partition without a leader is; the other partitions keep theirs. The replica is
    deleted from its broker behind the controller's back, as the controller's own deletion ends a move."""
    from actors.calls import call, get_actor
    from actors.options import log_manager_name

    admin, _ = admin_and_dirs
    admin.create_topic("gone-leader", 2)
    # Timestamps of now: records of 1970 would be past `retention.ms` and deleted at the next retention check.
    now_ms = time.time_ns() // 1_000_000
    offsets = produce("gone-leader", [now_ms, now_ms], partition=1)
    before = admin.describe_topic("gone-leader").partitions
    log_manager = get_actor(log_manager_name(before[0].node_id))
    assert call(log_manager.delete_partitions.remote("gone-leader", [0])) == [0]
    try:
        gone, kept = admin.describe_topic("gone-leader").partitions
        assert (gone.node_id, gone.replicas, gone.isr, gone.leader_epoch) == (
            before[0].node_id,
            before[0].replicas,
            before[0].isr,
            before[0].leader_epoch,
        )
        assert (gone.log_start_offset, gone.log_end_offset, gone.high_watermark) == (-1, -1, -1)
        assert (kept.log_start_offset, kept.log_end_offset) == (0, offsets[-1] + 1)
    finally:
        admin.delete_topic("gone-leader")
