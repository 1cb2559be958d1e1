"""The plain transaction coordinator without Ray, on the in-process broker and a `MockClock`: Kafka 3.9's documented
semantics (TransactionCoordinatorTest, TransactionMetadataTest, TransactionStateManagerTest) checked against what
lands in the logs: the `__transaction_state` records decoded with Kafka's schema, the COMMIT/ABORT markers, the
`.txnindex` and the last stable offset of the data partitions."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.core.controller.topic_metadata import TRANSACTION_STATE_TOPIC
from actors.core.in_process_broker import InProcessBroker
from actors.core.transactions.markers import TransactionMarker
from actors.core.transactions.transaction_coordinator import (
    InitProducerIdResult,
    TransactionCoordinator,
    TransactionDescription,
)
from actors.core.transactions.transaction_metadata import (
    VALID_PREVIOUS_STATES,
    TransactionMetadata,
    TransactionState,
    TxnError,
)
from storage.clock import MockClock
from storage.dump_log import DumpOptions, FileDump, classify
from storage.errors import BrokerNotAvailableError, InvalidRequestError, InvalidTxnStateError, RaybrokerError
from storage.records.layout import ControlRecordType
from storage.records.record_batch import RecordBatch, RecordBatchBuilder, iter_batches
from storage.records.transaction_log import (
    TransactionLogValue,
    decode_transaction_log_key,
    decode_transaction_log_value,
    encode_transaction_log_key,
    encode_transaction_log_value,
    partition_for_transactional_id,
)
from storage.topic_partition import TopicPartition

STATE_PARTITIONS = 3
PROPERTIES = {"transaction.state.log.num.partitions": str(STATE_PARTITIONS), "offsets.topic.num.partitions": "2"}
TXN_ID = "payments"
TIMEOUT_MS = 60_000
TOPIC = "orders"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    running = InProcessBroker(tmp_path, properties=PROPERTIES, clock=MockClock())
    running.controller.create_topic(TOPIC, 2)
    try:
        yield running
    finally:
        running.close()


@pytest.fixture
def coordinator(broker: InProcessBroker) -> TransactionCoordinator:
    return broker.transaction_coordinator


def state_records(broker: InProcessBroker, transactional_id: str = TXN_ID) -> list[TransactionLogValue | None]:
    """The values of `transactional_id` in its `__transaction_state` partition, in log order (None: tombstone)."""
    partitions = len(broker.controller.describe_topic(TRANSACTION_STATE_TOPIC).partitions)
    partition = partition_for_transactional_id(transactional_id, partitions)
    served = broker.internal_partition(TRANSACTION_STATE_TOPIC, partition)
    values: list[TransactionLogValue | None] = []
    for batch in iter_batches(served.read(0, 1 << 20)):
        for record in batch.records():
            assert record.key is not None
            if decode_transaction_log_key(record.key) == transactional_id:
                values.append(None if record.value is None else decode_transaction_log_value(record.value))
    return values


def statuses(broker: InProcessBroker, transactional_id: str = TXN_ID) -> list[int | None]:
    return [None if value is None else value.transaction_status for value in state_records(broker, transactional_id)]


def produce_transactional(broker: InProcessBroker, partition: int, producer_id: int, epoch: int, sequence: int) -> int:
    builder = RecordBatchBuilder(
        producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence, is_transactional=True
    )
    builder.append(b"k", b"v", timestamp=broker.clock.milliseconds())
    return broker.leader(TOPIC, partition).append(builder.build()).first_offset


def markers(broker: InProcessBroker, partition: int) -> list[tuple[ControlRecordType, int, int]]:
    """(type, producer id, producer epoch) of every marker of `orders-partition`."""
    found = []
    for batch in iter_batches(broker.internal_partition(TOPIC, partition).read(0, 1 << 20)):
        marker = batch.end_transaction_marker() if batch.is_control else None
        if marker is not None:
            found.append((marker.control_type, batch.producer_id, batch.producer_epoch))
    return found


def java_hash_partition(text: str, partitions: int) -> int:
    """Kafka's `Utils.abs(text.hashCode) % partitions`, computed as Java's definition reads: sum of
    s[i] * 31^(n-1-i) over UTF-16 code units, in 32-bit two's complement."""
    encoded = text.encode("utf-16-be")
    units = [int.from_bytes(encoded[i : i + 2], "big") for i in range(0, len(encoded), 2)]
    total = sum(unit * pow(31, len(units) - 1 - index, 1 << 32) for index, unit in enumerate(units)) % (1 << 32)
    signed = total - (1 << 32) if total >= 1 << 31 else total
    return (0 if signed == -(1 << 31) else abs(signed)) % partitions


def test_partition_of_a_transactional_id_is_javas_string_hash_modulo_the_partitions() -> None:
    for text in ("payments", "a", "", "txn-\u00e9\U0001f600", "polygenelubricants", "x" * 40):
        assert partition_for_transactional_id(text, 50) == java_hash_partition(text, 50)
    # "polygenelubricants".hashCode() is Integer.MIN_VALUE, which Utils.abs maps to 0.
    assert partition_for_transactional_id("polygenelubricants", 50) == 0


def test_the_first_use_creates_the_compacted_state_topic(broker: InProcessBroker) -> None:
    assert broker.transaction_coordinator.ready() == STATE_PARTITIONS
    topic = broker.controller.describe_topic(TRANSACTION_STATE_TOPIC)
    assert topic.internal and len(topic.partitions) == STATE_PARTITIONS
    assert topic.config["cleanup.policy"] == "compact"
    assert topic.config["compression.type"] == "uncompressed"
    # transaction.state.log.min.isr (2) and replication factor (3) are capped at the one broker running.
    assert topic.config["min.insync.replicas"] == "1"
    assert topic.replication_factor == 1


def test_init_producer_id_allocates_a_producer_id_at_epoch_0_and_writes_empty(
    broker: InProcessBroker, coordinator: TransactionCoordinator
) -> None:
    first = coordinator.init_producer_id(TXN_ID, TIMEOUT_MS)
    assert first.error == TxnError.NONE and first.producer_epoch == 0 and first.producer_id >= 0
    (value,) = state_records(broker)
    assert value == TransactionLogValue(first.producer_id, 0, TIMEOUT_MS, 0, (), broker.clock.milliseconds(), -1)
    again = coordinator.init_producer_id(TXN_ID, TIMEOUT_MS)
    assert (again.producer_id, again.producer_epoch) == (first.producer_id, 1)
    other = coordinator.init_producer_id("other", TIMEOUT_MS)
    assert other.producer_id != first.producer_id


