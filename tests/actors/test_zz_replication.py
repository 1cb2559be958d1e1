"""Replication across three Ray nodes on this machine (`ray.cluster_utils.Cluster`: a head and two workers), each with
its own log dirs and broker: replicas on distinct nodes, `acks=all`, followers identical to their leader, failover
when a node is removed, the removed node's disks rejoining on a new node, a node lost for good healed onto a
node that joins, and a node drained and let go to Ray.

Ray's health checks are shortened (`tests.actors.three_nodes.HEALTH_CHECKS`) so that a node killed without notice is
declared dead within about 2 s rather than Ray's default of about 15 s (5 failed checks 3 s apart), which bounds
failover.

This module needs its own Ray cluster: it stops the shared session's broker and Ray first (`OWNS_RAY`, so it runs
after every other test of the session), and only worker nodes are removed: the head holds the controller and its
metadata log, which Kafka's KRaft quorum would replicate and raybroker does not.

The brokers host their partitions as a broker does by default (`log.partitions.per.process=16`, one spare host
started ahead), so a topic's creation is checked to answer with its full ISR on the path users run."""

from __future__ import annotations

import contextlib
import itertools
import json
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
import ray

from actors.calls import call, get_actor
from actors.clients.admin import Admin
from actors.clients.broker import Broker
from actors.clients.consumer import Consumer
from actors.clients.producer import Producer
from actors.core.replication.leader_and_isr import LeaderAndIsr
from actors.options import log_manager_name
from actors.server.partition_lookup import HostedPartitionHandle, replica_actor
from cluster.cli.main import main as cli_main
from storage.errors import (
    BrokerNotAvailableError,
    InvalidReplicationFactorError,
    NotEnoughReplicasError,
    OutOfOrderSequenceError,
    RaybrokerError,
    UnknownTopicOrPartitionError,
)
from storage.records.file_records import iter_any_batches
from storage.records.record_batch import RecordBatch
from tests.actors.three_nodes import Nodes, three_nodes
from tests.reliability.modes import scaled

pytestmark = pytest.mark.ray
OWNS_RAY = True

BROKER_SETTINGS = {
    "offsets.topic.num.partitions": "1",
    "log.initial.task.delay.ms": "200",
    "replica.lag.time.max.ms": "3000",
    # A broker silent this long is fenced (Kafka's defaults are 2 s and 9 s).
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "4000",
    "replica.fetch.backoff.ms": "100",
    "leader.imbalance.check.interval.seconds": "2",
    # One partition of coordinator states (Kafka's 50 would open 150 replica processes); timed-out transactions
    # aborted and markers retried every second.
    "transaction.state.log.num.partitions": "1",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
    # Self-healing after 5 s away: earlier tests bring nodes back sooner, or have no broker free to take a replica.
    "raybroker.balancer.node.loss.grace.ms": "5000",
}


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    with three_nodes(tmp_path_factory.mktemp("replication"), BROKER_SETTINGS) as state:
        yield state


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
        assert state.leader == state.replicas[0] and state.leader_epoch == 0
    # Every follower is in sync: created in the ISR, or back in it at its first fetches if it left because they came
    # later than replica.lag.time.max.ms after its leader's start (3 s here; on a loaded machine, as on Kafka).
    wait_until(
        lambda: all(state.isr == state.replicas for state in states("spread3").values()),
        timeout_s=30,
        what="every follower of spread3 in its ISR",
    )
    assert all(state.leader_epoch == 0 for state in states("spread3").values())
    # Leadership spreads over the brokers, counting __consumer_offsets, whose one partition came first.
    leaders = [s.leader for topic in ("spread3", "__consumer_offsets") for s in states(topic).values()]
    assert sorted(leaders.count(node) for node in nodes.dirs) == [1, 1, 2]
    with pytest.raises(InvalidReplicationFactorError):
        admin.create_topic("too-many", partitions=1, replication_factor=4)


