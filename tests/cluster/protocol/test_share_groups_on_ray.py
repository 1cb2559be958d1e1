"""Share groups (KIP-932) on the broker of a real local Ray: the Java `KafkaShareConsumer` 4.2 sequence of
`test_share_group_clients` (whose deliveries Apache Kafka 4.2 gives there, `EXPECTED`) through a Kafka listener over
Ray's partition actors and group coordinator actor: each record accepted once, a RELEASEd one redelivered with
delivery count 2, a REJECTed one never again, one RELEASEd every time archived after the delivery limit, and the
group told over the wire as Kafka tells it. Then the group's offsets, which its partition's actor holds: described
with lag 0 (every record settled), altered to start at offset 1 (the rest of the log its lag) and deleted, as
`test_share_group_offsets` shows Kafka 4.2 answering. The same sequence with a Python `ShareConsumer` as the second
member beside the Java one gives the same deliveries. A group's `share.auto.offset.reset=earliest` set over the wire
(the controller actor keeps it and tells the group coordinator actor) makes its member read records produced before
it joined, as on Kafka (`test_group_configs`). A group with a dead-letter topic gets the dead letters Kafka 4.4 writes
(`test_share_group_dead_letters`). The broker runs with `kafka4`'s share settings (`group.share.*` keys
in its properties, as `server.properties` sets them). Last, across a restart of the whole broker on its log dirs
(partition actors and group coordinator actor started again), `test_share_group_clients.restart_steps`: the member
after it gets exactly the records not accepted before, the share-partitions' state read back from
`__share_group_state`.

The Python consumer's own rules (`actors.clients.share_consumer`): implicit acknowledgement accepts what a poll
returned, a closed member's unacknowledged records go to another member at once with their next delivery count, an
idle member of one partition waits at its leader rather than asking again and again, and wrong use raises without
changing anything."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from actors.clients.share_consumer import IDLE_BEFORE_WAIT_S, ShareConsumer, ShareRecord
from actors.core.shares.acknowledgements import AcknowledgeType
from cluster.protocol.client import WireClient
from cluster.protocol.listener import KafkaListener
from storage.errors import InvalidConfigError, InvalidRecordStateError, InvalidRequestError
from tests.cluster.protocol.conftest import SHARE_GROUP_SETTINGS
from tests.cluster.protocol.helpers import GROUP_KEY, coordinator_client
from tests.cluster.protocol.test_group_configs import (
    EARLY_RECORDS,
    RESET,
    SET,
    alter,
    described_once,
    read_from_the_beginning,
)
from tests.cluster.protocol.test_share_group_clients import (
    EXPECTED,
    RESTART_EXPECTED,
    ThreadedMember,
    acknowledge_type,
    assert_told_as_kafka_tells_it,
    java_member,
    restart_steps,
    share_steps,
)
from tests.cluster.protocol.test_share_group_dead_letters import assert_as_kafka_writes_them, dead_letter_steps
from tests.cluster.protocol.test_share_group_offsets import ALTER, DELETE, DESCRIBE

pytestmark = pytest.mark.ray

DEADLINE_S = 60.0


SHARE_SETTINGS = {
    key.replace(".", "_"): value for key, value in SHARE_GROUP_SETTINGS.items() if key.startswith("group.share.")
}


@pytest.fixture(scope="module")
def ray_listener(start_test_broker: Callable[..., tuple[Any, Any]]) -> Iterator[KafkaListener]:
    start_test_broker(**SHARE_SETTINGS)
    with KafkaListener({"listeners": "PLAINTEXT://127.0.0.1:0"}) as started:
        yield started


class PythonShareMember(ThreadedMember):
    """A `ShareConsumer` as a `ThreadedMember` (the test process is a Ray driver)."""

    def __init__(self, topic: str, group: str) -> None:
        super().__init__("python-share-member")
        self._consumer = ShareConsumer(group, acknowledgement_mode="explicit", value_deserializer=bytes.decode)
        self._consumer.subscribe([topic])
        self.start()

    def poll_once(self) -> list[tuple[str, int, str]]:
        found = []
        records = self._consumer.poll(200)
        for record in records:
            kind = acknowledge_type(record.value, record.delivery_count)
            self._consumer.acknowledge(record, AcknowledgeType[kind])
            found.append((record.value, record.delivery_count, kind))
        if records:
            assert set(self._consumer.commit_sync().values()) == {None}
        return found

    def close_consumer(self) -> None:
        self._consumer.close()


def test_two_share_consumers_accept_release_and_reject_on_ray_as_on_kafka(
    share_classpath: str, ray_listener: KafkaListener, tmp_path: Path
) -> None:
    bootstrap = ray_listener.bootstrap_servers
    java = java_member(share_classpath, tmp_path)
    deliveries, group = share_steps(bootstrap, (java, java))
    assert deliveries == EXPECTED
    assert_told_as_kafka_tells_it(group)
    listed: Any = group["listed"]
    described: Any = group["described"]
    group_id: str = listed[0][0]
    topic: str = described[3][0][0][0]
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{group_id}-watermarks"})
    try:
        _, high_watermark = reader.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    finally:
        reader.close()
    with coordinator_client(bootstrap, group_id, GROUP_KEY) as coordinator:
        # Every record settled: no lag, wherever the share-partition's last write left its start offset.
        ((name, partition, start_offset, lag, code),) = offsets(coordinator, group_id)
        assert (name, partition, lag, code) == (topic, 0, 0, ErrorCode.none) and 0 < start_offset <= high_watermark
        altered_offsets = [{"partition_index": 0, "start_offset": 1}]
        alter = {"group_id": group_id, "topics": [{"topic_name": topic, "partitions": altered_offsets}]}
        deadline = time.monotonic() + 30  # the members' leaving heartbeats may still be on their way
        while (altered := coordinator.request(ALTER, 0, alter)).error_code == ErrorCode.non_empty_group:
            assert time.monotonic() < deadline, altered
            time.sleep(0.5)
        assert [p.error_code for t in altered.responses for p in t.partitions] == [ErrorCode.none]
        assert offsets(coordinator, group_id) == [(topic, 0, 1, high_watermark - 1, ErrorCode.none)]
        deleted = coordinator.request(DELETE, 0, {"group_id": group_id, "topics": [{"topic_name": topic}]})
        assert [t.error_code for t in deleted.responses] == [ErrorCode.none]
        assert offsets(coordinator, group_id) == []


def test_dead_letters_on_ray_are_written_as_kafka_4_4_writes_them(
    share_classpath: str, ray_listener: KafkaListener, tmp_path: Path
) -> None:
    """`test_share_group_dead_letters`' sequence through Ray's partition actors, which hand their dead letters to the
    group coordinator actor, and the controller actor: the refusals, deliveries and dead-letter records Kafka 4.4
    gives there."""
    assert_as_kafka_writes_them(dead_letter_steps(share_classpath, ray_listener.bootstrap_servers, tmp_path))


def test_a_share_group_set_to_earliest_reads_from_the_beginning_on_ray(
    share_classpath: str, ray_listener: KafkaListener, tmp_path: Path
) -> None:
    bootstrap = ray_listener.bootstrap_servers
    with WireClient(bootstrap) as client:
        assert alter(client, "from-start", [(RESET, SET, "earliest")], False) == (0, None)
        described = described_once(client, "from-start", lambda entries: entries[RESET][1] == "earliest")
    assert dict((entry[0], entry[1:4]) for entry in described[1:])[RESET] == ("earliest", False, 8)
    assert read_from_the_beginning(share_classpath, bootstrap, "from-start", tmp_path) == EARLY_RECORDS


def offsets(coordinator: WireClient, group_id: str) -> list[tuple[Any, ...]]:
    """DescribeShareGroupOffsets of every topic: (topic, partition, start offset, lag, error) per partition."""
    answer = coordinator.request(DESCRIBE, 1, {"groups": [{"group_id": group_id, "topics": None}]})
    return [
        (t.topic_name, p.partition_index, p.start_offset, p.lag, p.error_code)
        for g in answer.groups
        for t in g.topics
        for p in t.partitions
    ]


def test_a_python_share_consumer_beside_a_java_one_gets_kafkas_deliveries(
    share_classpath: str, ray_listener: KafkaListener, tmp_path: Path
) -> None:
    python = PythonShareMember
    deliveries, group = share_steps(
        ray_listener.bootstrap_servers,
        (java_member(share_classpath, tmp_path), lambda _bootstrap, topic, group_id, _name: python(topic, group_id)),
    )
    assert deliveries == EXPECTED
    assert_told_as_kafka_tells_it(group)


def _topic(bootstrap: str) -> str:
    topic = f"pyshare-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(timeout=60)
    return topic


def _produce(bootstrap: str, topic: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": "5"})
    for value in values:
        producer.produce(topic, value=value.encode())
    assert producer.flush(30) == 0


def _poll_until(consumer: ShareConsumer, count: int) -> list[ShareRecord]:
    got: list[ShareRecord] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < count and time.monotonic() < deadline:
        got.extend(consumer.poll(200))
    return got


def _joined(consumer: ShareConsumer, topic: str) -> None:
    """Subscribes and polls until the member is assigned (the share-partition starts at the high watermark, Kafka's
    `share.auto.offset.reset=latest`, when the group first fetches)."""
    consumer.subscribe([topic])
    deadline = time.monotonic() + DEADLINE_S
    while not consumer.assignment() and time.monotonic() < deadline:
        assert consumer.poll(100) == []
    assert consumer.assignment() == [(topic, 0)]


def test_python_share_consumer_implicit_acknowledgement_and_release_on_close(ray_listener: KafkaListener) -> None:
    bootstrap = ray_listener.bootstrap_servers
    topic = _topic(bootstrap)
    group = f"pyshares-{uuid.uuid4().hex[:8]}"
    first = ShareConsumer(group)
    _joined(first, topic)
    values = [f"v{index}" for index in range(20)]
    _produce(bootstrap, topic, values)
    got = _poll_until(first, 20)
    assert [(r.value.decode(), r.delivery_count) for r in got] == [(value, 1) for value in values]
    # Wrong use raises and changes nothing: acknowledge belongs to explicit mode.
    with pytest.raises(InvalidRequestError, match="explicit"):
        first.acknowledge(got[0])
    assert first.commit_sync() == {(topic, 0): None}
    first.close()

    # Explicit mode: unacknowledged records block the next poll; a closed member's records come back at once.
    second = ShareConsumer(group, acknowledgement_mode="explicit")
    third = ShareConsumer(group)
    _joined(second, topic)
    _produce(bootstrap, topic, ["w0", "w1", "w2"])
    held = _poll_until(second, 3)
    assert [(r.value, r.delivery_count) for r in held] == [(b"w0", 1), (b"w1", 1), (b"w2", 1)]
    second.acknowledge(held[0], AcknowledgeType.ACCEPT)
    with pytest.raises(InvalidRequestError, match="was not delivered by the last poll"):
        second.acknowledge(held[0], AcknowledgeType.REJECT)
    with pytest.raises(InvalidRequestError, match="2 records of the last poll are not acknowledged"):
        second.poll(0)
    second.close()
    third.subscribe([topic])
    again = _poll_until(third, 2)
    # Accepted records never come back (all 20 of the first member's, and w0); w1 and w2 do, at once (well before
    # their 5 s lock would have expired), counted as their second delivery.
    assert [(r.value, r.delivery_count) for r in again] == [(b"w1", 2), (b"w2", 2)]
    assert third.poll(500) == []
    third.close()


def test_an_idle_python_share_consumer_waits_at_its_leader_and_takes_a_record_appended_meanwhile(
    ray_listener: KafkaListener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A member assigned one partition and idle for `IDLE_BEFORE_WAIT_S` waits at its leader, up to
    `fetch_max_wait_ms` a call and never past its next heartbeat (every second here): an idle poll of 1.5 s asks a
    handful of times where asking every `POLL_INTERVAL_S` would be ~30 times; a record appended while a poll waits is
    returned by it."""
    bootstrap = ray_listener.bootstrap_servers
    topic = _topic(bootstrap)
    consumer = ShareConsumer(f"pyshares-{uuid.uuid4().hex[:8]}", fetch_max_wait_ms=500)
    _joined(consumer, topic)
    assert consumer.poll(int(IDLE_BEFORE_WAIT_S * 1000) + 100) == []
    asked: list[float] = []
    ask = consumer._ask

    def counted(*args: Any) -> Any:
        asked.append(time.monotonic())
        return ask(*args)

    monkeypatch.setattr(consumer, "_ask", counted)
    assert consumer.poll(1500) == []
    assert 3 <= len(asked) <= 8, f"{len(asked)} calls in an idle poll of 1.5 s"
    appending = threading.Timer(0.3, _produce, (bootstrap, topic, ["late"]))
    appending.start()
    try:
        got = consumer.poll(10_000)
    finally:
        appending.join()
    assert [(record.value, record.delivery_count) for record in got] == [(b"late", 1)]
    consumer.close()


