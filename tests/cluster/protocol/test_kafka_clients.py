"""Real Kafka clients against a real broker over 127.0.0.1: librdkafka (confluent-kafka) and kafka-python produce
with every codec and acks setting, then read everything back with `assign`; records cross between the wire and
raybroker's own Python clients both ways; ListOffsets by time and the watermarks answer what was produced.

The oracle is what the producers were told: each delivery report's (partition, offset) with the key, value,
headers and timestamp that were sent.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from actors.calls import call
from cluster.protocol.listener import KafkaListener
from tests.actors.support import append_channel_connections
from tests.conftest import ONE_ACTOR_PER_PARTITION

pytestmark = pytest.mark.ray

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PARTITIONS = 2
RECORDS_PER_TOPIC = 30
# Recent: records older than `log.retention.hours` (168) would be deleted by the broker's retention under the test.
BASE_TIMESTAMP_MS = int(time.time() * 1000) - 60_000
POLL_DEADLINE_S = 30.0

Record = tuple[str, int, int, bytes | None, bytes | None, tuple[tuple[str, bytes], ...], int]


@pytest.fixture(scope="module")
def listener(start_test_broker: Callable[..., tuple[Any, Any]]) -> Iterator[KafkaListener]:
    start_test_broker(num_partitions=str(PARTITIONS), **ONE_ACTOR_PER_PARTITION)
    with KafkaListener({"listeners": "PLAINTEXT://127.0.0.1:0", "num.partitions": str(PARTITIONS)}) as started:
        yield started


def sent_records(topic: str) -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int]]:
    """What every producer sends to `topic`: keyed and unkeyed records, headers, explicit CreateTime timestamps."""
    return [
        (
            None if index % 7 == 0 else f"key-{index}".encode(),
            f"{topic}-value-{index}".encode() * (1 + index % 3),
            [("index", str(index).encode()), ("topic", topic.encode())],
            BASE_TIMESTAMP_MS + index * 10,
        )
        for index in range(RECORDS_PER_TOPIC)
    ]


def confluent_produce(listener: KafkaListener, topic: str, **config: str) -> list[Record]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": listener.bootstrap_servers, "linger.ms": "5", **config})
    delivered: list[Record] = []
    errors: list[Any] = []

    sent = {value: (key, tuple(headers), timestamp) for key, value, headers, timestamp in sent_records(topic)}

    def report(error: Any, message: Any) -> None:
        # A delivery report names where the record went; what it carried is what was sent (values are unique).
        if error is not None:
            errors.append(error)
            return
        key, headers, timestamp = sent[message.value()]
        delivered.append(
            (message.topic(), message.partition(), message.offset(), key, message.value(), headers, timestamp)
        )

    for key, value, headers, timestamp in sent_records(topic):
        producer.produce(topic, value=value, key=key, headers=headers, timestamp=timestamp, on_delivery=report)
    assert producer.flush(POLL_DEADLINE_S) == 0
    assert errors == []
    assert len(delivered) == RECORDS_PER_TOPIC
    return delivered


def confluent_consume(listener: KafkaListener, topics: list[str], expected: int) -> list[Record]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": listener.bootstrap_servers, "group.id": "unused", "enable.auto.commit": "false"}
    )
    try:
        consumer.assign([TopicPartition(topic, partition, 0) for topic in topics for partition in range(PARTITIONS)])
        received: list[Record] = []
        deadline = time.monotonic() + POLL_DEADLINE_S
        while len(received) < expected and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=500, timeout=1.0):
                assert message.error() is None, message.error()
                received.append(
                    (
                        message.topic(),
                        message.partition(),
                        message.offset(),
                        message.key(),
                        message.value(),
                        tuple(message.headers() or ()),
                        message.timestamp()[1],
                    )
                )
        return received
    finally:
        consumer.close()


def test_confluent_producers_with_every_codec_and_acks_are_read_back_by_a_confluent_consumer(
    listener: KafkaListener,
) -> None:
    produced: list[Record] = []
    topics = []
    for acks in ("all", "1"):
        for codec in CODECS:
            topic = f"confluent-{codec}-acks-{acks}"
            topics.append(topic)
            produced += confluent_produce(listener, topic, acks=acks, **{"compression.type": codec})
    received = confluent_consume(listener, topics, len(produced))
    assert sorted(received) == sorted(produced)
    for topic in topics:
        for partition in range(PARTITIONS):
            offsets = [offset for t, p, offset, *_ in produced if (t, p) == (topic, partition)]
            assert sorted(offsets) == list(range(len(offsets)))


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_produces_and_consumes_with_assign(listener: KafkaListener, codec: str | None) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = f"kafka-python-{codec or 'none'}"
    # Idempotence off (acks=1): kafka-python's default idempotent producer is tested on its own below.
    producer = KafkaProducer(
        bootstrap_servers=listener.bootstrap_servers, acks=1, compression_type=codec, enable_idempotence=False
    )
    produced: list[Record] = []
    futures = [
        (producer.send(topic, value=value, key=key, headers=headers, timestamp_ms=timestamp), key, value, headers)
        for key, value, headers, timestamp in sent_records(topic)
    ]
    producer.flush(POLL_DEADLINE_S)
    for future, key, value, headers in futures:
        metadata = future.get(timeout=POLL_DEADLINE_S)
        produced.append((topic, metadata.partition, metadata.offset, key, value, tuple(headers), metadata.timestamp))
    producer.close()

    consumer = KafkaConsumer(bootstrap_servers=listener.bootstrap_servers, enable_auto_commit=False)
    consumer.assign([TopicPartition(topic, partition) for partition in range(PARTITIONS)])
    consumer.seek_to_beginning()
    received: list[Record] = []
    deadline = time.monotonic() + POLL_DEADLINE_S
    while len(received) < len(produced) and time.monotonic() < deadline:
        for messages in consumer.poll(timeout_ms=1000).values():
            received += [
                (m.topic, m.partition, m.offset, m.key, m.value, tuple(m.headers), m.timestamp) for m in messages
            ]
    consumer.close()
    assert sorted(received) == sorted(produced)


def test_wire_records_are_read_by_the_python_consumer_and_python_records_by_the_wire(listener: KafkaListener) -> None:
    from actors import Admin, Consumer, Producer

    produced = confluent_produce(listener, "wire-to-python", acks="all", **{"compression.type": "lz4"})
    consumer = Consumer()
    consumer.assign([("wire-to-python", partition) for partition in range(PARTITIONS)])
    consumer.seek_to_beginning()
    received: list[Record] = []
    deadline = time.monotonic() + POLL_DEADLINE_S
    while len(received) < len(produced) and time.monotonic() < deadline:
        received += [
            (r.topic, r.partition, r.offset, r.key, r.value, tuple(r.headers), r.timestamp)
            for r in consumer.poll(timeout_ms=500)
        ]
    consumer.close()
    assert sorted(received) == sorted(produced)

    Admin().create_topic("python-to-wire", PARTITIONS)
    producer = Producer()
    futures = [
        (producer.send("python-to-wire", value=value, key=key, timestamp_ms=timestamp, headers=headers), key, value)
        for key, value, headers, timestamp in sent_records("python-to-wire")
    ]
    producer.flush()
    from_python: list[Record] = []
    for (future, key, value), (_, _, headers, timestamp) in zip(futures, sent_records("python-to-wire"), strict=True):
        metadata = future.result(timeout=POLL_DEADLINE_S)
        from_python.append(
            ("python-to-wire", metadata.partition, metadata.offset, key, value, tuple(headers), timestamp)
        )
    producer.close()
    assert sorted(confluent_consume(listener, ["python-to-wire"], len(from_python))) == sorted(from_python)


def test_offsets_for_times_and_watermarks(listener: KafkaListener) -> None:
    from confluent_kafka import Consumer, TopicPartition

    produced = confluent_produce(listener, "times", acks="1")
    consumer = Consumer({"bootstrap.servers": listener.bootstrap_servers, "group.id": "unused"})
    try:
        for partition in range(PARTITIONS):
            mine = sorted((offset, timestamp) for _, p, offset, *_, timestamp in produced if p == partition)
            assert consumer.get_watermark_offsets(TopicPartition("times", partition), timeout=10) == (0, len(mine))
            middle_offset, middle_timestamp = mine[len(mine) // 2]
            # The first record at or after the timestamp; none after the last one. One partition per call: a
            # ListOffsets request names each partition once.
            for timestamp, expected in (
                (middle_timestamp, middle_offset),
                (middle_timestamp - 1, middle_offset),
                (mine[-1][1] + 1, -1),
            ):
                (found,) = consumer.offsets_for_times([TopicPartition("times", partition, timestamp)], timeout=10)
                assert (found.error, found.offset) == (None, expected)
    finally:
        consumer.close()


def test_idempotent_producers_of_both_clients_get_distinct_ids_and_are_read_back(listener: KafkaListener) -> None:
    import ray
    from kafka import KafkaProducer

    from actors import Broker
    from storage.records.record_batch import iter_batches

    produced = confluent_produce(listener, "idempotent", **{"enable.idempotence": "true"})
    # kafka-python's default producer is idempotent (acks=all): it asks InitProducerId first.
    producer = KafkaProducer(bootstrap_servers=listener.bootstrap_servers)
    futures = [
        (
            producer.send("idempotent", value=value, key=key, headers=headers, timestamp_ms=timestamp),
            key,
            value,
            headers,
        )
        for key, value, headers, timestamp in sent_records("idempotent-kafka-python")
    ]
    for future, key, value, headers in futures:
        metadata = future.get(timeout=POLL_DEADLINE_S)
        produced.append(
            ("idempotent", metadata.partition, metadata.offset, key, value, tuple(headers), metadata.timestamp)
        )
    producer.close()
    assert sorted(confluent_consume(listener, ["idempotent"], len(produced))) == sorted(produced)
    broker = Broker.connect()
    stored = [ray.get(broker.partition("idempotent", partition).read.remote(0)) for partition in range(PARTITIONS)]
    producer_ids = {batch.producer_id for data in stored for batch in iter_batches(data)}
    assert len(producer_ids) == 2
    assert min(producer_ids) >= 0


def test_pipelined_idempotent_produces_keep_their_order_in_the_partition(listener: KafkaListener) -> None:
    """librdkafka pipelines up to 5 Produce requests per connection; the listener handles them concurrently, and
    an idempotent producer's batches must still reach the log in order, or the broker would answer
    OUT_OF_ORDER_SEQUENCE_NUMBER and the offsets would not follow the send order."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": listener.bootstrap_servers,
            "enable.idempotence": "true",
            "linger.ms": "0",
            "batch.num.messages": "20",
            "max.in.flight.requests.per.connection": "5",
        }
    )
    count = 3000
    offsets: dict[int, int] = {}
    errors: list[Any] = []

    def report(error: Any, message: Any) -> None:
        if error is not None:
            errors.append(error)
        else:
            offsets[int(message.value())] = message.offset()

    for index in range(count):
        producer.produce("pipelined", value=str(index).encode(), partition=0, on_delivery=report)
        producer.poll(0)
    assert producer.flush(POLL_DEADLINE_S) == 0
    assert errors == []
    first = offsets[0]
    assert [offsets[index] for index in range(count)] == list(range(first, first + count))


