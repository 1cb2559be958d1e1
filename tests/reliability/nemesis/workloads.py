"""The clients of a nemesis run, each a thread that writes what it does and learns into the run's `History`:

- `write`: an idempotent acks=all producer (the Python `Producer`) sending `<name>-<n>` round robin over a topic's
  partitions, at most `UNANSWERED_SENDS` unanswered;
- `tail`: a read_committed consumer assigned every partition of some topics from the start, recording every record
  it ever polled;
- `commit_offsets`: a consumer of group `<name>` that commits its positions after every poll (synchronously),
  recording each commit acknowledged;
- `transform`: consume-transform-produce with the Python clients: each poll's records written to the sink as
  `<name>|<input>|<attempt>` with the consumer's positions in one transaction (`send_offsets_to_transaction`),
  one in `ABORT_EVERY` aborted on purpose; a failed transaction is aborted (a producer that cannot abort is
  replaced) and the consumer goes back to the group's committed offsets;
- `transform_with_confluent`: the same through a Kafka listener with confluent-kafka (librdkafka);
- `abandon`: a transaction begun, written to every partition and left open, as by a client that crashed.

Every workload runs until its `stop` event is set; a transformer then goes on until the group's committed positions
reach `ends` (the input's final high watermarks, filled in by the caller). A client error is written as a `fail` or
`txn` event, never raised: what the clients were told is the checker's matter.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from actors.clients.consumer import Consumer
from actors.clients.producer import Producer
from storage.errors import RaybrokerError
from tests.reliability.nemesis.history import History

UNANSWERED_SENDS = 32
ABORT_EVERY = 7
Positions = dict[tuple[str, int], int]


def _offsets_event(positions: Positions) -> dict[str, int]:
    return {f"{topic}/{partition}": offset for (topic, partition), offset in positions.items()}


def write(history: History, name: str, topic: str, partitions: int, stop: threading.Event) -> None:
    """The idempotent acks=all producer; see the module docstring."""
    unanswered = threading.BoundedSemaphore(UNANSWERED_SENDS)
    with Producer(acks="all", retries=1_000_000, retry_backoff_max_ms=200, linger_ms=1) as producer:
        sequence = 0
        while not stop.is_set():
            if not unanswered.acquire(timeout=0.2):
                continue
            value, partition = f"{name}-{sequence}", sequence % partitions

            def done(future: Any, value: str = value, partition: int = partition) -> None:
                unanswered.release()
                error = future.exception()
                if error is not None:
                    history.add(name, "fail", topic=topic, partition=partition, value=value, error=repr(error))
                else:
                    offset = future.result().offset
                    history.add(name, "ack", topic=topic, partition=partition, value=value, offset=offset)

            history.add(name, "send", topic=topic, partition=partition, value=value)
            producer.send(topic, value.encode(), partition=partition).add_done_callback(done)
            sequence += 1
            time.sleep(0.004)
        producer.flush(120)


def _record_reads(history: History, name: str, records: list[Any]) -> None:
    for record in records:
        history.add(
            name,
            "read",
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            value=record.value.decode(),
            isolation="read_committed",
        )


def tail(history: History, name: str, partitions: list[tuple[str, int]], stop: threading.Event) -> None:
    """The read_committed tailing reader; see the module docstring."""
    positions = dict.fromkeys(partitions, 0)
    while not stop.is_set():
        try:
            with Consumer(auto_offset_reset="earliest", isolation_level="read_committed") as consumer:
                consumer.assign(partitions)
                for tp, offset in positions.items():
                    consumer.seek(tp, offset)
                while not stop.is_set():
                    records = consumer.poll(timeout_ms=200)
                    _record_reads(history, name, records)
                    for record in records:
                        positions[(record.topic, record.partition)] = record.offset + 1
        except RaybrokerError as exc:
            history.add(name, "error", error=repr(exc))
            time.sleep(0.2)


def commit_offsets(history: History, name: str, partitions: list[tuple[str, int]], stop: threading.Event) -> None:
    """The group member committing after every poll; see the module docstring."""
    while not stop.is_set():
        try:
            with Consumer(group_id=name, auto_offset_reset="earliest", enable_auto_commit=False) as consumer:
                consumer.assign(partitions)
                while not stop.is_set():
                    if not consumer.poll(timeout_ms=200, max_records=100):
                        continue
                    positions = {tp: consumer.position(tp) for tp in partitions}
                    consumer.commit(positions)
                    history.add(name, "offsets", group=name, offsets=_offsets_event(positions))
        except RaybrokerError as exc:
            history.add(name, "error", error=repr(exc))
            time.sleep(0.2)


def _done(stop: threading.Event, ends: Positions, committed: Positions) -> bool:
    return stop.is_set() and bool(ends) and all(committed.get(tp, 0) >= end for tp, end in ends.items())


def _end(
    history: History,
    name: str,
    attempt: int,
    inputs: list[str],
    outputs: list[str],
    positions: Positions,
    producer: Any,
) -> bool:
    """Ends a transformer's transaction, either client's: aborted on purpose one time in `ABORT_EVERY`, else
    committed; written to the history once its client answered. True if it committed."""
    if attempt % ABORT_EVERY == 2:
        producer.flush(120)
        producer.abort_transaction(120)
        history.add(name, "txn", attempt=attempt, outcome="abort", inputs=inputs, outputs=outputs)
        return False
    producer.commit_transaction(120)
    history.add(name, "txn", attempt=attempt, outcome="commit", inputs=inputs, outputs=outputs)
    history.add(name, "offsets", group=name, offsets=_offsets_event(positions))
    return True


def transform(
    history: History, name: str, source: str, sink: str, stop: threading.Event, ends: Positions, partitions: int
) -> None:
    """Consume-transform-produce with the Python clients; see the module docstring."""
    inputs = [(source, p) for p in range(partitions)]
    consumer = Consumer(group_id=name, auto_offset_reset="earliest", isolation_level="read_committed")
    consumer.assign(inputs)
    producer: Producer | None = None
    committed: Positions = {}
    attempt = 0
    while not _done(stop, ends, committed):
        try:
            if producer is None:
                producer = Producer(
                    transactional_id=name,
                    acks="all",
                    linger_ms=1,
                    retry_backoff_max_ms=200,
                    transaction_timeout_ms=60_000,
                )
                producer.init_transactions(120)
                for tp in inputs:
                    consumer.seek(tp, consumer.committed(tp) or 0)
            records = consumer.poll(timeout_ms=200, max_records=200)
        except Exception as exc:  # recorded; the next round starts a producer again
            history.add(name, "error", error=repr(exc))
            if producer is not None:
                producer.close(5)
            producer = None
            continue
        if not records:
            continue
        _record_reads(history, name, records)
        attempt += 1
        outputs = [f"{name}|{record.value.decode()}|{attempt}" for record in records]
        inputs_read = [record.value.decode() for record in records]
        try:
            producer.begin_transaction()
            for record, output in zip(records, outputs, strict=True):
                producer.send(sink, output.encode(), partition=record.partition % partitions)
            positions = {tp: consumer.position(tp) for tp in inputs}
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), timeout=120)
            if _end(history, name, attempt, inputs_read, outputs, positions, producer):
                committed = positions
                continue
        except Exception as exc:  # every failure of a transaction is handled alike: abort, go back
            history.add(
                name, "txn", attempt=attempt, outcome="fail", inputs=inputs_read, outputs=outputs, error=repr(exc)
            )
            try:
                producer.abort_transaction(120)
            except Exception:  # fenced, or the abort itself failed: a successor takes over
                producer.close(5)
                producer = None
                continue
        try:
            for tp in inputs:
                consumer.seek(tp, consumer.committed(tp) or 0)
        except RaybrokerError as exc:  # not rewound: no poll before the next round's producer rewinds it
            history.add(name, "error", error=repr(exc))
            producer.close(5)
            producer = None
    if producer is not None:
        producer.close(30)
    consumer.close()


def transform_with_confluent(
    history: History,
    name: str,
    bootstrap: str,
    source: str,
    sink: str,
    stop: threading.Event,
    ends: Positions,
    partitions: int,
) -> None:
    """`transform` with confluent-kafka through a Kafka listener: librdkafka retries what it may; a transaction it
    says must be aborted is aborted and replayed from the group's offsets, and a fatal error replaces the
    producer."""
    from confluent_kafka import Consumer as KafkaConsumer
    from confluent_kafka import KafkaException
    from confluent_kafka import Producer as KafkaProducer
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    tps = [KafkaTopicPartition(source, p) for p in range(partitions)]
    consumer = KafkaConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": name,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    positions: Positions = {}
    committed: Positions = {}

    def rewind() -> None:
        for tp in consumer.committed(tps, timeout=60):
            positions[(tp.topic, tp.partition)] = max(tp.offset, 0)
        consumer.assign([KafkaTopicPartition(t, p, offset) for (t, p), offset in positions.items()])

    producer: Any = None
    attempt = 0
    while not _done(stop, ends, committed):
        try:
            if producer is None:
                producer = KafkaProducer(
                    {"bootstrap.servers": bootstrap, "transactional.id": name, "transaction.timeout.ms": 60_000}
                )
                producer.init_transactions(120)
                rewind()
            messages = [m for m in consumer.consume(200, 0.2) if m.error() is None]
        except KafkaException as exc:
            history.add(name, "error", error=str(exc.args[0]))
            producer = None
            continue
        if not messages:
            continue
        attempt += 1
        for message in messages:
            history.add(
                name,
                "read",
                topic=message.topic(),
                partition=message.partition(),
                offset=message.offset(),
                value=message.value().decode(),
                isolation="read_committed",
            )
        outputs = [f"{name}|{m.value().decode()}|{attempt}" for m in messages]
        inputs_read = [m.value().decode() for m in messages]
        try:
            producer.begin_transaction()
            for message, output in zip(messages, outputs, strict=True):
                producer.produce(sink, value=output.encode(), partition=message.partition() % partitions)
                positions[(message.topic(), message.partition())] = message.offset() + 1
            offsets = [KafkaTopicPartition(t, p, offset) for (t, p), offset in positions.items()]
            producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 120)
            if _end(history, name, attempt, inputs_read, outputs, positions, producer):
                committed = dict(positions)
                continue
        except KafkaException as exc:
            error = exc.args[0]
            history.add(
                name, "txn", attempt=attempt, outcome="fail", inputs=inputs_read, outputs=outputs, error=str(error)
            )
            try:
                if error.txn_requires_abort():
                    producer.abort_transaction(120)
                else:
                    producer = None
            except KafkaException:
                producer = None
        try:
            rewind()
        except KafkaException as exc:  # not rewound: no poll before the next round's producer rewinds it
            history.add(name, "error", error=str(exc.args[0]))
            producer = None
    consumer.close()


def abandon(history: History, name: str, sink: str, partitions: int, timeout_ms: int) -> None:
    """A transactional producer that writes `<name>|<n>|1` to every partition of `sink` in a transaction and stops
    without ending it, as a client that crashed: the coordinator must abort it once `timeout_ms` passed."""
    producer = Producer(transactional_id=name, transaction_timeout_ms=timeout_ms)
    producer.init_transactions(60)
    producer.begin_transaction()
    outputs = [f"{name}|{partition}|1" for partition in range(partitions)]
    for partition, output in enumerate(outputs):
        producer.send(sink, output.encode(), partition=partition)
    producer.flush(60)
    history.add(name, "txn", attempt=1, outcome="abandoned", inputs=[], outputs=outputs)


def start(target: Callable[..., None], *args: Any) -> threading.Thread:
    """Runs a workload on a daemon thread."""
    thread = threading.Thread(target=target, args=args, daemon=True, name=f"workload-{args[1]}")
    thread.start()
    return thread
