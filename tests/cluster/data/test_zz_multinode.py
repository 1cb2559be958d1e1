"""Ray Data over three Ray nodes on this machine (`ray.cluster_utils.Cluster`: a head and two workers, each with its
own log dir and broker): `read_topic`'s tasks run on the node of their partition's leader (counted from the blocks'
execution stats), and when a worker node is removed, a read planned before (its tasks pinned to the dead node) and
a read planned after both read every record, through the partitions' new leaders. The oracle is what was produced.

This module needs its own Ray cluster: it stops the shared session's broker and Ray first (`OWNS_RAY`, so it runs
after every other test of the session). Ray's health checks are shortened so that a removed node is declared dead
within about a second."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import ray

from actors.clients.admin import Admin
from actors.clients.broker import Broker
from actors.clients.producer import Producer
from cluster.data import read_topic
from cluster.data.locality import read_locality
from cluster.data.read_planning import plan_topic_read
from tests.actors.three_nodes import Nodes, three_nodes

pytestmark = [pytest.mark.ray, pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")]
OWNS_RAY = True

# One CPU per node (`tests.actors.three_nodes.NODE_ARGS`): a node runs one read task at a time, so pinning is visible.
BROKER_SETTINGS = {
    "offsets.topic.num.partitions": "1",
    "log.initial.task.delay.ms": "200",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.backoff.ms": "100",
    # Partition hosts as by default, without a spare started ahead on each node: the reads are the test, not
    # creating topics.
    "log.partitions.spare.processes": "0",
}
PARTITIONS = 6
RECORDS = 300
COLUMNS = ["topic", "partition", "offset", "value"]


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    with three_nodes(tmp_path_factory.mktemp("ray-data-nodes"), BROKER_SETTINGS) as state:
        ray.data.DataContext.get_current().enable_progress_bars = False
        yield state


def leaders(topic: str) -> dict[int, str]:
    metadata = Broker.connect().topic(topic)
    return {p: metadata.state(p).leader for p in metadata.partitions}


def positions(dataset: Any) -> list[tuple[int, int, bytes]]:
    return sorted((row["partition"], row["offset"], row["value"]) for row in dataset.take_all())


def test_reads_run_on_their_leaders_nodes_and_survive_a_removed_node(nodes: Nodes) -> None:
    Admin().create_topic("spread", partitions=PARTITIONS, replication_factor=2)
    led = leaders("spread")
    assert set(led.values()) == {nodes.head, *nodes.workers}, "leaders on all three nodes"
    with Producer(acks="all") as producer:
        for partition in range(PARTITIONS):
            values = [f"p{partition}-{i}".encode() for i in range(RECORDS)]
            producer.send_many("spread", values, partition=partition).result()
    produced = sorted((p, i, f"p{p}-{i}".encode()) for p in range(PARTITIONS) for i in range(RECORDS))

    plan = plan_topic_read("spread")
    assert {tp[1]: node for tp, node in plan.leaders.items()} == led
    locality = read_locality(read_topic("spread", columns=COLUMNS), plan.leaders)
    assert locality.tasks >= PARTITIONS and locality.local_tasks == locality.tasks, locality
    assert locality.rows == len(produced)

    planned_before = read_topic("spread", columns=COLUMNS)
    victim = next(node for node in sorted(nodes.workers) if node in led.values())
    moved = sorted(p for p, node in led.items() if node == victim)
    nodes.remove(victim)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(leaders("spread")[p] == victim for p in moved):
        time.sleep(0.1)
    after = leaders("spread")
    assert all(after[p] != victim for p in moved), "the removed node's partitions have new leaders"

    assert positions(planned_before) == produced, "tasks pinned to the dead node ran elsewhere, fetching remotely"
    replanned = plan_topic_read("spread")
    assert victim not in replanned.leaders.values()
    again = read_locality(read_topic("spread", columns=COLUMNS), replanned.leaders)
    assert again.rows == len(produced) and again.local_tasks == again.tasks, again