def test_a_produce_pipelined_behind_a_waiting_fetch_wakes_it(listener: KafkaListener) -> None:
    """A Fetch that waits for data and a Produce sent after it on the same connection: the Produce is handled
    while the Fetch waits (else the Fetch would sleep its whole `max_wait`), the Fetch answers the new record,
    and the answers come in request order."""
    import socket

    from kio.index import load_request_schema, load_response_schema

    from cluster.protocol.framing import SIZE, decode_response, encode_request
    from cluster.protocol.handlers.fetch import FETCH_KEY
    from cluster.protocol.handlers.produce import PRODUCE_KEY
    from cluster.protocol.messages import build
    from tests.cluster.protocol.helpers import batch, fetch_v12_body, records_of

    max_wait_ms = 10_000
    confluent_produce(listener, "woken")  # creates the topic, leaves partition 0 with some end offset
    end = max(offset for _, partition, offset, *_ in confluent_produce(listener, "woken") if partition == 0) + 1
    fetch = build(load_request_schema(FETCH_KEY, 12), fetch_v12_body("woken", end, max_wait_ms=max_wait_ms))
    produce = build(
        load_request_schema(PRODUCE_KEY, 9),
        {
            "transactional_id": None,
            "acks": 1,
            "timeout": 30000,
            "topic_data": [{"name": "woken", "partition_data": [{"index": 0, "records": batch([(b"k", b"wake", 1)])}]}],
        },
    )

    def read_frame(sock: socket.socket) -> bytes:
        def exactly(count: int) -> bytes:
            data = b""
            while len(data) < count:
                chunk = sock.recv(count - len(data))
                assert chunk, "the listener closed the connection"
                data += chunk
            return data

        return exactly(SIZE.unpack(exactly(SIZE.size))[0])

    with socket.create_connection(("127.0.0.1", listener.port), timeout=POLL_DEADLINE_S) as sock:
        started = time.monotonic()
        sock.sendall(encode_request(FETCH_KEY, 1, "t", fetch) + encode_request(PRODUCE_KEY, 2, "t", produce))
        fetch_id, fetched = decode_response(read_frame(sock), load_response_schema(FETCH_KEY, 12))
        waited_s = time.monotonic() - started
        produce_id, produced = decode_response(read_frame(sock), load_response_schema(PRODUCE_KEY, 9))
    assert (fetch_id, produce_id) == (1, 2)
    assert produced.responses[0].partition_responses[0].base_offset == end
    answered = fetched.responses[0].partitions[0]
    # What the fetch answered besides its records, so that a failure says which way the wait ended.
    state = (
        f"error {answered.error_code}, high watermark {answered.high_watermark} (fetched at {end}), "
        f"{len(answered.records or b'')} bytes, after {waited_s:.3f} s"
    )
    assert [(key, value) for _, key, value, _ in records_of(answered.records)] == [(b"k", b"wake")], state
    assert waited_s < max_wait_ms / 1000 / 2, state