def test_a_partition_reassigned_to_another_node_keeps_every_record_there(
    nodes: Nodes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A partition moved to another node with `raybroker reassign` (kafka-reassign-partitions' --generate over that
    node's broker, then --execute of the plan it proposed, --verify and --list) keeps every record there, and its old
    replica is deleted."""
    admin = Admin()
    admin.create_topic("moved", partitions=1, replication_factor=1)
    (source,) = states("moved")[0].replicas
    target = next(node for node in sorted(nodes.dirs) if node != source)
    names = admin.describe_cluster().node_ids
    values = [f"moved-{i}".encode() for i in range(200)]
    with Producer(acks="all", linger_ms=2) as producer:
        for future in [producer.send("moved", value, partition=0) for value in values]:
            future.result(timeout=60)

    def reassign(*arguments: str) -> tuple[int, str, str]:
        code = cli_main(["reassign", *arguments])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    topics, plan = tmp_path / "topics.json", tmp_path / "plan.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": "moved"}]}), encoding="utf-8")
    brokers = str(names.get(target, target))
    code, out, err = reassign("--generate", "--topics-to-move-json-file", str(topics), "--broker-list", brokers)
    assert (code, err) == (0, ""), err
    lines = out.splitlines()
    assert lines[0] == "Current partition replica assignment"
    assert lines[3] == "Proposed partition reassignment configuration"
    assert [p["replicas"] for p in json.loads(lines[1])["partitions"]] == [[names.get(source, source)]]
    assert [p["replicas"] for p in json.loads(lines[4])["partitions"]] == [[names.get(target, target)]]
    plan.write_text(lines[4], encoding="utf-8")
    code, out, err = reassign("--execute", "--reassignment-json-file", str(plan))
    assert (code, err) == (0, ""), err
    rollback = [(p["topic"], p["partition"], p["replicas"]) for p in json.loads(out.splitlines()[2])["partitions"]]
    assert rollback == [("moved", 0, [names.get(source, source)])]
    assert out.splitlines()[-1] == "Successfully started partition reassignment for moved-0"
    wait_until(
        lambda: (
            "Reassignment of partition moved-0 is completed."
            in reassign("--verify", "--reassignment-json-file", str(plan))[1]
        ),
        what="--verify tells the move completed",
    )
    assert states("moved")[0].replicas == (target,)
    assert [value for _, value, _ in replica_records("moved", 0, target, len(values))] == [
        serialized(value) for value in values
    ]
    assert reassign("--list") == (0, "No partition reassignments found.\n", "")
    with pytest.raises(UnknownTopicOrPartitionError):
        replica_actor("moved", 0, source)


def test_a_consumers_offset_lookups_follow_a_leader_that_moved(nodes: Nodes) -> None:
    """A consumer's offset lookups (`seek_to_beginning`, `position`, `offsets_for_times`) keep answering after the
    partition's leadership moved to another replica since the consumer last asked: the replica it asked before, a
    follower now, answers NOT_LEADER_OR_FOLLOWER, and the consumer looks the leader up again, as Kafka's consumer
    retries a retriable ListOffsets error within `default.api.timeout.ms`."""
    admin = Admin()
    admin.create_topic("lead-moves", partitions=1, replication_factor=2)
    first = states("lead-moves")[0]
    tp = ("lead-moves", 0)
    with Producer(acks="all") as producer:
        sent = [producer.send("lead-moves", f"v{i}".encode(), partition=0).result(timeout=60) for i in range(10)]
    with Consumer(auto_offset_reset="earliest", value_deserializer=None) as consumer:
        consumer.assign([tp])
        consumer.seek_to_end()
        assert consumer.position(tp) == 10
        moved = (first.replicas[1], first.replicas[0])
        assert admin.alter_partition_reassignments({tp: list(moved)}) == {tp: None}
        wait_until(lambda: states("lead-moves")[0].leader == moved[0], what="the preferred leader elected")
        consumer.seek_to_beginning()
        assert consumer.position(tp) == 0
        first_at = next(record for record in sent if record.timestamp >= sent[4].timestamp)
        assert consumer.offsets_for_times({tp: sent[4].timestamp}) == {tp: (first_at.offset, first_at.timestamp)}


def test_acks_all_writes_reach_every_replica_identically(nodes: Nodes) -> None:
    """Three partitions, so that one is led on the producer's own node (its appends go over the leader's append
    channel, then `await_replicated`) and two elsewhere (Ray calls): every acknowledged write is on every replica."""
    Admin().create_topic("copies", partitions=3, replication_factor=3)
    sent = {p: [f"p{p}-v{i}".encode() for i in range(300)] for p in range(3)}
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


def test_min_insync_replicas_above_the_replica_count_asks_for_every_replica(nodes: Nodes) -> None:
    """Kafka's `effectiveMinIsr`: `min.insync.replicas` 4 on three replicas asks for the three, so acks=all is taken
    while all three are in sync (the refusal once one drops out: `test_a_removed_leader_fails_over...`)."""
    Admin().create_topic("capped", partitions=1, replication_factor=3, config={"min.insync.replicas": "4"})
    with Producer(acks="all", retries=0) as producer:
        assert producer.send("capped", b"taken", partition=0).result(timeout=60).offset == 0


def test_a_removed_leader_fails_over_and_its_disks_rejoin(nodes: Nodes) -> None:
    """Also: while the node is gone, a topic asking for three in-sync replicas refuses acks=all writes
    (NOT_ENOUGH_REPLICAS) and takes acks=1 ones."""
    # Leaders spread over the three nodes: one of three partitions is led by a worker, which is removed.
    Admin().create_topic("failover", partitions=3, replication_factor=3)
    Admin().create_topic("strict", partitions=1, replication_factor=3, config={"min.insync.replicas": "3"})
    partition, leader = next((p, s.leader) for p, s in states("failover").items() if s.leader in nodes.workers)
    with Producer(acks="all", retries=1_000_000, retry_backoff_max_ms=200) as producer:
        for i in range(100):
            producer.send("failover", f"before-{i}".encode(), partition=partition)
        producer.flush()
        removed_at = time.monotonic()
        old_dirs = nodes.remove(leader)
        wait_until(lambda: states("failover")[partition].leader != leader, what="a new leader")
        elected_s = time.monotonic() - removed_at
        after = producer.send("failover", b"after", partition=partition).result(timeout=120)
        failover_s = time.monotonic() - removed_at
    state = states("failover")[partition]
    assert state.leader != leader and state.leader_epoch == 1 and leader not in state.isr
    assert after.offset == 100
    assert elected_s < 10 and failover_s < 15, (elected_s, failover_s)
    consumer = Consumer(group_id="failover-reader", auto_offset_reset="earliest")
    consumer.assign([("failover", partition)])
    values: list[bytes | None] = []
    deadline = time.monotonic() + 60
    while len(values) < 101 and time.monotonic() < deadline:
        values.extend(record.value for record in consumer.poll(timeout_ms=500))
    consumer.close()
    assert values == [f"before-{i}".encode() for i in range(100)] + [b"after"]
    wait_until(lambda: leader not in states("strict")[0].isr, what="the removed node out of strict's ISR")
    with Producer(acks="all", retries=0) as producer, pytest.raises(NotEnoughReplicasError):
        producer.send("strict", b"refused", partition=0).result(timeout=60)
    with Producer(acks=1) as producer:
        assert producer.send("strict", b"written", partition=0).result(timeout=60).offset == 0

    rejoined = nodes.add(old_dirs)

    def rejoined_isr() -> LeaderAndIsr | None:
        current = states("failover")[partition]
        return current if rejoined in current.isr else None

    state = wait_until(rejoined_isr, what="the old disks back in the ISR")
    assert rejoined in state.replicas and leader not in state.replicas
    copies = [replica_records("failover", partition, node, 101) for node in state.replicas]
    assert copies[0] == copies[1] == copies[2]
    # The returning disks were the preferred replica: auto.leader.rebalance.enable gives them the leadership back.
    assert state.replicas[0] == rejoined
    back = wait_until(
        lambda: (current := states("failover")[partition]).leader == rejoined and current,
        what="the preferred leader again",
    )
    assert back.leader_epoch == 2
    with Producer(acks="all") as producer:
        assert producer.send("failover", b"preferred", partition=partition).result(timeout=60).offset == 101


def test_a_follower_killed_mid_append_catches_up_and_loses_nothing(nodes: Nodes) -> None:
    """A follower's process (its partition host, the broker's default) is killed while acks=all writes go on: Ray
    restarts it, it recovers its log, learns its state from the controller, truncates and catches up; every write is
    acknowledged once and every replica ends identical."""
    Admin().create_topic("follower-kill", partitions=1, replication_factor=3)
    state = states("follower-kill")[0]
    follower = next(node for node in state.replicas if node != state.leader)
    values = [f"v{i}".encode() for i in range(200)]
    with Producer(acks="all", retries=1_000_000, retry_backoff_max_ms=200, linger_ms=1) as producer:
        futures = []
        for index, value in enumerate(values):
            futures.append(producer.send("follower-kill", value, partition=0))
            if index == 50:
                ray.kill(replica_process(replica_actor("follower-kill", 0, follower)), no_restart=False)
            time.sleep(0.002)
        offsets = [future.result(timeout=120).offset for future in futures]
    assert offsets == list(range(200))
    wait_until(
        lambda: all(len(replica_records("follower-kill", 0, node, 200)) == 200 for node in state.replicas),
        what="the restarted follower caught up",
    )
    copies = [replica_records("follower-kill", 0, node, 200) for node in state.replicas]
    assert copies[0] == copies[1] == copies[2]
    assert [value for _, value, _ in copies[0]] == values


def test_a_paused_broker_is_fenced_at_its_session_timeout_and_rejoins_when_resumed(nodes: Nodes) -> None:
    """Every process of a broker that leads one partition and follows the others is paused (SIGSTOP: its log
    manager, partition hosts, cleaners) while its node's raylet runs, as a broker hung by a busy or swapping machine:
    Ray keeps the node alive, and only the broker's missing heartbeats tell. Once `broker.session.timeout.ms` passes
    it is fenced (out of the brokers and every ISR, its partition led elsewhere) and acks=all writes go on, one
    writer per partition. Resumed, the zombie leader is told it leads no more (its next heartbeat registers it
    again and it learns every state), and nothing it held is acknowledged twice or lost: each partition's replicas
    end identical, holding each writer's acknowledged records once, in order. A write in flight to the paused
    leader fails once the controller elected its successor (the append route's leader watch: a Ray call to a
    stopped process never answers while Ray keeps its node alive), and its retry is answered by the new leader while
    the old one is still paused, the Python producer's and librdkafka's through a listener alike (`wire`), and a
    librdkafka producer that starts during the pause, whose first append finds the leader's broker standing still
    (`fresh`), is answered by the new leader too."""
    from confluent_kafka import Producer as KafkaProducer

    from cluster.protocol.listener_actor import start_kafka_listeners
    from storage.config.broker_config import BrokerConfig

    Admin().create_topic("paused", partitions=3, replication_factor=3)
    Admin().create_topic("paused-wire", partitions=3, replication_factor=3)
    before = states("paused")
    victim = next(s.leader for s in before.values() if s.leader in nodes.workers)
    led = {p for p, s in before.items() if s.leader == victim}
    wire_partition = next(p for p, s in states("paused-wire").items() if s.leader == victim)
    # A partition no client wrote to yet: a producer that starts during the pause must find its leader, whose
    # broker stands still, and go on once the controller elected another.
    Admin().create_topic("paused-fresh", partitions=3, replication_factor=3)
    fresh_partition = next(p for p, s in states("paused-fresh").items() if s.leader == victim)
    fresh: list[tuple[float, Any]] = []
    config = BrokerConfig.from_properties({"listeners": "PLAINTEXT://127.0.0.1:0", "node.id": "0"})
    bootstrap = start_kafka_listeners(config, nodes.head).bootstrap_servers
    wire: list[tuple[float, Any]] = []
    raylet = psutil.Process(nodes.workers[victim].all_processes["raylet"][0].process.pid)
    # Ray's workers; not its agents, which the raylet's own health depends on.
    paused = [proc for proc in raylet.children(recursive=True) if "Agent" not in proc.name()]
    written: dict[int, list[tuple[float, float, int]]] = {p: [] for p in before}
    stop = threading.Event()

    def write(partition: int) -> None:
        with Producer(acks="all", retries=1_000_000, retry_backoff_max_ms=200) as producer:
            while not stop.is_set():
                sent = time.monotonic()
                value = f"p{partition}-{len(written[partition])}".encode()
                offset = producer.send("paused", value, partition=partition).result(timeout=120).offset
                written[partition].append((sent, time.monotonic(), offset))
                time.sleep(0.02)

    def write_wire(topic: str, partition: int, delivered: list[tuple[float, Any]], once: bool = False) -> None:
        """librdkafka through the listener, one record every 20 ms (`once`: a single record), each delivery's time
        and error in `delivered`."""
        producer = KafkaProducer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
        while True:
            producer.produce(
                topic,
                value=b"w",
                partition=partition,
                on_delivery=lambda error, _message: delivered.append((time.monotonic(), error)),
            )
            if once or stop.is_set():
                break
            producer.poll(0.02)
        producer.flush(120)

    writers = [threading.Thread(target=write, args=(p,)) for p in before]
    writers.append(threading.Thread(target=write_wire, args=("paused-wire", wire_partition, wire)))
    for writer in writers:
        writer.start()
    session_s = int(BROKER_SETTINGS["broker.session.timeout.ms"]) / 1000
    # The session counts from the last heartbeat, sent up to one interval before the pause.
    heartbeat_s = int(BROKER_SETTINGS["broker.heartbeat.interval.ms"]) / 1000
    try:
        wait_until(
            lambda: all(len(w) >= 10 for w in written.values()) and len(wire) >= 10,
            what="acknowledged writes before the pause",
        )
        paused_at = time.monotonic()
        for proc in paused:
            proc.send_signal(signal.SIGSTOP)
        newcomer = threading.Thread(target=write_wire, args=("paused-fresh", fresh_partition, fresh, True))
        newcomer.start()
        writers.append(newcomer)
        try:
            wait_until(lambda: victim not in registered_brokers(), what="the paused broker fenced")
            fenced_s = time.monotonic() - paused_at
            assert victim in {node["NodeID"] for node in ray.nodes() if node["Alive"]}
            assert all(victim not in s.isr and s.leader != victim for s in states("paused").values())
            counts = {p: len(w) for p, w in written.items()}
            wired = len(wire)
            try:
                wait_until(
                    lambda: (
                        all(len(written[p]) >= counts[p] + 10 for p in before)
                        and len(wire) >= wired + 10
                        and bool(fresh)
                    ),
                    timeout_s=session_s + 10,
                    what="acks=all writes after the fence, to the partitions the paused broker led too",
                )
            except AssertionError as exc:
                progress = {p: len(written[p]) - counts[p] for p in before}
                raise AssertionError(
                    f"{exc}: writes since per partition {progress} (led {led}), wire {len(wire) - wired}, fresh {fresh}"
                ) from None
        finally:
            for proc in paused:
                with contextlib.suppress(psutil.Error):
                    proc.send_signal(signal.SIGCONT)
        assert session_s - heartbeat_s <= fenced_s < session_s + 5, fenced_s
        wait_until(lambda: victim in registered_brokers(), what="the resumed broker registered")
        wait_until(
            lambda: all(victim in s.isr for s in states("paused").values()), what="the resumed replicas in the ISRs"
        )
        counts = {p: len(w) for p, w in written.items()}
        wait_until(lambda: all(len(written[p]) >= counts[p] + 10 for p in before), what="writes after the resume")
    finally:
        stop.set()
        for writer in writers:
            writer.join()
    assert all(error is None for _, error in wire + fresh), [error for _, error in wire + fresh if error][:3]
    wire_gap_s = max(later - earlier for (earlier, _), (later, _) in itertools.pairwise(wire))
    assert wire_gap_s < session_s + 5, wire_gap_s
    for partition, acked in written.items():
        assert [offset for _, _, offset in acked] == list(range(len(acked)))
        longest_wait_s = max(done - sent for sent, done, _ in acked)
        assert longest_wait_s < session_s + 5, (partition, partition in led, longest_wait_s)
        replicas, count = before[partition].replicas, len(acked)
        wait_until(
            lambda p=partition, n=count, r=replicas: all(len(replica_records("paused", p, node, n)) == n for node in r),
            what="every replica caught up",
        )
        copies = [replica_records("paused", partition, node, len(acked)) for node in replicas]
        assert copies[0] == copies[1] == copies[2]
        expected = [serialized(f"p{partition}-{i}".encode()) for i in range(len(acked))]
        assert [value for _, value, _ in copies[0]] == expected


def registered_brokers() -> list[str]:
    """The nodes whose broker the controller counts in the cluster now."""
    brokers: list[str] = call(Broker.connect().controller.brokers.remote())
    return brokers


def replica_process(handle: Any) -> Any:
    """The actor whose process holds a replica: its partition host, or the partition actor itself."""
    return handle.host if isinstance(handle, HostedPartitionHandle) else handle


@dataclass
class Acked:
    """What the producers were told: (partition, offset) -> value, and each producer's values per partition in
    acknowledgement order."""

    by_offset: dict[tuple[int, int], bytes] = field(default_factory=dict)
    order: dict[tuple[str, int], list[bytes]] = field(default_factory=dict)
    errors: list[BaseException] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


# Sends a producer of the node-kill test leaves unanswered at most. Unbounded, the producers outran a 3-node
# broker by thousands of records, and each `flush` after the last kill drained them for ~50 s.
UNANSWERED_SENDS = 32


def produce_until(
    stop: threading.Event, name: str, acked: Acked, topic: str, partitions: int, acks: str = "all"
) -> None:
    """A producer sending `name-<seq>` one record at a time, at most `UNANSWERED_SENDS` unanswered, until `stop`;
    idempotent with acks=all, as Kafka requires (an idempotent acks=1 producer's sequence runs ahead of a new leader
    that never got its last batches)."""
    settings: dict[str, Any] = {"enable_idempotence": acks == "all"}
    unanswered = threading.BoundedSemaphore(UNANSWERED_SENDS)
    with Producer(acks=acks, retries=1_000_000, retry_backoff_max_ms=200, linger_ms=1, **settings) as producer:
        seq = 0
        while not stop.is_set():
            if not unanswered.acquire(timeout=0.2):
                continue
            value = f"{name}-{seq}".encode()
            partition = seq % partitions

            def done(future: Any, value: bytes = value, partition: int = partition) -> None:
                unanswered.release()
                with acked.lock:
                    if future.exception() is not None:
                        acked.errors.append(future.exception())
                        return
                    acked.by_offset[(partition, future.result().offset)] = value
                    acked.order.setdefault((name, partition), []).append(value)

            producer.send(topic, value, partition=partition).add_done_callback(done)
            seq += 1
            time.sleep(0.004)
        producer.flush()


@pytest.mark.reliability
def test_acknowledged_records_survive_node_kills_exactly_once(nodes: Nodes) -> None:
    """Node kills: two idempotent `acks=all` producers and a consumer group run while worker nodes are removed and
    come back (their disks on new nodes). Afterwards every acknowledged record is in the log exactly once, in each
    producer's order per partition; the consumer read every one of them once, in offset order, and nothing it read
    is missing from the final log (it never read past a high watermark that then moved back); and every replica is
    record for record the leader's. A third producer with acks=1 leaves tails only the dead leaders had.
    Quick mode: 1 kill; `RAYBROKER_RELIABILITY=long`: 10."""
    topic, partitions = "jepsen", 3
    Admin().create_topic(topic, partitions=partitions, replication_factor=3, config={"min.insync.replicas": "2"})
    acked, leader_acked = Acked(), Acked()
    stop = threading.Event()
    producers = [
        threading.Thread(target=produce_until, args=(stop, name, acked, topic, partitions), daemon=True)
        for name in ("a", "b")
    ]
    # acks=1 records may be lost with a leader that dies before its followers fetched them (Kafka's semantics): they
    # leave divergent tails on the dead leader's disks, which must be truncated when those disks come back.
    producers.append(
        threading.Thread(target=produce_until, args=(stop, "c", leader_acked, topic, partitions, "1"), daemon=True)
    )
    read: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    consuming = threading.Event()
    consuming.set()

    def consume() -> None:
        with Consumer(group_id="jepsen", auto_offset_reset="earliest", value_deserializer=None) as consumer:
            consumer.subscribe([topic])
            while consuming.is_set():
                for record in consumer.poll(timeout_ms=200):
                    read[record.partition].append((record.offset, record.value))
                consumer.commit()

    reader = threading.Thread(target=consume, daemon=True)
    for thread in [*producers, reader]:
        thread.start()
    kills = scaled(1, 10)
    for kill in range(kills):
        time.sleep(2)
        workers = sorted(nodes.workers)
        victim = workers[kill % len(workers)]
        old_dirs = nodes.remove(victim)
        wait_until(
            lambda v=victim: all(s.leader != v and v not in s.isr for s in states(topic).values()),
            what=f"kill {kill}: partitions led elsewhere",
        )
        time.sleep(1)
        back = nodes.add(old_dirs)
        wait_until(
            lambda b=back: all(b in s.isr and len(s.isr) == 3 for s in states(topic).values()),
            timeout_s=120,
            what=f"kill {kill}: the returning disks in every ISR",
        )
    stop.set()
    for thread in producers:
        thread.join(timeout=120)
        assert not thread.is_alive(), "a producer did not flush its last sends within 120 s"
    # A send may fail (never acknowledged, allowed to be in the log once) with OutOfOrderSequenceError, seen in 1 of
    # 5 runs here. The likely cause, not yet proven: a follower that truncated rebuilt its producer state from its
    # last snapshot, which keeps each producer's last batch only (as Kafka's does), so as the new leader it may not
    # recognise the retry of an older unacknowledged batch. Nothing else may fail, and only sends in flight at a
    # leader change can: at most UNANSWERED_SENDS per producer for each of the two leader changes of a kill (away
    # from the removed node and back to the preferred leader once it returns).
    failed = acked.errors + leader_acked.errors
    assert all(isinstance(error, OutOfOrderSequenceError) for error in failed), failed[:3]
    assert len(failed) <= kills * 2 * len(producers) * UNANSWERED_SENDS, (len(failed), len(acked.by_offset))
    # A leader that just took its partition back (the preferred replica, once its disks returned) exposes records up
    # to its own high watermark, which passes what the previous leader acknowledged only once its followers fetch
    # again (as Kafka's leaders do): a partition's final log is a read of its leader that reaches its last
    # acknowledged offset. Never reaching it would be a lost record.
    last_acked = {p: max((o for (q, o) in acked.by_offset if q == p), default=-1) for p in range(partitions)}

    def leader_log(partition: int) -> list[tuple[int, bytes | None, int]] | None:
        records = replica_records(topic, partition, states(topic)[partition].leader, 1 << 62)
        return records if records and records[-1][0] >= last_acked[partition] else None

    final = {
        p: wait_until(lambda p=p: leader_log(p), timeout_s=60, what=f"a read of partition {p} past its last ack")
        for p in range(partitions)
    }
    wait_until(
        lambda: all(len(read[p]) >= len(final[p]) for p in range(partitions)), timeout_s=120, what="consumer caught up"
    )
    consuming.clear()
    reader.join(timeout=60)
    assert not reader.is_alive(), "the consumer did not stop within 60 s"

    for partition in range(partitions):
        log = [(offset, value) for offset, value, _ in final[partition]]
        values = [value for _, value in log]
        idempotent = [value for value in values if value is not None and not value.startswith(b"c-")]
        assert len(idempotent) == len(set(idempotent)), f"duplicates in partition {partition}"
        in_log = dict(log)
        found_at = {value: offset for offset, value in log}
        for (p, offset), value in acked.by_offset.items():
            if p == partition:
                assert in_log.get(offset) == value, (partition, offset, value, found_at.get(value), len(log))
        # Positions by lookup, not `values.index` per value: that is quadratic in the records of a partition.
        position = {value: index for index, value in enumerate(values)}
        for (name, p), answered in acked.order.items():
            if p == partition and name != "c":
                # The producer answers a partition's records in send order (Kafka's promise for `send`), and the log
                # holds them in it.
                sent = sorted(answered, key=lambda value: int(value.rsplit(b"-", 1)[1]))
                assert answered == sent, f"{name}'s answers out of send order in {partition}"
                positions = [position[value] for value in sent]
                assert positions == sorted(positions), f"{name} out of order in the log of {partition}"
        consumed = read[partition]
        assert [offset for offset, _ in consumed] == sorted({offset for offset, _ in consumed})
        assert consumed == log[: len(consumed)]
        assert_replicas_converge(topic, partition, len(log))
    assert len(acked.by_offset) > 100


def assert_replicas_converge(topic: str, partition: int, upto: int, timeout_s: float = 30.0) -> None:
    """Every replica of the partition holds the same records below `upto`, within `timeout_s`: a follower reads
    up to its own high watermark, which it learns from its leader's answer to its next fetch (Kafka's followers lag
    the same way), so a copy may be short for a moment after the writes stop, but never different."""
    deadline = time.monotonic() + timeout_s
    while True:
        state = states(topic)[partition]
        copies = {node: replica_records(topic, partition, node, upto) for node in state.replicas}
        first = copies[state.replicas[0]]
        if all(copy == first for copy in copies.values()):
            return
        if time.monotonic() >= deadline:
            break
        time.sleep(0.2)

    def first_difference(copy: list[tuple[int, bytes | None, int]]) -> int | None:
        return next((index for index, (a, b) in enumerate(zip(copy, first, strict=False)) if a != b), None)

    detail = {node[:8]: (len(copy), first_difference(copy)) for node, copy in copies.items()}
    raise AssertionError(f"replicas of {partition} differ after {timeout_s} s: (records, first different) {detail}")


# Transactions of the consume-transform-produce test: the coordinator's timeout of an abandoned one, and every how
# many transactions one is aborted on purpose (its output flushed first, so read_uncommitted readers see it), from
# the second on: a transformer whose polls return large batches may make only a few.
EOS_TIMEOUT_MS = 4000
EOS_ABORT_EVERY = 7
EOS_FIRST_ABORT = 2
EOS_GROUP = "eos-transform"


def aborted_on_purpose(attempt: int) -> bool:
    """Whether a transformer aborts its `attempt`th transaction on purpose: the second, and every
    `EOS_ABORT_EVERY`th after it."""
    return attempt % EOS_ABORT_EVERY == EOS_FIRST_ABORT


@dataclass
class Transformed:
    """What the transformer did: the attempts (transactions) it committed and aborted, the positions of its last
    commit, and the errors its transactions met."""

    committed: set[int] = field(default_factory=set)
    aborted: set[int] = field(default_factory=set)
    positions: dict[tuple[str, int], int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    # Input value -> every (partition, offset) the transformer read it at, for a failure's diagnosis.
    read_at: dict[bytes, list[tuple[int, int]]] = field(default_factory=dict)


def transform_until(
    stop: threading.Event, ends: dict[tuple[str, int], int], source: str, sink: str, out: Transformed
) -> None:
    """Consume-transform-produce with the Python clients: each poll's records, written to `sink` as
    `<input value>|<attempt>` (same partition number modulo the sink's), and the consumer's positions, in one
    transaction; some are aborted on purpose (`aborted_on_purpose`). A transaction that fails is aborted (a producer
    that cannot, or is fenced, is replaced: its successor's InitProducerId completes or aborts what it left) and the
    consumer goes back to the group's committed offsets. Stops once `stop` is set and the committed positions reach
    `ends` (the input's final end offsets, filled in by the caller)."""
    inputs = [(source, p) for p in range(len(states(source)))]
    sink_partitions = len(states(sink))
    consumer = Consumer(group_id=EOS_GROUP, auto_offset_reset="earliest", isolation_level="read_committed")
    consumer.assign(inputs)
    producer: Producer | None = None
    attempt = 0
    while not (stop.is_set() and ends and all(out.positions.get(tp, 0) >= end for tp, end in ends.items())):
        if producer is None:
            producer = Producer(
                transactional_id="eos-transformer",
                acks="all",
                linger_ms=1,
                retry_backoff_max_ms=200,
                transaction_timeout_ms=60_000,
            )
            producer.init_transactions(120)
            for tp in inputs:
                consumer.seek(tp, consumer.committed(tp) or 0)
        records = consumer.poll(timeout_ms=200, max_records=200)
        if not records:
            continue
        attempt += 1
        try:
            producer.begin_transaction()
            for record in records:
                out.read_at.setdefault(record.value, []).append((record.partition, record.offset))
                value = record.value + f"|{attempt}".encode()
                producer.send(sink, value, partition=record.partition % sink_partitions)
            positions = {tp: consumer.position(tp) for tp in inputs}
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), timeout=120)
            if aborted_on_purpose(attempt):
                producer.flush(120)
                producer.abort_transaction(120)
                out.aborted.add(attempt)
            else:
                producer.commit_transaction(120)
                out.committed.add(attempt)
                out.positions = positions
                continue
        except Exception as exc:  # every failure of a transaction is handled alike: abort, go back
            out.errors.append(f"{attempt}: {type(exc).__name__}: {exc}")
            try:
                producer.abort_transaction(120)
                out.aborted.add(attempt)
            except Exception:  # fenced, or the abort itself failed: a successor takes over
                producer.close(5)
                producer = None
                continue
        for tp in inputs:
            consumer.seek(tp, consumer.committed(tp) or 0)
    if producer is not None:
        producer.close(30)
    consumer.close()


def transform_with_confluent(
    stop: threading.Event, ends: dict[tuple[str, int], int], bootstrap: str, source: str, sink: str, out: Transformed
) -> None:
    """`transform_until` with confluent-kafka (librdkafka) through a Kafka listener: outputs
    `ck|<input value>|<attempt>`, offsets committed to group `eos-confluent` with the transaction. librdkafka retries
    what it may; a transaction it says must be aborted is aborted and replayed from the group's offsets, and a fatal
    error (fenced) replaces the producer."""
    from confluent_kafka import Consumer as KafkaConsumer
    from confluent_kafka import KafkaException
    from confluent_kafka import Producer as KafkaProducer
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    partitions = [KafkaTopicPartition(source, p) for p in range(len(states(source)))]
    sink_partitions = len(states(sink))
    consumer = KafkaConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "eos-confluent",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )

    # The next offset to read per input partition: from the group's committed offsets at each rewind, then past
    # every message polled (librdkafka's `position` is unknown for a partition not fetched since `assign`).
    positions: dict[tuple[str, int], int] = {}

    def rewind() -> None:
        committed = consumer.committed(partitions, timeout=60)
        positions.update({(tp.topic, tp.partition): max(tp.offset, 0) for tp in committed})
        consumer.assign(
            [KafkaTopicPartition(topic, partition, offset) for (topic, partition), offset in positions.items()]
        )

    producer: Any = None
    attempt = 0
    while not (stop.is_set() and ends and all(out.positions.get(tp, 0) >= end for tp, end in ends.items())):
        if producer is None:
            producer = KafkaProducer(
                {"bootstrap.servers": bootstrap, "transactional.id": "eos-confluent", "transaction.timeout.ms": 60_000}
            )
            producer.init_transactions(120)
            rewind()
        messages = [m for m in consumer.consume(200, 0.2) if m.error() is None]
        if not messages:
            continue
        attempt += 1
        try:
            producer.begin_transaction()
            for message in messages:
                value = b"ck|" + message.value() + f"|{attempt}".encode()
                producer.produce(sink, value=value, partition=message.partition() % sink_partitions)
                positions[(message.topic(), message.partition())] = message.offset() + 1
            offsets = [
                KafkaTopicPartition(topic, partition, offset) for (topic, partition), offset in positions.items()
            ]
            producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 120)
            if aborted_on_purpose(attempt):
                producer.flush(120)
                producer.abort_transaction(120)
                out.aborted.add(attempt)
            else:
                producer.commit_transaction(120)
                out.committed.add(attempt)
                out.positions = dict(positions)
                continue
        except KafkaException as exc:
            error = exc.args[0]
            out.errors.append(f"{attempt}: {error}")
            if error.txn_requires_abort():
                producer.abort_transaction(120)
                out.aborted.add(attempt)
            else:
                producer = None
        rewind()
    consumer.close()


