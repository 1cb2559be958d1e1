"""Failover beside Apache Kafka's, in the same run: how long a partition takes no write when the broker leading it
dies or stands still, for the same librdkafka producer against raybroker and against a three-broker Kafka.

| figure             | what (raybroker)                                    | baseline (same run)                      |
|--------------------|-----------------------------------------------------|------------------------------------------|
| `failover_s`       | seconds from `remove_node` of the worker Ray node   | Apache Kafka 3.9.1, 3 brokers (KRaft,    |
|                    | leading a partition to the first acks=all write     | `benchmarks.kafka_cluster`): SIGKILL of  |
|                    | acknowledged in its new leader's epoch              | the leader broker's JVM, same measure    |
| `failover_pause_s` | the same from SIGSTOP of every process of the       | SIGSTOP of the leader broker's JVM, same |
|                    | broker on that worker (its raylet runs: Ray keeps   | measure, resumed alike                   |
|                    | the node alive), resumed (SIGCONT) once a new       |                                          |
|                    | leader acknowledged a write                         |                                          |

Both sides get the same client and sequence. A topic of 3 partitions with 3 replicas and `min.insync.replicas` 2 is
created through the broker's Kafka protocol and waited for until every replica is in sync. A confluent-kafka
(librdkafka) producer with acks=all and idempotence on, every other setting librdkafka's (retries, backoff 100 ms to
1 s, `socket.timeout.ms` 60 s), sends one record every `SEND_PAUSE_S` to one partition, its value the record's sequence
number, and its delivery callback timestamps each acknowledgement. After `WARM_ACKS` acknowledgements the partition's
leader is killed or paused, and the figure is the time from then to the first acknowledgement of a record whose batch
carries a later leader epoch than the records acknowledged before, i.e. one the new leader wrote. A paused leader is
resumed once a record produced after the pause is acknowledged (only a new leader can have written it), or after
`PAUSE_MAX_S` (longer than librdkafka's 60 s `socket.timeout.ms`, after which a request left unanswered fails and is
sent again), which the figure's text then says; it must rejoin its partition's ISR. Afterwards a consumer reads the
partition back from its leader: a figure is met only if every acknowledged record is there exactly once, at the offset
acknowledged, on both sides, and both have a write after the fault in a later epoch (a side without one is reported
with its time to the first write after the fault, and says so). The text names both sides' numbers, when each side's
metadata named the new leader (polled every `METADATA_POLL_S`), writes of the old leader's epoch acknowledged after
the fault, and every send that failed.

- Apache Kafka: combined broker+controller nodes (`benchmarks.kafka_cluster`); the partition chosen is one led by a
  broker that is not the active KRaft controller (read from the nodes' `quorum-state` files), so that a controller
  election does not add to the failover. The text names the leader and the controller.
- raybroker: the cluster of `benchmarks.bench_replication.three_nodes` (a head and two workers, Ray's health checks
  shortened to 3 failures 300 ms apart, which decides when a removed node is dead), its actors at the clients'
  niceness as in `produce_rf3_kafka` (`WORKER_NICENESS`), one Kafka listener on the head (`node.id` 0) through which
  the client reaches every partition, as `tests/actors/test_zz_replication.py` does. The partition chosen is led by
  a worker (the head holds the controller). Its leader is removed with `Cluster.remove_node` (the raylet killed;
  the node's workers end when they notice), or paused: every process under the worker's raylet except Ray's agents
  (log manager, partition hosts, cleaners), as in the paused-broker test of the same module.
- Both sides run with Kafka's `broker.session.timeout.ms` (9 s) and `broker.heartbeat.interval.ms` (2 s) defaults:
  a paused broker is fenced by its missing heartbeats on either.

Kafka runs first, stopped before the Ray cluster starts, so neither side shares the cores with the other. Each side
measures the pause first, then the kill on a topic of its own (the paused broker rejoined). One failover of each kind a
run, `--quick` too (a failover is one event at any size; the module takes ~4-5 minutes, most of it the two pauses). Like
`benchmarks.bench_replication` this module needs Ray to itself (it stops the shared environment first, so it runs last)
and leaves nothing running.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil

from benchmarks.bench_replication import (
    BROKER_PROPERTIES,
    HEALTH_CHECKS,
    ThreeNodes,
    states,
    stop_shared_ray,
    three_nodes,
)
from benchmarks.bench_replication_kafka import WORKER_NICENESS
from benchmarks.common import BenchContext, Figure
from benchmarks.kafka_broker import KAFKA_VERSION
from benchmarks.kafka_cluster import KafkaCluster
from benchmarks.processes import CLIENT_TIMEOUT_S, QUIET

PARTITIONS = 3
REPLICATION_FACTOR = 3
MIN_INSYNC_REPLICAS = 2
# The producer's pace: one record every 10 ms, its acknowledgements served as they come.
SEND_PAUSE_S = 0.01
# Acknowledgements before the fault (the client connected, its producer id and the leader known), and after the
# first write of the new leader (the partition writable again, not one write through).
WARM_ACKS = 50
TAIL_ACKS = 50
METADATA_POLL_S = 0.05
METADATA_TIMEOUT_S = 5.0
FAILOVER_TIMEOUT_S = 120.0
PAUSE_MAX_S = 90.0
REJOIN_TIMEOUT_S = 60.0
FLUSH_TIMEOUT_S = 120.0
CREATE_ATTEMPTS = 3
GOAL_RATIO = 1.0
GOAL_S = 10.0
# librdkafka's settings besides its defaults: Kafka's Java producer defaults, and each record sent at once.
PRODUCER_SETTINGS = {"acks": "all", "enable.idempotence": True, "linger.ms": 0}
# Kafka's defaults, which `benchmarks.kafka_cluster` leaves as they are.
KAFKA_SESSION = {"broker.session.timeout.ms": 9000, "broker.heartbeat.interval.ms": 2000}


@dataclass(frozen=True, slots=True)
class Fault:
    """How one side's leader is taken away (`apply`), given back (`resume`, None for a kill) and seen back in the
    ISR (`rejoined`); `leader` names the current leader as the side's metadata has it (None: no leader now)."""

    apply: Callable[[], None]
    leader: Callable[[], Any]
    resume: Callable[[], None] | None = None
    rejoined: Callable[[], bool] | None = None