def test_large_fetches_are_sent_from_the_segment_files_byte_for_byte(listener: KafkaListener) -> None:
    """Fetches of a partition on the listener's node send located bytes of `SENDFILE_MIN_BYTES` or more with
    `sendfile`; a confluent consumer reading 4 MiB from offset 0 gets every value the Python producer wrote, in
    order, and the server counts what it sent from the files."""
    import os

    from confluent_kafka import Consumer, TopicPartition

    from actors import Admin, Producer

    Admin().create_topic("sendfile", 1)
    values = [os.urandom(1024) for _ in range(4096)]
    with Producer() as producer:
        producer.send_many("sendfile", values, partition=0).result()
    before = listener.statistics().file_bytes_sent
    consumer = Consumer(
        {"bootstrap.servers": listener.bootstrap_servers, "group.id": "sendfile", "enable.auto.commit": "false"}
    )
    try:
        consumer.assign([TopicPartition("sendfile", 0, 0)])
        received: list[bytes] = []
        deadline = time.monotonic() + POLL_DEADLINE_S
        while len(received) < len(values) and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=1000, timeout=1.0):
                assert message.error() is None, message.error()
                received.append(message.value())
    finally:
        consumer.close()
    assert received == values
    assert listener.statistics().file_bytes_sent - before >= 3 * 1024 * 1024


