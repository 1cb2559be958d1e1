"""A consumer group's rebalance over the Kafka protocol: the same confluent-kafka consumers against raybroker's listener
and against Apache Kafka 4.2, with the classic group protocol and with Kafka 4's consumer protocol (KIP-848).

| figure                  | what                                              | baseline                             |
|-------------------------|---------------------------------------------------|--------------------------------------|
| `group_join_s`          | seconds from an 11th member's `subscribe` to a    | Apache Kafka 4.2 (KRaft, one node on |
|                         | group of 10 stable members consuming a 22-        | loopback), the same clients and      |
|                         | partition topic, until every one of the 11 has    | group settings                       |
|                         | consumed a record under its new assignment (the   |                                      |
|                         | median of the runs)                               |                                      |
| `group_join_consumer_s` | the same with `group.protocol=consumer` members,  | the same, consumer protocol          |
|                         | until the new member has read under its           |                                      |
|                         | assignment and the 11 own every partition once    |                                      |

Classic members are librdkafka consumers with its defaults (`range` assignment, eager: every member gives its
partitions up and joins again; `heartbeat.interval.ms` 3000, `session.timeout.ms` 45000), reading from the end. The
members learn of the new member at their next heartbeat (REBALANCE_IN_PROGRESS), so a run takes up to one heartbeat
interval on either broker, plus the join and sync round trips and the first fetch under the new assignment.
Consumer-protocol members are the same clients with `group.protocol=consumer` and the brokers' defaults (`uniform`
assignor, `group.consumer.heartbeat.interval.ms` 5000): the new member is assigned what the others give up, which
they learn at their next heartbeat and acknowledge at once; it then gets those partitions at its own next
heartbeat, so a run takes up to about two heartbeat intervals on either broker, and nobody stops reading meanwhile
(so only the members that give partitions up, and the new one, are assigned anew: the run ends once the new member
read and the group's assignments cover every partition once).
A producer writes a record to every partition every `PRODUCE_PAUSE_S`, so that a member assigned a partition soon
has a record to read. All clients run as threads of one spawned process; the sides are measured alternately.
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from typing import Any

from benchmarks.common import BenchContext, Figure
from benchmarks.kafka_broker import KAFKA_4_VERSION
from benchmarks.processes import QUIET, in_process
from benchmarks.side_by_side import beside_kafka

MEMBERS = 10
PARTITIONS = 22
PRODUCE_PAUSE_S = 0.05
GOAL_RATIO = 1.0
DEADLINE_S = 120.0


class _Member:
    """One consumer thread: when it was last assigned partitions, and when it first read a record after that."""

    def __init__(self, bootstrap: str, topic: str, group: str, index: int, protocol: str) -> None:
        self.assigned_at = 0.0
        self.read_at = 0.0
        self.owned: frozenset[int] = frozenset()
        self.stopping = threading.Event()
        self._args = (bootstrap, topic, group, index)
        self._protocol = protocol
        self._thread = threading.Thread(target=self._run, name=f"member-{index}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self._thread.join(DEADLINE_S)

    def reads_since(self, moment: float) -> bool:
        """Whether it was assigned after `moment` and has read a record since."""
        return self.assigned_at > moment and self.read_at > self.assigned_at

    def _run(self) -> None:
        from confluent_kafka import Consumer

        bootstrap, topic, group, index = self._args
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": f"member-{index}",
                "auto.offset.reset": "latest",
                "enable.auto.commit": False,
                "group.protocol": self._protocol,
                **QUIET,
            }
        )

        def assigned(_consumer: Any, partitions: list[Any]) -> None:
            if partitions:
                self.assigned_at = time.monotonic()

        consumer.subscribe([topic], on_assign=assigned)
        try:
            while not self.stopping.is_set():
                message = consumer.poll(0.05)
                if message is not None and message.error() is None and self.assigned_at:
                    self.read_at = max(self.read_at, time.monotonic())
                self.owned = frozenset(partition.partition for partition in consumer.assignment())
        finally:
            consumer.close()


def _wait(condition: Any, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not within {DEADLINE_S:g} s")
        time.sleep(0.01)


def _owned_once(members: list[_Member]) -> bool:
    """Whether the members' assignments cover every partition exactly once."""
    owned = [partition for member in members for partition in member.owned]
    return sorted(owned) == list(range(PARTITIONS))


def join_client(bootstrap: str, protocol: str) -> float:
    """One run (see the module docstring): the seconds until all 11 members read under their new assignments."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"bench-groups-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)], operation_timeout=30)[topic].result(timeout=60)
    producing = threading.Event()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **QUIET})

    def produce() -> None:
        while not producing.is_set():
            for partition in range(PARTITIONS):
                producer.produce(topic, b"r", partition=partition)
            producer.poll(0)
            time.sleep(PRODUCE_PAUSE_S)
        producer.flush(30)

    writer = threading.Thread(target=produce, daemon=True)
    writer.start()
    group = f"{topic}-group"
    members = [_Member(bootstrap, topic, group, index, protocol) for index in range(MEMBERS)]
    try:
        for member in members:
            member.start()
        _wait(lambda: all(member.reads_since(0.0) for member in members), "the first members' reads")
        # Stable: no rebalance under way (each member's last assignment is a second old).
        _wait(lambda: time.monotonic() - max(m.assigned_at for m in members) > 1.0, "a stable group")
        joining = _Member(bootstrap, topic, group, MEMBERS, protocol)
        members.append(joining)
        started = time.monotonic()
        joining.start()
        if protocol == "classic":
            _wait(lambda: all(m.reads_since(started) for m in members), "every member's reads after the join")
        else:
            _wait(lambda: joining.reads_since(started) and _owned_once(members), "the new member's reads")
            return joining.read_at - started
        return max(member.read_at for member in members) - started
    finally:
        for member in members:
            member.stopping.set()
        for member in members:
            member.stop()
        producing.set()
        writer.join(DEADLINE_S)


# Each figure's group protocol (librdkafka's `group.protocol`).
PROTOCOLS = {"group_join_s": "classic", "group_join_consumer_s": "consumer"}


def run(ctx: BenchContext) -> list[Figure]:
    figures = []
    with beside_kafka(ctx, {"num.partitions": "1"}, KAFKA_4_VERSION) as targets:
        for figure, protocol in PROTOCOLS.items():
            runs: dict[str, list[float]] = {name: [] for name in targets}
            repeats = 1 if ctx.quick else 3
            for attempt in range(repeats):
                for name, bootstrap in targets.items():
                    runs[name].append(in_process(join_client, bootstrap, protocol))
                ctx.progress(
                    f"  {figure} {attempt + 1}/{repeats}: {runs['raybroker'][-1]:.2f} s vs Kafka "
                    f"{runs['kafka'][-1]:.2f} s"
                )
            ours, theirs = statistics.median(runs["raybroker"]), statistics.median(runs["kafka"])
            ratio = ours / theirs
            figures.append(
                Figure(
                    figure,
                    ours,
                    "s",
                    f"Apache Kafka {KAFKA_4_VERSION}, {protocol} protocol (same clients)",
                    theirs,
                    ratio,
                    f"ratio (ours/Kafka's time) <= {GOAL_RATIO:g}; runs: raybroker "
                    f"{', '.join(f'{s:.2f}' for s in runs['raybroker'])} s, Kafka "
                    f"{', '.join(f'{s:.2f}' for s in runs['kafka'])} s",
                    ratio <= GOAL_RATIO,
                )
            )
    return figures
