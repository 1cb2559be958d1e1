"""How the broker views (`RayBrokerView`, `InProcessBrokerView`) turn the controller's replication state (node ids) into
what Metadata lists (Kafka broker ids), as the plain function `topic_info` of the topic, the listeners and the running
brokers. The oracle is the rule the Metadata handler documents: a replica is named by its node's listener `node.id`,
left out without one; a partition without a leader is offline; listed replicas whose broker is not running are
offline replicas. And what a view answers while its controller is unreachable (Kafka's metadata cache)."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from actors.core.controller.topic_metadata import AdvertisedListener, TopicMetadata
from actors.core.in_process_broker import InProcessBroker
from actors.core.replication.leader_and_isr import NO_LEADER, LeaderAndIsr
from cluster.protocol.views.broker_view import BrokerView, PartitionInfo, topic_info
from cluster.protocol.views.in_process_broker_view import InProcessPartitions
from cluster.protocol.views.transport import EVERY_METHOD, InProcessTransport
from storage.errors import BrokerNotAvailableError, UnknownTopicOrPartitionError
from tests.cluster.protocol.helpers import run

# Ray nodes a, b, c run brokers; a and b run listeners (node.id 1 and 2); d ran a broker once and is gone.
LISTENERS = {"a": AdvertisedListener(1, "host-a", 9092), "b": AdvertisedListener(2, "host-b", 9092)}
LIVE = frozenset({"a", "b", "c"})


def topic(*states: LeaderAndIsr) -> TopicMetadata:
    return TopicMetadata(
        "t", {s.partition: s.leader or s.replicas[0] for s in states}, {}, {s.partition: s for s in states}
    )


def test_replicas_are_named_by_their_listeners_node_ids_in_assignment_order() -> None:
    info = topic_info(
        topic(
            LeaderAndIsr("t", 0, "b", 3, ("b", "a", "c"), ("b", "a", "c")),
            LeaderAndIsr("t", 1, "a", 0, ("a", "b", "c"), ("a",)),
        ),
        LISTENERS,
        LIVE,
    )
    assert (info.name, info.partition_count, info.replication_factor) == ("t", 2, 3)
    assert info.partitions == (
        PartitionInfo(leader=2, leader_epoch=3, replicas=(2, 1), isr=(2, 1)),
        PartitionInfo(leader=1, leader_epoch=0, replicas=(1, 2), isr=(1,)),
    )


def test_a_leader_on_a_node_without_listener_is_none_but_not_offline() -> None:
    (partition,) = topic_info(topic(LeaderAndIsr("t", 0, "c", 1, ("c", "a"), ("c", "a"))), LISTENERS, LIVE).partitions
    assert partition == PartitionInfo(leader=None, leader_epoch=1, replicas=(1,), isr=(1,))


def test_a_partition_without_leader_is_offline_and_its_stopped_listed_replicas_are_offline_replicas() -> None:
    listeners = {**LISTENERS, "d": AdvertisedListener(4, "host-d", 9092)}
    state = LeaderAndIsr("t", 0, NO_LEADER, 5, ("d", "a"), ("d",))
    (partition,) = topic_info(topic(state), listeners, LIVE).partitions
    assert partition == PartitionInfo(
        leader=None, leader_epoch=5, replicas=(4, 1), isr=(4,), offline_replicas=(4,), offline=True
    )


def test_a_topic_from_before_replication_has_its_one_replica_leading_in_epoch_0() -> None:
    legacy = TopicMetadata("old", {0: "a", 1: "c"}, {})
    info = topic_info(legacy, LISTENERS, LIVE)
    assert info.replication_factor == 1
    assert info.partitions == (PartitionInfo(1, 0, (1,), (1,)), PartitionInfo(None, 0, (), ()))


def test_metadata_is_answered_from_the_last_answers_while_the_controller_is_unreachable(
    broker: InProcessBroker,
) -> None:
    """Kafka's metadata cache: a listener whose controller went away (its head lost) answers what the controller
    last said; a question never answered raises; an answered error (the topic deleted) forgets the last answer."""
    lost = False

    def controller() -> object:
        if lost:
            raise BrokerNotAvailableError("the controller's head is gone")
        return broker.controller

    view = BrokerView(InProcessTransport(controller, inline=EVERY_METHOD), InProcessPartitions(broker), "node-0")
    run(view.create_topic("kept", 2))
    run(view.create_topic("deleted", 1))
    before = (run(view.topics()), run(view.topic("kept")), run(view.topic("deleted")), run(view.brokers()))
    lost = True
    assert (run(view.topics()), run(view.topic("kept")), run(view.topic("deleted")), run(view.brokers())) == before
    with pytest.raises(BrokerNotAvailableError):
        run(view.topic("never-asked"))
    lost = False
    run(view.delete_topic("deleted"))
    with pytest.raises(UnknownTopicOrPartitionError):
        run(view.topic("deleted"))
    lost = True
    with pytest.raises(BrokerNotAvailableError):
        run(view.topic("deleted"))


class CountingController:
    """The in-process broker's controller, counting the calls of each method the view makes."""

    def __init__(self, broker: InProcessBroker) -> None:
        self._controller = broker.controller
        self.calls: Counter[str] = Counter()

    def __getattr__(self, method: str) -> object:
        self.calls[method] += 1
        return getattr(self._controller, method)


def test_concurrent_requests_share_one_brokers_call_but_each_asks_for_its_topic(broker: InProcessBroker) -> None:
    """A Metadata request asks the brokers and listeners twice (its brokers, its partitions' replicas), and every
    member of a rebalancing group asks at once: a question of the cluster's brokers joins the same one in flight,
    while each topic question is asked anew (a topic just created or changed is seen by the next request)."""
    counting = CountingController(broker)
    view = BrokerView(InProcessTransport(lambda: counting, inline=EVERY_METHOD), InProcessPartitions(broker), "node-0")
    run(view.create_topic("t", 2))
    counting.calls.clear()

    async def together() -> list[object]:
        return list(await asyncio.gather(view.brokers(), view.topic("t"), view.topic("t"), view.brokers()))

    first_brokers, first_topic, second_topic, second_brokers = run(together())
    assert first_brokers == second_brokers and first_topic == second_topic
    assert (counting.calls["listeners"], counting.calls["brokers"], counting.calls["describe_topic"]) == (1, 1, 2)
    run(view.brokers())
    assert counting.calls["listeners"] == 2
