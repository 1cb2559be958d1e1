"""The producer facade on a real broker: placement (Kafka's murmur2, sticky null keys), batching, codecs,
headers and timestamps, idempotent retries (a resent batch, a partition actor killed mid-stream, a batch the
partition refuses), and the typed errors of bad input. The oracle is always what was sent."""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections import defaultdict
from concurrent.futures import Future
from typing import Any

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from storage.errors import (
    InvalidConfigError,
    InvalidRequestError,
    InvalidTimestampError,
    RecordTooLargeError,
    RequestTimedOutError,
    SerializationError,
    UnknownTopicOrPartitionError,
    UnsupportedCompressionTypeError,
)
from storage.records.compression import CompressionType
from storage.records.record_batch import RecordBatch, RecordBatchBuilder, TimestampType, iter_batches
from tests.actors.support import append_channel_connections, wait_for
from tests.conftest import ONE_ACTOR_PER_PARTITION

pytestmark = pytest.mark.ray

TOPICS = {
    "p3": (3, {}),
    "one": (1, {}),
    "append-time": (1, {"message.timestamp.type": "LogAppendTime"}),
    "killed": (2, {}),
    "small": (1, {"max.message.bytes": "2000"}),
    "answers": (1, {}),
}


@pytest.fixture(scope="module")
def broker(start_test_broker: Any) -> Any:
    from actors import Admin

    broker, _ = start_test_broker(log_dirs_count=1, **ONE_ACTOR_PER_PARTITION)
    admin = Admin(broker)
    for name, (partitions, config) in TOPICS.items():
        admin.create_topic(name, partitions, config)
    return broker


def end_offsets(broker: Any, topic: str) -> dict[int, int]:
    import ray

    partitions = sorted(broker.topic(topic).partitions)
    return {p: ray.get(broker.partition(topic, p).offsets.remote())[2] for p in partitions}


def raw_batches(broker: Any, topic: str, partition: int, start: int) -> list[RecordBatch]:
    """Every batch of the partition from the one holding `start`, read straight from the actor."""
    import ray

    handle = broker.partition(topic, partition)
    end = ray.get(handle.offsets.remote())[2]
    batches: list[RecordBatch] = []
    offset = start
    while offset < end:
        found = list(iter_batches(ray.get(handle.read.remote(offset, 1 << 20))))
        batches.extend(found)
        offset = found[-1].next_offset
    return batches


def consume(broker: Any, starts: dict[tuple[str, int], int], count: int, **options: Any) -> list[Any]:
    """`count` records from the given positions (fails if fewer arrive within 20 s)."""
    from actors import Consumer

    records: list[Any] = []
    with Consumer(broker, **options) as consumer:
        consumer.assign(list(starts))
        for tp, offset in starts.items():
            consumer.seek(tp, offset)
        deadline = time.monotonic() + 20
        while len(records) < count and time.monotonic() < deadline:
            records.extend(consumer.poll(timeout_ms=200))
        assert consumer.poll(timeout_ms=0) == []
    assert len(records) == count
    return records