@pytest.mark.parametrize("timeout_ms", [0, -1, 900_001, 2**31 - 1])
def test_a_timeout_outside_0_to_the_maximum_is_invalid_and_writes_nothing(
    broker: InProcessBroker, coordinator: TransactionCoordinator, timeout_ms: int
) -> None:
    answer = coordinator.init_producer_id(TXN_ID, timeout_ms)
    assert answer == InitProducerIdResult(TxnError.INVALID_TRANSACTION_TIMEOUT)
    assert state_records(broker) == []
    assert coordinator.init_producer_id(TXN_ID, 900_000).error == TxnError.NONE


def test_hostile_arguments_answer_kafkas_errors_and_leave_the_log_alone(
    broker: InProcessBroker, coordinator: TransactionCoordinator
) -> None:
    init = coordinator.init_producer_id(TXN_ID, TIMEOUT_MS)
    pid, epoch = init.producer_id, init.producer_epoch
    before = state_records(broker)
    assert coordinator.init_producer_id("", TIMEOUT_MS).error == TxnError.INVALID_REQUEST
    assert coordinator.init_producer_id(TXN_ID, "60000").error == TxnError.INVALID_TRANSACTION_TIMEOUT  # type: ignore[arg-type]
    assert coordinator.add_partitions("unknown", pid, epoch, [(TOPIC, 0)]) == TxnError.INVALID_PRODUCER_ID_MAPPING
    assert coordinator.add_partitions(TXN_ID, pid + 1, epoch, [(TOPIC, 0)]) == TxnError.INVALID_PRODUCER_ID_MAPPING
    assert coordinator.add_partitions(TXN_ID, pid, epoch + 1, [(TOPIC, 0)]) == TxnError.PRODUCER_FENCED
    assert coordinator.add_partitions(TXN_ID, pid, epoch - 1, [(TOPIC, 0)]) == TxnError.PRODUCER_FENCED
    assert coordinator.end_transaction(TXN_ID, pid, epoch, commit=True) == TxnError.INVALID_TXN_STATE
    assert coordinator.end_transaction(TXN_ID, pid, epoch, commit=False) == TxnError.INVALID_TXN_STATE
    assert coordinator.end_transaction("unknown", pid, epoch, commit=True) == TxnError.INVALID_PRODUCER_ID_MAPPING
    assert coordinator.end_transaction("", pid, epoch, commit=True) == TxnError.INVALID_REQUEST
    assert coordinator.init_producer_id(TXN_ID, TIMEOUT_MS, pid + 7, 3).error == TxnError.PRODUCER_FENCED
    assert state_records(broker) == before


def test_add_partitions_writes_ongoing_once_and_commit_writes_markers_then_complete(
    broker: InProcessBroker, coordinator: TransactionCoordinator
) -> None:
    init = coordinator.init_producer_id(TXN_ID, TIMEOUT_MS)
    pid, epoch = init.producer_id, init.producer_epoch
    start_ms = broker.clock.milliseconds()
    assert coordinator.add_partitions(TXN_ID, pid, epoch, [(TOPIC, 0)]) == TxnError.NONE
    broker.clock.sleep(5)
    assert coordinator.add_partitions(TXN_ID, pid, epoch, [(TOPIC, 1), (TOPIC, 0)]) == TxnError.NONE
    assert coordinator.add_partitions(TXN_ID, pid, epoch, [(TOPIC, 1)]) == TxnError.NONE  # already in: no write
    first = produce_transactional(broker, 0, pid, epoch, 0)
    produce_transactional(broker, 1, pid, epoch, 0)
    log = broker.leader(TOPIC, 0).log
    assert log.last_stable_offset == first
    assert coordinator.end_transaction(TXN_ID, pid, epoch, commit=True) == TxnError.NONE
    values = state_records(broker)
    assert [value.transaction_status for value in values if value is not None] == [0, 1, 1, 2, 4]
    ongoing, prepared, complete = values[2], values[3], values[4]
    assert ongoing is not None and ongoing.partitions == ((TOPIC, 0), (TOPIC, 1))
    assert ongoing.start_timestamp_ms == start_ms
    assert prepared is not None and prepared.partitions == ((TOPIC, 0), (TOPIC, 1))
    assert complete is not None and complete.partitions == ()
    assert markers(broker, 0) == [(ControlRecordType.COMMIT, pid, epoch)]
    assert markers(broker, 1) == [(ControlRecordType.COMMIT, pid, epoch)]
    assert log.last_stable_offset == log.log_end_offset
    assert log.collect_aborted_transactions(0, log.log_end_offset) == []
    # A retried EndTxn of the completed transaction is answered without a write; the opposite result is refused.
    assert coordinator.end_transaction(TXN_ID, pid, epoch, commit=True) == TxnError.NONE
    assert coordinator.end_transaction(TXN_ID, pid, epoch, commit=False) == TxnError.INVALID_TXN_STATE
    assert len(state_records(broker)) == 5
    described = coordinator.describe(TXN_ID)
    assert described is not None and described.state == "CompleteCommit"


def test_abort_writes_abort_markers_which_the_txnindex_records(
    broker: InProcessBroker, coordinator: TransactionCoordinator
) -> None:
    init = coordinator.init_producer_id(TXN_ID, TIMEOUT_MS)
    pid, epoch = init.producer_id, init.producer_epoch
    assert coordinator.add_partitions(TXN_ID, pid, epoch, [(TOPIC, 0)]) == TxnError.NONE
    first = produce_transactional(broker, 0, pid, epoch, 0)
    assert coordinator.end_transaction(TXN_ID, pid, epoch, commit=False) == TxnError.NONE
    assert statuses(broker)[-2:] == [3, 5]
    log = broker.leader(TOPIC, 0).log
    (aborted,) = log.collect_aborted_transactions(0, log.log_end_offset)
    assert (aborted.producer_id, aborted.first_offset, aborted.last_offset) == (pid, first, first + 1)
    # The next transaction starts from CompleteAbort.
    assert coordinator.add_partitions(TXN_ID, pid, epoch, [(TOPIC, 1)]) == TxnError.NONE
    assert statuses(broker)[-1] == 1


