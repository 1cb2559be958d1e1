"""Metadata: this listener is the one broker and every partition's leader unless the view places partitions on
other brokers; replicated partitions carry their epoch, replicas, ISR and offline replicas, and one without a
leader answers LEADER_NOT_AVAILABLE with leader -1, as Kafka's does; unknown topics are auto-created with
`num.partitions` when allowed, else answered UNKNOWN_TOPIC_OR_PARTITION; every served version encodes."""

from __future__ import annotations

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode

from cluster.protocol.broker_view import BrokerEndpoint, PartitionInfo
from cluster.protocol.framing import decode_response, encode_response
from cluster.protocol.handlers.metadata import METADATA_KEY, MetadataHandler
from cluster.protocol.messages import build
from cluster.protocol.router import SERVED
from tests.cluster.protocol.support import CLUSTER_ID, LogBrokerView, request, run

ENDPOINT = BrokerEndpoint(7, "broker.example", 19092)
VERSIONS = range(SERVED[METADATA_KEY].min_version, SERVED[METADATA_KEY].max_version + 1)


def ask(view: LogBrokerView, version: int, topics: list[str] | None, allow_create: bool = True, enable: bool = True):  # type: ignore[no-untyped-def]
    values = {
        "topics": None if topics is None else [{"name": name, "topic_id": None} for name in topics],
        "allow_auto_topic_creation": allow_create,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False,
    }
    body = build(load_request_schema(METADATA_KEY, version), values)
    response = run(MetadataHandler(view, ENDPOINT, enable, 3)(request(body)))
    _, decoded = decode_response(encode_response(1, response)[4:], load_response_schema(METADATA_KEY, version))
    return decoded


@pytest.mark.parametrize("version", VERSIONS)
def test_an_unknown_topic_is_created_with_num_partitions_led_by_this_broker(view: LogBrokerView, version: int) -> None:
    decoded = ask(view, version, ["orders"])
    assert [(b.node_id, b.host, b.port) for b in decoded.brokers] == [(7, "broker.example", 19092)]
    (topic,) = decoded.topics
    assert (topic.name, topic.error_code) == ("orders", ErrorCode.none)
    assert [(p.partition_index, p.leader_id, tuple(p.replica_nodes)) for p in topic.partitions] == [
        (0, 7, (7,)),
        (1, 7, (7,)),
        (2, 7, (7,)),
    ]
    if version >= 2:
        assert decoded.cluster_id == CLUSTER_ID
    if version >= 7:
        assert {p.leader_epoch for p in topic.partitions} == {0}


@pytest.mark.parametrize("version", [4, 12])
def test_no_auto_creation_when_the_request_or_the_broker_forbids_it(view: LogBrokerView, version: int) -> None:
    for allow, enable in ((False, True), (True, False)):
        (topic,) = ask(view, version, ["missing"], allow_create=allow, enable=enable).topics
        assert topic.error_code == ErrorCode.unknown_topic_or_partition
    assert run(view.topics()) == {}


def test_an_invalid_topic_name_is_answered_invalid_topic(view: LogBrokerView) -> None:
    (topic,) = ask(view, 12, ["no/slashes"]).topics
    assert topic.error_code == ErrorCode.invalid_topic_exception


@pytest.mark.parametrize("version", [0, 1, 12])
def test_all_topics_when_none_are_named(view: LogBrokerView, version: int) -> None:
    run(view.create_topic("b", 1))
    run(view.create_topic("a", 2))
    decoded = ask(view, version, [] if version == 0 else None)
    assert [(t.name, len(t.partitions)) for t in decoded.topics] == [("a", 2), ("b", 1)]


def test_an_empty_topic_list_asks_for_no_topic_from_v1(view: LogBrokerView) -> None:
    run(view.create_topic("a", 1))
    assert ask(view, 1, []).topics == ()