@dataclass(frozen=True, slots=True)
class Failover:
    """One measured failover: seconds from the fault to the new leader's first acknowledged write, whether every
    acknowledged write was read back once where acknowledged and the paused broker rejoined, and what the figure's
    text says of it; `failed_over` False when no write acknowledged after the fault is in a later leader epoch (then
    `seconds` is the time to the first write after the fault)."""

    seconds: float
    intact: bool
    rejoined: bool
    text: str
    failed_over: bool = True


@dataclass
class Writer:
    """The producer (see the module docstring), run by `run` on a thread until `stopped`, then flushed. `acked` is
    (monotonic time, sequence number, offset) in order of acknowledgement, `failed` (time, sequence number, error)
    for each send librdkafka gave up on."""

    bootstrap: str
    topic: str
    partition: int
    acked: list[tuple[float, int, int]] = field(default_factory=list)
    failed: list[tuple[float, int, str]] = field(default_factory=list)
    sent: int = 0
    unanswered: int = 0
    error: BaseException | None = None
    stopped: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        from confluent_kafka import Producer

        def delivered(error: Any, message: Any) -> None:
            now = time.monotonic()
            sequence = int(message.value())
            if error is None:
                self.acked.append((now, sequence, message.offset()))
            else:
                self.failed.append((now, sequence, str(error)))

        try:
            producer = Producer({"bootstrap.servers": self.bootstrap, **PRODUCER_SETTINGS, **QUIET})
            next_send = time.monotonic()
            while not self.stopped.is_set():
                producer.produce(self.topic, str(self.sent).encode(), partition=self.partition, on_delivery=delivered)
                self.sent += 1
                next_send += SEND_PAUSE_S
                while (left := next_send - time.monotonic()) > 0:
                    producer.poll(left)
            self.unanswered = producer.flush(FLUSH_TIMEOUT_S)
        except BaseException as exc:
            self.error = exc

    def first_ack_from(self, sequence: int) -> tuple[float, int, int] | None:
        """The first acknowledgement of a record numbered `sequence` or later."""
        return next((ack for ack in list(self.acked) if ack[1] >= sequence), None)