def test_offset_for_leader_epoch_is_answered_from_the_partition_actors_epoch_cache(listener: KafkaListener) -> None:
    """OffsetForLeaderEpoch through the listener and the partition's actor: epoch 0, the epoch a new partition is
    led in, ends at the log end offset; a client that knows a newer leader epoch gets UNKNOWN_LEADER_EPOCH."""
    import socket

    from kio.index import load_request_schema, load_response_schema
    from kio.schema.errors import ErrorCode

    from cluster.protocol.framing import decode_response, encode_request
    from cluster.protocol.handlers.leader_epoch import OFFSET_FOR_LEADER_EPOCH_KEY
    from cluster.protocol.messages import build
    from tests.cluster.protocol.helpers import read_frame

    end = max(offset for _, partition, offset, *_ in confluent_produce(listener, "epochs") if partition == 0) + 1
    request = build(
        load_request_schema(OFFSET_FOR_LEADER_EPOCH_KEY, 4),
        {
            "replica_id": -1,
            "topics": [
                {
                    "topic": "epochs",
                    "partitions": [
                        {"partition": 0, "current_leader_epoch": 0, "leader_epoch": 0},
                        {"partition": 0, "current_leader_epoch": 1, "leader_epoch": 0},
                    ],
                }
            ],
        },
    )
    with socket.create_connection(("127.0.0.1", listener.port), timeout=POLL_DEADLINE_S) as sock:
        sock.sendall(encode_request(OFFSET_FOR_LEADER_EPOCH_KEY, 4, "t", request))
        _, response = decode_response(read_frame(sock), load_response_schema(OFFSET_FOR_LEADER_EPOCH_KEY, 4))
    answers = [(p.error_code, p.leader_epoch, p.end_offset) for p in response.topics[0].partitions]
    assert answers == [(ErrorCode.none, 0, end), (ErrorCode.unknown_leader_epoch, -1, -1)]