def test_python_share_consumer_in_the_record_limit_mode_takes_at_most_max_poll_records(
    ray_listener: KafkaListener,
) -> None:
    """`share_acquire_mode="record_limit"` (Kafka 4.2's `share.acquire.mode`): ten records written as one batch come
    three a poll, each once, in order, though the batch-optimized mode would acquire the whole batch at once; an
    unknown mode is refused when the consumer is made."""
    bootstrap = ray_listener.bootstrap_servers
    topic = _topic(bootstrap)
    with pytest.raises(InvalidConfigError, match="share_acquire_mode"):
        ShareConsumer("any", share_acquire_mode="records")
    consumer = ShareConsumer(f"pylimit-{uuid.uuid4().hex[:8]}", share_acquire_mode="record_limit", max_poll_records=3)
    _joined(consumer, topic)
    values = [f"r{index}" for index in range(10)]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": "200"})
    for value in values:
        producer.produce(topic, value=value.encode())
    assert producer.flush(30) == 0
    polls: list[list[tuple[str, int]]] = []
    deadline = time.monotonic() + DEADLINE_S
    while sum(len(p) for p in polls) < 10 and time.monotonic() < deadline:
        if got := consumer.poll(200):
            polls.append([(r.value.decode(), r.delivery_count) for r in got])
    consumer.close()
    assert [len(p) for p in polls] == [3, 3, 3, 1]
    assert [record for p in polls for record in p] == [(value, 1) for value in values]