def run(ctx: BenchContext) -> list[Figure]:
    ctx.progress("  stopping the shared Ray: this module runs its own 3-node cluster")
    stop_shared_ray(ctx)
    ctx.progress("  starting Apache Kafka with three brokers (fetched from Maven Central on the first run) ...")
    kafka = _kafka_failovers(ctx)
    ours = _raybroker_failovers(ctx)
    return [
        _figure("failover_s", "leader SIGKILLed", ours["kill"], kafka["kill"]),
        _figure("failover_pause_s", "leader SIGSTOPped", ours["pause"], kafka["pause"]),
    ]


def _figure(name: str, fault: str, ours: Failover, kafka: Failover) -> Figure:
    """The figure of one kind of fault: ours beside Kafka's, met as the module docstring says."""
    ratio = ours.seconds / kafka.seconds
    met = ratio <= GOAL_RATIO and ours.seconds <= GOAL_S and ours.intact and kafka.intact
    met = met and ours.rejoined and kafka.rejoined and ours.failed_over and kafka.failed_over
    ray_checks = (
        f"{HEALTH_CHECKS['health_check_failure_threshold']} failures {HEALTH_CHECKS['health_check_period_ms']} ms "
        f"apart (timeout {HEALTH_CHECKS['health_check_timeout_ms']} ms)"
    )
    return Figure(
        name,
        ours.seconds,
        "s",
        f"Apache Kafka {KAFKA_VERSION}, 3 brokers, {fault} (same client)",
        kafka.seconds,
        ratio,
        f"ratio (ours/Kafka's time) <= {GOAL_RATIO:g}, <= {GOAL_S:g} s and no acknowledged write lost; "
        f"raybroker {ours.seconds:.2f} s: {ours.text}; Kafka {kafka.seconds:.2f} s: {kafka.text}; both: librdkafka "
        f"acks=all, idempotent, one record every {SEND_PAUSE_S * 1000:g} ms into a partition of 3 replicas "
        f"(min.insync.replicas {MIN_INSYNC_REPLICAS}), {_session_text()}; "
        f"Ray health checks: dead after {ray_checks}",
        met,
    )


def _session_text() -> str:
    """raybroker's broker session settings, checked to be Kafka's defaults (which `benchmarks.kafka_cluster` keeps)."""
    from storage.config.broker_config import BrokerConfig

    config = BrokerConfig.from_properties(BROKER_PROPERTIES)
    ours = {
        "broker.session.timeout.ms": config.broker_session_timeout_ms,
        "broker.heartbeat.interval.ms": config.broker_heartbeat_interval_ms,
    }
    if ours != KAFKA_SESSION:
        raise RuntimeError(f"raybroker's broker session settings {ours} are not Kafka's defaults {KAFKA_SESSION}")
    return (
        f"a broker fenced after {KAFKA_SESSION['broker.session.timeout.ms'] / 1000:g} s without a heartbeat (one "
        f"every {KAFKA_SESSION['broker.heartbeat.interval.ms'] / 1000:g} s, Kafka's defaults, on both)"
    )


# --- Apache Kafka -----------------------------------------------------------------------------------------------


def _kafka_failovers(ctx: BenchContext) -> dict[str, Failover]:
    """The pause, then the kill, on Apache Kafka's three brokers (stopped afterwards)."""
    with KafkaCluster() as kafka:
        return {how: _kafka_failover(ctx, kafka, how) for how in ("pause", "kill")}