def transaction_coordinator_node() -> str:
    """The node of the transaction coordinator actor (started if none runs)."""
    return str(call(coordinator_handle().__ray_call__.remote(lambda _: ray.get_runtime_context().get_node_id())))


def coordinator_handle() -> Any:
    from actors.clients.broker import transaction_coordinator

    return transaction_coordinator(call(Broker.connect().controller.transaction_config.remote()))


def hanging(topic: str, partitions: int) -> dict[int, Any]:
    """Per partition: its LSO, and each replica's producers with an open transaction (what holds the LSO back)."""
    found: dict[int, Any] = {}
    for partition in range(partitions):
        state = states(topic)[partition]
        found[partition] = (
            state.leader[:8],
            last_stable_offset(topic, partition),
            {
                node[:8]: [
                    (p.producer_id, p.producer_epoch, p.current_txn_start_offset)
                    for p in call(replica_actor(topic, partition, node).describe_producers.remote())
                    if p.current_txn_start_offset >= 0
                ]
                for node in state.replicas
            },
        )
    return found


def aborted_but_visible(topic: str, partitions: int, attempts: set[int]) -> list[Any]:
    """Where the records of the given aborted attempts lie on each partition's leader: (partition, leader, offsets,
    producer id and epoch, the producer's next marker after them, whether the leader's aborted list covers them)."""
    found = []
    for partition in range(partitions):
        leader = states(topic)[partition].leader
        handle = replica_actor(topic, partition, leader)
        fetched = call(handle.fetch.remote(0, 1 << 26, isolation="txn_committed"))
        aborted = fetched.aborted_transactions or ()
        batches = [b for b in iter_any_batches(call(handle.read.remote(0, 1 << 26))) if isinstance(b, RecordBatch)]
        for index, batch in enumerate(batches):
            if batch.is_control:
                continue
            values = [record.value or b"" for record in batch.records()]
            hit = [v for v in values if v.rsplit(b"|", 1)[-1].isdigit() and int(v.rsplit(b"|", 1)[-1]) in attempts]
            if not hit:
                continue
            marker = next(
                (
                    (later.base_offset, later.end_transaction_marker())
                    for later in batches[index + 1 :]
                    if later.is_control and later.producer_id == batch.producer_id
                ),
                None,
            )
            covered = [a for a in aborted if a.producer_id == batch.producer_id and a.first_offset <= batch.base_offset]
            found.append(
                (partition, leader[:8], batch.base_offset, batch.producer_id, batch.producer_epoch, marker, covered)
            )
    return found