def wait_until_gone(pid: int, timeout_s: float = 60.0) -> None:
    """Waits until process `pid` (on this machine) has exited."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} still runs after {timeout_s} s")


def per_partition(records: list[Any]) -> dict[int, list[Any]]:
    grouped: dict[int, list[Any]] = defaultdict(list)
    for record in records:
        grouped[record.partition].append((record.offset, record.value))
    return dict(grouped)


def test_keyed_records_land_on_kafkas_partition_and_read_back_once_in_order(broker: Any) -> None:
    from actors import Producer

    starts = end_offsets(broker, "p3")
    sent: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    with Producer(broker) as producer:
        futures = [(i, producer.send("p3", f"value-{i}", key=f"key-{i % 37}")) for i in range(600)]
        producer.flush()
        for i, future in futures:
            metadata = future.result()
            key = f"key-{i % 37}".encode()
            assert metadata.partition == (kafka_python_murmur2(key) & 0x7FFFFFFF) % 3
            assert metadata.topic == "p3"
            sent[metadata.partition].append((metadata.offset, f"value-{i}".encode()))
    for partition, records in sent.items():
        offsets = [offset for offset, _ in records]
        assert offsets == list(range(starts[partition], starts[partition] + len(records)))
    records = consume(broker, {("p3", p): offset for p, offset in starts.items()}, 600)
    assert per_partition(records) == dict(sent)


def test_str_keys_past_the_remembered_count_keep_kafkas_partition_and_bytes(broker: Any) -> None:
    """More distinct `str` keys than the producer remembers, each sent twice, among bytes keys, a non-ASCII key
    and one no UTF-8 can encode: every record is on kafka-python's partition, with its key's UTF-8 bytes."""
    from actors import Producer
    from actors.clients.partitioner import KEY_HASH_CACHE_SIZE

    keys: list[str | bytes] = [f"k{index}" for index in range(KEY_HASH_CACHE_SIZE + 300)] * 2
    keys[::97] = [f"k{index}".encode() for index in range(0, len(keys), 97)]
    keys.append("ключ-✓")
    with Producer(broker, linger_ms=50) as producer:
        futures = [producer.send("p3", b"v", key=key) for key in keys]
        with pytest.raises(SerializationError):
            producer.send("p3", b"v", key="\ud800")
        producer.flush()
        for key, future in zip(keys, futures, strict=True):
            key_bytes = key.encode() if isinstance(key, str) else key
            assert future.result().partition == (kafka_python_murmur2(key_bytes) & 0x7FFFFFFF) % 3
        last = futures[-1].result()
    records = consume(broker, {("p3", last.partition): last.offset}, 1)
    assert [record.key for record in records] == ["ключ-✓".encode()]


def test_null_key_records_stick_to_a_partition_until_its_batch_closes(broker: Any) -> None:
    from actors import Producer

    starts = end_offsets(broker, "p3")
    # About 20 records of 40-byte values per 1000-byte batch; batches close when full, not on linger.
    with Producer(broker, batch_size=1000, linger_ms=60_000) as producer:
        futures = [producer.send("p3", b"x" * 40) for _ in range(400)]
        producer.flush()
        placed = [future.result() for future in futures]
    runs: list[tuple[int, int, int]] = []
    for metadata in placed:
        if runs and runs[-1][0] == metadata.partition and runs[-1][2] + 1 == metadata.offset:
            runs[-1] = (metadata.partition, runs[-1][1], metadata.offset)
        else:
            runs.append((metadata.partition, metadata.offset, metadata.offset))
    logged = {
        (partition, batch.base_offset, batch.last_offset)
        for partition, start in starts.items()
        for batch in raw_batches(broker, "p3", partition, start)
    }
    assert set(runs) == logged
    assert len(runs) >= 15
    assert all(a[0] != b[0] for a, b in itertools.pairwise(runs))


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_every_compression_type_is_written_with_its_codec_and_reads_back(broker: Any, codec: str) -> None:
    from actors import Producer

    start = end_offsets(broker, "p3")[1]
    values = [f"{codec}-{i}-".encode() * 20 for i in range(50)]
    with Producer(broker, compression_type=codec) as producer:
        for value in values:
            producer.send("p3", value, partition=1)
    batches = raw_batches(broker, "p3", 1, start)
    assert {batch.compression for batch in batches} == {CompressionType.from_name(codec)}
    assert [r.value for batch in batches for r in batch.records()] == values


def test_headers_and_timestamps_round_trip(broker: Any) -> None:
    from actors import Producer
    from actors.clients import serializers

    start = end_offsets(broker, "one")[0]
    headers = [("trace", b"\x00\x01"), ("empty", None), ("text", "é")]
    # Recent: older records would fall to the test broker's 500 ms retention checks (retention.ms is 7 days).
    base_ms = time.time_ns() // 1_000_000 - 60_000
    with Producer(broker, value_serializer=serializers.json_serializer) as producer:
        futures = [producer.send("one", {"n": i}, timestamp_ms=base_ms + i, headers=headers) for i in range(5)]
        defaulted = producer.send("one", {"n": 5})
        before_ms = time.time_ns() // 1_000_000
    assert [f.result().timestamp for f in futures] == [base_ms + i for i in range(5)]
    assert abs(defaulted.result().timestamp - before_ms) < 60_000
    records = consume(broker, {("one", 0): start}, 6, value_deserializer=serializers.json_deserializer)
    assert [r.value for r in records] == [{"n": i} for i in range(6)]
    assert [r.timestamp for r in records] == [f.result().timestamp for f in [*futures, defaulted]]
    assert {r.timestamp_type for r in records} == {TimestampType.CREATE_TIME}
    assert [r.headers for r in records[:5]] == [(("trace", b"\x00\x01"), ("empty", None), ("text", "é".encode()))] * 5
    assert records[5].headers == ()


def test_a_log_append_time_topic_reports_the_brokers_timestamp(broker: Any) -> None:
    from actors import Producer

    before_ms = time.time_ns() // 1_000_000
    with Producer(broker) as producer:
        future = producer.send("append-time", b"v", timestamp_ms=1_000)
    metadata = future.result()
    assert before_ms <= metadata.timestamp <= time.time_ns() // 1_000_000
    (record,) = consume(broker, {("append-time", 0): metadata.offset}, 1)
    assert (record.timestamp, record.timestamp_type) == (metadata.timestamp, TimestampType.LOG_APPEND_TIME)


def test_a_batch_resent_with_its_sequence_is_a_duplicate_and_mixes_with_facade_records(broker: Any) -> None:
    import ray

    from actors import Producer

    handle = broker.partition("one", 0)
    start = end_offsets(broker, "one")[0]
    with Producer(broker, linger_ms=0) as producer:
        before = [producer.send("one", f"facade-{i}") for i in range(3)]
        producer.flush()
        producer_id = ray.get(broker.controller.allocate_producer_id.remote())
        builder = RecordBatchBuilder(producer_id=producer_id, producer_epoch=0, base_sequence=0)
        for i in range(4):
            builder.append(None, f"raw-{i}".encode(), timestamp=time.time_ns() // 1_000_000)
        batch = builder.build()
        first = ray.get(handle.append.remote(batch))
        again = ray.get(handle.append.remote(batch))
        after = [producer.send("one", f"facade-{i}") for i in range(3, 6)]
    assert not first.duplicate
    assert again.duplicate
    assert again.batch_offsets == first.batch_offsets == ((start + 3, start + 6),)
    assert [f.result().offset for f in before + after] == [start + i for i in (0, 1, 2, 7, 8, 9)]
    assert end_offsets(broker, "one")[0] == start + 10
    records = consume(broker, {("one", 0): start}, 10)
    assert [r.value for r in records] == [
        *(f"facade-{i}".encode() for i in range(3)),
        *(f"raw-{i}".encode() for i in range(4)),
        *(f"facade-{i}".encode() for i in range(3, 6)),
    ]


def test_a_same_node_producer_appends_over_the_partitions_channel_and_closes_it(broker: Any) -> None:
    import ray

    from actors import Producer

    pid = ray.get(broker.partition("p3", 1).state.remote()).pid
    start = end_offsets(broker, "p3")[1]
    with Producer(broker) as producer:
        futures = [producer.send("p3", f"channel-{i}", partition=1) for i in range(20)]
        assert [f.result().offset for f in futures] == list(range(start, start + 20))
        # The producer's end and the channel's end of one connection, both in this machine's table.
        assert append_channel_connections(pid) >= 1
    deadline = time.monotonic() + 10
    while append_channel_connections(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert append_channel_connections(pid) == 0, "the producer's close left its channel connection open"
    records = consume(broker, {("p3", 1): start}, 20)
    assert [r.value for r in records] == [f"channel-{i}".encode() for i in range(20)]


def test_killing_a_partition_actor_mid_stream_loses_and_duplicates_nothing(
    broker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    import ray

    from actors import Producer

    handle = broker.partition("killed", 0)
    pid_before = ray.get(handle.state.remote()).pid
    starts = end_offsets(broker, "killed")
    futures: list[tuple[bytes, Future[Any]]] = []
    # Small batches with almost no linger: many calls are in flight when the actor dies.
    with (
        caplog.at_level(logging.INFO, "actors.clients.sender"),
        Producer(broker, linger_ms=1, batch_size=512) as producer,
    ):
        for i in range(3000):
            value = f"record-{i}".encode()
            futures.append((value, producer.send("killed", value, partition=i % 2)))
            if i == 1000:
                # Appends take ~0.1 ms over the append channel: the rest would be written before the kill lands, or
                # the first one after it, unless the producer is writing and the actor gone before they are sent.
                futures[0][1].result()
                ray.kill(handle, no_restart=False)
                wait_until_gone(pid_before)
        producer.flush()
    sent: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    for value, future in futures:
        metadata = future.result()
        sent[metadata.partition].append((metadata.offset, value))
    for partition, records in sent.items():
        assert [offset for offset, _ in records] == list(range(starts[partition], starts[partition] + 1500))
    assert ray.get(broker.partition("killed", 0).state.remote()).pid != pid_before
    # Retried: appends refused unsent by the gone process (BrokerNotAvailableError) or sent to it and never answered
    # (RequestTimedOutError).
    retried = ("BrokerNotAvailableError", "RequestTimedOutError")
    assert any("killed-0: " in m and any(e in m for e in retried) for m in caplog.messages), "nothing was retried"
    records = consume(broker, {("killed", p): offset for p, offset in starts.items()}, 3000)
    assert per_partition(records) == dict(sent)


def test_a_batch_the_partition_refuses_fails_alone_and_the_others_are_written_once(broker: Any) -> None:
    from actors import Producer

    start = end_offsets(broker, "small")[0]
    small = [f"small-{i}".encode() for i in range(20)]
    # One in-flight call at a time makes the big batch and the next small one travel together in one call,
    # which the partition refuses as a whole (topic max.message.bytes 2000).
    with Producer(broker, linger_ms=60_000, batch_size=1500, max_in_flight_requests_per_connection=1) as producer:
        first = [producer.send("small", value) for value in small[:10]]
        big = producer.send("small", b"b" * 5000)
        second = [producer.send("small", value) for value in small[10:]]
        producer.flush()
        producer_id = producer.producer_id
    with pytest.raises(RecordTooLargeError):
        big.result()
    offsets = [f.result().offset for f in first + second]
    assert offsets == list(range(start, start + 20))
    records = consume(broker, {("small", 0): start}, 20)
    assert [r.value for r in records] == small
    batches = raw_batches(broker, "small", 0, start)
    # The partition lost track of the sequence at the refused batch: what follows went under a fresh id.
    assert batches[0].producer_id == producer_id
    assert batches[-1].producer_id != producer_id
    assert batches[-1].base_sequence == 0


def test_batches_are_sent_when_full_or_on_flush_and_close_ends_sending(broker: Any) -> None:
    from actors import Producer

    producer = Producer(broker, linger_ms=60_000, batch_size=400)
    lingering = producer.send("one", b"alone")
    time.sleep(0.3)
    assert not lingering.done()
    full = [producer.send("one", b"y" * 50) for _ in range(20)]
    assert full[0].result(timeout=10).offset >= 0
    producer.flush(timeout=10)
    assert lingering.done() and all(f.done() for f in full)
    producer.close()
    producer.close()
    with pytest.raises(InvalidRequestError):
        producer.send("one", b"late")


def test_a_full_buffer_makes_send_wait_for_acknowledgements_instead_of_growing(broker: Any) -> None:
    from actors import Producer

    start = end_offsets(broker, "one")[0]
    # 100 records of about 136 bytes against a 1000-byte buffer: without the bound they would all wait
    # for the 60 s linger; with it, each send that finds the buffer full pushes the batches out.
    with Producer(broker, buffer_memory=1000, linger_ms=60_000, max_block_ms=10_000) as producer:
        futures = [producer.send("one", b"z" * 100) for _ in range(100)]
        assert sum(f.done() for f in futures) >= 90
    assert [f.result().offset for f in futures] == list(range(start, start + 100))


def test_callbacks_may_send_again(broker: Any) -> None:
    from actors import Producer

    chained = threading.Event()
    with Producer(broker, linger_ms=0) as producer:
        future = producer.send("one", b"first")
        future.add_done_callback(lambda _: producer.send("one", b"second").add_done_callback(lambda _: chained.set()))
        assert chained.wait(10)


class AnswerLostLate:
    """An append that was written but whose answer was lost (it fails as the route fails such a call, with
    REQUEST_TIMED_OUT), reported only once `later` is done: the route's leader watch may abandon a call with the
    leader it went to after the next call, sent to the new leader, was answered."""

    def __init__(self, call: Any, later: Future[Any]) -> None:
        self._call = call
        self._later = later

    def add_done_callback(self, callback: Any) -> None:
        self._call.add_done_callback(lambda: self._later.add_done_callback(lambda _: callback()))

    def result(self) -> Any:
        self._call.result()
        raise RequestTimedOutError("the leader went away before answering an append")


def test_answers_come_in_send_order_when_a_later_call_succeeds_before_an_earlier_ones_failure(
    broker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka's `send` answers a partition's records in send order. Here the first call's answer is lost and its
    failure comes after the second call succeeded: the first batch is resent, recognised as a duplicate and
    answered with its offset, and only then is the second batch answered."""
    from actors import Producer
    from actors.server.append_route import AppendRoute

    real_send = AppendRoute.send
    second_answered: Future[Any] = Future()
    calls: list[Any] = []

    def send(route: AppendRoute, leader: Any, topic: str, *args: Any, **kwargs: Any) -> Any:
        call = real_send(route, leader, topic, *args, **kwargs)
        if topic != "answers":
            return call
        calls.append(call)
        if len(calls) == 1:
            return AnswerLostLate(call, second_answered)
        if len(calls) == 2:
            call.add_done_callback(lambda: second_answered.set_result(None))
        return call

    monkeypatch.setattr(AppendRoute, "send", send)
    start = end_offsets(broker, "answers")[0]
    answered: list[str] = []
    with Producer(broker, linger_ms=0, enable_idempotence=True) as producer:
        first = producer.send("answers", b"first")
        first.add_done_callback(lambda _: answered.append("first"))
        # The second record goes in a call of its own, while the first is still in flight.
        wait_for(lambda: len(calls) == 1)
        second = producer.send("answers", b"second")
        second.add_done_callback(lambda _: answered.append("second"))
        producer.flush()
    assert len(calls) == 3, "the first batch was not resent alone"
    assert answered == ["first", "second"]
    assert [first.result().offset, second.result().offset] == [start, start + 1]
    assert [r.value for r in consume(broker, {("answers", 0): start}, 2)] == [b"first", b"second"]