def test_init_producer_id_during_a_transaction_fences_it_and_the_retry_bumps_again(
    broker: InProcessBroker, coordinator: TransactionCoordinator
) -> None:
    init = coordinator.init_producer_id(TXN_ID, TIMEOUT_MS)
    pid, epoch = init.producer_id, init.producer_epoch
    coordinator.add_partitions(TXN_ID, pid, epoch, [(TOPIC, 0)])
    produce_transactional(broker, 0, pid, epoch, 0)
    assert coordinator.init_producer_id(TXN_ID, TIMEOUT_MS).error == TxnError.CONCURRENT_TRANSACTIONS
    # The abort runs with the bumped epoch, so the zombie's writes are refused by the partition from now on.
    assert markers(broker, 0) == [(ControlRecordType.ABORT, pid, epoch + 1)]
    prepare_abort = state_records(broker)[-2]
    assert prepare_abort is not None and (prepare_abort.transaction_status, prepare_abort.producer_epoch) == (3, 1)
    retried = coordinator.init_producer_id(TXN_ID, TIMEOUT_MS)
    assert (retried.error, retried.producer_id, retried.producer_epoch) == (TxnError.NONE, pid, epoch + 2)
    assert coordinator.end_transaction(TXN_ID, pid, epoch, commit=True) == TxnError.PRODUCER_FENCED
    assert coordinator.add_partitions(TXN_ID, pid, epoch, [(TOPIC, 0)]) == TxnError.PRODUCER_FENCED
    # A zombie cannot resume its epoch (KIP-360): only a timeout leaves that door open.
    assert coordinator.init_producer_id(TXN_ID, TIMEOUT_MS, pid, epoch).error == TxnError.PRODUCER_FENCED


def test_a_transaction_past_its_timeout_is_aborted_by_the_scheduled_task(
    broker: InProcessBroker, coordinator: TransactionCoordinator
) -> None:
    init = coordinator.init_producer_id(TXN_ID, 1_000)
    pid, epoch = init.producer_id, init.producer_epoch
    # The timeout counts from the first AddPartitions, not from InitProducerId.
    broker.clock.sleep(20_000)
    coordinator.add_partitions(TXN_ID, pid, epoch, [(TOPIC, 0)])
    produce_transactional(broker, 0, pid, epoch, 0)
    assert coordinator.abort_timed_out_transactions() == []
    broker.clock.sleep(10_000)
    assert "transaction-timeouts" in broker.run_scheduled()
    assert markers(broker, 0) == [(ControlRecordType.ABORT, pid, epoch + 1)]
    assert statuses(broker)[-1] == 5
    assert coordinator.end_transaction(TXN_ID, pid, epoch, commit=True) == TxnError.PRODUCER_FENCED
    log = broker.leader(TOPIC, 0).log
    assert log.last_stable_offset == log.log_end_offset
    # The timed-out producer resumes by naming its epoch and takes the fence's epoch, once, without a new bump.
    for _ in range(2):
        resumed = coordinator.init_producer_id(TXN_ID, 1_000, pid, epoch)
        assert (resumed.error, resumed.producer_id, resumed.producer_epoch) == (TxnError.NONE, pid, epoch + 1)
    assert coordinator.add_partitions(TXN_ID, pid, epoch + 1, [(TOPIC, 0)]) == TxnError.NONE


def test_an_idle_transactional_id_expires_with_a_tombstone_and_comes_back_with_a_new_producer_id(
    broker: InProcessBroker, coordinator: TransactionCoordinator
) -> None:
    init = coordinator.init_producer_id(TXN_ID, TIMEOUT_MS)
    ongoing = coordinator.init_producer_id("busy", TIMEOUT_MS)
    coordinator.add_partitions("busy", ongoing.producer_id, ongoing.producer_epoch, [(TOPIC, 0)])
    broker.clock.sleep(604_800_000 - 1)
    assert coordinator.expire_transactional_ids() == []
    broker.clock.sleep(1)
    # Only idle states expire; the Ongoing one is the timeout task's.
    assert coordinator.expire_transactional_ids() == [TXN_ID]
    assert state_records(broker)[-1] is None
    assert coordinator.describe(TXN_ID) is None
    again = coordinator.init_producer_id(TXN_ID, TIMEOUT_MS)
    assert again.producer_id != init.producer_id and again.producer_epoch == 0


class _UnreachablePartitions:
    """Marker writes that fail as a restarting broker's do (`BrokerNotAvailableError`)."""

    def write_markers(
        self, partitions: Collection[TopicPartition], marker: TransactionMarker
    ) -> dict[TopicPartition, RaybrokerError]:
        return {
            (topic, partition): BrokerNotAvailableError(f"{topic}-{partition}: broker restarting")
            for topic, partition in partitions
        }


def test_a_coordinator_restarted_after_prepare_commit_sends_the_markers_and_completes(
    broker: InProcessBroker, coordinator: TransactionCoordinator
) -> None:
    init = coordinator.init_producer_id(TXN_ID, TIMEOUT_MS)
    pid, epoch = init.producer_id, init.producer_epoch
    stuck = TransactionCoordinator(
        broker.config.transaction_config,
        clock=broker.clock,
        controller=broker.controller,
        find_partition=lambda partition: broker.internal_partition(TRANSACTION_STATE_TOPIC, partition),
        allocate_producer_id=broker.controller.allocate_producer_id,
        allocate_coordinator_epoch=broker.controller.allocate_coordinator_epoch,
        markers=_UnreachablePartitions(),
    )
    assert stuck.add_partitions(TXN_ID, pid, epoch, [(TOPIC, 0), (TOPIC, 1)]) == TxnError.NONE
    produce_transactional(broker, 0, pid, epoch, 0)
    assert stuck.end_transaction(TXN_ID, pid, epoch, commit=True) == TxnError.NONE
    assert statuses(broker)[-1] == 2 and markers(broker, 0) == []
    # While the markers wait, the id answers CONCURRENT_TRANSACTIONS (retriable).
    assert stuck.add_partitions(TXN_ID, pid, epoch, [(TOPIC, 0)]) == TxnError.CONCURRENT_TRANSACTIONS
    assert stuck.end_transaction(TXN_ID, pid, epoch, commit=True) == TxnError.CONCURRENT_TRANSACTIONS
    assert stuck.send_pending_markers() == 1
    broker.forget_transaction_coordinator()
    moved = broker.transaction_coordinator
    assert moved.ready() == STATE_PARTITIONS
    assert markers(broker, 0) == [(ControlRecordType.COMMIT, pid, epoch)]
    assert markers(broker, 1) == [(ControlRecordType.COMMIT, pid, epoch)]
    assert statuses(broker)[-1] == 4
    described = moved.describe(TXN_ID)
    assert described is not None and (described.state, described.producer_id) == ("CompleteCommit", pid)
    assert moved.init_producer_id(TXN_ID, TIMEOUT_MS).producer_epoch == epoch + 1


