"""Differential tests: the same confluent-kafka scenario against Apache Kafka and against raybroker's listener,
and the answers compared (record contents and offsets, list-offsets answers, error codes, log start offsets,
group assignments, the groups and offsets left after a topic is deleted, the answers to retried idempotent
batches).

Kafka (`benchmarks.kafka_broker.KafkaBroker`, 3.9 in KRaft mode) starts once per session; the first run fetches
it from Maven Central into the download cache (`cluster.downloads`). A machine where it cannot be fetched or
started skips this module with the reason. Both brokers start empty, so the same topic names serve on both.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kio.index import load_request_schema

from cluster.protocol.listener import KafkaListener
from cluster.protocol.messages import build
from storage.records.record_batch import RecordBatchBuilder
from tests.cluster.protocol.helpers import assigned_member, exchange, fetch_v12_body

pytestmark = [pytest.mark.ray, pytest.mark.kafka]

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
RECORDS = 30
# Inside the one batch a producer with linger sends: the fetch must start mid-batch and drop the records before.
ODD_OFFSETS = [0, 7, 13, 29]
BASE_TIMESTAMP_MS = int(time.time() * 1000) - 60_000
DEADLINE_S = 30.0
QUIET = {"log_level": 0}


@pytest.fixture(scope="module")
def raybroker(start_test_broker: Callable[..., tuple[Any, Any]]) -> Iterator[str]:
    start_test_broker(num_partitions="1")
    with KafkaListener({"listeners": "PLAINTEXT://127.0.0.1:0", "num.partitions": "1"}) as started:
        yield started.bootstrap_servers


@pytest.fixture
def both(kafka: str, raybroker: str) -> dict[str, str]:
    return {"kafka": kafka, "raybroker": raybroker}


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, **QUIET})


def _create(bootstrap: str, topic: str, partitions: int = 1) -> None:
    from confluent_kafka.admin import NewTopic

    admin = _admin(bootstrap)  # held until the result is in: a collected client cancels its requests
    admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=10)[topic].result(timeout=DEADLINE_S)


def _produce(bootstrap: str, topic: str, codec: str = "none") -> list[int]:
    """30 records (keys, nulls, headers, explicit timestamps) in one batch; returns the offsets reported."""
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": "50", "compression.type": codec, "acks": "all", **QUIET}
    )
    offsets: list[int] = []
    errors: list[Any] = []

    def report(error: Any, message: Any) -> None:
        if error is not None:
            errors.append(error)
        else:
            offsets.append(message.offset())

    for index in range(RECORDS):
        producer.produce(
            topic,
            partition=0,
            key=None if index % 7 == 0 else f"key-{index}".encode(),
            value=None if index == 5 else f"value-{index}".encode() * (1 + index % 4),
            headers=[("index", str(index).encode()), ("empty", b"")],
            timestamp=BASE_TIMESTAMP_MS + index * 10 - (500 if index == 20 else 0),
            on_delivery=report,
        )
    assert producer.flush(DEADLINE_S) == 0
    assert errors == []
    return sorted(offsets)


def _consume_from(bootstrap: str, topic: str, offset: int, expected: int) -> list[tuple[Any, ...]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}", "enable.auto.commit": False, **QUIET}
    )
    try:
        consumer.assign([TopicPartition(topic, 0, offset)])
        records: list[tuple[Any, ...]] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(records) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            records.append(
                (
                    message.offset(),
                    message.key(),
                    message.value(),
                    message.headers(),
                    message.timestamp(),
                    message.leader_epoch() is not None,
                )
            )
        return records
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", CODECS)
def test_produce_and_fetch_at_odd_offsets_agree(both: dict[str, str], codec: str) -> None:
    answers: dict[str, Any] = {}
    for name, bootstrap in both.items():
        topic = f"codec-{codec}"
        _create(bootstrap, topic)
        offsets = _produce(bootstrap, topic, codec)
        fetched = {start: _consume_from(bootstrap, topic, start, RECORDS - start) for start in ODD_OFFSETS}
        answers[name] = (offsets, fetched)
    assert answers["kafka"][0] == list(range(RECORDS))
    assert answers["raybroker"] == answers["kafka"]


def test_list_offsets_by_time_agree(both: dict[str, str]) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    specs = {
        "earliest": OffsetSpec.earliest(),
        "latest": OffsetSpec.latest(),
        "max_timestamp": OffsetSpec.max_timestamp(),
        "before_all": OffsetSpec.for_timestamp(BASE_TIMESTAMP_MS - 10_000),
        "exact": OffsetSpec.for_timestamp(BASE_TIMESTAMP_MS + 100),
        "between": OffsetSpec.for_timestamp(BASE_TIMESTAMP_MS + 105),
        "after_all": OffsetSpec.for_timestamp(BASE_TIMESTAMP_MS + 10_000),
    }
    answers: dict[str, dict[str, tuple[int, int, int | None]]] = {}
    for name, bootstrap in both.items():
        topic = "list-offsets"
        _create(bootstrap, topic)
        _produce(bootstrap, topic)
        admin = _admin(bootstrap)
        answers[name] = {}
        for label, spec in specs.items():
            partition = TopicPartition(topic, 0)
            result = admin.list_offsets({partition: spec}, request_timeout=10)[partition].result(timeout=DEADLINE_S)
            answers[name][label] = (result.offset, result.timestamp, result.leader_epoch)
    assert answers["kafka"]["exact"][0] == 10
    assert answers["raybroker"] == answers["kafka"]


def _metadata_error(bootstrap: str, topic: str, allow_auto_create: bool) -> tuple[int | None, int]:
    """What a consumer's Metadata request for `topic` answers: the topic's error code (None: no error) and its
    partition count."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "metadata",
            "allow.auto.create.topics": allow_auto_create,
            **QUIET,
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        answer = metadata.topics[topic]
        return (None if answer.error is None else answer.error.code(), len(answer.partitions))
    finally:
        consumer.close()