@pytest.mark.parametrize(
    ("send_kwargs", "error"),
    [
        ({"topic": "no-such-topic", "value": b"v"}, UnknownTopicOrPartitionError),
        ({"topic": "one", "value": b"v", "partition": 1}, UnknownTopicOrPartitionError),
        ({"topic": "one", "value": b"v", "partition": "0"}, UnknownTopicOrPartitionError),
        ({"topic": "one", "value": object()}, SerializationError),
        ({"topic": "one", "value": b"v", "key": {1, 2}}, SerializationError),
        ({"topic": "one", "value": b"v" * (1 << 20)}, RecordTooLargeError),
        ({"topic": "one", "value": b"v", "timestamp_ms": -5}, InvalidTimestampError),
        ({"topic": "one", "value": b"v", "headers": [("k", 5)]}, SerializationError),
        ({"topic": "one", "value": b"v", "headers": [(b"k", b"v")]}, SerializationError),
    ],
)
def test_bad_records_raise_typed_errors_from_send(broker: Any, send_kwargs: dict[str, Any], error: type) -> None:
    from actors import Producer

    with Producer(broker) as producer, pytest.raises(error):
        producer.send(**send_kwargs)


def test_a_serializer_that_returns_no_bytes_is_refused(broker: Any) -> None:
    from actors import Producer

    with Producer(broker, value_serializer=str) as producer, pytest.raises(SerializationError):  # type: ignore[arg-type]
        producer.send("one", 5)


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"compression_type": "brotli"}, UnsupportedCompressionTypeError),
        ({"linger_ms": -1}, InvalidConfigError),
        ({"batch_size": 0}, InvalidConfigError),
        ({"retries": 1.5}, InvalidConfigError),
        ({"max_in_flight_requests_per_connection": 6}, InvalidConfigError),
    ],
)
def test_bad_producer_configs_raise_typed_errors(broker: Any, options: dict[str, Any], error: type) -> None:
    from actors import Producer

    with pytest.raises(error):
        Producer(broker, **options)