def write_state(broker: InProcessBroker, transactional_id: str, value: bytes | None) -> None:
    partition = partition_for_transactional_id(transactional_id, STATE_PARTITIONS)
    builder = RecordBatchBuilder()
    builder.append(encode_transaction_log_key(transactional_id), value, timestamp=broker.clock.milliseconds())
    broker.leader(TRANSACTION_STATE_TOPIC, partition).append(builder.build())


def test_an_exhausted_epoch_rotates_the_producer_id(broker: InProcessBroker) -> None:
    broker.transaction_coordinator.ready()
    broker.forget_transaction_coordinator()
    now = broker.clock.milliseconds()
    write_state(
        broker, TXN_ID, encode_transaction_log_value(TransactionLogValue(4242, 32766, TIMEOUT_MS, 4, (), now, now))
    )
    answer = broker.transaction_coordinator.init_producer_id(TXN_ID, TIMEOUT_MS)
    assert answer.error == TxnError.NONE and answer.producer_id != 4242 and answer.producer_epoch == 0


def test_loading_skips_malformed_records_and_unknown_key_versions(broker: InProcessBroker) -> None:
    broker.transaction_coordinator.ready()
    broker.forget_transaction_coordinator()
    now = broker.clock.milliseconds()
    write_state(broker, TXN_ID, encode_transaction_log_value(TransactionLogValue(77, 3, TIMEOUT_MS, 0, (), now, -1)))
    write_state(broker, TXN_ID, b"\x00\x00garbage")
    partition = partition_for_transactional_id(TXN_ID, STATE_PARTITIONS)
    builder = RecordBatchBuilder()
    builder.append(b"\x00\x09future-key", b"whatever", timestamp=now)
    broker.leader(TRANSACTION_STATE_TOPIC, partition).append(builder.build())
    described = broker.transaction_coordinator.describe(TXN_ID)
    assert described is not None and (described.producer_id, described.producer_epoch, described.state) == (
        77,
        3,
        "Empty",
    )
    # KIP-360: a client naming its epoch bumps it; a retry naming the epoch before gets the same answer.
    resumed = broker.transaction_coordinator.init_producer_id(TXN_ID, TIMEOUT_MS, 77, 3)
    assert (resumed.producer_id, resumed.producer_epoch) == (77, 4)
    assert broker.transaction_coordinator.init_producer_id(TXN_ID, TIMEOUT_MS, 77, 3).producer_epoch == 4
    assert broker.transaction_coordinator.init_producer_id(TXN_ID, TIMEOUT_MS, 77, 1).error == TxnError.PRODUCER_FENCED


def test_list_transactions_filters_by_state_producer_and_duration(
    broker: InProcessBroker, coordinator: TransactionCoordinator
) -> None:
    idle = coordinator.init_producer_id("idle", TIMEOUT_MS)
    busy = coordinator.init_producer_id("busy", TIMEOUT_MS)
    coordinator.add_partitions("busy", busy.producer_id, busy.producer_epoch, [(TOPIC, 0)])
    broker.clock.sleep(500)
    assert [found.transactional_id for found in coordinator.list_transactions()] == ["busy", "idle"]
    assert [found.transactional_id for found in coordinator.list_transactions(states=["Ongoing"])] == ["busy"]
    assert [found.transactional_id for found in coordinator.list_transactions(producer_ids=[idle.producer_id])] == [
        "idle"
    ]
    assert [found.transactional_id for found in coordinator.list_transactions(duration_ms=500)] == ["busy"]
    assert coordinator.list_transactions(duration_ms=501) == []


def test_the_state_machine_refuses_every_transition_kafka_does_not_allow() -> None:
    for source in TransactionState:
        metadata = TransactionMetadata(TXN_ID, 1, 0, TIMEOUT_MS, source)
        for target in TransactionState:
            if source in VALID_PREVIOUS_STATES[target]:
                assert metadata.to(target, 0).state == target
            else:
                with pytest.raises(InvalidTxnStateError):
                    metadata.to(target, 0)


# A model-based test: random producers' calls against a dict model of Kafka's documented answers, then a coordinator
# loaded from `__transaction_state` alone must describe every id as the live one does, and each data partition must
# hold one marker per completed transaction that included it.
IDS = ("a", "b")
OPERATIONS = st.lists(
    st.tuples(
        st.sampled_from(["init", "add", "commit", "abort", "stale_add", "timeout"]),
        st.sampled_from(IDS),
        st.sampled_from([0, 1]),
    ),
    max_size=25,
)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(OPERATIONS)
def test_random_calls_match_the_model_and_reload_to_the_same_state(
    tmp_path_factory: pytest.TempPathFactory, operations: list[tuple[str, str, int]]
) -> None:
    broker = InProcessBroker(tmp_path_factory.mktemp("model"), properties=PROPERTIES, clock=MockClock())
    try:
        broker.controller.create_topic(TOPIC, 2)
        coordinator = broker.transaction_coordinator
        # The model: per id, (producer id, epoch, state name, partitions); markers per partition.
        model: dict[str, tuple[int, int, str, frozenset[int]]] = {}
        expected_markers: dict[int, int] = {0: 0, 1: 0}
        for operation, transactional_id, partition in operations:
            known = model.get(transactional_id)
            if operation == "init":
                answer = coordinator.init_producer_id(transactional_id, TIMEOUT_MS)
                if known is not None and known[2] == "Ongoing":
                    assert answer.error == TxnError.CONCURRENT_TRANSACTIONS
                    for added in known[3]:
                        expected_markers[added] += 1
                    answer = coordinator.init_producer_id(transactional_id, TIMEOUT_MS)
                    assert answer.producer_epoch == known[1] + 2
                elif known is not None:
                    assert answer.producer_epoch == known[1] + 1
                assert answer.error == TxnError.NONE
                if known is not None:
                    assert answer.producer_id == known[0]
                model[transactional_id] = (answer.producer_id, answer.producer_epoch, "Empty", frozenset())
            elif known is None:
                unknown = coordinator.add_partitions(transactional_id, 1, 0, [(TOPIC, partition)])
                assert unknown == TxnError.INVALID_PRODUCER_ID_MAPPING
            elif operation == "add":
                assert coordinator.add_partitions(transactional_id, known[0], known[1], [(TOPIC, partition)]) == (
                    TxnError.NONE
                )
                model[transactional_id] = (known[0], known[1], "Ongoing", known[3] | {partition})
            elif operation == "stale_add":
                stale = coordinator.add_partitions(transactional_id, known[0], known[1] - 1, [(TOPIC, partition)])
                assert stale == TxnError.PRODUCER_FENCED
            elif operation in ("commit", "abort"):
                answer_code = coordinator.end_transaction(transactional_id, known[0], known[1], operation == "commit")
                if known[2] == "Ongoing":
                    assert answer_code == TxnError.NONE
                    for added in known[3]:
                        expected_markers[added] += 1
                    state = "CompleteCommit" if operation == "commit" else "CompleteAbort"
                    model[transactional_id] = (known[0], known[1], state, frozenset())
                elif known[2] == ("CompleteCommit" if operation == "commit" else "CompleteAbort"):
                    assert answer_code == TxnError.NONE
                else:
                    assert answer_code == TxnError.INVALID_TXN_STATE
            else:
                broker.clock.sleep(TIMEOUT_MS + 1)
                aborted = set(coordinator.abort_timed_out_transactions())
                assert aborted == {name for name, entry in model.items() if entry[2] == "Ongoing"}
                for name in aborted:
                    pid, epoch, _, added_partitions = model[name]
                    for added in added_partitions:
                        expected_markers[added] += 1
                    model[name] = (pid, epoch + 1, "CompleteAbort", frozenset())
        for transactional_id, (pid, epoch, state, added_partitions) in model.items():
            described = coordinator.describe(transactional_id)
            assert described is not None
            assert (described.producer_id, described.producer_epoch, described.state) == (pid, epoch, state)
            assert {p for _, p in described.partitions} == set(added_partitions)
        live = coordinator.list_transactions()
        broker.forget_transaction_coordinator()
        assert broker.transaction_coordinator.list_transactions() == live
        assert {partition: len(markers(broker, partition)) for partition in (0, 1)} == expected_markers
    finally:
        broker.close()