def test_metadata_of_unknown_topics_agrees(both: dict[str, str]) -> None:
    answers = {}
    for name, bootstrap in both.items():
        first = _metadata_error(bootstrap, "unknown-no-create", allow_auto_create=False)
        created = _metadata_error(bootstrap, "unknown-auto-create", allow_auto_create=True)
        deadline = time.monotonic() + 10
        # Kafka's answer to the creating request may still say LEADER_NOT_AVAILABLE; the next one has the leader.
        while created[0] is not None and time.monotonic() < deadline:
            time.sleep(0.2)
            created = _metadata_error(bootstrap, "unknown-auto-create", allow_auto_create=True)
        answers[name] = (first, created)
    assert answers["kafka"] == ((3, 0), (None, 1))
    assert answers["raybroker"] == answers["kafka"]


def _create_error(bootstrap: str, topic: str, config: dict[str, str]) -> int | None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic

    admin = _admin(bootstrap)
    futures = admin.create_topics([NewTopic(topic, 1, 1, config=config)], operation_timeout=10)
    try:
        futures[topic].result(timeout=DEADLINE_S)
    except KafkaException as exc:
        return int(exc.args[0].code())
    return None


def test_create_topic_errors_agree(both: dict[str, str]) -> None:
    answers = {}
    for name, bootstrap in both.items():
        _create(bootstrap, "existing")
        answers[name] = {
            "bad config value": _create_error(bootstrap, "bad-config", {"cleanup.policy": "bogus"}),
            "unknown config": _create_error(bootstrap, "unknown-config", {"no.such.config": "1"}),
            "bad name": _create_error(bootstrap, "bad name!", {}),
            "dot name": _create_error(bootstrap, "..", {}),
            "long name": _create_error(bootstrap, "x" * 250, {}),
            "existing": _create_error(bootstrap, "existing", {}),
        }
    assert answers["kafka"]["existing"] == 36
    assert answers["raybroker"] == answers["kafka"]


def _outcome(future: Any) -> tuple[int, str] | None:
    """A topic future's error code and message (None: it succeeded)."""
    from confluent_kafka import KafkaException

    try:
        future.result(timeout=DEADLINE_S)
    except KafkaException as exc:
        return int(exc.args[0].code()), str(exc.args[0].str())
    return None


