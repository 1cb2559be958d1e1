"""The Python `Producer`'s transactions on a real broker (real Ray, the transaction and group coordinator actors,
the partition actors): commits seen by read_committed readers and aborts never, an open transaction invisible until
it commits, an open transaction aborted when its producer closes, a zombie fenced by a newer producer of its id, a
transaction the coordinator aborted on its timeout, consume-transform-produce with offsets committed in the
transaction and a crash of the transform, and the state errors of calls out of order. The oracle is a list model of
what each transaction sent and how it ended."""

from __future__ import annotations

import time
from typing import Any

import pytest

from actors.core.transactions.markers import TransactionMarker
from storage.errors import (
    InvalidConfigError,
    InvalidTxnStateError,
    ProducerFencedError,
    TransactionTimedOutError,
    UnknownTopicOrPartitionError,
)
from storage.records.layout import ControlRecordType
from storage.records.record_batch import iter_batches

pytestmark = pytest.mark.ray

PARTITIONS = 3
DEADLINE_S = 30.0
# Short enough that the coordinator's timeout scan aborts a transaction within a test.
TIMEOUT_SCAN_MS = 300


@pytest.fixture(scope="module")
def broker(start_test_broker: Any) -> Any:
    broker, _ = start_test_broker(
        log_dirs_count=1,
        transaction_state_log_num_partitions="1",
        transaction_abort_timed_out_transaction_cleanup_interval_ms=str(TIMEOUT_SCAN_MS),
    )
    return broker


def create_topic(broker: Any, name: str, partitions: int = PARTITIONS) -> str:
    from actors import Admin

    Admin(broker).create_topic(name, partitions)
    return name


def transactional(transactional_id: str, **options: Any) -> Any:
    from actors import Producer

    producer = Producer(transactional_id=transactional_id, linger_ms=0, **options)
    producer.init_transactions(DEADLINE_S)
    return producer


def read(topic: str, isolation: str, expected: int, partitions: int = PARTITIONS) -> list[bytes]:
    """Every value a consumer at `isolation` reads from offset 0 (waiting for `expected`, then a little more)."""
    from actors import Consumer

    with Consumer(isolation_level=isolation, auto_offset_reset="earliest") as consumer:
        consumer.assign([(topic, partition) for partition in range(partitions)])
        values: list[bytes] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(values) < expected and time.monotonic() < deadline:
            values += [record.value for record in consumer.poll(timeout_ms=200)]
        values += [record.value for record in consumer.poll(timeout_ms=300)]
        return values


def send_all(producer: Any, topic: str, values: list[bytes]) -> None:
    for index, value in enumerate(values):
        producer.send(topic, value, partition=index % PARTITIONS)


def coordinator_state(transactional_id: str) -> tuple[str, int]:
    from actors.clients.transactions_admin import Transactions

    described = Transactions().describe(transactional_id)
    assert described is not None
    return described.state, described.producer_epoch


def test_committed_transactions_are_read_and_aborted_ones_are_not(broker: Any) -> None:
    topic = create_topic(broker, "txn-ledger")
    model: list[tuple[list[bytes], bool]] = []
    with transactional("ledger") as producer:
        for number, commit in enumerate([True, False, True, False, True]):
            values = [f"t{number}-{index}".encode() for index in range(7)]
            producer.begin_transaction()
            send_all(producer, topic, values)
            # In the log before the abort: an abort fails the batches not sent yet, as Kafka's producer does.
            producer.flush(DEADLINE_S)
            if commit:
                producer.commit_transaction(DEADLINE_S)
            else:
                producer.abort_transaction(DEADLINE_S)
            model.append((values, commit))
        producer_id, epoch = producer.producer_id, producer.producer_epoch
    committed = [value for values, commit in model if commit for value in values]
    everything = [value for values, _ in model for value in values]
    assert sorted(read(topic, "read_committed", len(committed))) == sorted(committed)
    assert sorted(read(topic, "read_uncommitted", len(everything))) == sorted(everything)
    # On the log, as Kafka's producer writes it: transactional batches of the producer's id and epoch, and one
    # marker per transaction on each partition it wrote to. How many batches a transaction's records fill depends
    # on when the sender drained them (linger.ms 0), so a run of data batches counts as one "data".
    for partition in range(PARTITIONS):
        kinds: list[str] = []
        for batch in iter_batches(broker_read(broker, topic, partition)):
            assert (batch.producer_id, batch.producer_epoch, batch.is_transactional) == (producer_id, epoch, True)
            marker = batch.end_transaction_marker() if batch.is_control else None
            kind = "data" if marker is None else marker.control_type.name
            if not (kind == "data" and kinds[-1:] == ["data"]):
                kinds.append(kind)
        assert kinds == [kind for _, commit in model for kind in ("data", "COMMIT" if commit else "ABORT")]