def test_dump_log_reads_the_state_segment_and_the_markers(
    broker: InProcessBroker, coordinator: TransactionCoordinator
) -> None:
    init = coordinator.init_producer_id(TXN_ID, TIMEOUT_MS)
    coordinator.add_partitions(TXN_ID, init.producer_id, init.producer_epoch, [(TOPIC, 0)])
    produce_transactional(broker, 0, init.producer_id, init.producer_epoch, 0)
    coordinator.end_transaction(TXN_ID, init.producer_id, init.producer_epoch, commit=False)
    partition = partition_for_transactional_id(TXN_ID, STATE_PARTITIONS)
    state_log = broker.leader(TRANSACTION_STATE_TOPIC, partition).log
    state_log.flush()
    info = classify(state_log.directory / "00000000000000000000.log")
    assert info is not None
    dump = FileDump(info, DumpOptions(print_data_log=True))
    lines = list(dump.text_lines())
    assert not dump.failed
    # The coordinator's claim (a tombstone of the empty transactional id), then Empty, Ongoing, PrepareAbort,
    # CompleteAbort: one uncompressed batch of one record each, CRCs valid.
    records = [line for line in lines if line.startswith("| offset:")]
    assert len(records) == 5 and all("isvalid: true" in line for line in lines if line.startswith("baseOffset"))
    assert "keySize: 4 valueSize: -1 sequence: 0" in records[0] and "sequence: 4" in records[4]
    data_log = broker.leader(TOPIC, 0).log
    data_log.flush()
    data_info = classify(data_log.directory / "00000000000000000000.log")
    assert data_info is not None
    data_lines = list(FileDump(data_info, DumpOptions(print_data_log=True)).text_lines())
    assert any("endTxnMarker: ABORT coordinatorEpoch: 0" in line for line in data_lines)
    txn_index = classify(data_log.directory / "00000000000000000000.txnindex")
    assert txn_index is not None
    index_lines = list(FileDump(txn_index).text_lines())
    assert any(f"producerId: {init.producer_id}" in line for line in index_lines), index_lines


# Three nodes, replication factor 3: followers answer an idle fetch within 50 ms, so acks=all waits stay short.
REPLICATED = {
    "transaction.state.log.num.partitions": "1",
    "offsets.topic.num.partitions": "1",
    "replica.fetch.wait.max.ms": "50",
    "replica.fetch.backoff.ms": "20",
}
REPLICATED_DEADLINE_S = 10.0
_T = TypeVar("_T")


@pytest.fixture
def three_nodes(tmp_path: Path) -> Iterator[InProcessBroker]:
    running = InProcessBroker(tmp_path, nodes=3, properties=REPLICATED)
    running.controller.create_topic(TOPIC, 2, replication_factor=3)
    try:
        yield running
    finally:
        running.close()


def replica_batches(broker: InProcessBroker, node: str, topic: str, partition: int) -> list[RecordBatch]:
    """Every batch of the replica on `node`, to its log end (a follower's too)."""
    log = broker.replica_on(node, topic, partition).log
    return list(iter_batches(bytes(log.read(0, 1 << 20, isolation="log_end").records)))


def replica_markers(broker: InProcessBroker, node: str, partition: int) -> list[tuple[ControlRecordType, int]]:
    """(type, coordinator epoch) of every marker of the replica of `orders-partition` on `node`."""
    found = []
    for batch in replica_batches(broker, node, TOPIC, partition):
        marker = batch.end_transaction_marker() if batch.is_control else None
        if marker is not None:
            found.append((marker.control_type, marker.coordinator_epoch))
    return found


def until_answered(attempt: Callable[[], _T]) -> list[_T | str]:
    """`attempt`'s answers until one is not retriable (a client's retries: NOT_COORDINATOR,
    COORDINATOR_NOT_AVAILABLE, or a retriable error raised, recorded by its name), at most
    `REPLICATED_DEADLINE_S`."""
    answers: list[_T | str] = []
    deadline = time.monotonic() + REPLICATED_DEADLINE_S
    while (
        not answers
        or answers[-1] in (TxnError.NOT_COORDINATOR, TxnError.COORDINATOR_NOT_AVAILABLE)
        or (isinstance(answers[-1], str))
    ):
        assert time.monotonic() < deadline, answers
        if answers:
            time.sleep(0.05)
        try:
            answers.append(attempt())
        except RaybrokerError as exc:
            assert exc.retriable, exc
            answers.append(type(exc).__name__)
    return answers


