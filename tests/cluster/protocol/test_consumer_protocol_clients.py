"""Kafka 4's consumer group protocol (KIP-848) with Kafka's own client: Java `kafka-clients` 4.2 members with
`group.protocol=consumer` (`java/ConsumerGroupMember.java`), against a raybroker listener over the in-process broker
and against Apache Kafka 4.2, the same sequence on both: two members split a 6-partition topic 3/3, a third joins
and the group moves to 2/2/2 without stopping the others, and records produced before and between the steps are
read; and a rolling upgrade from classic Java members to a consumer-protocol one and back (Kafka's
`group.consumer.migration.policy`). The oracle is what was produced, as the producer's delivery reports named it:
every record read exactly once across the members (each commits after every poll and before giving a partition up,
so nothing committed may be read again), and each step's assignments complete and balanced. librdkafka's own
consumer-protocol client (confluent-kafka, `group.protocol=consumer`) runs the same steps on raybroker, and static
members of it (`group.instance.id`) on both brokers: one closes (a static leave) and the other keeps its own share
meanwhile, then the instance starts again and gets back the partitions it had, as on Kafka 4.2.

Both brokers run with a 1 s consumer heartbeat interval (Kafka's default is 5 s; a member learns of a new target
at its next heartbeat), so each step takes a few seconds."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.applications.java_programs import JavaProcess, java_classpath
from tests.cluster.applications.programs import ProgramProcess

pytestmark = pytest.mark.kafka

KAFKA_CLIENTS = ("org.apache.kafka", "kafka-clients", "4.2.2")
SOURCE = Path(__file__).parent / "java" / "ConsumerGroupMember.java"
PARTITIONS = 6
RECORDS_PER_STEP = 300
DEADLINE_S = 60.0

Position = tuple[int, int]
# One broker's run of steps: each step's assignment sizes, and how often each produced record was read.
Run = tuple[list[list[int]], Counter[Position]]


@pytest.fixture(scope="module")
def classpath(tmp_path_factory: pytest.TempPathFactory) -> str:
    return java_classpath([KAFKA_CLIENTS], {SOURCE.name: SOURCE.read_text()}, tmp_path_factory.mktemp("java"))


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[topic].result(timeout=60)


def produce(bootstrap: str, topic: str, count: int) -> set[Position]:
    """Sends `count` keyed records; the (partition, offset) of each, from the delivery reports."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": "5"})
    delivered: set[Position] = set()

    def report(error: object, message: object) -> None:
        assert error is None, error
        delivered.add((message.partition(), message.offset()))  # type: ignore[attr-defined]

    for index in range(count):
        producer.produce(topic, key=f"k{index}-{uuid.uuid4()}".encode(), value=b"v", on_delivery=report)
    assert producer.flush(DEADLINE_S) == 0 and len(delivered) == count
    return delivered


class PrintingMember:
    """A group member running as a program that prints what it does, a line each ("RECORD partition offset",
    "ASSIGNMENT p,p,...", "CLOSED" once it left); `stop_file` asks it to leave."""

    def __init__(self, process: ProgramProcess, stop_file: Path) -> None:
        self.process = process
        self.stop_file = stop_file

    def lines(self, kind: str) -> list[str]:
        return [
            line.split(" ", 1)[1] if " " in line else ""
            for line in self.process.output().splitlines()
            if line.split(" ", 1)[0] == kind
        ]

    def assignment(self) -> set[int]:
        printed = self.lines("ASSIGNMENT")
        return {int(number) for number in printed[-1].split(",") if number} if printed else set()

    def records(self) -> list[Position]:
        return [(int(p), int(o)) for p, o in (line.split() for line in self.lines("RECORD"))]

    def tail(self) -> str:
        return f"--- {self.process.log_path.name}\n{self.process.output()[-3000:]}"

    def leave(self) -> None:
        self.stop_file.touch()
        deadline = time.monotonic() + DEADLINE_S
        while "CLOSED" not in self.process.output() and time.monotonic() < deadline:
            time.sleep(0.2)
        self.process.stop()


class JavaMember(PrintingMember):
    """One Java member (see the module docstring), of group protocol `protocol`."""

    def __init__(
        self,
        classpath: str,
        bootstrap: str,
        topic: str,
        group: str,
        folder: Path,
        name: str,
        protocol: str = "consumer",
    ) -> None:
        stop_file = folder / f"{name}.stop"
        arguments = [bootstrap, topic, group, str(stop_file), protocol]
        super().__init__(JavaProcess(classpath, "ConsumerGroupMember", arguments, folder / f"{name}.log"), stop_file)