def test_fetch_and_list_offsets_fence_a_client_leader_epoch_in_the_listeners_view_and_in_the_actor(
    listener: KafkaListener,
) -> None:
    """A new partition is led in epoch 0. Fetch v12 with epoch 1 (newer) answers UNKNOWN_LEADER_EPOCH from the
    partition's actor before the listener has a view of its log, and from the view once it has one, without a Ray
    call (no `locate`), while epoch 0 is answered from the view; ListOffsets v7 for the latest offset, also answered
    from the view then, answers UNKNOWN_LEADER_EPOCH for 1 and FENCED_LEADER_EPOCH for -2 (below the leader's epoch;
    only -1 is not checked), and the partition's end for 0 and -1."""
    import socket

    from kio.index import load_request_schema, load_response_schema
    from kio.schema.errors import ErrorCode

    from actors import Admin, Producer
    from cluster.protocol.framing import decode_response, encode_request
    from cluster.protocol.handlers.fetch import FETCH_KEY
    from cluster.protocol.handlers.list_offsets import LIST_OFFSETS_KEY
    from cluster.protocol.messages import build
    from cluster.protocol.views.ray_broker_view import statistics
    from tests.cluster.protocol.helpers import fetch_v12_body, read_frame, records_of

    topic, count = "fenced-epochs", 5
    Admin().create_topic(topic, 1)
    with Producer() as producer:
        producer.send_many(topic, [b"v%d" % index for index in range(count)], partition=0).result()

    def fetch(sock: socket.socket, epoch: int) -> tuple[ErrorCode, list[int]]:
        body = fetch_v12_body(topic, 0, current_leader_epoch=epoch)
        sock.sendall(encode_request(FETCH_KEY, 12, "t", build(load_request_schema(FETCH_KEY, 12), body)))
        _, response = decode_response(read_frame(sock), load_response_schema(FETCH_KEY, 12))
        answer = response.responses[0].partitions[0]
        return answer.error_code, [offset for offset, *_ in records_of(answer.records)]

    def list_latest(sock: socket.socket, epoch: int) -> tuple[ErrorCode, int]:
        partitions = [{"partition_index": 0, "current_leader_epoch": epoch, "timestamp": -1}]
        body = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": partitions}]}
        sock.sendall(encode_request(LIST_OFFSETS_KEY, 7, "t", build(load_request_schema(LIST_OFFSETS_KEY, 7), body)))
        _, response = decode_response(read_frame(sock), load_response_schema(LIST_OFFSETS_KEY, 7))
        answer = response.topics[0].partitions[0]
        return answer.error_code, answer.offset

    everything = list(range(count))
    with socket.create_connection(("127.0.0.1", listener.port), timeout=POLL_DEADLINE_S) as sock:
        assert fetch(sock, 1) == (ErrorCode.unknown_leader_epoch, [])
        # The first fetches locate the records and open the view; then the view answers.
        for _ in range(3):
            assert fetch(sock, 0) == (ErrorCode.none, everything)
        before = statistics()
        assert fetch(sock, 1) == (ErrorCode.unknown_leader_epoch, [])
        assert fetch(sock, 0) == (ErrorCode.none, everything)
        assert fetch(sock, -1) == (ErrorCode.none, everything)
        after = statistics()
        assert list_latest(sock, 1) == (ErrorCode.unknown_leader_epoch, -1)
        assert list_latest(sock, -2) == (ErrorCode.fenced_leader_epoch, -1)
        assert list_latest(sock, 0) == (ErrorCode.none, count)
        assert list_latest(sock, -1) == (ErrorCode.none, count)
        listed = statistics()
    assert (after.view_reads - before.view_reads, after.located - before.located) == (2, 0)
    assert (listed.view_offsets - after.view_offsets, listed.located - after.located) == (2, 0)