def test_states_and_markers_are_on_every_in_sync_replica_when_end_txn_answers(three_nodes: InProcessBroker) -> None:
    """Kafka's coordinator appends `__transaction_state` and its markers with acks=all: once EndTxn is answered,
    the followers hold the Prepare and Complete states and every marker, so the leader's loss loses none."""
    coordinator = three_nodes.transaction_coordinator
    init = coordinator.init_producer_id(TXN_ID, TIMEOUT_MS)
    pid, epoch = init.producer_id, init.producer_epoch
    assert coordinator.add_partitions(TXN_ID, pid, epoch, [(TOPIC, 0), (TOPIC, 1)]) == TxnError.NONE
    produce_transactional(three_nodes, 0, pid, epoch, 0)
    assert coordinator.end_transaction(TXN_ID, pid, epoch, commit=True) == TxnError.NONE
    states = three_nodes.controller.partition_state(TRANSACTION_STATE_TOPIC, 0)
    for node in states.replicas:
        statuses_there = [
            decode_transaction_log_value(record.value).transaction_status
            for batch in replica_batches(three_nodes, node, TRANSACTION_STATE_TOPIC, 0)
            for record in batch.records()
            if record.value is not None
        ]
        assert statuses_there == [0, 1, 2, 4], node
    for partition in (0, 1):
        for node in three_nodes.controller.partition_state(TOPIC, partition).replicas:
            assert replica_markers(three_nodes, node, partition) == [(ControlRecordType.COMMIT, 0)], (node, partition)


def test_a_lost_state_leader_makes_the_coordinator_load_from_the_new_one_and_mark_with_its_epoch(
    three_nodes: InProcessBroker,
) -> None:
    """The node leading `__transaction_state` is lost mid-transaction: the coordinator's next write fails
    retriably (NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE, as Kafka's on a moved partition) and drops the
    partition, the retry loads it from the new leader, and the commit's markers carry the new leader epoch as the
    coordinator epoch (Kafka's `onElection`); the transaction ends committed on every partition."""
    coordinator = three_nodes.transaction_coordinator
    init = coordinator.init_producer_id(TXN_ID, TIMEOUT_MS)
    pid, epoch = init.producer_id, init.producer_epoch
    assert coordinator.add_partitions(TXN_ID, pid, epoch, [(TOPIC, 0), (TOPIC, 1)]) == TxnError.NONE
    produce_transactional(three_nodes, 0, pid, epoch, 0)
    produce_transactional(three_nodes, 1, pid, epoch, 0)
    lost = three_nodes.controller.partition_state(TRANSACTION_STATE_TOPIC, 0).leader
    three_nodes.lose_node(lost)
    new_state = three_nodes.controller.partition_state(TRANSACTION_STATE_TOPIC, 0)
    assert new_state.leader != lost and new_state.leader_epoch == 1
    answers = until_answered(lambda: coordinator.end_transaction(TXN_ID, pid, epoch, commit=True))
    assert answers[-1] == TxnError.NONE and len(answers) >= 2, answers
    for partition in (0, 1):
        leader = three_nodes.controller.partition_state(TOPIC, partition).leader
        assert replica_markers(three_nodes, leader, partition) == [(ControlRecordType.COMMIT, 1)]
        log = three_nodes.leader(TOPIC, partition).log
        assert log.last_stable_offset == log.log_end_offset
    described = coordinator.describe(TXN_ID)
    assert described is not None and described.state == "CompleteCommit"


def test_a_marker_not_replicated_to_min_insync_replicas_keeps_the_transaction_prepared(
    three_nodes: InProcessBroker,
) -> None:
    """A partition whose ISR is below its `min.insync.replicas` refuses the marker (NOT_ENOUGH_REPLICAS, as Kafka's
    acks=-1 marker append): the transaction stays PrepareCommit, its id answers CONCURRENT_TRANSACTIONS, and the
    marker retries complete it once the replica is back in sync."""
    controller = three_nodes.controller
    controller.create_topic("strict", 1, {"min.insync.replicas": "3"}, replication_factor=3)
    coordinator = three_nodes.transaction_coordinator
    init = coordinator.init_producer_id(TXN_ID, TIMEOUT_MS)
    pid, epoch = init.producer_id, init.producer_epoch
    assert coordinator.add_partitions(TXN_ID, pid, epoch, [("strict", 0)]) == TxnError.NONE
    leaders = {controller.partition_state(topic, 0).leader for topic in ("strict", TRANSACTION_STATE_TOPIC)}
    follower = next(node for node in sorted(three_nodes.nodes) if node not in leaders)
    three_nodes.lose_node(follower)
    assert coordinator.end_transaction(TXN_ID, pid, epoch, commit=True) == TxnError.NONE
    assert statuses(three_nodes)[-1] == 2
    assert coordinator.add_partitions(TXN_ID, pid, epoch, [("strict", 0)]) == TxnError.CONCURRENT_TRANSACTIONS
    three_nodes.restart_node(follower)
    deadline = time.monotonic() + REPLICATED_DEADLINE_S
    while len(controller.partition_state("strict", 0).isr) < 3:
        assert time.monotonic() < deadline, "the returning replica never rejoined the ISR"
        time.sleep(0.02)
    assert coordinator.send_pending_markers() == 0
    assert statuses(three_nodes)[-1] == 4
    leader = controller.partition_state("strict", 0).leader
    markers_there = [
        batch.end_transaction_marker()
        for batch in replica_batches(three_nodes, leader, "strict", 0)
        if batch.is_control
    ]
    assert [marker.control_type for marker in markers_there if marker is not None] == [ControlRecordType.COMMIT]


class _Later:
    """A `completions` seam that keeps each completion until the test runs it."""

    def __init__(self) -> None:
        self.tasks: list[Callable[[], None]] = []

    def __call__(self, task: Callable[[], None]) -> None:
        self.tasks.append(task)

    def run(self) -> None:
        while self.tasks:
            self.tasks.pop(0)()


def coordinator_with(broker: InProcessBroker, completions: Callable[[Callable[[], None]], object]) -> Any:
    return TransactionCoordinator(
        broker.config.transaction_config,
        clock=broker.clock,
        controller=broker.controller,
        find_partition=lambda partition: broker.internal_partition(TRANSACTION_STATE_TOPIC, partition),
        allocate_producer_id=broker.controller.allocate_producer_id,
        allocate_coordinator_epoch=broker.controller.allocate_coordinator_epoch,
        markers=broker.markers,
        completions=completions,
        completion_wait_s=0.01,
    )


def answered_commit(broker: InProcessBroker) -> tuple[Any, _Later, int, int]:
    """A coordinator with a `completions` seam that holds its completions, and a one-partition transaction whose
    EndTxn (commit) it answered: (coordinator, the held completions, producer id, epoch)."""
    later = _Later()
    coordinator = coordinator_with(broker, later)
    init = coordinator.init_producer_id(TXN_ID, TIMEOUT_MS)
    pid, epoch = init.producer_id, init.producer_epoch
    assert coordinator.add_partitions(TXN_ID, pid, epoch, [(TOPIC, 0)]) == TxnError.NONE
    produce_transactional(broker, 0, pid, epoch, 0)
    assert coordinator.end_transaction(TXN_ID, pid, epoch, commit=True) == TxnError.NONE
    return coordinator, later, pid, epoch