def open_transactions() -> list[str] | None:
    """The ids the coordinator lists as Ongoing, PrepareCommit or PrepareAbort; None while it cannot answer (it
    loads `__transaction_state`, or is started again)."""
    try:
        listed = call(coordinator_handle().list_transactions.remote([], [], -1))
    except RaybrokerError as exc:
        if not exc.retriable:
            raise
        return None
    return [t.transactional_id for t in listed if t.state in OPEN]


def of_leader(topic: str, partition: int, ask: Callable[[Any], Any]) -> Any:
    """`ask(replica)`'s answer from the partition's current leader. The leader named by the controller's state may
    stop leading before the call reaches it (`leader.imbalance.check.interval.seconds` is 2 s here, so leadership
    goes back to a returning preferred replica at any moment): a replica that answers it does not lead (or is gone)
    is asked again once the state names the next leader."""
    deadline = time.monotonic() + 60
    while True:
        leader = states(topic)[partition].leader
        try:
            return call(ask(replica_actor(topic, partition, leader)))
        except BrokerNotAvailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def settled_ends(topic: str, last_acked: dict[int, int]) -> dict[tuple[str, int], int] | None:
    """The input's end offsets once its writers stopped: each partition's high watermark, read from its leader when
    that equals the leader's log end and passes the partition's last acknowledged offset; None before. A leader the
    preferred-leader rebalance (every 2 s here) elected a moment ago learns its high watermark from its followers'
    next fetches, so a high watermark alone may fall short of the end its predecessor had reached: a transformer
    then reads past the ends taken, and its outputs of the last inputs look like outputs of records the log does not
    hold."""
    ends = {}
    for partition, acked_upto in last_acked.items():
        _, high_watermark, log_end = of_leader(topic, partition, lambda replica: replica.offsets.remote())
        if high_watermark != log_end or high_watermark <= acked_upto:
            return None
        ends[(topic, partition)] = int(high_watermark)
    return ends


