"""Share groups (KIP-932) with Kafka's own client: two Java `KafkaShareConsumer` 4.2 members
(`java/ShareGroupMember.java`, explicit acknowledgement) on a one-partition topic, against a raybroker listener over
the in-process broker and against Apache Kafka 4.2, the same sequence on both, compared record by record.

The members share the one partition (the `simple` assignor gives it to both). A share-partition starts at the high
watermark (`share.auto.offset.reset=latest`, Kafka's default) when its group first fetches, so the test waits for
both members to join and then produces warm-up records until a member got one; then a known set: plain records,
which must each be ACCEPTed exactly once across the members with delivery count 1; a record the members RELEASE on
its first delivery, which must come back once with delivery count 2 (and then be accepted); a record they REJECT,
which must never come back; and a record they RELEASE every time, which is delivered
`group.share.delivery.count.limit` (5) times and then archived. Each broker's deliveries (value, delivery count,
acknowledge type) must be those, and the same on both. Meanwhile the group is asked over the wire, on both brokers
alike: ListGroups (v5, types filter `share`) lists it Stable with protocol type and group type `share`,
ShareGroupDescribe (v1) shows its two members sharing partition 0 under the `simple` assignor, and DescribeGroups
(v6) answers GROUP_ID_NOT_FOUND (it is no classic group).

A second sequence SIGKILLs the member holding a record it never acknowledged: the other member must get that record
with delivery count 2, and every record produced once it has, on both brokers alike (`KILL_EXPECTED`).

Durability (KIP-932's, Kafka's `__share_group_state`): a member accepts, rejects and releases records on the
in-process broker, records are produced after it left, the broker stops and opens again on the same log dirs, and a
new member of the group gets exactly the records produced meanwhile (each a first delivery), none of those accepted
or rejected before: what Kafka 4.2 gives after a restart (its share coordinator's snapshot), against the oracle of
what was acknowledged."""

from __future__ import annotations

import contextlib
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from tests.cluster.applications.java_programs import JavaProcess
from tests.cluster.protocol.conftest import start_share_broker
from tests.cluster.protocol.helpers import GROUP_KEY, coordinator_client, start_local_listener

pytestmark = pytest.mark.kafka

DEADLINE_S = 90.0
PLAIN_RECORDS = 30
# What each known record's deliveries must be: (delivery count, acknowledge type), in order.
EXPECTED = {
    **{f"plain-{index}": [(1, "ACCEPT")] for index in range(PLAIN_RECORDS)},
    "release-0": [(1, "RELEASE"), (2, "ACCEPT")],
    "reject-0": [(1, "REJECT")],
    "bounce-0": [(count, "RELEASE") for count in range(1, 6)],
}

Deliveries = dict[str, list[tuple[int, str]]]
Delivered = list[tuple[str, int, str]]
LIST_GROUPS, DESCRIBE_GROUPS, SHARE_GROUP_DESCRIBE = 16, 15, 77


class Member(Protocol):
    """A member of the share group the sequence runs on: what it got, and how it stops."""

    def deliveries(self) -> list[tuple[str, int, str]]: ...

    def close(self) -> None: ...

    def tail(self) -> str: ...


# Makes one of the sequence's members from the bootstrap servers, the topic, the group and a name.
MemberFactory = Callable[[str, str, str, str], Member]


# The sequence of `share_kill_steps`: a record whose first holder is killed holding it, and records after it.
KILL_EXPECTED = {"hang-0": [(1, "HOLD"), (2, "ACCEPT")], **{f"after-{index}": [(1, "ACCEPT")] for index in range(5)}}


def acknowledge_type(value: str, delivery_count: int) -> str:
    """How the members acknowledge a record, by its value (as `java/ShareGroupMember.java` decides)."""
    if value.startswith("bounce") or (value.startswith("release") and delivery_count == 1):
        return "RELEASE"
    return "REJECT" if value.startswith("reject") else "ACCEPT"