def test_with_a_completions_seam_end_txn_answers_once_prepare_is_durable_and_the_id_waits_for_the_markers(
    broker: InProcessBroker,
) -> None:
    """Kafka's EndTxn answer: NONE once PrepareCommit is written, the markers and CompleteCommit after; meanwhile
    the id's calls answer CONCURRENT_TRANSACTIONS (once the short wait for the completion ran out)."""
    coordinator, later, pid, epoch = answered_commit(broker)
    assert statuses(broker)[-1] == 2 and markers(broker, 0) == [] and len(later.tasks) == 1
    assert coordinator.add_partitions(TXN_ID, pid, epoch, [(TOPIC, 1)]) == TxnError.CONCURRENT_TRANSACTIONS
    assert coordinator.end_transaction(TXN_ID, pid, epoch, commit=True) == TxnError.CONCURRENT_TRANSACTIONS
    assert coordinator.init_producer_id(TXN_ID, TIMEOUT_MS).error == TxnError.CONCURRENT_TRANSACTIONS
    assert coordinator.send_pending_markers() == 0 and markers(broker, 0) == []
    later.run()
    assert markers(broker, 0) == [(ControlRecordType.COMMIT, pid, epoch)] and statuses(broker)[-1] == 4
    assert coordinator.end_transaction(TXN_ID, pid, epoch, commit=True) == TxnError.NONE
    assert coordinator.add_partitions(TXN_ID, pid, epoch, [(TOPIC, 1)]) == TxnError.NONE


