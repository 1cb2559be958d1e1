"""Replication across three Ray nodes on this machine (`ray.cluster_utils.Cluster`: a head and two workers), each with
its own log dirs and broker: replicas on distinct nodes, `acks=all`, followers identical to their leader, failover
when a node is removed, and the removed node's disks rejoining on a new node.

Ray's health checks are shortened (`HEALTH_CHECKS`) so that a node killed without notice is declared dead within
about 2 s rather than Ray's default of about 15 s (5 failed checks 3 s apart), which bounds failover.

This module needs its own Ray cluster: it stops the shared session's broker and Ray first (`OWNS_RAY`, so it runs
after every other test of the session), and only worker nodes are removed: the head holds the controller and its
metadata log, which Kafka's KRaft quorum would replicate and raybroker does not."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import ray
from ray.cluster_utils import Cluster
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.calls import call
from actors.clients.admin import Admin
from actors.clients.broker import Broker, stop_broker
from actors.clients.consumer import Consumer
from actors.clients.producer import Producer
from actors.partition_lookup import replica_actor
from actors.server.replication.leader_and_isr import LeaderAndIsr
from storage.errors import BrokerNotAvailableError, InvalidReplicationFactorError, NotEnoughReplicasError
from storage.records.file_records import iter_any_batches
from storage.records.record_batch import RecordBatch

pytestmark = pytest.mark.ray
OWNS_RAY = True

NODE_ARGS = {"num_cpus": 1, "object_store_memory": 128 * 1024 * 1024}
HEALTH_CHECKS = {"health_check_period_ms": 300, "health_check_timeout_ms": 300, "health_check_failure_threshold": 3}
BROKER_SETTINGS = {
    "offsets.topic.num.partitions": "1",
    "log.initial.task.delay.ms": "200",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.backoff.ms": "100",
    "leader.imbalance.check.interval.seconds": "2",
}


@ray.remote(num_cpus=0)
def start_broker_here(properties: dict[str, str]) -> str:
    from actors.clients.broker import start_broker

    return start_broker(properties)


@dataclass
class Nodes:
    """The cluster, the head's node id, and each live node's log dirs."""

    cluster: Cluster
    head: str
    dirs: dict[str, list[Path]]
    workers: dict[str, Any]

    def start_broker(self, node: str, log_dirs: list[Path]) -> None:
        properties = {"log.dirs": ",".join(str(d) for d in log_dirs), **BROKER_SETTINGS}
        pinned = NodeAffinitySchedulingStrategy(node_id=node, soft=False)
        assert ray.get(start_broker_here.options(scheduling_strategy=pinned).remote(properties)) == node

    def remove(self, node: str) -> list[Path]:
        """Removes a worker node (its raylet and every process on it); returns its log dirs."""
        self.cluster.remove_node(self.workers.pop(node), allow_graceful=False)
        return self.dirs.pop(node)

    def add(self, log_dirs: list[Path]) -> str:
        """A new worker node over `log_dirs` (a replaced host with the old disks), with its broker."""
        before = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        worker = self.cluster.add_node(**NODE_ARGS)
        self.cluster.wait_for_nodes()
        node = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] not in before)
        self.workers[node] = worker
        self.dirs[node] = log_dirs
        self.start_broker(node, log_dirs)
        return node


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    if ray.is_initialized():
        with contextlib.suppress(BrokerNotAvailableError):
            stop_broker()
        ray.shutdown()
    os.environ["RAY_LOG_TO_DRIVER"] = "0"
    cluster = Cluster(
        initialize_head=True,
        head_node_args={**NODE_ARGS, "include_dashboard": False, "_system_config": HEALTH_CHECKS},
    )
    try:
        workers = [cluster.add_node(**NODE_ARGS) for _ in range(2)]
        ray.init(address=cluster.address, namespace="raybroker", log_to_driver=False, logging_level="ERROR")
        cluster.wait_for_nodes()
        head = ray.get_runtime_context().get_node_id()
        root = tmp_path_factory.mktemp("replication")
        alive = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
        others = sorted(node for node in alive if node != head)
        by_id = {worker.node_id: worker for worker in workers}
        state = Nodes(cluster, head, {}, {node: by_id[node] for node in others})
        for index, node in enumerate([head, *others]):
            state.dirs[node] = [root / f"node{index}-dir0"]
            state.start_broker(node, state.dirs[node])
        yield state
        with contextlib.suppress(BrokerNotAvailableError):
            stop_broker()
    finally:
        ray.shutdown()
        cluster.shutdown()


def wait_until(condition: Any, timeout_s: float = 60.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what} not reached within {timeout_s} s")


def states(topic: str) -> dict[int, LeaderAndIsr]:
    metadata = Broker.connect().topic(topic)
    return {p: metadata.state(p) for p in metadata.partitions}


def replica_records(topic: str, partition: int, node: str, upto: int) -> list[tuple[int, bytes | None, int]]:
    """(offset, value, batch leader epoch) of every record below `upto` in the replica on `node` (its `read`, up to
    its own high watermark, which a follower takes from its leader)."""
    data = call(replica_actor(topic, partition, node).read.remote(0, 1 << 24))
    return [
        (record.offset, record.value, batch.partition_leader_epoch)
        for batch in iter_any_batches(data)
        if isinstance(batch, RecordBatch)
        for record in batch.records()
        if record.offset < upto
    ]


def test_replicas_go_to_distinct_nodes_and_too_many_is_refused(nodes: Nodes) -> None:
    admin = Admin()
    admin.create_topic("spread3", partitions=3, replication_factor=3)
    for partition, state in states("spread3").items():
        assert sorted(state.replicas) == sorted(nodes.dirs), partition
        assert state.isr == state.replicas and state.leader == state.replicas[0] and state.leader_epoch == 0
    # Leadership spreads over the brokers, counting __consumer_offsets, whose one partition came first.
    leaders = [s.leader for topic in ("spread3", "__consumer_offsets") for s in states(topic).values()]
    assert sorted(leaders.count(node) for node in nodes.dirs) == [1, 1, 2]
    with pytest.raises(InvalidReplicationFactorError):
        admin.create_topic("too-many", partitions=1, replication_factor=4)


def test_acks_all_writes_reach_every_replica_identically(nodes: Nodes) -> None:
    Admin().create_topic("copies", partitions=2, replication_factor=3)
    sent = {p: [f"p{p}-v{i}".encode() for i in range(300)] for p in range(2)}
    with Producer(acks="all", linger_ms=2) as producer:
        futures = [producer.send("copies", value, partition=p) for p, values in sent.items() for value in values]
        offsets = [future.result(timeout=60) for future in futures]
    assert all(meta.offset >= 0 for meta in offsets)
    for partition, values in sent.items():
        state = states("copies")[partition]
        leader = replica_actor("copies", partition, state.leader)
        _, high_watermark, log_end = call(leader.offsets.remote())
        assert high_watermark == log_end == len(values)
        expected = wait_until(
            lambda p=partition, s=state: all(
                len(replica_records("copies", p, node, 300)) == 300 for node in s.replicas
            ),
            what="followers caught up",
        )
        assert expected
        copies = [replica_records("copies", partition, node, len(values)) for node in state.replicas]
        assert copies[0] == copies[1] == copies[2]
        assert [value for _, value, _ in copies[0]] == [serialized(value) for value in values]


def serialized(value: bytes) -> bytes:
    from actors.clients.serializers import default_serializer

    return default_serializer(value)


def test_min_insync_replicas_refuses_acks_all_writes(nodes: Nodes) -> None:
    Admin().create_topic("strict", partitions=1, replication_factor=3, config={"min.insync.replicas": "4"})
    with Producer(acks="all", retries=0) as producer:
        with pytest.raises(NotEnoughReplicasError):
            producer.send("strict", b"refused", partition=0).result(timeout=60)
        assert producer.send("strict", b"acks=1 is not refused", partition=0) is not None
    with Producer(acks=1) as producer:
        assert producer.send("strict", b"written", partition=0).result(timeout=60).offset == 0


def test_a_removed_leader_fails_over_and_its_disks_rejoin(nodes: Nodes) -> None:
    Admin().create_topic("failover", partitions=1, replication_factor=3)
    leader = states("failover")[0].leader
    if leader == nodes.head:
        # Only workers are removed: make a worker lead by electing one (the head's replica leaves the ISR first).
        pytest.skip("the head leads this partition; placement put a worker first for every earlier test")
    with Producer(acks="all", retries=1_000_000, retry_backoff_max_ms=200) as producer:
        for i in range(100):
            producer.send("failover", f"before-{i}".encode(), partition=0)
        producer.flush()
        removed_at = time.monotonic()
        old_dirs = nodes.remove(leader)
        wait_until(lambda: states("failover")[0].leader != leader, what="a new leader")
        elected_s = time.monotonic() - removed_at
        after = producer.send("failover", b"after", partition=0).result(timeout=120)
        failover_s = time.monotonic() - removed_at
    state = states("failover")[0]
    assert state.leader != leader and state.leader_epoch == 1 and leader not in state.isr
    assert after.offset == 100
    assert elected_s < 10 and failover_s < 15, (elected_s, failover_s)
    consumer = Consumer(group_id="failover-reader", auto_offset_reset="earliest")
    consumer.assign([("failover", 0)])
    values: list[bytes | None] = []
    deadline = time.monotonic() + 60
    while len(values) < 101 and time.monotonic() < deadline:
        values.extend(record.value for record in consumer.poll(timeout_ms=500))
    consumer.close()
    assert values == [f"before-{i}".encode() for i in range(100)] + [b"after"]

    rejoined = nodes.add(old_dirs)

    def rejoined_isr() -> LeaderAndIsr | None:
        current = states("failover")[0]
        return current if rejoined in current.isr else None

    state = wait_until(rejoined_isr, what="the old disks back in the ISR")
    assert rejoined in state.replicas and leader not in state.replicas
    copies = [replica_records("failover", 0, node, 101) for node in state.replicas]
    assert copies[0] == copies[1] == copies[2]
