"""Metadata: this listener is the one broker and every partition's leader unless the controller placed partitions
on other nodes' brokers; replicated partitions carry their epoch, replicas, ISR and offline replicas, and one without a
leader answers LEADER_NOT_AVAILABLE with leader -1, as Kafka's does; unknown topics are auto-created with
`num.partitions` when allowed, else answered UNKNOWN_TOPIC_OR_PARTITION; topics carry their ids and v12 names them by
id; every served version encodes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode

from actors.core.in_process_broker import InProcessBroker
from cluster.protocol.framing import decode_response, encode_response
from cluster.protocol.handlers.metadata import METADATA_KEY, MetadataHandler
from cluster.protocol.messages import build
from cluster.protocol.router import SERVED
from cluster.protocol.views.broker_view import BrokerEndpoint
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from storage.errors import BrokerNotAvailableError
from tests.cluster.protocol.helpers import request, run, start_broker

ENDPOINT = BrokerEndpoint(7, "broker.example", 19092)
VERSIONS = range(SERVED[METADATA_KEY].min_version, SERVED[METADATA_KEY].max_version + 1)


def ask(
    view: InProcessBrokerView, version: int, topics: list[str] | None, allow_create: bool = True, enable: bool = True
):  # type: ignore[no-untyped-def]
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
def test_an_unknown_topic_is_created_with_num_partitions_led_by_this_broker(
    view: InProcessBrokerView, version: int
) -> None:
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
        assert decoded.cluster_id == view.broker.controller.cluster_id()
    if version >= 7:
        assert {p.leader_epoch for p in topic.partitions} == {0}


@pytest.mark.parametrize("version", [4, 12])
def test_no_auto_creation_when_the_request_or_the_broker_forbids_it(view: InProcessBrokerView, version: int) -> None:
    for allow, enable in ((False, True), (True, False)):
        (topic,) = ask(view, version, ["missing"], allow_create=allow, enable=enable).topics
        assert topic.error_code == ErrorCode.unknown_topic_or_partition
    assert run(view.topics()) == {}


def test_an_invalid_topic_name_is_answered_invalid_topic(view: InProcessBrokerView) -> None:
    (topic,) = ask(view, 12, ["no/slashes"]).topics
    assert topic.error_code == ErrorCode.invalid_topic_exception


@pytest.mark.parametrize("version", [0, 1, 12])
def test_all_topics_when_none_are_named(view: InProcessBrokerView, version: int) -> None:
    run(view.create_topic("b", 1))
    run(view.create_topic("a", 2))
    decoded = ask(view, version, [] if version == 0 else None)
    assert [(t.name, len(t.partitions)) for t in decoded.topics] == [("a", 2), ("b", 1)]


def test_an_empty_topic_list_asks_for_no_topic_from_v1(view: InProcessBrokerView) -> None:
    run(view.create_topic("a", 1))
    assert ask(view, 1, []).topics == ()


@pytest.mark.parametrize("version", [9, 10, 12])
def test_topics_carry_their_id_from_v10(view: InProcessBrokerView, version: int) -> None:
    created = run(view.create_topic("a", 1)).topic_id
    for decoded in (ask(view, version, ["a"]), ask(view, version, None)):
        (topic,) = decoded.topics
        assert getattr(topic, "topic_id", None) == (created if version >= 10 else None)


def ask_by_id(view: InProcessBrokerView, version: int, topics: list[tuple[str | None, uuid.UUID | None]]) -> Any:
    values = {
        "topics": [{"name": name, "topic_id": topic_id} for name, topic_id in topics],
        "allow_auto_topic_creation": True,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False,
    }
    body = build(load_request_schema(METADATA_KEY, version), values)
    response = run(MetadataHandler(view, ENDPOINT, True, 3)(request(body)))
    return decode_response(encode_response(1, response)[4:], load_response_schema(METADATA_KEY, version))[1]


def test_v12_names_topics_by_id_and_answers_unknown_ids_unknown_topic_id(view: InProcessBrokerView) -> None:
    known = run(view.create_topic("known", 2)).topic_id
    unknown = uuid.UUID(int=2**100 + 3)
    decoded = ask_by_id(view, 12, [(None, known), (None, unknown)])
    assert [(t.name, t.topic_id, t.error_code, len(t.partitions)) for t in decoded.topics] == [
        ("known", known, ErrorCode.none, 2),
        (None, unknown, ErrorCode.unknown_topic_id, 0),
    ]
    assert set(run(view.topics())) == {"known"}  # nothing is created by id


@pytest.mark.parametrize("version", [10, 11])
def test_before_v12_a_topic_named_by_id_or_by_no_name_is_an_invalid_request(
    view: InProcessBrokerView, version: int
) -> None:
    known = run(view.create_topic("known", 1)).topic_id
    decoded = ask_by_id(view, version, [("known", None), (None, known)])
    assert [(t.name, t.error_code) for t in decoded.topics] == [
        ("known", ErrorCode.invalid_request),
        ("", ErrorCode.invalid_request),
    ]
    assert decoded.brokers == ()


@pytest.fixture
def three_nodes(tmp_path: Path) -> Iterator[InProcessBroker]:
    """Brokers on three nodes; the listeners of node-0 (this one, node.id 7) and node-1 (node.id 3) announce."""
    running = start_broker(tmp_path / "three", nodes=3)
    try:
        run(InProcessBrokerView(running, "node-1").announce(BrokerEndpoint(3, "node-b", 9092)))
        yield running
    finally:
        running.close()


def node_of(broker: InProcessBroker, topic: str) -> dict[int, str]:
    """partition -> the node of its leader, as the controller placed it."""
    described = broker.controller.describe_topic(topic)
    return {partition: described.state(partition).leader for partition in described.partitions}


@pytest.mark.parametrize("version", [0, 12])
def test_partitions_on_other_nodes_are_led_by_their_nodes_brokers(three_nodes: InProcessBroker, version: int) -> None:
    """Other nodes' announced listeners are brokers too, each partition is led by its node's broker, and a
    partition whose node runs no listener (node-2) is led by this one, which stands for its replicas too."""
    view = InProcessBrokerView(three_nodes, "node-0")
    run(view.announce(BrokerEndpoint(7, "stale-address-of-this-node", 1)))
    run(view.create_topic("spread", 3))
    placed = node_of(three_nodes, "spread")
    assert sorted(placed.values()) == ["node-0", "node-1", "node-2"], "one partition on each node"
    decoded = ask(view, version, ["spread"])
    assert [(b.node_id, b.host, b.port) for b in decoded.brokers] == [(3, "node-b", 9092), (7, "broker.example", 19092)]
    (topic,) = decoded.topics
    broker_id = {"node-0": 7, "node-1": 3, "node-2": 7}
    assert [(p.partition_index, p.leader_id, tuple(p.replica_nodes)) for p in topic.partitions] == [
        (partition, broker_id[placed[partition]], (broker_id[placed[partition]],)) for partition in range(3)
    ]


@pytest.mark.parametrize("version", VERSIONS)
def test_replicated_partitions_carry_their_epoch_replicas_isr_and_offline_replicas(
    three_nodes: InProcessBroker, version: int
) -> None:
    """Three replicas each; partition 2's followers fail and its ISR shrinks to its leader, then that leader's node
    (node.id 9, whose listener stays announced) is lost: the other partitions elect a new leader in a new epoch with 9
    out of the ISR and offline, partition 2 goes offline (no in-sync replica runs): LEADER_NOT_AVAILABLE and leader
    -1. The oracle is the controller's state, in the listeners' broker ids."""
    view = InProcessBrokerView(three_nodes, "node-0")
    run(view.announce(ENDPOINT))
    run(view.create_topic("replicated", 3, replication_factor=3))
    lost = three_nodes.controller.partition_state("replicated", 2)
    # Partition 2's followers stop (their replicas fail), so its leader is left alone in its ISR.
    for follower in lost.replicas[1:]:
        three_nodes.replica_on(follower, "replicated", 2).replica.stop(BrokerNotAvailableError("stopped"), 5.0)
    three_nodes.controller.alter_partition("replicated", 2, lost.leader, lost.leader_epoch, lost.version, [lost.leader])
    lost_endpoint = BrokerEndpoint(9, "lost-node", 9092)
    run(InProcessBrokerView(three_nodes, lost.leader).announce(lost_endpoint))
    three_nodes.lose_node(lost.leader)
    run(InProcessBrokerView(three_nodes, lost.leader).announce(lost_endpoint))
    listeners = {node: found.broker_id for node, found in three_nodes.controller.listeners().items()}
    states = [three_nodes.controller.partition_state("replicated", p) for p in range(3)]
    assert states[2].offline and all(not state.offline for state in states[:2])

    (topic,) = ask(view, version, ["replicated"]).topics
    assert topic.error_code == ErrorCode.none
    described = [
        (p.partition_index, p.error_code, p.leader_id, tuple(p.replica_nodes), tuple(p.isr_nodes))
        for p in topic.partitions
    ]

    def ids(nodes: tuple[str, ...]) -> tuple[int, ...]:
        return tuple(listeners[node] for node in nodes if node in listeners)

    assert described == [
        (
            p,
            ErrorCode.leader_not_available if state.offline else ErrorCode.none,
            -1 if state.offline else listeners[state.leader],
            ids(state.replicas),
            ids(state.isr),
        )
        for p, state in enumerate(states)
    ]
    if version >= 5:
        assert [tuple(p.offline_replicas) for p in topic.partitions] == [(9,), (9,), (9,)]
    if version >= 7:
        assert [p.leader_epoch for p in topic.partitions] == [state.leader_epoch for state in states]
        assert [p.leader_epoch for p in topic.partitions][2] == lost.leader_epoch + 1


def test_a_leader_whose_node_runs_no_listener_is_this_listener_with_the_replicas_that_have_one(
    three_nodes: InProcessBroker,
) -> None:
    """The leader's node (node-2) has no listener, so this one serves the partition; the replicas listed are those
    with a broker id, and when none has one, this listener stands for them."""
    view = InProcessBrokerView(three_nodes, "node-0")
    run(view.announce(ENDPOINT))
    run(view.create_topic("unlisted", 3, replication_factor=2))
    states = [three_nodes.controller.partition_state("unlisted", p) for p in range(3)]
    listeners = {"node-0": 7, "node-1": 3}
    unlisted = [p for p, state in enumerate(states) if state.leader == "node-2"]
    assert unlisted, "node-2 leads a partition"
    (topic,) = ask(view, 12, ["unlisted"]).topics
    for partition in unlisted:
        described = topic.partitions[partition]
        listed = tuple(listeners[node] for node in states[partition].replicas if node in listeners)
        assert (described.error_code, described.leader_id) == (ErrorCode.none, 7)
        assert tuple(described.replica_nodes) == (listed or (7,))