def broker_read(broker: Any, topic: str, partition: int) -> bytes:
    from actors.calls import call

    data: bytes = call(broker.partition(topic, partition).read.remote(0, 1 << 20))
    return data


def test_an_open_transaction_is_invisible_to_read_committed_until_it_commits(broker: Any) -> None:
    topic = create_topic(broker, "txn-open")
    values = [f"open-{index}".encode() for index in range(6)]
    with transactional("open") as producer:
        producer.begin_transaction()
        send_all(producer, topic, values)
        producer.flush(DEADLINE_S)
        assert read(topic, "read_committed", 0) == []
        assert sorted(read(topic, "read_uncommitted", len(values))) == sorted(values)
        assert coordinator_state("open")[0] == "Ongoing"
        producer.commit_transaction(DEADLINE_S)
    assert sorted(read(topic, "read_committed", len(values))) == sorted(values)


def test_closing_a_producer_aborts_its_open_transaction_and_read_committed_readers_go_on_at_once(
    broker: Any,
) -> None:
    """As Kafka's Java client on close: the open transaction is aborted, not left to hold back the partitions'
    last stable offset until the coordinator times it out (`transaction_timeout_ms`, a minute by default)."""
    topic = create_topic(broker, "txn-closed")
    left_open = transactional("closed-open")
    left_open.begin_transaction()
    send_all(left_open, topic, [b"open-0", b"open-1", b"open-2"])
    left_open.flush(DEADLINE_S)
    epoch = left_open.producer_epoch
    left_open.close(DEADLINE_S)
    assert coordinator_state("closed-open") == ("CompleteAbort", epoch)
    with transactional("closed-after") as after:
        after.begin_transaction()
        send_all(after, topic, [b"after-0", b"after-1", b"after-2"])
        after.commit_transaction(DEADLINE_S)
    started = time.monotonic()
    assert sorted(read(topic, "read_committed", 3)) == [b"after-0", b"after-1", b"after-2"]
    assert time.monotonic() - started < DEADLINE_S / 2


def test_markers_go_to_every_partition_at_once_and_only_the_ones_not_written_are_answered(broker: Any) -> None:
    """`RayTransactionMarkers.write_markers`, the coordinator's WriteTxnMarkers: the markers of one call end the
    producer's open transaction on each partition that has it, and a partition that cannot take one (here a topic
    that does not exist) is the only one answered, with its typed error."""
    from actors.clients.transactions_admin import Transactions
    from actors.server.append_route import AppendRoute
    from actors.server.transaction_coordinator_actor import RayTransactionMarkers

    topic = create_topic(broker, "txn-markers")
    transactions = Transactions()
    with transactional("markers") as producer:
        producer.begin_transaction()
        send_all(producer, topic, [b"m-0", b"m-1", b"m-2"])
        producer.flush(DEADLINE_S)
        pid, epoch = producer.producer_id, producer.producer_epoch
        opened = [transactions.open_transaction_at(topic, partition, 0) for partition in range(PARTITIONS)]
        assert {(found.producer_id, found.producer_epoch) for found in opened} == {(pid, epoch)}
        written = [(topic, partition) for partition in range(PARTITIONS)]
        route = AppendRoute()
        try:
            marker = TransactionMarker(pid, epoch, opened[0].coordinator_epoch, ControlRecordType.ABORT)
            failed = RayTransactionMarkers(route).write_markers([*written, ("txn-markers-missing", 0)], marker)
        finally:
            route.close()
        assert list(failed) == [("txn-markers-missing", 0)]
        assert isinstance(failed["txn-markers-missing", 0], UnknownTopicOrPartitionError)
        for partition in range(PARTITIONS):
            with pytest.raises(InvalidTxnStateError, match="no open transaction"):
                transactions.open_transaction_at(topic, partition, 0)
        producer.abort_transaction(DEADLINE_S)
    assert read(topic, "read_committed", 0) == []
    assert sorted(read(topic, "read_uncommitted", 3)) == [b"m-0", b"m-1", b"m-2"]


