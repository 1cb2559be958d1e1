"""Spare partition hosts on a real local Ray (`log.partitions.per.process=2`, `log.partitions.spare.processes=1`):
the log manager keeps one host holding nothing started, a new topic opens in that running host (not in a process
started for it) and another spare starts behind it, and a host emptied by a delete is the next topic's again
without a new process. The oracle is the hosts' own lists of what they hold, and the hosts' names (one per index,
started in order).

Slow (~4 s): a broker of its own and three host processes, since spares are off in the test brokers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import ray

from actors.calls import call, get_actor
from actors.clients.broker import Broker
from actors.options import partition_host_name
from actors.server.partition_lookup import HostedPartitionHandle
from storage.errors import BrokerNotAvailableError
from storage.topic_partition import TopicPartition
from tests.actors.support import wait_for

pytestmark = pytest.mark.ray

StartBroker = Callable[..., tuple[Broker, list[Path]]]


def hosts() -> list[tuple[Any, list[TopicPartition]]]:
    """This node's running partition hosts, by index, with the partitions each holds."""
    node = ray.get_runtime_context().get_node_id()
    found: list[tuple[Any, list[TopicPartition]]] = []
    while True:
        try:
            handle = get_actor(partition_host_name(node, len(found)))
        except BrokerNotAvailableError:
            return found
        found.append((handle, [(t, p) for t, p in call(handle.partitions.remote(), timeout_s=60)]))


def held() -> list[list[TopicPartition]]:
    return [sorted(partitions) for _, partitions in hosts()]


def test_a_new_topic_opens_in_the_spare_host_and_a_new_spare_starts_behind_it(start_test_broker: StartBroker) -> None:
    client, _ = start_test_broker(log_dirs_count=1, log_partitions_per_process="2", log_partitions_spare_processes="1")
    offsets = [("__consumer_offsets", 0), ("__consumer_offsets", 1)]
    # The two __consumer_offsets partitions fill host 0; host 1 is the spare, running and holding nothing.
    assert held() == [offsets, []]
    spare = hosts()[1][0]
    call(client.controller.create_topic.remote("fresh", 2))
    handles = [client.partition("fresh", p) for p in range(2)]
    assert all(isinstance(h, HostedPartitionHandle) and h.host._actor_id == spare._actor_id for h in handles)
    assert held() == [offsets, [("fresh", 0), ("fresh", 1)], []]
    # Every partition answers from its host, empty.
    for handle in handles:
        assert call(handle.offsets.remote()) == (0, 0, 0)

    call(client.controller.delete_topic.remote("fresh"))
    wait_for(lambda: held() == [offsets, [], []], what="the deleted topic's host emptied")
    call(client.controller.create_topic.remote("reborn", 1))
    # The lowest host with room takes it; host 2 stays the spare and no host 3 starts.
    assert held() == [offsets, [("reborn", 0)], []]
    assert client.partition("reborn", 0).host._actor_id == spare._actor_id