def _kafka_failover(ctx: BenchContext, kafka: KafkaCluster, how: str) -> Failover:
    """One failover on a new topic, of a partition led by a broker other than the active KRaft controller (when
    the controller leads every partition, of one it leads)."""
    bootstrap = kafka.bootstrap_servers
    topic = create_topic(bootstrap, how, lambda name: isr_whole(bootstrap, name))
    controller = kafka_controller(kafka)
    led = wait_for(lambda: leaders(bootstrap, topic), CLIENT_TIMEOUT_S, f"{topic}'s leaders")
    partition = next((p for p, leader in enumerate(led) if leader != controller), 0)
    leader = led[partition]
    node = next(node for node in kafka.nodes if node.node_id == leader)
    if node.process is None:
        raise RuntimeError(f"Kafka broker {leader} is not running")
    others = ",".join(f"127.0.0.1:{other.port}" for other in kafka.nodes if other is not node)
    where = f"broker {leader} led partition {partition}, the KRaft controller was broker {controller}"
    if leader == controller:
        where += " (it led every partition)"
    ctx.progress(f"  Kafka {how}: {topic}, {where}")
    fault = _kafka_fault(how, node.process, others, topic, partition, leader)
    return _measure(ctx, "Kafka", bootstrap, topic, partition, leader, fault, where)


def _kafka_fault(how: str, process: Any, others: str, topic: str, partition: int, leader: int) -> Fault:
    """The fault of the broker `leader` (its JVM `process`), its partition's metadata asked of the `others`."""

    def current() -> int | None:
        found = partition_metadata(others, topic, partition)
        return None if found is None or found.leader < 0 else int(found.leader)

    if how == "kill":
        return Fault(lambda: process.send_signal(signal.SIGKILL), current)

    def rejoined() -> bool:
        found = partition_metadata(others, topic, partition)
        return found is not None and leader in found.isrs

    return Fault(
        lambda: process.send_signal(signal.SIGSTOP),
        current,
        resume=lambda: process.send_signal(signal.SIGCONT),
        rejoined=rejoined,
    )