def test_a_call_arriving_while_the_completion_runs_waits_for_it_rather_than_answering_concurrent(
    broker: InProcessBroker,
) -> None:
    """The next transaction's AddPartitionsToTxn, sent as soon as the commit is answered, waits for the markers
    written on another thread (librdkafka would back off 20 ms on CONCURRENT_TRANSACTIONS)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        started = threading.Event()

        def slowly(task: Callable[[], None]) -> object:
            def run() -> None:
                started.set()
                time.sleep(0.005)
                task()

            return pool.submit(run)

        coordinator = coordinator_with(broker, slowly)
        init = coordinator.init_producer_id(TXN_ID, TIMEOUT_MS)
        pid, epoch = init.producer_id, init.producer_epoch
        for _ in range(3):
            assert coordinator.add_partitions(TXN_ID, pid, epoch, [(TOPIC, 0)]) == TxnError.NONE
            assert coordinator.end_transaction(TXN_ID, pid, epoch, commit=True) == TxnError.NONE
            assert started.wait(5)
            started.clear()
    assert statuses(broker) == [0, 1, 2, 4, 1, 2, 4, 1, 2, 4]


def test_a_coordinator_loading_from_a_leader_just_elected_loads_the_last_state_it_acknowledged(
    three_nodes: InProcessBroker,
) -> None:
    """The state leader is lost right after an Ongoing state was acknowledged: the new leader has it, though its
    followers learn that it is replicated only at their next fetch. A coordinator loading from it gets that state
    (while the new leader's high watermark lags its log end it is told COORDINATOR_LOAD_IN_PROGRESS, see
    `test_offsets_topic`, rather than load the state before): the transaction keeps both its partitions, and its
    commit marks both."""
    coordinator = three_nodes.transaction_coordinator
    init = coordinator.init_producer_id(TXN_ID, TIMEOUT_MS)
    pid, epoch = init.producer_id, init.producer_epoch
    assert coordinator.add_partitions(TXN_ID, pid, epoch, [(TOPIC, 0)]) == TxnError.NONE
    produce_transactional(three_nodes, 0, pid, epoch, 0)
    assert coordinator.add_partitions(TXN_ID, pid, epoch, [(TOPIC, 0), (TOPIC, 1)]) == TxnError.NONE
    three_nodes.lose_node(three_nodes.controller.partition_state(TRANSACTION_STATE_TOPIC, 0).leader)
    three_nodes.forget_transaction_coordinator()
    moved = three_nodes.transaction_coordinator
    described = until_answered(lambda: moved.describe(TXN_ID))[-1]
    assert isinstance(described, TransactionDescription)
    assert (described.state, described.partitions) == ("Ongoing", ((TOPIC, 0), (TOPIC, 1)))
    assert until_answered(lambda: moved.end_transaction(TXN_ID, pid, epoch, commit=True))[-1] == TxnError.NONE
    for partition in (0, 1):
        leader = three_nodes.controller.partition_state(TOPIC, partition).leader
        assert [kind for kind, _ in replica_markers(three_nodes, leader, partition)] == [ControlRecordType.COMMIT]


def test_a_coordinator_left_running_beside_its_successor_writes_nothing_after_the_successor_loaded(
    broker: InProcessBroker,
) -> None:
    """A coordinator paused after answering EndTxn (its markers and CompleteCommit still to write) while a successor
    loaded, completed the transaction and bumped the producer's epoch: when it resumes, its marker and its
    CompleteCommit are refused, so a later load finds the successor's state (the late CompleteCommit would roll the
    producer's epoch back), and the partition keeps only the successor's marker."""
    predecessor, later, pid, epoch = answered_commit(broker)
    assert len(later.tasks) == 1
    successor = broker.transaction_coordinator
    described = successor.describe(TXN_ID)
    assert described is not None and (described.state, described.producer_epoch) == ("CompleteCommit", epoch)
    assert successor.init_producer_id(TXN_ID, TIMEOUT_MS, pid, epoch).producer_epoch == epoch + 1
    assert successor.add_partitions(TXN_ID, pid, epoch + 1, [(TOPIC, 0)]) == TxnError.NONE
    produce_transactional(broker, 0, pid, epoch + 1, 0)
    written = state_records(broker)
    later.run()
    assert state_records(broker) == written
    assert markers(broker, 0) == [(ControlRecordType.COMMIT, pid, epoch)]
    # The predecessor's own calls answer NOT_COORDINATOR once it finds itself fenced: its state write is refused.
    assert predecessor.end_transaction(TXN_ID, pid, epoch, commit=True) in (
        TxnError.NOT_COORDINATOR,
        TxnError.PRODUCER_FENCED,
    )
    broker.forget_transaction_coordinator()
    reloaded = broker.transaction_coordinator.describe(TXN_ID)
    assert reloaded is not None and (reloaded.state, reloaded.producer_epoch) == ("Ongoing", epoch + 1)
    assert reloaded.partitions == ((TOPIC, 0),)


def test_every_coordinator_takes_a_newer_epoch_and_its_markers_carry_it(broker: InProcessBroker) -> None:
    """The controller's coordinator epochs never repeat and survive its restart, and a coordinator's markers carry
    the epoch it claimed its partition in, so each successor's markers fence its predecessors'."""
    first = broker.controller.allocate_coordinator_epoch(0)
    assert broker.controller.allocate_coordinator_epoch(0) == first + 1
    assert broker.controller.allocate_coordinator_epoch(first + 10) == first + 10
    coordinator = broker.transaction_coordinator
    init = coordinator.init_producer_id(TXN_ID, TIMEOUT_MS)
    assert coordinator.add_partitions(TXN_ID, init.producer_id, init.producer_epoch, [(TOPIC, 0)]) == TxnError.NONE
    produce_transactional(broker, 0, init.producer_id, init.producer_epoch, 0)
    assert coordinator.end_transaction(TXN_ID, init.producer_id, init.producer_epoch, commit=False) == TxnError.NONE
    (producer,) = broker.leader(TOPIC, 0).log.active_producers()
    assert producer.coordinator_epoch == first + 11
    with pytest.raises(InvalidRequestError):
        broker.controller.allocate_coordinator_epoch(-1)


# Transactions v2 (KIP-890 part 2, Kafka 4): partitions added by the brokers that take the batches, and every EndTxn
# bumping the producer's epoch.


def test_v2_partitions_join_implicitly_and_every_end_bumps_the_epoch_its_markers_carry(
    broker: InProcessBroker, coordinator: TransactionCoordinator
) -> None:
    init = coordinator.init_producer_id(TXN_ID, TIMEOUT_MS)
    pid, epoch = init.producer_id, init.producer_epoch
    added = coordinator.add_partitions_implicitly(TXN_ID, pid, epoch, [(TOPIC, 0), (TOPIC, 1)])
    assert added == {(TOPIC, 0): TxnError.NONE, (TOPIC, 1): TxnError.NONE}
    produce_transactional(broker, 0, pid, epoch, 0)
    produce_transactional(broker, 1, pid, epoch, 0)
    ended = coordinator.end_transaction_v2(TXN_ID, pid, epoch, commit=True)
    assert (ended.error, ended.producer_id, ended.producer_epoch) == (TxnError.NONE, pid, epoch + 1)
    assert markers(broker, 0) == markers(broker, 1) == [(ControlRecordType.COMMIT, pid, epoch + 1)]
    # The lost answer's retry gets the same epoch; the old epoch cannot act otherwise.
    retried = coordinator.end_transaction_v2(TXN_ID, pid, epoch, commit=True)
    assert (retried.error, retried.producer_epoch) == (TxnError.NONE, epoch + 1)
    assert coordinator.end_transaction_v2(TXN_ID, pid, epoch, commit=False).error == TxnError.INVALID_TXN_STATE
    stale = coordinator.add_partitions_implicitly(TXN_ID, pid, epoch, [(TOPIC, 0)])
    assert stale == {(TOPIC, 0): TxnError.PRODUCER_FENCED}
    # The next transaction, in the new epoch, from sequence 0; aborted.
    assert coordinator.add_partitions_implicitly(TXN_ID, pid, epoch + 1, [(TOPIC, 0)]) == {(TOPIC, 0): TxnError.NONE}
    produce_transactional(broker, 0, pid, epoch + 1, 0)
    aborted = coordinator.end_transaction_v2(TXN_ID, pid, epoch + 1, commit=False)
    assert (aborted.error, aborted.producer_epoch) == (TxnError.NONE, epoch + 2)
    assert markers(broker, 0)[-1] == (ControlRecordType.ABORT, pid, epoch + 2)
    log = broker.leader(TOPIC, 0).log
    assert log.last_stable_offset == log.log_end_offset
    values = [value for value in state_records(broker) if value is not None]
    assert [value.transaction_status for value in values] == [0, 1, 2, 4, 1, 3, 5]
    assert {value.client_transaction_version for value in values[1:]} == {2}


def test_v2_abort_without_a_transaction_bumps_the_epoch_and_commit_is_refused(
    broker: InProcessBroker, coordinator: TransactionCoordinator
) -> None:
    init = coordinator.init_producer_id(TXN_ID, TIMEOUT_MS)
    pid, epoch = init.producer_id, init.producer_epoch
    assert coordinator.end_transaction_v2(TXN_ID, pid, epoch, commit=True).error == TxnError.INVALID_TXN_STATE
    aborted = coordinator.end_transaction_v2(TXN_ID, pid, epoch, commit=False)
    assert (aborted.error, aborted.producer_epoch) == (TxnError.NONE, epoch + 1)
    assert statuses(broker)[-2:] == [3, 5]
    assert coordinator.end_transaction_v2(TXN_ID, pid + 1, epoch + 1, commit=False).error == (
        TxnError.INVALID_PRODUCER_ID_MAPPING
    )
    assert coordinator.end_transaction_v2("", pid, epoch, commit=False).error == TxnError.INVALID_REQUEST


def test_v2_an_epoch_running_out_moves_the_producer_to_a_new_id_which_a_reload_keeps(
    broker: InProcessBroker,
) -> None:
    broker.transaction_coordinator.ready()
    broker.forget_transaction_coordinator()
    now = broker.clock.milliseconds()
    value = TransactionLogValue(4242, 32765, TIMEOUT_MS, 1, ((TOPIC, 0),), now, now, client_transaction_version=2)
    write_state(broker, TXN_ID, encode_transaction_log_value(value))
    produce_transactional(broker, 0, 4242, 32765, 0)
    coordinator = broker.transaction_coordinator
    ended = coordinator.end_transaction_v2(TXN_ID, 4242, 32765, commit=True)
    assert ended.error == TxnError.NONE and ended.producer_id != 4242 and ended.producer_epoch == 0
    assert markers(broker, 0) == [(ControlRecordType.COMMIT, 4242, 32766)]
    complete = state_records(broker)[-1]
    assert complete is not None and (complete.producer_id, complete.producer_epoch) == (ended.producer_id, 0)
    assert complete.previous_producer_id == 4242
    # A coordinator loading that state still knows the lost answer's retry, and the new id goes on.
    broker.forget_transaction_coordinator()
    reloaded = broker.transaction_coordinator
    retried = reloaded.end_transaction_v2(TXN_ID, 4242, 32765, commit=True)
    assert (retried.error, retried.producer_id, retried.producer_epoch) == (TxnError.NONE, ended.producer_id, 0)
    assert reloaded.add_partitions_implicitly(TXN_ID, ended.producer_id, 0, [(TOPIC, 1)]) == {(TOPIC, 1): TxnError.NONE}