def wait_for(what: str, done: Callable[[], bool], members: Sequence[PrintingMember]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not done():
        if time.monotonic() > deadline:
            tails = "\n".join(member.tail() for member in members)
            pytest.fail(f"{what} did not happen within {DEADLINE_S} s:\n{tails}")
        for member in members:
            assert member.process.process.poll() is None, member.tail()
        time.sleep(0.1)


def balanced(members: Sequence[PrintingMember], size: int) -> bool:
    assignments = [member.assignment() for member in members]
    every = [partition for assignment in assignments for partition in assignment]
    return sorted(every) == list(range(PARTITIONS)) and all(len(a) == size for a in assignments)


def on_both_brokers(
    kafka4: str,
    wall_clock_listener: str,
    tmp_path: Path,
    steps: Callable[[str, Path], Run],
) -> dict[str, Run]:
    """`steps(bootstrap, folder)` on Kafka 4.2, then on raybroker: each broker's step sizes and read counts, after
    checking that no record was read twice."""
    outcomes = {}
    for name, bootstrap in (("kafka", kafka4), ("raybroker", wall_clock_listener)):
        folder = tmp_path / name
        folder.mkdir()
        outcomes[name] = steps(bootstrap, folder)
    for name, (_, counts) in outcomes.items():
        assert max(counts.values()) == 1, (name, [position for position, n in counts.items() if n > 1][:10])
    return outcomes


def run_steps(classpath: str, bootstrap: str, folder: Path) -> Run:
    """The module docstring's steps; each step's assignment sizes and how often each produced record was read."""
    topic, group = f"kip848-{uuid.uuid4().hex[:8]}", f"members-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    produced = produce(bootstrap, topic, RECORDS_PER_STEP)
    members = [JavaMember(classpath, bootstrap, topic, group, folder, name) for name in ("a", "b")]
    sizes = []
    try:
        wait_for("a 3/3 split", lambda: balanced(members, 3), members)
        sizes.append(sorted(len(m.assignment()) for m in members))
        produced |= produce(bootstrap, topic, RECORDS_PER_STEP)
        members.append(JavaMember(classpath, bootstrap, topic, group, folder, "c"))
        wait_for("a 2/2/2 split", lambda: balanced(members, 2), members)
        sizes.append(sorted(len(m.assignment()) for m in members))
        produced |= produce(bootstrap, topic, RECORDS_PER_STEP)
        read = lambda: Counter(position for m in members for position in m.records())  # noqa: E731
        wait_for("every record read", lambda: set(read()) >= produced, members)
    finally:
        for member in members:
            member.leave()
    counts = read()
    assert set(counts) == produced
    return sizes, counts


def test_java_members_split_and_rebalance_as_on_kafka(
    classpath: str, wall_clock_listener: str, kafka4: str, tmp_path: Path
) -> None:
    outcomes = on_both_brokers(kafka4, wall_clock_listener, tmp_path, lambda b, f: run_steps(classpath, b, f))
    for name, (sizes, _) in outcomes.items():
        assert sizes == [[3, 3], [2, 2, 2]], name


def run_migration_steps(classpath: str, bootstrap: str, folder: Path) -> Run:
    """A rolling upgrade and its way back: two classic Java members split the topic 3/3, a consumer-protocol member
    joins (the group is upgraded) and the three hold 2/2/2, then it leaves (the group is classic again) and the two
    hold 3/3; records are produced before each step. Each step's assignment sizes, and how often each record was
    read."""
    topic, group = f"migrate-{uuid.uuid4().hex[:8]}", f"rolling-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    produced = produce(bootstrap, topic, RECORDS_PER_STEP)
    members = [JavaMember(classpath, bootstrap, topic, group, folder, name, protocol="classic") for name in ("a", "b")]
    everyone = list(members)
    sizes = []
    read = lambda: Counter(position for m in everyone for position in m.records())  # noqa: E731
    try:
        wait_for("a 3/3 split of classic members", lambda: balanced(members, 3), members)
        sizes.append(sorted(len(m.assignment()) for m in members))
        produced |= produce(bootstrap, topic, RECORDS_PER_STEP)
        upgraded = JavaMember(classpath, bootstrap, topic, group, folder, "c")
        members.append(upgraded)
        everyone.append(upgraded)
        wait_for("a 2/2/2 split after the upgrade", lambda: balanced(members, 2), members)
        sizes.append(sorted(len(m.assignment()) for m in members))
        produced |= produce(bootstrap, topic, RECORDS_PER_STEP)
        wait_for("every record read", lambda: set(read()) >= produced, members)
        upgraded.leave()
        members.remove(upgraded)
        wait_for("a 3/3 split after the downgrade", lambda: balanced(members, 3), members)
        sizes.append(sorted(len(m.assignment()) for m in members))
        produced |= produce(bootstrap, topic, RECORDS_PER_STEP)
        wait_for("every record read", lambda: set(read()) >= produced, members)
    finally:
        for member in members:
            member.leave()
    counts = read()
    assert set(counts) == produced
    return sizes, counts


def test_a_rolling_upgrade_from_classic_members_and_back_as_on_kafka(
    classpath: str, wall_clock_listener: str, kafka4: str, tmp_path: Path
) -> None:
    outcomes = on_both_brokers(kafka4, wall_clock_listener, tmp_path, lambda b, f: run_migration_steps(classpath, b, f))
    for name, (sizes, _) in outcomes.items():
        assert sizes == [[3, 3], [2, 2, 2], [3, 3]], name


def test_librdkafka_members_split_and_rebalance(wall_clock_listener: str) -> None:
    topic, group = f"kip848-rd-{uuid.uuid4().hex[:8]}", "rd-members"
    create_topic(wall_clock_listener, topic)
    produced = produce(wall_clock_listener, topic, RECORDS_PER_STEP)
    settings = {
        "bootstrap.servers": wall_clock_listener,
        "group.id": group,
        "group.protocol": "consumer",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": "false",
    }
    consumers: list[Consumer] = []
    read: Counter[Position] = Counter()

    def poll_until(what: str, done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while not done():
            assert time.monotonic() < deadline, f"{what} did not happen within {DEADLINE_S} s"
            for consumer in consumers:
                messages = [message for message in consumer.consume(500, 0.05) if message.error() is None]
                read.update((message.partition(), message.offset()) for message in messages)
                if messages:
                    consumer.commit(asynchronous=False)

    def sizes() -> list[int]:
        return sorted(len(consumer.assignment()) for consumer in consumers)

    try:
        consumers += [Consumer(settings), Consumer(settings)]
        for consumer in consumers:
            consumer.subscribe([topic])
        poll_until("a 3/3 split", lambda: sizes() == [3, 3])
        consumers.append(Consumer(settings))
        consumers[-1].subscribe([topic])
        poll_until("a 2/2/2 split", lambda: sizes() == [2, 2, 2])
        poll_until("every record read", lambda: set(read) >= produced)
    finally:
        for consumer in consumers:
            consumer.close()
    assert set(read) == produced


def static_member_steps(bootstrap: str) -> list[list[list[int]]]:
    """Two static librdkafka members split the topic; "i-a" closes, then starts again: each member's partitions
    after the split, after i-a's close (i-b's only), and after its return."""
    topic, group = f"kip848-static-{uuid.uuid4().hex[:8]}", f"static-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)

    def member(instance: str) -> Consumer:
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "group.protocol": "consumer",
                "group.instance.id": instance,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": "false",
            }
        )
        consumer.subscribe([topic])
        return consumer

    consumers = {"i-a": member("i-a"), "i-b": member("i-b")}

    def partitions(instance: str) -> list[int]:
        return sorted(partition.partition for partition in consumers[instance].assignment())

    def poll_for(seconds: float, done: Callable[[], bool] = lambda: False) -> None:
        deadline = time.monotonic() + seconds
        while not done() and time.monotonic() < deadline:
            for consumer in consumers.values():
                consumer.poll(0.05)

    steps = []
    try:
        poll_for(DEADLINE_S, lambda: [len(partitions(i)) for i in consumers] == [3, 3])
        steps.append([partitions(instance) for instance in sorted(consumers)])
        consumers.pop("i-a").close()
        # Longer than a few heartbeats of i-b, far shorter than the session i-a's partitions are kept for.
        poll_for(5.0)
        steps.append([partitions("i-b")])
        consumers["i-a"] = member("i-a")
        poll_for(DEADLINE_S, lambda: len(partitions("i-a")) == 3)
        steps.append([partitions(instance) for instance in sorted(consumers)])
    finally:
        for consumer in consumers.values():
            consumer.close()
    return steps


def test_a_static_member_gets_its_partitions_back_as_on_kafka(wall_clock_listener: str, kafka4: str) -> None:
    outcomes = {
        name: static_member_steps(bootstrap)
        for name, bootstrap in (("kafka", kafka4), ("raybroker", wall_clock_listener))
    }
    for name, (split, away, back) in outcomes.items():
        assert sorted(len(partitions) for partitions in split) == [3, 3], (name, split)
        assert away == [split[1]] and back == split, (name, outcomes[name])