def _manual_assignment_answers(bootstrap: str) -> dict[str, Any]:
    """CreateTopics and CreatePartitions with manual replica assignments naming the one broker B, a broker that
    does not exist (B+100) or B twice: each answer with the broker's id written B, and the topic they create
    (librdkafka refuses an empty replica list, or a count of lists unlike the partitions added, before asking)."""
    from confluent_kafka.admin import NewPartitions, NewTopic

    admin = _admin(bootstrap)
    (broker,) = admin.list_topics(timeout=DEADLINE_S).brokers
    asked = {
        "assigned": [[broker], [broker]],
        "assigned-unregistered": [[broker], [broker + 100]],
        "assigned-twice": [[broker, broker]],
    }
    answers: dict[str, Any] = {}
    for topic, assignment in asked.items():
        new = NewTopic(topic, len(assignment), replica_assignment=assignment)
        answers[topic] = _outcome(admin.create_topics([new], operation_timeout=10)[topic])
    grown = {
        "grown by one": NewPartitions("assigned", 3, [[broker]]),
        "grown onto an unregistered broker": NewPartitions("assigned", 4, [[broker + 100]]),
    }
    for name, partitions in grown.items():
        answers[name] = _outcome(admin.create_partitions([partitions], operation_timeout=10)["assigned"])
    metadata = admin.list_topics("assigned", timeout=DEADLINE_S).topics["assigned"]
    answers["replicas"] = [list(metadata.partitions[p].replicas) for p in sorted(metadata.partitions)]
    return _named(answers, broker)


def _named(value: Any, broker: int) -> Any:
    """`value` with the broker's id written B (and B+100) in its messages and lists."""
    if isinstance(value, dict):
        return {key: _named(item, broker) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_named(item, broker) for item in value)
    if isinstance(value, int) and value in (broker, broker + 100):
        return "B" if value == broker else "B+100"
    if isinstance(value, str):
        return re.sub(rf"\b{broker + 100}\b", "B+100", re.sub(rf"\b{broker}\b", "B", value))
    return value


def test_manual_replica_assignments_agree(both: dict[str, str]) -> None:
    answers = {name: _manual_assignment_answers(bootstrap) for name, bootstrap in both.items()}
    oracle = answers["kafka"]
    assert oracle["assigned"] is None and oracle["grown by one"] is None, oracle
    assert oracle["replicas"] == [["B"]] * 3, oracle
    assert answers["raybroker"] == oracle


def _fetch_error_below(bootstrap: str, topic: str, offset: int) -> tuple[int | None, int]:
    """A consumer assigned below the log start with auto.offset.reset=error: the error it reports (librdkafka's
    _AUTO_OFFSET_RESET, -140, which it raises on the broker's OFFSET_OUT_OF_RANGE), and the offset a consumer
    with auto.offset.reset=earliest reads first instead."""
    from confluent_kafka import Consumer, TopicPartition

    codes: list[int | None] = []
    for reset in ("error", "earliest"):
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"g-{uuid.uuid4().hex}",
                "auto.offset.reset": reset,
                "enable.auto.commit": False,
                **QUIET,
            }
        )
        try:
            consumer.assign([TopicPartition(topic, 0, offset)])
            deadline = time.monotonic() + DEADLINE_S
            while time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is None:
                    continue
                error = message.error()
                codes.append(message.offset() if error is None else error.code())
                break
        finally:
            consumer.close()
    assert len(codes) == 2
    return codes[0], int(codes[1] or 0)


def test_delete_records_then_fetch_below_log_start_agree(both: dict[str, str]) -> None:
    from confluent_kafka import Consumer, TopicPartition

    answers = {}
    for name, bootstrap in both.items():
        topic = "delete-records"
        _create(bootstrap, topic)
        _produce(bootstrap, topic)
        partition = TopicPartition(topic, 0, 12)
        admin = _admin(bootstrap)
        deleted = admin.delete_records([partition], request_timeout=10)[partition].result(DEADLINE_S)

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks", **QUIET})
        try:
            watermarks = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        finally:
            consumer.close()
        answers[name] = (deleted.low_watermark, watermarks, _fetch_error_below(bootstrap, topic, 5))
    assert answers["kafka"] == (12, (12, RECORDS), (-140, 12))
    assert answers["raybroker"] == answers["kafka"]