def partition_metadata(bootstrap: str, topic: str, partition: int) -> Any:
    """The partition's metadata (leader, ISR) as one of the `bootstrap` brokers answers it now, None without an
    answer within `METADATA_TIMEOUT_S`. A new client each time: a client's metadata request may go to any broker it
    knows, and one sent to a paused broker waits for librdkafka's `socket.timeout.ms` (60 s), blocking the next."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    try:
        metadata = AdminClient({"bootstrap.servers": bootstrap, **QUIET}).list_topics(topic, timeout=METADATA_TIMEOUT_S)
    except KafkaException:
        return None
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        return None
    return found.partitions.get(partition)


def leaders(bootstrap: str, topic: str) -> list[int] | None:
    """Each partition's leader (broker id) as the `bootstrap` brokers answer, None while one has none or the metadata
    does not answer."""
    found = [partition_metadata(bootstrap, topic, partition) for partition in range(PARTITIONS)]
    return None if any(p is None or p.leader < 0 for p in found) else [int(p.leader) for p in found]


def isr_whole(bootstrap: str, topic: str) -> bool:
    found = [partition_metadata(bootstrap, topic, partition) for partition in range(PARTITIONS)]
    return all(p is not None and p.leader >= 0 and len(p.isrs) == REPLICATION_FACTOR for p in found)


def kafka_controller(kafka: KafkaCluster) -> int:
    """The active KRaft controller: the quorum leader of the highest epoch in the nodes' `quorum-state` files
    (Metadata's controller id is any broker in KRaft mode)."""
    best = (-1, -1)
    for node in kafka.nodes:
        with contextlib.suppress(OSError, ValueError):
            state = json.loads((node.folder / "data" / "__cluster_metadata-0" / "quorum-state").read_text())
            best = max(best, (int(state["leaderEpoch"]), int(state["leaderId"])))
    return best[1]


# --- raybroker --------------------------------------------------------------------------------------------------


def _raybroker_failovers(ctx: BenchContext) -> dict[str, Failover]:
    """The pause, then the kill, on raybroker's three Ray nodes, through the head's Kafka listener."""
    measured: dict[str, Failover] = {}
    with three_nodes(ctx, WORKER_NICENESS) as nodes:
        bootstrap = _head_listener(nodes)
        ctx.progress(f"  a Kafka listener on the head: {bootstrap}")
        for how in ("pause", "kill"):
            topic = create_topic(bootstrap, how, _raybroker_isr_whole)
            led = [(p, state.leader) for p, state in sorted(states(topic).items()) if state.leader in nodes.workers]
            if not led:
                raise RuntimeError(f"the head leads every partition of {topic}: no worker to take away")
            partition, leader = led[0]
            where = f"worker {leader[:6]} led partition {partition}"
            ctx.progress(f"  raybroker {how}: {topic}, {where}")
            fault = _ray_fault(how, nodes, topic, partition, leader)
            measured[how] = _measure(ctx, "raybroker", bootstrap, topic, partition, leader, fault, where)
    return measured


def _head_listener(nodes: ThreeNodes) -> str:
    """A Kafka listener on the head (`node.id` 0), the client's one broker; its bootstrap servers."""
    from cluster.protocol.listener_actor import start_kafka_listeners
    from storage.config.broker_config import BrokerConfig

    config = BrokerConfig.from_properties({"listeners": "PLAINTEXT://127.0.0.1:0", "node.id": "0"})
    return start_kafka_listeners(config, nodes.head).bootstrap_servers


def _raybroker_isr_whole(topic: str) -> bool:
    found = states(topic)
    return len(found) == PARTITIONS and all(len(state.isr) == REPLICATION_FACTOR for state in found.values())


def _ray_fault(how: str, nodes: ThreeNodes, topic: str, partition: int, leader: str) -> Fault:
    """The fault of the broker on the worker node `leader`: its node removed, or its processes paused."""

    def current() -> str | None:
        return states(topic)[partition].leader or None

    if how == "kill":
        return Fault(lambda: nodes.remove(leader), current)
    nodes.remember_processes()
    raylet = psutil.Process(nodes.workers[leader].all_processes["raylet"][0].process.pid)
    # Ray's workers (the broker's actors and idle workers), not its agents, which the raylet's health depends on.
    paused = [process for process in raylet.children(recursive=True) if "Agent" not in process.name()]

    def signal_all(sent: signal.Signals) -> None:
        for process in paused:
            with contextlib.suppress(psutil.Error):
                process.send_signal(sent)

    def rejoined() -> bool:
        return leader in _registered_brokers() and leader in states(topic)[partition].isr

    return Fault(
        lambda: signal_all(signal.SIGSTOP),
        current,
        resume=lambda: signal_all(signal.SIGCONT),
        rejoined=rejoined,
    )


def _registered_brokers() -> list[str]:
    """The nodes whose broker the controller counts in the cluster now (a fenced one is not)."""
    from actors.calls import call
    from actors.clients.broker import Broker

    brokers: list[str] = call(Broker.connect().controller.brokers.remote())
    return brokers


# --- both sides -------------------------------------------------------------------------------------------------


def create_topic(bootstrap: str, how: str, whole: Callable[[str], bool]) -> str:
    """A new topic (see the module docstring) created by confluent-kafka's AdminClient; answers once `whole` says
    every replica of every partition is in sync. librdkafka drops its bootstrap connections once it has learned the
    brokers, failing a request still waiting on one with _DESTROY_BROKER: the create is sent again then (a create
    that went through answers TOPIC_ALREADY_EXISTS)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"bench-failover-{how}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    new = NewTopic(name, PARTITIONS, REPLICATION_FACTOR, config={"min.insync.replicas": str(MIN_INSYNC_REPLICAS)})
    for attempt in range(CREATE_ATTEMPTS):
        try:
            admin.create_topics([new], operation_timeout=30)[name].result(timeout=60)
            break
        except KafkaException as exc:
            code = exc.args[0].code()
            if attempt > 0 and code == KafkaError.TOPIC_ALREADY_EXISTS:
                break
            if code != KafkaError._DESTROY_BROKER or attempt == CREATE_ATTEMPTS - 1:
                raise
    wait_for(lambda: whole(name), CLIENT_TIMEOUT_S, f"{name}: every replica in sync")
    return name


def wait_for(condition: Callable[[], Any], timeout_s: float, what: str) -> Any:
    found = _within(condition, time.monotonic() + timeout_s)
    if not found:
        raise RuntimeError(f"{what} not reached within {timeout_s:.0f} s")
    return found


def _within(condition: Callable[[], Any], deadline: float) -> Any:
    """What `condition` answered once truthy (asked every `METADATA_POLL_S`), or its last answer at `deadline`."""
    while True:
        found = condition()
        if found or time.monotonic() >= deadline:
            return found
        time.sleep(METADATA_POLL_S)


def _measure(
    ctx: BenchContext,
    side: str,
    bootstrap: str,
    topic: str,
    partition: int,
    old_leader: Any,
    fault: Fault,
    where: str,
) -> Failover:
    """One failover of `topic`-`partition` (see the module docstring), its acknowledged writes read back."""
    writer = Writer(bootstrap, topic, partition)
    thread = threading.Thread(target=writer.run, name=f"failover-writer-{side}", daemon=True)
    thread.start()
    resumed_at: float | None = None
    rejoined_at: float | None = None
    try:
        wait_for(lambda: len(writer.acked) >= WARM_ACKS or writer.error, FAILOVER_TIMEOUT_S, "the first writes")
        if writer.error is not None:
            raise RuntimeError(f"the {side} writer failed before the fault: {writer.error!r}")
        faulted_at = time.monotonic()
        fault.apply()
        # A record produced from here on can be written by a new leader only (a paused one reads nothing; the one
        # being produced now is skipped).
        unsent = writer.sent + 1
        new_leader = wait_for(
            lambda: (found := fault.leader()) not in (None, old_leader) and found, FAILOVER_TIMEOUT_S, "a new leader"
        )
        named_at = time.monotonic()
        limit = faulted_at + (PAUSE_MAX_S if fault.resume is not None else FAILOVER_TIMEOUT_S)
        first = _within(lambda: writer.first_ack_from(unsent) or writer.error, limit)
        if fault.resume is not None:
            fault.resume()
            resumed_at = time.monotonic()
            first = first or wait_for(
                lambda: writer.first_ack_from(unsent) or writer.error, FAILOVER_TIMEOUT_S, "a write after resuming"
            )
            rejoined = fault.rejoined
            if rejoined is not None and _within(rejoined, resumed_at + REJOIN_TIMEOUT_S):
                rejoined_at = time.monotonic()
        if not first or writer.error is not None:
            raise RuntimeError(f"no {side} write acknowledged after the new leader was named: {writer.error!r}")
        count = len(writer.acked)
        wait_for(lambda: len(writer.acked) >= count + TAIL_ACKS or writer.error, FAILOVER_TIMEOUT_S, "later writes")
    finally:
        if fault.resume is not None and resumed_at is None:
            fault.resume()
        writer.stopped.set()
        thread.join(FLUSH_TIMEOUT_S + CLIENT_TIMEOUT_S)
    if writer.error is not None or thread.is_alive():
        raise RuntimeError(f"the {side} writer failed or hangs: {writer.error!r}")
    return _judge(
        ctx,
        side,
        writer,
        read_back(bootstrap, topic, partition),
        faulted_at,
        named_at,
        new_leader,
        resumed_at,
        rejoined_at,
        where,
    )


def read_back(bootstrap: str, topic: str, partition: int) -> list[tuple[int, int, int]]:
    """(offset, sequence number, batch leader epoch) of every record of the partition, read by a consumer from its
    leader up to the high watermark."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-failover-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            **QUIET,
        }
    )
    records: list[tuple[int, int, int]] = []
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=CLIENT_TIMEOUT_S)
        consumer.assign([TopicPartition(topic, partition, low)])
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while (records[-1][0] if records else low - 1) < high - 1:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic}-{partition}: read up to {len(records)} of offsets {low}-{high}")
            for message in consumer.consume(1000, 1.0):
                error = message.error()
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(f"{topic}-{partition}: {error}")
                if error is None:
                    offset, value, epoch = message.offset(), message.value(), message.leader_epoch()
                    if offset is None or value is None or epoch is None:
                        raise RuntimeError(f"{topic}-{partition}: a record without offset, value or leader epoch")
                    records.append((offset, int(value), epoch))
    finally:
        consumer.close()
    return records