def held_below(topic: str, ends: dict[tuple[str, int], int]) -> list[bytes] | None:
    """Every value below `ends` of each partition of `topic` from its leader now; None while a leader reads fewer
    (its high watermark short of the end)."""
    values = []
    for (_, partition), end in sorted(ends.items()):
        held = replica_records(topic, partition, states(topic)[partition].leader, end)
        if len(held) < end:
            return None
        values.extend(value for _, value, _ in held)
    return values


def high_watermark(topic: str, partition: int) -> int:
    """The high watermark of the partition's current leader."""
    return int(of_leader(topic, partition, lambda replica: replica.offsets.remote())[1])


def last_stable_offset(topic: str, partition: int) -> int:
    """The last stable offset of the partition's current leader."""
    answer = of_leader(topic, partition, lambda replica: replica.list_offset.remote(-1, "txn_committed"))
    return int(answer.offset)


def read_all(topic: str, isolation: str, partitions: int, ends: dict[int, int]) -> list[bytes]:
    """Every value of `topic` a consumer at `isolation` reads up to `ends` (per partition; an offset)."""
    with Consumer(auto_offset_reset="earliest", isolation_level=isolation, value_deserializer=None) as consumer:
        consumer.assign([(topic, p) for p in range(partitions)])
        values: list[bytes] = []
        deadline = time.monotonic() + 60
        while any(consumer.position((topic, p)) < ends[p] for p in range(partitions)):
            assert time.monotonic() < deadline, f"{topic} not read to {ends} at {isolation} within 60 s"
            values.extend(record.value for record in consumer.poll(timeout_ms=200))
        return values