def _group_assignment(bootstrap: str, topic: str) -> list[list[int]]:
    """Two consumers of one group subscribe with the range assignor; returns each one's partitions, sorted."""
    from confluent_kafka import Consumer

    group = f"range-{uuid.uuid4().hex[:8]}"
    consumers = [
        Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "partition.assignment.strategy": "range",
                "session.timeout.ms": 10_000,
                "heartbeat.interval.ms": 500,
                **QUIET,
            }
        )
        for _ in range(2)
    ]
    try:
        for consumer in consumers:
            consumer.subscribe([topic])
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            for consumer in consumers:
                consumer.poll(0.2)
            assignments = [sorted(p.partition for p in consumer.assignment()) for consumer in consumers]
            if sum(len(a) for a in assignments) == 5 and all(assignments):
                return sorted(assignments)
        raise AssertionError(f"no stable assignment: {assignments}")
    finally:
        for consumer in consumers:
            consumer.close()


def test_range_assignment_of_a_two_member_group_agrees(both: dict[str, str]) -> None:
    answers = {}
    for name, bootstrap in both.items():
        _create(bootstrap, "range-group", partitions=5)
        answers[name] = _group_assignment(bootstrap, "range-group")
    assert answers["kafka"] == [[0, 1, 2], [3, 4]]
    assert answers["raybroker"] == answers["kafka"]


def _commits_without_membership(bootstrap: str, topic: str) -> list[Any]:
    """One consumer subscribes to `topic` in a group; then AlterConsumerGroupOffsets (the admin client) and a
    consumer that assigns its partition itself commit under the group's id, both with generation -1 and no
    member id: the code of each (None: written), while the member is in the group and after it left, and the
    offset the group has committed in the end."""
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, TopicPartition

    group = "generation-minus-one"
    admin = _admin(bootstrap)

    def alter(offset: int) -> int | None:
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, offset)])
        try:
            (partition,) = (
                admin.alter_consumer_group_offsets([request])[group].result(timeout=DEADLINE_S).topic_partitions
            )
        except KafkaException as exc:
            return int(exc.args[0].code())
        return None if partition.error is None else int(partition.error.code())

    def assigned_commit(offset: int) -> int | None:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False, **QUIET})
        try:
            consumer.assign([TopicPartition(topic, 0, 0)])
            consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
        except KafkaException as exc:
            return int(exc.args[0].code())
        finally:
            consumer.close()
        return None

    member = assigned_member(bootstrap, group, topic, DEADLINE_S)
    try:
        answers: list[Any] = [alter(3), assigned_commit(4)]
    finally:
        member.close()
    answers += [alter(5), assigned_commit(6)]
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group, **QUIET})
    try:
        (committed,) = reader.committed([TopicPartition(topic, 0)], timeout=10)
    finally:
        reader.close()
    return [*answers, committed.offset]


def test_commits_of_generation_minus_one_into_an_active_group_agree(both: dict[str, str]) -> None:
    answers = {}
    for name, bootstrap in both.items():
        _create(bootstrap, "generation-minus-one")
        answers[name] = _commits_without_membership(bootstrap, "generation-minus-one")
    # UNKNOWN_MEMBER_ID (25) while the group has a member; written once it left.
    assert answers["kafka"] == [25, 25, None, None, 6]
    assert answers["raybroker"] == answers["kafka"]