def test_python_share_consumer_acknowledgements_ride_on_its_next_poll_and_a_refused_one_is_reported(
    ray_listener: KafkaListener,
) -> None:
    """Explicit acknowledgements go with the next poll's fetch (as Kafka's ShareFetch piggybacks them) and reach the
    acknowledgement callback: None when applied; `InvalidRecordStateError` when the records' lock expired and
    another member took them, reported and not raised, the other member's accept then applying. An accepted record
    is never delivered again."""
    bootstrap = ray_listener.bootstrap_servers
    topic = _topic(bootstrap)
    group = f"pyack-{uuid.uuid4().hex[:8]}"
    reported: list[dict[tuple[str, int], Any]] = []
    first = ShareConsumer(group, acknowledgement_mode="explicit", acknowledgement_commit_callback=reported.append)
    second = ShareConsumer(group, acknowledgement_mode="explicit")
    _joined(first, topic)
    _joined(second, topic)
    _produce(bootstrap, topic, ["a0", "a1"])
    held = _poll_until(first, 2)
    assert [(r.value, r.delivery_count) for r in held] == [(b"a0", 1), (b"a1", 1)]
    time.sleep(int(SHARE_GROUP_SETTINGS["group.share.record.lock.duration.ms"]) / 1000 + 0.5)
    taken = _poll_until(second, 2)
    assert [(r.value, r.delivery_count) for r in taken] == [(b"a0", 2), (b"a1", 2)]
    for record in held:
        first.acknowledge(record, AcknowledgeType.ACCEPT)
    assert first.poll(0) == []
    assert [list(outcome) for outcome in reported] == [[(topic, 0)]]
    assert isinstance(reported[0][(topic, 0)], InvalidRecordStateError)
    for record in taken:
        second.acknowledge(record, AcknowledgeType.ACCEPT)
    assert second.commit_sync() == {(topic, 0): None}

    reported.clear()
    _produce(bootstrap, topic, ["a2"])
    (late,) = _poll_until(first, 1)
    first.acknowledge(late, AcknowledgeType.ACCEPT)
    assert first.poll(300) == []
    assert reported == [{(topic, 0): None}]
    first.close()
    second.close()
    third = ShareConsumer(group)
    _joined(third, topic)
    assert third.poll(1000) == []
    third.close()


def test_a_broker_restart_on_ray_delivers_only_what_was_not_accepted(
    share_classpath: str, start_test_broker: Callable[..., tuple[Any, Any]], tmp_path: Path
) -> None:
    """Last in the module: it starts brokers of its own, stopping `ray_listener`'s."""
    log_dirs: list[Path] | None = None

    @contextlib.contextmanager
    def listen() -> Iterator[str]:
        nonlocal log_dirs
        _, log_dirs = start_test_broker(log_dirs=log_dirs, **SHARE_SETTINGS)
        with KafkaListener({"listeners": "PLAINTEXT://127.0.0.1:0"}) as started:
            yield started.bootstrap_servers

    assert restart_steps(share_classpath, listen, tmp_path) == RESTART_EXPECTED