def test_a_newer_producer_of_the_same_id_fences_the_zombie_and_aborts_its_transaction(broker: Any) -> None:
    topic = create_topic(broker, "txn-zombie")
    zombie = transactional("zombie-id")
    zombie.begin_transaction()
    send_all(zombie, topic, [b"z0", b"z1", b"z2"])
    zombie.flush(DEADLINE_S)
    with transactional("zombie-id") as successor:
        assert successor.producer_id == zombie.producer_id
        assert successor.producer_epoch == zombie.producer_epoch + 2
        with pytest.raises(ProducerFencedError, match="fenced by a newer producer"):
            zombie.commit_transaction(DEADLINE_S)
        # Fenced for good: nothing more is accepted from it.
        with pytest.raises(ProducerFencedError):
            zombie.send(topic, b"late", partition=0)
        with pytest.raises(ProducerFencedError):
            zombie.abort_transaction(DEADLINE_S)
        zombie.close()
        successor.begin_transaction()
        send_all(successor, topic, [b"s0", b"s1", b"s2"])
        successor.commit_transaction(DEADLINE_S)
    assert sorted(read(topic, "read_committed", 3)) == [b"s0", b"s1", b"s2"]


def test_a_transaction_aborted_on_its_timeout_must_be_aborted_and_the_producer_goes_on(broker: Any) -> None:
    topic = create_topic(broker, "txn-timeout")
    with transactional("slow", transaction_timeout_ms=500) as producer:
        epoch = producer.producer_epoch
        producer.begin_transaction()
        send_all(producer, topic, [b"late0", b"late1", b"late2"])
        producer.flush(DEADLINE_S)
        deadline = time.monotonic() + DEADLINE_S
        while coordinator_state("slow") != ("CompleteAbort", epoch + 1) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert coordinator_state("slow") == ("CompleteAbort", epoch + 1)
        with pytest.raises(TransactionTimedOutError, match="transaction_timeout_ms 500"):
            producer.commit_transaction(DEADLINE_S)
        with pytest.raises(TransactionTimedOutError):
            producer.send(topic, b"refused", partition=0)
        producer.abort_transaction(DEADLINE_S)
        assert producer.producer_epoch == epoch + 1
        producer.begin_transaction()
        send_all(producer, topic, [b"on0", b"on1", b"on2"])
        producer.commit_transaction(DEADLINE_S)
    assert sorted(read(topic, "read_committed", 3)) == [b"on0", b"on1", b"on2"]


def test_calls_out_of_order_raise_invalid_txn_state(broker: Any) -> None:
    from actors import Producer

    topic = create_topic(broker, "txn-states", 1)
    with Producer(transactional_id="states") as producer:
        with pytest.raises(InvalidTxnStateError, match="init_transactions first"):
            producer.send(topic, b"x")
        with pytest.raises(InvalidTxnStateError, match="begin_transaction in state uninitialized"):
            producer.begin_transaction()
        producer.init_transactions(DEADLINE_S)
        with pytest.raises(InvalidTxnStateError, match="init_transactions in state ready"):
            producer.init_transactions(DEADLINE_S)
        with pytest.raises(InvalidTxnStateError, match="begin_transaction first"):
            producer.send(topic, b"x")
        with pytest.raises(InvalidTxnStateError, match="commit_transaction in state ready"):
            producer.commit_transaction(DEADLINE_S)
        with pytest.raises(InvalidTxnStateError, match="abort_transaction in state ready"):
            producer.abort_transaction(DEADLINE_S)
        producer.begin_transaction()
        with pytest.raises(InvalidTxnStateError, match="begin_transaction in state in transaction"):
            producer.begin_transaction()
        producer.send(topic, b"kept")
        producer.commit_transaction(DEADLINE_S)
    with Producer() as plain, pytest.raises(InvalidTxnStateError, match="transactional_id"):
        plain.begin_transaction()
    with pytest.raises(InvalidConfigError, match="idempotent"):
        Producer(transactional_id="states", enable_idempotence=False)
    with pytest.raises(InvalidConfigError, match="transaction_timeout_ms"):
        Producer(transactional_id="states", transaction_timeout_ms=0)
    assert read(topic, "read_committed", 1, partitions=1) == [b"kept"]