@pytest.mark.reliability
def test_consume_transform_produce_outputs_each_input_once_across_node_kills(nodes: Nodes) -> None:
    """Exactly-once across node kills: an idempotent producer writes input records while two transformers, the Python
    clients and confluent-kafka through the head's listener, each read them (read_committed) and write each one's
    output with its input offsets in one transaction per poll, some aborted on purpose, while the worker node holding
    the transaction coordinator (with `__transaction_state`'s leader and leaders of the data topics) is removed and
    its disks come back on a new node. A second transactional producer leaves a transaction open and stops, as a
    crashed one would. Afterwards: a read_committed reader sees every input's output exactly once per transformer
    and nothing of an aborted transaction (read_uncommitted sees the aborted ones too), each group's committed
    offsets are the input's end offsets, the coordinator lists no open transaction (the abandoned one was aborted on
    its timeout), and every output partition's last stable offset is its high watermark. Quick mode: 1 kill;
    `RAYBROKER_RELIABILITY=long`: 4, alternating with the other worker."""
    source, sink = "eos-in", "eos-out"
    # The coordinator lives beside the leader of `__transaction_state`'s partition, placed as any new partition is:
    # topics of one partition move the next leadership off the head until it lands on a worker (the head holds the
    # controller and is never removed).
    from actors.core.controller.assignment import place_replicas

    ctrl = Broker.connect().controller

    def next_leader() -> str:
        topics = call(ctrl.topics.remote()).values()
        existing = [metadata.state(p) for metadata in topics for p in metadata.partitions]
        return place_replicas(1, 3, call(ctrl.brokers.remote()), existing)[0][0]

    filler = 0
    while next_leader() == nodes.head and "__transaction_state" not in call(ctrl.list_topics.remote(True)):
        Admin().create_topic(f"eos-filler-{filler}", partitions=1, replication_factor=3)
        filler += 1
    coordinator_node = transaction_coordinator_node()
    assert coordinator_node in nodes.workers, "the coordinator must start on a worker for the kill to reach it"
    for topic in (source, sink):
        Admin().create_topic(topic, partitions=2, replication_factor=3, config={"min.insync.replicas": "2"})

    from cluster.protocol.listener_actor import start_kafka_listeners
    from storage.config.broker_config import BrokerConfig

    # The brokers' transaction settings: whichever of the listener and the Python clients starts the coordinator
    # again after the kill, it runs with them.
    settings = {key: value for key, value in BROKER_SETTINGS.items() if key.startswith("transaction.")}
    config = BrokerConfig.from_properties({"listeners": "PLAINTEXT://127.0.0.1:0", "node.id": "0", **settings})
    bootstrap = start_kafka_listeners(config, nodes.head).bootstrap_servers

    acked = Acked()
    stop_input, stop_transform = threading.Event(), threading.Event()
    ends: dict[tuple[str, int], int] = {}
    out, out_confluent = Transformed(), Transformed()
    input_thread = threading.Thread(target=produce_until, args=(stop_input, "in", acked, source, 2), daemon=True)
    transformers = [
        threading.Thread(target=transform_until, args=(stop_transform, ends, source, sink, out), daemon=True),
        threading.Thread(
            target=transform_with_confluent,
            args=(stop_transform, ends, bootstrap, source, sink, out_confluent),
            daemon=True,
        ),
    ]
    input_thread.start()
    for transformer in transformers:
        transformer.start()
    with Producer(transactional_id="eos-abandoned", transaction_timeout_ms=EOS_TIMEOUT_MS) as abandoned:
        abandoned.init_transactions(60)
        abandoned.begin_transaction()
        for partition in range(2):
            abandoned.send(sink, b"abandoned", partition=partition)
        abandoned.flush(60)

        kills = scaled(1, 4)
        for kill in range(kills):
            time.sleep(2)
            workers = sorted(nodes.workers)
            coordinator_node = transaction_coordinator_node()
            victim = coordinator_node if kill % 2 == 0 and coordinator_node in workers else workers[kill % 2]
            old_dirs = nodes.remove(victim)
            wait_until(
                lambda v=victim: all(
                    s.leader != v for topic in (source, sink, "__transaction_state") for s in states(topic).values()
                ),
                what=f"kill {kill}: partitions led elsewhere",
            )
            time.sleep(1)
            back = nodes.add(old_dirs)
            wait_until(
                lambda b=back: all(
                    b in s.isr for topic in (source, sink, "__transaction_state") for s in states(topic).values()
                ),
                timeout_s=120,
                what=f"kill {kill}: the returning disks in every ISR",
            )
        stop_input.set()
        input_thread.join(timeout=120)
        assert not input_thread.is_alive(), "the input producer did not flush its last sends within 120 s"
        last_acked = {p: max((o for (q, o) in acked.by_offset if q == p), default=-1) for p in range(2)}
        ends.update(
            wait_until(
                lambda: settled_ends(source, last_acked),
                what="each input partition's leader committed past its last acknowledged offset",
            )
        )
        stop_transform.set()
        for transformer, done in zip(transformers, (out, out_confluent), strict=True):
            transformer.join(timeout=120)
            assert not transformer.is_alive(), (
                f"a transformer did not reach {ends} within 120 s: {done.positions}, errors {done.errors[:3]} ... "
                f"{done.errors[-3:]} ({len(done.errors)}), committed {sorted(done.committed)[-3:]}, "
                f"aborted {sorted(done.aborted)[-3:]}\n{offsets_history()}"
            )

    # A leader the preferred-leader rebalance (every 2 s here) just elected learns its high watermark from its
    # followers' next fetches, so its reads may stop short of the input's end for a moment.
    inputs = wait_until(
        lambda: held_below(source, ends),
        timeout_s=30,
        what=f"each input partition's leader reading its records up to {ends}",
    )
    assert len(set(inputs)) == len(inputs)
    wait_until(
        lambda: open_transactions() == [],
        timeout_s=EOS_TIMEOUT_MS / 1000 + 30,
        what="no open transaction left",
    )
    sink_ends = {
        p: end
        for (_, p), end in wait_until(
            lambda: settled_ends(sink, dict.fromkeys(range(2), -1)), what="each output partition's leader settled"
        ).items()
    }
    # The high watermark now: a marker the coordinator sends again after a failover lands after the last records.
    try:
        wait_until(
            lambda: all(last_stable_offset(sink, p) == high_watermark(sink, p) for p in range(2)),
            what="every output partition's last stable offset at its high watermark",
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}: high watermarks {sink_ends}, open transactions {hanging(sink, 2)}") from None
    committed = read_all(sink, "read_committed", 2, sink_ends)
    assert b"abandoned" not in committed
    for done, group_id, prefix in ((out, EOS_GROUP, b""), (out_confluent, "eos-confluent", b"ck|")):
        outputs = [
            value[len(prefix) :].rsplit(b"|", 1)
            for value in committed
            if value.startswith(b"ck|") == (prefix == b"ck|")
        ]
        attempts = {int(attempt) for _, attempt in outputs}
        visible = attempts & done.aborted
        assert not visible, (group_id, visible, aborted_but_visible(sink, 2, visible)[:8])
        seen = [original for original, _ in outputs]
        assert sorted(seen) == sorted(inputs), (
            group_id,
            len(seen),
            len(inputs),
            len(set(seen)),
            done.errors[:3],
            input_divergence(source, set(seen) - set(inputs), done, acked, nodes),
        )
        with Consumer(group_id=group_id) as group:
            assert {tp: group.committed(tp) for tp in ends} == ends, group_id
        assert done.committed and done.aborted, group_id
    uncommitted = read_all(sink, "read_uncommitted", 2, sink_ends)
    assert b"abandoned" in uncommitted and len(uncommitted) > len(committed)