@pytest.mark.parametrize("version", [0, 12])
def test_partitions_on_other_nodes_are_led_by_their_nodes_brokers(view: LogBrokerView, version: int) -> None:
    """Other nodes' announced listeners are brokers too, each partition is led by its node's broker, and a
    partition whose node runs no listener is led by this one."""
    run(view.announce(BrokerEndpoint(3, "node-b", 9092)))
    run(view.announce(BrokerEndpoint(7, "stale-address-of-this-node", 1)))
    run(view.create_topic("spread", 3))
    view.place(
        "spread", (PartitionInfo(leader=3, replicas=(3,), isr=(3,)), PartitionInfo(), PartitionInfo(7, 0, (7,), (7,)))
    )
    decoded = ask(view, version, ["spread"])
    assert [(b.node_id, b.host, b.port) for b in decoded.brokers] == [(3, "node-b", 9092), (7, "broker.example", 19092)]
    (topic,) = decoded.topics
    assert [(p.partition_index, p.leader_id, tuple(p.replica_nodes)) for p in topic.partitions] == [
        (0, 3, (3,)),
        (1, 7, (7,)),
        (2, 7, (7,)),
    ]


@pytest.mark.parametrize("version", VERSIONS)
def test_replicated_partitions_carry_their_epoch_replicas_isr_and_offline_replicas(
    view: LogBrokerView, version: int
) -> None:
    """Three brokers: partition 0 fully in sync, partition 1 led by 3 in epoch 4 with broker 9 out of the ISR and
    not running, partition 2 offline (no in-sync replica runs): LEADER_NOT_AVAILABLE and leader -1."""
    run(view.create_topic("replicated", 3))
    view.place(
        "replicated",
        (
            PartitionInfo(leader=7, leader_epoch=0, replicas=(7, 3, 9), isr=(7, 3, 9)),
            PartitionInfo(leader=3, leader_epoch=4, replicas=(9, 3, 7), isr=(3, 7), offline_replicas=(9,)),
            PartitionInfo(
                leader=None, leader_epoch=2, replicas=(3, 9, 7), isr=(9,), offline_replicas=(9,), offline=True
            ),
        ),
        replication_factor=3,
    )
    (topic,) = ask(view, version, ["replicated"]).topics
    assert topic.error_code == ErrorCode.none
    described = [
        (p.partition_index, p.error_code, p.leader_id, tuple(p.replica_nodes), tuple(p.isr_nodes))
        for p in topic.partitions
    ]
    assert described == [
        (0, ErrorCode.none, 7, (7, 3, 9), (7, 3, 9)),
        (1, ErrorCode.none, 3, (9, 3, 7), (3, 7)),
        (2, ErrorCode.leader_not_available, -1, (3, 9, 7), (9,)),
    ]
    if version >= 5:
        assert [tuple(p.offline_replicas) for p in topic.partitions] == [(), (9,), (9,)]
    if version >= 7:
        assert [p.leader_epoch for p in topic.partitions] == [0, 4, 2]


def test_a_leader_whose_node_runs_no_listener_is_this_listener_with_the_replicas_that_have_one(
    view: LogBrokerView,
) -> None:
    """The leader's node has no listener, so this one serves the partition; the replicas listed are those with a
    broker id, and when none has one, this listener stands for them."""
    run(view.create_topic("unlisted", 2))
    view.place(
        "unlisted",
        (
            PartitionInfo(leader=None, leader_epoch=1, replicas=(3,), isr=(3,)),
            PartitionInfo(leader=None, leader_epoch=1),
        ),
        replication_factor=2,
    )
    (topic,) = ask(view, 12, ["unlisted"]).topics
    assert [(p.error_code, p.leader_id, tuple(p.replica_nodes), tuple(p.isr_nodes)) for p in topic.partitions] == [
        (ErrorCode.none, 7, (3,), (3,)),
        (ErrorCode.none, 7, (7,), (7,)),
    ]