def transform(value: bytes) -> bytes:
    return value.upper()


def run_transform(source: str, sink: str, group: str, batches: int | None, crash_after: bool = False) -> None:
    """Consume-transform-produce: each poll's records, transformed, and the consumer's positions, in one
    transaction. Stops after `batches` committed transactions (None: when the source is drained); `crash_after`
    then sends one more batch's output and stops without committing, as a process killed mid-transaction would."""
    from actors import Consumer

    producer = transactional(f"{group}-transform")
    with Consumer(group_id=group, auto_offset_reset="earliest", isolation_level="read_committed") as consumer:
        consumer.assign([(source, 0)])
        done = 0
        idle_polls = 0
        while batches is None or done < batches:
            records = consumer.poll(timeout_ms=300, max_records=4)
            if not records:
                idle_polls += 1
                if batches is None and idle_polls >= 3:
                    break
                continue
            producer.begin_transaction()
            for record in records:
                producer.send(sink, transform(record.value), partition=0)
            producer.send_offsets_to_transaction(
                {(source, 0): consumer.position((source, 0))}, consumer.consumer_group_metadata()
            )
            producer.commit_transaction(DEADLINE_S)
            done += 1
        if crash_after:
            records = consumer.poll(timeout_ms=DEADLINE_S * 1000, max_records=4)
            assert records
            producer.begin_transaction()
            for record in records:
                producer.send(sink, transform(record.value), partition=0)
            producer.send_offsets_to_transaction(
                {(source, 0): consumer.position((source, 0))}, consumer.consumer_group_metadata()
            )
            producer.flush(DEADLINE_S)
    producer.close()


def test_consume_transform_produce_outputs_each_record_once_across_a_crash(broker: Any) -> None:
    from actors import Consumer, Producer

    source, sink = create_topic(broker, "ctp-source", 1), create_topic(broker, "ctp-sink", 1)
    inputs = [f"record-{index}".encode() for index in range(22)]
    with Producer() as plain:
        for value in inputs:
            plain.send(source, value, partition=0)
    run_transform(source, sink, "ctp", batches=2, crash_after=True)
    with Consumer(group_id="ctp") as consumer:
        # The crashed transaction's offsets are not committed: the restart starts after the second batch.
        assert consumer.committed((source, 0)) == 8
    run_transform(source, sink, "ctp", batches=None)
    expected = [transform(value) for value in inputs]
    assert read(sink, "read_committed", len(expected), partitions=1) == expected
    # The crashed attempt's output is in the log (read_uncommitted sees it twice), aborted by the restart's fence.
    uncommitted = read(sink, "read_uncommitted", len(expected) + 4, partitions=1)
    assert sorted(uncommitted) == sorted(expected + expected[8:12])
    with Consumer(group_id="ctp") as consumer:
        assert consumer.committed((source, 0)) == len(inputs)


def test_a_read_committed_consumer_waits_for_the_offsets_of_a_transaction_until_it_ends(broker: Any) -> None:
    """KIP-447's `require_stable`, as Kafka's read_committed consumer asks it: offsets sent with a transaction are
    pending until its marker; a read_committed consumer's `committed` waits for them, a read_uncommitted one answers
    the last committed offset at once."""
    import threading

    from actors import Consumer

    source = create_topic(broker, "stable-source", 1)
    with (
        transactional("stable") as producer,
        Consumer(group_id="stable-group", isolation_level="read_committed") as reader,
        Consumer(group_id="stable-group") as plain,
    ):
        producer.begin_transaction()
        producer.send_offsets_to_transaction({(source, 0): 5}, reader.consumer_group_metadata(), DEADLINE_S)
        assert plain.committed((source, 0)) is None
        found: list[int | None] = []
        waiting = threading.Thread(target=lambda: found.append(reader.committed((source, 0))))
        waiting.start()
        waiting.join(0.5)
        assert waiting.is_alive() and found == []
        producer.commit_transaction(DEADLINE_S)
        waiting.join(DEADLINE_S)
        assert found == [5]