def _judge(
    ctx: BenchContext,
    side: str,
    writer: Writer,
    records: list[tuple[int, int, int]],
    faulted_at: float,
    named_at: float,
    new_leader: Any,
    resumed_at: float | None,
    rejoined_at: float | None,
    where: str,
) -> Failover:
    """The failover's time from the records read back (the first acknowledged after the fault in a later leader
    epoch than the last acknowledged before it), whether every acknowledged write is there once, and its text."""
    found: dict[int, list[tuple[int, int]]] = {}
    for offset, sequence, epoch in records:
        found.setdefault(sequence, []).append((offset, epoch))
    before = [ack for ack in writer.acked if ack[0] <= faulted_at]
    if not before or len(found.get(before[-1][1], [])) != 1:
        raise RuntimeError(f"{side}: the last write acknowledged before the fault is not in the log once")
    old_epoch = found[before[-1][1]][0][1]
    after = [ack for ack in writer.acked if ack[0] > faulted_at]
    new = [ack for ack in after if any(epoch > old_epoch for _, epoch in found.get(ack[1], []))]
    if not after:
        raise RuntimeError(f"{side}: no write acknowledged after the fault")
    # Without a write in a later epoch there was no failover to time (a broker that named a new leader but whose
    # writes after the fault all stayed in the old epoch): the time to the first write after the fault is reported,
    # said so, and the figure is unmet.
    acked_at, _, offset = (new or after)[0]
    seconds = acked_at - faulted_at
    lost = [sequence for _, sequence, _ in writer.acked if sequence not in found]
    duplicated = [sequence for sequence, places in found.items() if len(places) > 1]
    moved = [s for _, s, o in writer.acked if s in found and len(found[s]) == 1 and found[s][0][0] != o]
    old_leader_acks = [ack for ack in after if ack[0] < acked_at and ack[1] in found]
    parts = [
        where,
        f"new leader {str(new_leader)[:6]} named after {named_at - faulted_at:.2f} s",
        f"first write in its epoch ({old_epoch} -> {found[new[0][1]][0][1]}) at offset {offset}"
        if new
        else f"NO acknowledged write in a leader epoch after {old_epoch}: the first after the fault at offset {offset}",
    ]
    if old_leader_acks:
        parts.append(
            f"{len(old_leader_acks)} write(s) of the old epoch acknowledged after the fault, "
            f"{old_leader_acks[0][0] - faulted_at:.2f}-{old_leader_acks[-1][0] - faulted_at:.2f} s after it"
        )
    if resumed_at is not None:
        parts.append(
            f"resumed after {resumed_at - faulted_at:.2f} s"
            + ("" if seconds < resumed_at - faulted_at else " without a write of the new leader acknowledged")
            + (
                f", back in the ISR {rejoined_at - resumed_at:.2f} s later"
                if rejoined_at is not None
                else f", NOT back in the ISR within {REJOIN_TIMEOUT_S:g} s"
            )
        )
    parts.append(_failures(writer, faulted_at))
    intact = not (lost or duplicated or moved or writer.unanswered)
    parts.append(
        f"all {len(writer.acked)} acknowledged writes read back once"
        if intact
        else f"{len(writer.acked)} acknowledged: LOST {lost[:5]}, DUPLICATED {duplicated[:5]}, at another offset "
        f"{moved[:5]}, {writer.unanswered} unanswered after the flush"
    )
    text = ", ".join(parts)
    ctx.progress(f"  {side} {'pause' if resumed_at is not None else 'kill'}: {seconds:.2f} s; {text}")
    return Failover(seconds, intact, resumed_at is None or rejoined_at is not None, text, failed_over=bool(new))


def _failures(writer: Writer, faulted_at: float) -> str:
    """The sends librdkafka gave up on, by error, with when they failed after the fault."""
    if not writer.failed:
        return "no send failed"
    by_error: dict[str, list[float]] = {}
    for at, _, error in writer.failed:
        by_error.setdefault(error, []).append(at - faulted_at)
    listed = [
        f"{len(times)} x {error} ({min(times):.2f}-{max(times):.2f} s)" for error, times in sorted(by_error.items())
    ]
    return f"FAILED sends: {'; '.join(listed)}"