class ThreadedMember:
    """A member on a thread of the test process doing what `java/ShareGroupMember.java` does: each `poll_once` takes
    one poll's records, acknowledges each by its value (`acknowledge_type`) and commits, and answers them as
    (value, delivery count, acknowledge type); `close` stops the thread and raises what failed it. A subclass makes its
    consumer, then calls `start`."""

    def __init__(self, name: str) -> None:
        self._found: list[tuple[str, int, str]] = []
        self._failure: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def poll_once(self) -> list[tuple[str, int, str]]:
        raise NotImplementedError

    def close_consumer(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._found.extend(self.poll_once())
        except BaseException as exc:  # reported by close() and tail()
            self._failure = exc
        finally:
            self.close_consumer()

    def deliveries(self) -> list[tuple[str, int, str]]:
        return list(self._found)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        if self._failure is not None:
            raise self._failure

    def tail(self) -> str:
        return f"--- {self._thread.name}: {self._found[-5:]} failure {self._failure!r}"


class ShareMember:
    """One Java share consumer (see the module docstring) printing its deliveries."""

    def __init__(self, classpath: str, bootstrap: str, topic: str, group: str, folder: Path, name: str) -> None:
        self.stop_file = folder / f"{name}.stop"
        arguments = [bootstrap, topic, group, str(self.stop_file)]
        self.process = JavaProcess(classpath, "ShareGroupMember", arguments, folder / f"{name}.log")

    def deliveries(self) -> list[tuple[str, int, str]]:
        """(value, delivery count, acknowledge type) of each record it got, in order."""
        found = []
        for line in self.process.output().splitlines():
            parts = line.split(" ")
            if parts[0] == "RECORD" and len(parts) == 5:
                found.append((parts[4], int(parts[2]), parts[3]))
        return found

    def close(self) -> None:
        self.stop_file.touch()
        deadline = time.monotonic() + 30
        while "CLOSED" not in self.process.output() and self.process.process.poll() is None:
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self.process.stop()

    def tail(self) -> str:
        return f"--- {self.process.log_path.name}\n{self.process.output()[-3000:]}"

    def kill(self) -> None:
        """SIGKILL: the JVM dies holding what it acquired, with no final acknowledgement."""
        self.process.kill()


def produce(bootstrap: str, topic: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": "5"})
    for value in values:
        producer.produce(topic, value=value.encode())
    assert producer.flush(30) == 0


def java_member(classpath: str, folder: Path) -> MemberFactory:
    """Makes Java members (`ShareMember`) logging into `folder`."""
    return lambda bootstrap, topic, group, name: ShareMember(classpath, bootstrap, topic, group, folder, name)


def share_steps(bootstrap: str, makers: tuple[MemberFactory, MemberFactory]) -> tuple[Deliveries, dict[str, object]]:
    """The module docstring's sequence on one broker with the two members `makers` make; each known record's
    deliveries across both, and what the group APIs told of the group meanwhile."""
    topic, group = f"kip932-{uuid.uuid4().hex[:8]}", f"shares-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(timeout=60)
    members = [make(bootstrap, topic, group, name) for make, name in zip(makers, ("a", "b"), strict=True)]

    def deliveries() -> Deliveries:
        found: Deliveries = {}
        for member in members:
            for value, count, kind in member.deliveries():
                found.setdefault(value, []).append((count, kind))
        return {value: sorted(seen) for value, seen in found.items()}

    def wait_for(what: str, done: object) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while not done() and time.monotonic() < deadline:  # type: ignore[operator]
            time.sleep(0.3)
        assert done(), f"{what} not within {DEADLINE_S} s:\n" + "\n".join(m.tail() for m in members)  # type: ignore[operator]

    try:
        # Both members in the group before any record: a member quicker to start must not settle every record alone.
        wait_for("both members joined", lambda: member_count(bootstrap, group) == 2)
        warmups = iter(range(10_000))

        def warmed() -> bool:
            if any(value.startswith("warmup") for value in deliveries()):
                return True
            produce(bootstrap, topic, [f"warmup-{next(warmups)}"])
            return False

        wait_for("a warm-up record delivered", warmed)
        produce(bootstrap, topic, [*(f"plain-{i}" for i in range(PLAIN_RECORDS)), "release-0", "reject-0", "bounce-0"])
        wait_for(
            "every known record settled",
            lambda: all(deliveries().get(value, [])[-1:] == expected[-1:] for value, expected in EXPECTED.items()),
        )
        time.sleep(3)  # anything delivered again would show by now
        told = group_on_the_wire(bootstrap, group)
    finally:
        for member in members:
            member.close()
    return {value: seen for value, seen in deliveries().items() if not value.startswith("warmup")}, told


def share_kill_steps(classpath: str, bootstrap: str, folder: Path) -> Deliveries:
    """Two Java members; the one that takes `hang-0` holds it and is SIGKILLed; the other must then get it (its second
    delivery) and the records produced after. Each known record's deliveries across both members."""
    topic, group = f"kip932-{uuid.uuid4().hex[:8]}", f"shares-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(timeout=60)
    members = [ShareMember(classpath, bootstrap, topic, group, folder, name) for name in ("a", "b")]

    def deliveries() -> Deliveries:
        found: Deliveries = {}
        for member in members:
            for value, count, kind in member.deliveries():
                found.setdefault(value, []).append((count, kind))
        return {value: sorted(seen) for value, seen in found.items() if not value.startswith("warmup")}

    def wait_for(what: str, done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while not done() and time.monotonic() < deadline:
            time.sleep(0.3)
        assert done(), f"{what} not within {DEADLINE_S} s:\n" + "\n".join(m.tail() for m in members)

    try:
        wait_for("both members joined", lambda: member_count(bootstrap, group) == 2)
        warmups = iter(range(10_000))

        def warmed() -> bool:
            if any(value.startswith("warmup") for member in members for value, _, _ in member.deliveries()):
                return True
            produce(bootstrap, topic, [f"warmup-{next(warmups)}"])
            return False

        wait_for("a warm-up record delivered", warmed)
        produce(bootstrap, topic, ["hang-0"])
        wait_for("hang-0 held", lambda: any(("hang-0", 1, "HOLD") in member.deliveries() for member in members))
        (holder,) = [member for member in members if ("hang-0", 1, "HOLD") in member.deliveries()]
        holder.kill()
        wait_for("hang-0 delivered again", lambda: deliveries().get("hang-0", [])[-1:] == [(2, "ACCEPT")])
        # The killed member's last ShareFetch may still wait at the broker (the consumer fetches in the background
        # while its application holds hang-0) for up to fetch.max.wait.ms (500): records produced meanwhile would be
        # acquired for it, on either broker, and come to the other member only as second deliveries.
        time.sleep(1.5)
        produce(bootstrap, topic, [f"after-{index}" for index in range(5)])
        wait_for(
            "every known record settled",
            lambda: all(deliveries().get(value, [])[-1:] == expected[-1:] for value, expected in KILL_EXPECTED.items()),
        )
        time.sleep(3)  # anything delivered again would show by now
    finally:
        for member in members:
            member.close()
    return deliveries()


def member_count(bootstrap: str, group: str) -> int:
    """How many members ShareGroupDescribe shows in the share group."""
    with coordinator_client(bootstrap, group, GROUP_KEY) as client:
        described = client.request(
            SHARE_GROUP_DESCRIBE, 1, {"group_ids": [group], "include_authorized_operations": False}
        )
    return len(described.groups[0].members)


def group_on_the_wire(bootstrap: str, group: str) -> dict[str, object]:
    """What ListGroups, ShareGroupDescribe and DescribeGroups tell of the share group (its coordinator asked)."""
    with coordinator_client(bootstrap, group, GROUP_KEY) as client:
        listed = client.request(LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["share"]})
        described = client.request(
            SHARE_GROUP_DESCRIBE, 1, {"group_ids": [group], "include_authorized_operations": False}
        )
        classic = client.request(DESCRIBE_GROUPS, 6, {"groups": [group], "include_authorized_operations": False})
    (shared,) = described.groups
    (as_classic,) = classic.groups
    return {
        "listed": [
            (g.group_id, g.protocol_type, g.group_state, g.group_type) for g in listed.groups if g.group_id == group
        ],
        "described": (
            shared.error_code,
            shared.group_state,
            shared.assignor_name,
            sorted(
                [(t.topic_name, list(t.partitions)) for t in member.assignment.topic_partitions]
                for member in shared.members
            ),
        ),
        "classic": (as_classic.error_code, as_classic.group_state),
    }


def test_two_share_consumers_accept_release_and_reject_as_on_kafka(
    share_classpath: str, share_listener: str, kafka4: str, tmp_path: Path
) -> None:
    outcomes = {}
    for name, bootstrap in (("kafka", kafka4), ("raybroker", share_listener)):
        folder = tmp_path / name
        folder.mkdir()
        java = java_member(share_classpath, folder)
        outcomes[name] = share_steps(bootstrap, (java, java))
    kafka_deliveries, kafka_group = outcomes["kafka"]
    assert kafka_deliveries == EXPECTED
    assert outcomes["raybroker"][0] == kafka_deliveries
    assert_told_as_kafka_tells_it(kafka_group)
    # The topic's name differs between the runs (each its own); everything else must match.
    assert json_of(outcomes["raybroker"][1]) == json_of(kafka_group), (kafka_group, outcomes["raybroker"][1])


def test_a_killed_members_records_go_to_the_other_as_on_kafka(
    share_classpath: str, share_listener: str, kafka4: str, tmp_path: Path
) -> None:
    """A member SIGKILLed holding a record: the record comes back to the other member with delivery count 2, on both
    brokers alike (at once when the killed member's connection closes; at the latest when its lock expires)."""
    outcomes = {}
    for name, bootstrap in (("kafka", kafka4), ("raybroker", share_listener)):
        folder = tmp_path / name
        folder.mkdir()
        outcomes[name] = share_kill_steps(share_classpath, bootstrap, folder)
    assert outcomes["kafka"] == KILL_EXPECTED
    assert outcomes["raybroker"] == outcomes["kafka"]


def assert_told_as_kafka_tells_it(group: dict[str, object]) -> None:
    """`group_on_the_wire`'s answer as Kafka 4.2 gives it: listed Stable with type `share`, described Stable under
    the `simple` assignor with two members, and no classic group."""
    listed, described, classic = group["listed"], group["described"], group["classic"]
    assert [(kind, state, group_type) for _, kind, state, group_type in listed] == [("share", "Stable", "share")]  # type: ignore[attr-defined]
    assert described[:3] == (ErrorCode.none, "Stable", "simple") and len(described[3]) == 2  # type: ignore[index]
    assert classic[0] == ErrorCode.group_id_not_found  # type: ignore[index]


def json_of(seen: dict[str, object]) -> str:
    """`group_on_the_wire`'s answer with group and topic names masked."""
    return re.sub(r"(kip932|shares)-[0-9a-f]{8}", r"\1-*", repr(seen))


def wait_until(what: str, done: Callable[[], bool], members: list[ShareMember]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not done() and time.monotonic() < deadline:
        time.sleep(0.3)
    assert done(), f"{what} not within {DEADLINE_S} s:\n" + "\n".join(m.tail() for m in members)


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(timeout=60)


def restart_steps(classpath: str, listen: Callable[[], AbstractContextManager[str]], folder: Path) -> Delivered:
    """The module docstring's last paragraph on the broker `listen()` starts (over the same log dirs each time) and
    stops at its end: before the restart a member accepts warm-up and `plain-*` records, REJECTs `reject-0` and
    RELEASEs then accepts `release-0`; `later-*` are produced once it left. The deliveries to the member that joins
    after the restart."""
    topic, group = f"kip932-{uuid.uuid4().hex[:8]}", f"shares-{uuid.uuid4().hex[:8]}"
    with listen() as bootstrap:
        create_topic(bootstrap, topic)
        before = ShareMember(classpath, bootstrap, topic, group, folder, "before")
        try:
            warmups = iter(range(10_000))

            def warmed() -> bool:
                if before.deliveries():
                    return True
                produce(bootstrap, topic, [f"warmup-{next(warmups)}"])
                return False

            wait_until("a warm-up record delivered", warmed, [before])
            settled = {*(f"plain-{i}" for i in range(10)), "reject-0", "release-0"}
            produce(bootstrap, topic, sorted(settled))
            wait_until(
                "every record settled",
                lambda: settled <= {value for value, _, kind in before.deliveries() if kind != "RELEASE"},
                [before],
            )
        finally:
            before.close()
        produce(bootstrap, topic, [f"later-{i}" for i in range(10)])
    with listen() as bootstrap:
        after = ShareMember(classpath, bootstrap, topic, group, folder, "after")
        try:
            wait_until("every later record delivered", lambda: len(after.deliveries()) >= 10, [after])
            time.sleep(2)  # anything delivered again would show by now
        finally:
            after.close()
    return sorted(after.deliveries())


# What the member after the restart gets: the records produced after the first member left, each once.
RESTART_EXPECTED = sorted((f"later-{i}", 1, "ACCEPT") for i in range(10))


def test_a_broker_restart_delivers_only_what_was_not_accepted(share_classpath: str, tmp_path: Path) -> None:
    @contextlib.contextmanager
    def listen() -> Iterator[str]:
        broker = start_share_broker(tmp_path / "broker")
        try:
            with start_local_listener(broker) as listener:
                yield listener.bootstrap_servers
        finally:
            broker.close()

    assert restart_steps(share_classpath, listen, tmp_path) == RESTART_EXPECTED