def _offsets_after_deleting_a_topic(bootstrap: str) -> tuple[list[str], dict[str, dict[tuple[str, int], int]]]:
    """Groups commit on `deleted-topic` (2 partitions) and `kept-topic`, then `deleted-topic` is deleted: the test's
    groups ListGroups names and each one's OffsetFetch of every partition, once the deleted topic's offsets are gone
    (Kafka deletes them when its group coordinator sees the deletion, after DeleteTopics answered)."""
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition

    commits = {"deleted-only": {("deleted-topic", 0): 3, ("deleted-topic", 1): 4}, "mixed": {("deleted-topic", 0): 5}}
    commits["mixed"][("kept-topic", 0)] = 7
    _create(bootstrap, "deleted-topic", partitions=2)
    _create(bootstrap, "kept-topic")
    for group, offsets in commits.items():
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False, **QUIET})
        try:
            consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
        finally:
            consumer.close()
    admin = _admin(bootstrap)
    admin.delete_topics(["deleted-topic"], operation_timeout=10)["deleted-topic"].result(timeout=DEADLINE_S)

    def answers() -> tuple[list[str], dict[str, dict[tuple[str, int], int]]]:
        listed = sorted(g.group_id for g in admin.list_consumer_groups().result(timeout=DEADLINE_S).valid)
        fetched = {}
        for group in commits:
            (future,) = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
            result = future.result(timeout=DEADLINE_S)
            fetched[group] = {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions}
        return [group for group in listed if group in commits], fetched

    deadline = time.monotonic() + DEADLINE_S
    listed, fetched = answers()
    while "deleted-only" in listed and time.monotonic() < deadline:
        time.sleep(0.2)
        listed, fetched = answers()
    return listed, fetched


def test_deleting_a_topic_deletes_its_committed_offsets_alike(both: dict[str, str]) -> None:
    answers = {name: _offsets_after_deleting_a_topic(bootstrap) for name, bootstrap in both.items()}
    assert answers["kafka"] == (["mixed"], {"deleted-only": {}, "mixed": {("kept-topic", 0): 7}})
    assert answers["raybroker"] == answers["kafka"]


def _retried_idempotent_batches(bootstrap: str) -> list[tuple[int, int, int]]:
    """(error code, base offset, log append time) of 7 idempotent batches sent raw, then of a retry of each of the
    last 5 and of the 6th last, with `acks=-1` over one socket per request."""
    _create(bootstrap, "retried-batches")
    port = int(bootstrap.rsplit(":", 1)[1])
    producer: Any = None
    deadline = time.monotonic() + DEADLINE_S
    while producer is None or producer.producer_id < 0:
        # A fresh Kafka answers COORDINATOR_LOAD_IN_PROGRESS until its transaction state topic is loaded.
        assert time.monotonic() < deadline, f"no producer id: {producer}"
        request = build(load_request_schema(22, 1), {"transactional_id": None, "transaction_timeout": 60_000})
        _, producer = asyncio.run(exchange(port, request))
        time.sleep(0 if producer.producer_id >= 0 else 0.5)

    def produce(records: bytes) -> tuple[int, int, int]:
        body = build(
            load_request_schema(0, 9),
            {
                "transactional_id": None,
                "acks": -1,
                "timeout": 30_000,
                "topic_data": [{"name": "retried-batches", "partition_data": [{"index": 0, "records": records}]}],
            },
        )
        _, response = asyncio.run(exchange(port, body))
        answer = response.responses[0].partition_responses[0]
        time_ms = -1 if answer.log_append_time is None else int(answer.log_append_time.timestamp() * 1000)
        return int(answer.error_code), answer.base_offset, time_ms

    sent = []
    sequence = 0
    for index in range(7):
        builder = RecordBatchBuilder(
            producer_id=producer.producer_id, producer_epoch=producer.producer_epoch, base_sequence=sequence
        )
        for delta in range(1 + index % 3):
            builder.append(None, b"retried", timestamp=BASE_TIMESTAMP_MS + sequence + delta)
        sequence += 1 + index % 3
        sent.append(builder.build())
    return [produce(records) for records in [*sent, *sent[-5:], sent[-6]]]


def test_retried_idempotent_batches_are_answered_alike(both: dict[str, str]) -> None:
    answers = {name: _retried_idempotent_batches(bootstrap) for name, bootstrap in both.items()}
    # A retry of one of the last 5 batches: NONE, its original base offset and max timestamp; the 6th last:
    # OUT_OF_ORDER_SEQUENCE_NUMBER (45).
    assert answers["kafka"][7] == (0, 3, BASE_TIMESTAMP_MS + 5)
    assert answers["kafka"][-1] == (45, -1, -1)
    assert answers["raybroker"] == answers["kafka"]