# --- send_many -----------------------------------------------------------------------------------


def test_send_many_to_a_partition_keeps_send_order_with_single_sends_and_numbers_batches(broker: Any) -> None:
    from actors import Producer

    start = end_offsets(broker, "p3")[2]
    bulk = [f"bulk-{i}".encode() * (1 + i % 7) for i in range(3000)]
    with Producer(broker, linger_ms=60_000, batch_size=2000) as producer:
        before = producer.send("p3", b"single-before", partition=2)
        many = producer.send_many("p3", bulk, partition=2)
        after = producer.send("p3", b"single-after", partition=2)
        producer.flush()
        producer_id = producer.producer_id
    sent = [b"single-before", *bulk, b"single-after"]
    metadata = [before.result(), *many.result(), after.result()]
    assert many.done() and many.exception() is None
    assert [(m.topic, m.partition) for m in metadata] == [("p3", 2)] * len(sent)
    assert [m.offset for m in metadata] == list(range(start, start + len(sent)))
    records = consume(broker, {("p3", 2): start}, len(sent))
    assert [r.value for r in records] == sent
    assert [r.timestamp for r in records] == [m.timestamp for m in metadata]
    batches = raw_batches(broker, "p3", 2, start)
    assert len(batches) > 10  # 2000-byte batches, not one call's worth in one batch
    assert {b.producer_id for b in batches} == {producer_id}
    assert [b.base_sequence for b in batches] == list(
        itertools.accumulate((b.records_count for b in batches[:-1]), initial=batches[0].base_sequence)
    )