def offsets_history() -> str:
    """Every batch of `__consumer_offsets` partition 0 (the test's groups all hash there with one partition), for a
    failure's diagnosis: offset, producer id and epoch, transactional or not, and the marker or the group offsets it
    holds."""
    from storage.records.consumer_offsets import decode_offset_commit_key, decode_offset_commit_value

    handle = replica_actor("__consumer_offsets", 0, states("__consumer_offsets")[0].leader)
    lines = []
    for batch in iter_any_batches(call(handle.read.remote(0, 1 << 26))):
        if not isinstance(batch, RecordBatch):
            continue
        marker = batch.end_transaction_marker() if batch.is_control else None
        held = []
        for record in [] if batch.is_control else batch.records():
            key = decode_offset_commit_key(record.key) if record.key else None
            if key is not None:
                held.append((*key, None if record.value is None else decode_offset_commit_value(record.value).offset))
        what = marker.control_type.name if marker is not None else held
        lines.append(
            f"  {batch.base_offset} pid {batch.producer_id} epoch {batch.producer_epoch} "
            f"txn {batch.is_transactional}: {what}"
        )
    return "\n".join(lines[-60:])


def input_divergence(source: str, extras: set[bytes], done: Transformed, acked: Acked, nodes: Nodes) -> str:
    """Where the inputs a transformer output but the input log no longer holds came from: for each, the offsets it
    was read at, whether its producer was told it was written (and where), and what each replica holds there now;
    then every state of the input's partitions the controller wrote (its metadata log, leader and ISR by node)."""
    short = {node: f"n{index}" for index, node in enumerate([nodes.head, *sorted(set(nodes.dirs) - {nodes.head})])}
    lines = []
    acked_at = {value: where for where, value in acked.by_offset.items()}
    for value in sorted(extras)[:8]:
        lines.append(f"{value!r}: read at {done.read_at.get(value)}, acked at {acked_at.get(value)}")
        for partition, offset in done.read_at.get(value, [])[:1]:
            for node in states(source)[partition].replicas:
                held = replica_records(source, partition, node, offset + 1)
                at = [(v, epoch) for o, v, epoch in held if o == offset]
                lines.append(f"  {short.get(node, node[:6])} holds {at} at {partition}:{offset}")
    metadata = nodes.dirs[nodes.head][0] / "__cluster_metadata-0"
    for segment in sorted(metadata.glob("*.log")):
        for batch in iter_any_batches(segment.read_bytes()):
            if not isinstance(batch, RecordBatch):
                continue
            for record in batch.records():
                if record.key is None or record.value is None:
                    continue
                body = json.loads(record.value)
                if record.key == f"topic/{source}".encode():
                    changed = sorted(body.get("replication", {}).items())
                elif record.key.startswith(f"partition/{source}/".encode()):
                    changed = [(record.key.decode().rsplit("/", 1)[1], body["state"])]
                else:
                    continue
                for partition, state in changed:
                    leader = short.get(state["leader"], state["leader"][:6])
                    isr = [short.get(node, node[:6]) for node in state["isr"]]
                    lines.append(f"  state {partition}: leader {leader} epoch {state['epoch']} isr {isr}")
    return "\n".join(lines)


OPEN = {"Ongoing", "PrepareCommit", "PrepareAbort"}