def test_a_listener_on_the_partitions_node_appends_over_their_channels_and_closes_them_when_stopped(
    listener: KafkaListener,
) -> None:
    from actors.clients.broker import Broker

    broker = Broker.connect()
    with KafkaListener({"listeners": "PLAINTEXT://127.0.0.1:0", "num.partitions": str(PARTITIONS)}) as own:
        produced = confluent_produce(own, "over-the-channel", acks="all")
        pids = {call(broker.partition("over-the-channel", p).state.remote()).pid for p in range(PARTITIONS)}
        # Only this listener wrote to the new topic: each partition's process has its connection.
        assert all(append_channel_connections(pid) >= 1 for pid in pids)
    deadline = time.monotonic() + POLL_DEADLINE_S
    while any(append_channel_connections(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(append_channel_connections(pid) for pid in pids), "a stopped listener left a connection open"
    assert sorted(confluent_consume(listener, ["over-the-channel"], len(produced))) == sorted(produced)


def test_a_consumer_served_from_the_listeners_view_is_reset_by_delete_records_as_kafka_resets_it(
    listener: KafkaListener,
) -> None:
    """A confluent consumer reading a same-node partition in 16 KiB fetches is served from the listener's view of the
    log (a `locate` call only for its first fetches); DeleteRecords then moves the log start past its position, and
    its next fetch answers OFFSET_OUT_OF_RANGE, as Kafka's would: `auto.offset.reset=earliest` sends it to the new log
    start, from where it reads every record to the end, never one below it nor one twice."""
    from confluent_kafka import Consumer, TopicPartition

    from actors import Admin, Producer
    from cluster.protocol.views.ray_broker_view import statistics

    topic, total, deleted_below = "view-delete-records", 2000, 1500
    Admin().create_topic(topic, 1)
    with Producer() as producer:
        producer.send_many(topic, [b"%06d" % index + bytes(1018) for index in range(total)], partition=0).result()
    consumer = Consumer(
        {
            "bootstrap.servers": listener.bootstrap_servers,
            "group.id": topic,
            "enable.auto.commit": "false",
            "auto.offset.reset": "earliest",
            "max.partition.fetch.bytes": "16384",
            # Fetch only when the local queue runs dry, so the fetches after DeleteRecords start below the new start,
            # and at once then (librdkafka waits 1 s by default).
            "queued.min.messages": "1",
            "queued.max.messages.kbytes": "1",
            "fetch.queue.backoff.ms": "1",
        }
    )
    offsets: list[int] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + POLL_DEADLINE_S
        while len(offsets) < 400 and time.monotonic() < deadline:
            offsets.extend(message.offset() for message in consumer.consume(50, 1.0) if message.error() is None)
        before = statistics()
        Admin().delete_records(topic, 0, deleted_below)
        while (not offsets or offsets[-1] < total - 1) and time.monotonic() < deadline:
            for message in consumer.consume(100, 1.0):
                assert message.error() is None, message.error()
                offsets.append(message.offset())
        after = statistics()
    finally:
        consumer.close()
    jump = next(index for index in range(1, len(offsets)) if offsets[index] != offsets[index - 1] + 1)
    assert offsets[:jump] == list(range(jump)) and jump < deleted_below
    assert offsets[jump:] == list(range(deleted_below, total))
    assert after.view_reads - before.view_reads >= 30, "the fetches after the reset came from the view"
    assert after.located - before.located <= 4, "a locate for the out-of-range fetch and the reset's first ones"


def test_a_consumer_at_the_end_of_a_same_node_partition_is_woken_by_its_change_notices(
    listener: KafkaListener,
) -> None:
    """A confluent consumer waiting at the end of a same-node partition (`fetch.wait.max.ms` 10 s) gets each record
    produced one at a time: the listener's fetches wait on the partition's change notices, not in the actor's long
    poll (`locate` is asked for the first fetches only)."""
    from confluent_kafka import Consumer, TopicPartition

    from actors import Admin, Producer
    from cluster.protocol.views.ray_broker_view import statistics

    topic, count = "view-notices", 12
    Admin().create_topic(topic, 1)
    consumer = Consumer(
        {
            "bootstrap.servers": listener.bootstrap_servers,
            "group.id": topic,
            "enable.auto.commit": "false",
            "fetch.wait.max.ms": "10000",
        }
    )
    received: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        with Producer(linger_ms=0) as producer:
            producer.send(topic, b"first", partition=0).result()
            deadline = time.monotonic() + POLL_DEADLINE_S
            while not received and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    received.append(message.value())
            before = statistics()
            for index in range(count):
                producer.send(topic, b"r%d" % index, partition=0).result()
                while len(received) < index + 2 and time.monotonic() < deadline:
                    message = consumer.poll(0.5)
                    if message is not None and message.error() is None:
                        received.append(message.value())
            after = statistics()
    finally:
        consumer.close()
    assert received == [b"first", *(b"r%d" % index for index in range(count))]
    assert after.woken - before.woken >= count // 2, "waits ended by notices"
    assert after.located - before.located <= 1