def _leader_epoch_fencing(bootstrap: str) -> list[tuple[str, int, int]]:
    """(request, client leader epoch, error code) of Fetch v12 and ListOffsets v7 (latest) on a new topic's partition,
    whose leader is in epoch 0, for client epochs older, equal, newer and "unknown" (-1)."""
    topic = "fenced-epochs"
    _create(bootstrap, topic)
    _produce(bootstrap, topic)
    port = int(bootstrap.rsplit(":", 1)[1])
    answers = []
    for epoch in (-2, -1, 0, 1):
        fetch = fetch_v12_body(topic, 0, current_leader_epoch=epoch)
        _, response = asyncio.run(exchange(port, build(load_request_schema(1, 12), fetch)))
        answers.append(("fetch", epoch, int(response.responses[0].partitions[0].error_code)))
        listed = {"partition_index": 0, "current_leader_epoch": epoch, "timestamp": -1}
        offsets = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [listed]}]}
        _, response = asyncio.run(exchange(port, build(load_request_schema(2, 7), offsets)))
        answers.append(("list_offsets", epoch, int(response.topics[0].partitions[0].error_code)))
    return answers


def test_a_client_leader_epoch_is_fenced_alike(both: dict[str, str]) -> None:
    """KIP-320 on Fetch and ListOffsets: a newer epoch than the leader's is UNKNOWN_LEADER_EPOCH (75)."""
    answers = {name: _leader_epoch_fencing(bootstrap) for name, bootstrap in both.items()}
    assert ("fetch", 1, 75) in answers["kafka"] and ("fetch", 0, 0) in answers["kafka"]
    assert answers["raybroker"] == answers["kafka"]


# The two tests below delete `__consumer_offsets`: they stay last in the module, whose other tests need it.


def _delete_error(bootstrap: str, topic: str) -> int | None:
    from confluent_kafka import KafkaException

    admin = _admin(bootstrap)
    try:
        admin.delete_topics([topic], operation_timeout=10)[topic].result(timeout=DEADLINE_S)
    except KafkaException as exc:
        return int(exc.args[0].code())
    return None


def _commit_and_read_back(bootstrap: str, topic: str, offset: int) -> int:
    """A consumer that assigns `topic`-0 commits `offset` and reads the committed offset back; raises
    KafkaException when either fails."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "offsets-topic", "enable.auto.commit": False, **QUIET}
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
        (committed,) = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        return int(committed.offset)
    finally:
        consumer.close()


def test_deleting_the_offsets_topic_agrees(both: dict[str, str]) -> None:
    """Kafka 3.9 (KRaft) lets a client delete `__consumer_offsets`: neither the controller
    (`ReplicationControlManager.deleteTopic`) nor the broker refuses an internal topic. The controller's own
    `__cluster_metadata` is no topic a client sees: UNKNOWN_TOPIC_OR_PARTITION (3)."""
    answers = {}
    for name, bootstrap in both.items():
        _create(bootstrap, "offsets-topic")
        assert _commit_and_read_back(bootstrap, "offsets-topic", 1) == 1  # `__consumer_offsets` exists
        answers[name] = (_delete_error(bootstrap, "__consumer_offsets"), _delete_error(bootstrap, "__cluster_metadata"))
    assert answers["kafka"] == (None, 3)
    assert answers["raybroker"] == answers["kafka"]


def test_commits_after_the_offsets_topic_was_deleted(both: dict[str, str]) -> None:
    """After the test above: the group coordinator creates `__consumer_offsets` again (the committed offsets are
    gone), so the next commit is written (Kafka may first answer COORDINATOR_NOT_AVAILABLE while it creates the
    topic: the client is given three tries)."""
    from confluent_kafka import KafkaException

    answers: dict[str, Any] = {}
    for name, bootstrap in both.items():
        answers[name] = None
        for _ in range(3):
            try:
                answers[name] = _commit_and_read_back(bootstrap, "offsets-topic", 5)
                break
            except KafkaException as exc:
                answers[name] = exc.args[0].name()
                time.sleep(1)
    assert answers["kafka"] == 5
    assert answers["raybroker"] == answers["kafka"]