def test_send_many_places_keyed_records_like_send_and_null_keys_stickily(broker: Any) -> None:
    from actors import Producer

    starts = end_offsets(broker, "p3")
    keys = [None if i % 5 == 0 else f"key-{i % 41}".encode() for i in range(2000)]
    values = [f"value-{i}".encode() for i in range(2000)]
    timestamps = [time.time_ns() // 1_000_000 - 1000 + i % 100 for i in range(2000)]
    with Producer(broker, batch_size=1000) as producer:
        metadata = producer.send_many("p3", values, keys=keys, timestamps=timestamps).result(timeout=30)
    sent: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    for key, value, timestamp, placed in zip(keys, values, timestamps, metadata, strict=True):
        if key is not None:
            assert placed.partition == (kafka_python_murmur2(key) & 0x7FFFFFFF) % 3
        assert placed.timestamp == timestamp
        sent[placed.partition].append((placed.offset, value))
    for partition, records in sent.items():
        assert [offset for offset, _ in records] == list(range(starts[partition], starts[partition] + len(records)))
    null_key_partitions = [placed.partition for key, placed in zip(keys, metadata, strict=True) if key is None]
    assert len(set(null_key_partitions)) > 1  # 400 null-key records of ~50 bytes fill more than one batch
    records = consume(broker, {("p3", p): offset for p, offset in starts.items()}, 2000)
    assert per_partition(records) == dict(sent)
    assert {(r.partition, r.offset): r.key for r in records} == {
        (placed.partition, placed.offset): key for key, placed in zip(keys, metadata, strict=True)
    }


@pytest.mark.parametrize("codec", ["none", "lz4", "zstd"])
def test_send_many_compresses_its_batches_with_the_producers_codec(broker: Any, codec: str) -> None:
    from actors import Producer

    start = end_offsets(broker, "one")[0]
    values = [f"{codec}-{i}-".encode() * 10 for i in range(500)]
    with Producer(broker, compression_type=codec) as producer:
        producer.send_many("one", values).wait(timeout=30)
    batches = raw_batches(broker, "one", 0, start)
    assert {batch.compression for batch in batches} == {CompressionType.from_name(codec)}
    assert [r.value for batch in batches for r in batch.records()] == values


def test_send_many_reports_a_refused_batch_through_its_future(broker: Any) -> None:
    from actors import Producer

    start = end_offsets(broker, "small")[0]
    # 30 records of ~140 bytes in 8000-byte batches: one batch, larger than the topic's max.message.bytes 2000.
    with Producer(broker, batch_size=8000) as producer:
        many = producer.send_many("small", [b"r" * 100] * 30)
        with pytest.raises(RecordTooLargeError):
            many.wait(timeout=30)
        assert isinstance(many.exception(), RecordTooLargeError)
        with pytest.raises(RecordTooLargeError):
            many.result()
        fine = producer.send_many("small", [b"s" * 10] * 5)
    assert [m.offset for m in fine.result()] == list(range(start, start + 5))


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ({"values": [b"a", b"b"], "keys": [b"k"]}, InvalidRequestError),
        ({"values": [b"a"], "timestamps": [1, 2]}, InvalidRequestError),
        ({"values": [b"a", object()]}, SerializationError),
        ({"values": [b"a", b"v" * (1 << 20)]}, RecordTooLargeError),
        ({"values": [b"a"], "timestamps": [-1]}, InvalidTimestampError),
        ({"values": [b"a"], "partition": 1}, UnknownTopicOrPartitionError),
    ],
)
def test_send_many_refuses_bad_records_before_queueing_any(broker: Any, args: dict[str, Any], error: type) -> None:
    from actors import Producer

    start = end_offsets(broker, "one")[0]
    with Producer(broker) as producer:
        with pytest.raises(error):
            producer.send_many("one", **args)
        producer.flush()
    assert end_offsets(broker, "one")[0] == start


def test_send_many_of_nothing_is_done_at_once_and_after_close_is_refused(broker: Any) -> None:
    from actors import Producer

    producer = Producer(broker)
    empty = producer.send_many("one", [])
    assert empty.done() and empty.result() == []
    producer.close()
    with pytest.raises(InvalidRequestError):
        producer.send_many("one", [b"late"])