def test_a_kafka_client_writes_through_a_failover_without_losing_or_repeating(nodes: Nodes) -> None:
    """confluent-kafka (librdkafka) produces with acks=all and idempotence through the head node's listener while
    the worker leading the partition is removed with appends in flight: the listener answers NOT_LEADER_OR_FOLLOWER,
    LEADER_NOT_AVAILABLE or REQUEST_TIMED_OUT until the controller has elected a new leader, librdkafka retries, and
    every record is delivered and then read back once, in order. No append is answered out of order on the way:
    librdkafka would start a new producer epoch and write again what the old leader had replicated unacknowledged
    (every batch stays in epoch 0). The removed node does not come back: the next test heals its replicas."""
    from confluent_kafka import Consumer as KafkaConsumer
    from confluent_kafka import Producer as KafkaProducer
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    from cluster.protocol.listener_actor import start_kafka_listeners
    from storage.config.broker_config import BrokerConfig

    config = BrokerConfig.from_properties({"listeners": "PLAINTEXT://127.0.0.1:0", "node.id": "0"})
    bootstrap = start_kafka_listeners(config, nodes.head).bootstrap_servers
    # Leaders spread over the three nodes: one of three partitions is led by a worker, which is removed.
    Admin().create_topic("wire-failover", partitions=3, replication_factor=3)
    partition, leader = next((p, s.leader) for p, s in states("wire-failover").items() if s.leader in nodes.workers)
    failures: list[str] = []
    producer = KafkaProducer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    values = [f"w{i}".encode() for i in range(300)]

    acknowledged: list[int] = []

    def delivered(error: Any, message: Any) -> None:
        if error is not None:
            failures.append(str(error))
        else:
            acknowledged.append(message.offset())

    for index, value in enumerate(values):
        producer.produce("wire-failover", value=value, partition=partition, on_delivery=delivered)
        producer.poll(0)
        if index == 100:
            # The producer is past its start (metadata, producer id) and sends a record per request, some in flight.
            wait_until(lambda: producer.poll(0.01) >= 0 and len(acknowledged) >= 90, what="the first acknowledgements")
            nodes.remove(leader)
        time.sleep(0.01)
    assert producer.flush(120) == 0
    assert not failures, failures[:3]
    assert states("wire-failover")[partition].leader != leader
    consumer = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": "wire-failover", "enable.auto.commit": False})
    try:
        consumer.assign([KafkaTopicPartition("wire-failover", partition, 0)])
        read: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(read) < len(values) and time.monotonic() < deadline:
            for message in consumer.consume(100, 1.0):
                assert message.error() is None, message.error()
                read.append(message.value())
    finally:
        consumer.close()
    assert read == values
    new_leader = states("wire-failover")[partition].leader
    epochs = {
        batch.producer_epoch
        for batch in iter_any_batches(
            call(replica_actor("wire-failover", partition, new_leader).read.remote(0, 1 << 24))
        )
    }
    assert epochs == {0}, "librdkafka bumped its epoch: an append was answered OUT_OF_ORDER_SEQUENCE_NUMBER"


def test_a_node_lost_for_good_has_its_replicas_recreated_on_a_node_that_joins(nodes: Nodes, tmp_path: Path) -> None:
    """Self-healing: the worker the failover test removed stays gone. Once `raybroker.balancer.node.loss.grace.ms`
    has passed, each partition that has a leader, internal topics included, has the lost node's replica re-created
    on a running broker that held none of it: each is back at its replication factor on running brokers, all in
    sync, and each new replica holds the leader's records offset for offset. A node that joins with empty disks takes
    the replica of every partition whose other replicas fill the running brokers (it is the only broker free to
    take it); a partition with a free running broker before the node joins (the replication factor 2 topic) may heal
    onto that one, as the grace may pass before the node registers. A partition left without a leader (its only
    replica was on the lost node) has nothing to copy and waits for that node. Last of the module."""
    running = set(nodes.dirs)
    topics = Admin().list_topics(include_internal=True)
    lost_replicas = {
        (topic, partition): state.replicas
        for topic in topics
        for partition, state in states(topic).items()
        if not state.offline and not set(state.replicas) <= running
    }
    assert {("wire-failover", p) for p in range(3)} <= set(lost_replicas)
    joined = nodes.add([tmp_path / "joined-dir0"])

    def unhealed() -> list[str]:
        now = {(topic, partition): states(topic)[partition] for topic, partition in lost_replicas}
        return [
            f"{topic}-{partition}: {list(state.replicas)} isr {list(state.isr)}"
            for (topic, partition), state in now.items()
            if not set(state.replicas) <= {*running, joined}
            or len(state.replicas) != len(lost_replicas[topic, partition])
            or (running <= set(lost_replicas[topic, partition]) and joined not in state.replicas)
            or state.reassigning
            or set(state.isr) != set(state.replicas)
        ]

    try:
        wait_until(lambda: not unhealed(), timeout_s=60, what="every partition healed")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {unhealed()}") from None
    for (topic, partition), before in lost_replicas.items():
        state = states(topic)[partition]
        end = call(replica_actor(topic, partition, state.leader).offsets.remote())[1]
        records = replica_records(topic, partition, state.leader, end)
        for node in set(state.replicas) - set(before):
            assert wait_until(
                lambda t=topic, p=partition, n=node, e=end, r=records: replica_records(t, p, n, e) == r,
                timeout_s=30,
                what=f"{topic}-{partition}'s records on its new replica on {node}",
            )


def test_a_drained_worker_hands_its_replicas_over_stops_its_broker_and_ray_drains_its_node(
    nodes: Nodes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`raybroker drain` of a worker once a fourth node joined, an idempotent acks=all producer running throughout:
    each of its replicas moves to the new node (every record kept; every acknowledged record in its leader's log
    once, none failed), then its broker stops (no log manager, not registered, no replica anywhere) and Ray accepts
    draining the node, as Ray's autoscaler asks before it terminates a node: the node, idle, leaves the cluster."""
    admin = Admin()
    admin.create_topic("drained", partitions=3, replication_factor=3)
    values = [f"drained-{i}".encode() for i in range(300)]
    with Producer(acks="all", linger_ms=2) as producer:
        for future in [producer.send("drained", value, partition=i % 3) for i, value in enumerate(values)]:
            future.result(timeout=60)
    worker = next(node for node in sorted(nodes.workers) if node in states("drained")[0].replicas)
    joined = nodes.add([tmp_path / "fourth-dir0"])
    wait_until(lambda: joined in registered_brokers(), what="the fourth broker registered")
    held = [
        (topic, partition)
        for topic in admin.list_topics(include_internal=True)
        for partition, state in states(topic).items()
        if worker in state.replicas
    ]
    ends = {p: call(replica_actor("drained", p, states("drained")[p].leader).offsets.remote())[1] for p in range(3)}
    before = {p: replica_records("drained", p, states("drained")[p].leader, ends[p]) for p in range(3)}

    # An idempotent acks=all producer runs through the drain, its leaders moving off the worker.
    stop, acked = threading.Event(), Acked()
    producing = threading.Thread(target=produce_until, args=(stop, "d", acked, "drained", 3), daemon=True)
    producing.start()
    try:
        code = cli_main(["drain", "--broker", worker, "--timeout", "120"])
    finally:
        stop.set()
        producing.join(timeout=120)
    out, err = capsys.readouterr()
    assert (code, err) == (0, ""), err
    assert not producing.is_alive() and acked.errors == [], acked.errors[:3]
    assert len(acked.by_offset) > 10
    for p in range(3):
        last = max(offset for (q, offset) in acked.by_offset if q == p)
        log = replica_records("drained", p, states("drained")[p].leader, last + 1)
        values = [value for _, value, _ in log]
        assert len(values) == len(set(values)), f"duplicates in drained-{p}"
        in_log = {offset: value for offset, value, _ in log}
        assert all(in_log.get(o) == v for (q, o), v in acked.by_offset.items() if q == p), f"lost in drained-{p}"
    assert out.splitlines()[-2:] == [
        f"Stopping broker {worker} and asking Ray to drain node {worker}.",
        f"Ray drains node {worker}: it takes no new work and leaves the cluster once idle.",
    ]
    for topic, partition in held:
        state = states(topic)[partition]
        assert worker not in state.replicas and joined in state.replicas, (topic, partition, state)
    for p in range(3):
        assert set(states("drained")[p].isr) == set(states("drained")[p].replicas)
        assert wait_until(
            lambda p=p: replica_records("drained", p, joined, ends[p]) == before[p],
            timeout_s=30,
            what=f"drained-{p}'s records on the joined node",
        )
    assert worker not in registered_brokers()
    with pytest.raises(BrokerNotAvailableError):
        get_actor(log_manager_name(worker))
    wait_until(
        lambda: worker not in {node["NodeID"] for node in ray.nodes() if node["Alive"]},
        timeout_s=30,
        what="Ray took the drained, idle node out of the cluster",
    )
    del nodes.workers[worker], nodes.dirs[worker]
