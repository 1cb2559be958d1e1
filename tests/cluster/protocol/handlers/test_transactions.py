"""The transaction APIs' handlers on the in-process broker, request by request and version by version, against
Kafka's documented answers (KafkaApis, TransactionCoordinator): hostile input (unknown ids, wrong producer ids and
epochs, transitions the state machine refuses, unknown topics, garbage) answers Kafka's error code and leaves
`__transaction_state` as it was; PRODUCER_FENCED only where the version knows it; a transactional Produce to a
partition not in the transaction is refused; TxnOffsetCommit's offsets are UNSTABLE for `require_stable` until the
COMMIT marker; WriteTxnMarkers writes markers and refuses an older epoch; DescribeTransactions and ListTransactions
show the coordinator's state."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from actors.core.controller.topic_metadata import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from actors.core.security.acl_bindings import AclOperation, ResourceType
from actors.core.transactions.transaction_coordinator import FENCING_ID
from cluster.protocol.handlers.group_offsets import OFFSET_FETCH_KEY, OffsetFetchHandler
from cluster.protocol.handlers.partition_counts import TOPIC_CACHE_MS
from cluster.protocol.handlers.produce import PRODUCE_KEY, ProduceHandler
from cluster.protocol.handlers.producer_id import INIT_PRODUCER_ID_KEY, InitProducerIdHandler
from cluster.protocol.handlers.transactions import (
    ADD_OFFSETS_TO_TXN_KEY,
    ADD_PARTITIONS_TO_TXN_KEY,
    DESCRIBE_PRODUCERS_KEY,
    DESCRIBE_TRANSACTIONS_KEY,
    END_TXN_KEY,
    LIST_TRANSACTIONS_KEY,
    TXN_OFFSET_COMMIT_KEY,
    WRITE_TXN_MARKERS_KEY,
    AddOffsetsToTxnHandler,
    AddPartitionsToTxnHandler,
    DescribeProducersHandler,
    DescribeTransactionsHandler,
    EndTxnHandler,
    ListTransactionsHandler,
    TxnOffsetCommitHandler,
    WriteTxnMarkersHandler,
)
from cluster.protocol.router import SERVED
from cluster.protocol.views.group_view import GroupView
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from cluster.protocol.views.security_view import SecurityView
from cluster.protocol.views.transaction_view import TransactionView
from storage.records.record_batch import RecordBatchBuilder, iter_batches
from storage.records.transaction_log import decode_transaction_log_key
from tests.cluster.protocol.handlers.test_authorization import access_with, acl, ask, on_cluster
from tests.cluster.protocol.helpers import answer, leader_log, run

TXN = "txn-1"
TOPIC = "t"


def versions(api_key: int) -> range:
    return range(SERVED[api_key].min_version, SERVED[api_key].max_version + 1)


@pytest.fixture
def transactions(view: InProcessBrokerView) -> TransactionView:
    run(view.create_topic(TOPIC, 2))
    return TransactionView.in_process(view.broker)


def init(view: InProcessBrokerView, transactions: TransactionView, transactional_id: str = TXN) -> tuple[int, int]:
    values = {
        "transactional_id": transactional_id,
        "transaction_timeout": 60_000,
        "producer_id": -1,
        "producer_epoch": -1,
    }
    found = answer(InitProducerIdHandler(view, transactions), INIT_PRODUCER_ID_KEY, 4, values)
    assert found.error_code == ErrorCode.none
    return found.producer_id, found.producer_epoch


def state_log(view: InProcessBrokerView) -> list[bytes]:
    """Every state record value of `__transaction_state`, in order (what hostile requests must leave unchanged); a
    coordinator's claim of a partition it loads (the tombstone of `FENCING_ID`) is no state."""
    return [
        bytes(record.value or b"")
        for partition in range(len(view.broker.controller.describe_topic(TRANSACTION_STATE_TOPIC).partitions))
        for batch in iter_batches(leader_log(view, TRANSACTION_STATE_TOPIC, partition).read(0, 1 << 20).records)
        for record in batch.records()
        if record.key is None or decode_transaction_log_key(record.key) != FENCING_ID
    ]


def add_partitions(
    view: InProcessBrokerView,
    transactions: TransactionView,
    producer: tuple[int, int],
    partitions: dict[str, list[int]],
    version: int = 3,
    transactional_id: str = TXN,
    access: Any = None,
) -> dict[tuple[str, int], ErrorCode]:
    values = {
        "v3_and_below_transactional_id": transactional_id,
        "v3_and_below_producer_id": producer[0],
        "v3_and_below_producer_epoch": producer[1],
        "v3_and_below_topics": [{"name": name, "partitions": ids} for name, ids in partitions.items()],
    }
    found = ask(AddPartitionsToTxnHandler(view, transactions, access), ADD_PARTITIONS_TO_TXN_KEY, values, version)
    return {
        (topic.name, result.partition_index): result.partition_error_code
        for topic in found.results_by_topic_v3_and_below
        for result in topic.results_by_partition
    }


def end_txn(transactions: TransactionView, producer: tuple[int, int], committed: bool, version: int = 3) -> ErrorCode:
    values = {
        "transactional_id": TXN,
        "producer_id": producer[0],
        "producer_epoch": producer[1],
        "committed": committed,
    }
    code: ErrorCode = answer(EndTxnHandler(transactions), END_TXN_KEY, version, values).error_code
    return code


@pytest.mark.parametrize("version", range(4))
def test_add_partitions_refuses_wrong_producers_by_version_and_writes_nothing(
    view: InProcessBrokerView, transactions: TransactionView, version: int
) -> None:
    pid, epoch = init(view, transactions)
    before = state_log(view)
    fenced = ErrorCode.producer_fenced if version >= 2 else ErrorCode.invalid_producer_epoch
    assert add_partitions(view, transactions, (pid, epoch + 1), {TOPIC: [0]}, version) == {(TOPIC, 0): fenced}
    assert add_partitions(view, transactions, (pid + 1, epoch), {TOPIC: [0]}, version) == {
        (TOPIC, 0): ErrorCode.invalid_producer_id_mapping
    }
    unknown = add_partitions(view, transactions, (pid, epoch), {TOPIC: [0]}, version, transactional_id="nobody")
    assert unknown == {(TOPIC, 0): ErrorCode.invalid_producer_id_mapping}
    # An unknown topic or partition fails itself and leaves the rest not attempted.
    assert add_partitions(view, transactions, (pid, epoch), {TOPIC: [0, 7], "missing": [0]}, version) == {
        (TOPIC, 0): ErrorCode.operation_not_attempted,
        (TOPIC, 7): ErrorCode.unknown_topic_or_partition,
        ("missing", 0): ErrorCode.unknown_topic_or_partition,
    }
    assert state_log(view) == before
    assert add_partitions(view, transactions, (pid, epoch), {TOPIC: [0, 1]}, version) == {
        (TOPIC, 0): ErrorCode.none,
        (TOPIC, 1): ErrorCode.none,
    }
    assert len(state_log(view)) == len(before) + 1


def broker_add_partitions(
    view: InProcessBrokerView,
    transactions: TransactionView,
    batch: list[tuple[str, tuple[int, int], dict[str, list[int]], bool]],
    version: int = 5,
    access: Any = None,
) -> tuple[ErrorCode, dict[tuple[str, str, int], ErrorCode]]:
    """A broker's AddPartitionsToTxn (v4+) of (transactional id, producer, partitions, verify_only) transactions:
    the top-level code and each (id, topic, partition)'s."""
    values = {
        "transactions": [
            {
                "transactional_id": transactional_id,
                "producer_id": producer[0],
                "producer_epoch": producer[1],
                "verify_only": verify_only,
                "topics": [{"name": name, "partitions": ids} for name, ids in partitions.items()],
            }
            for transactional_id, producer, partitions, verify_only in batch
        ]
    }
    found = ask(AddPartitionsToTxnHandler(view, transactions, access), ADD_PARTITIONS_TO_TXN_KEY, values, version)
    return found.error_code, {
        (result.transactional_id, topic.name, partition.partition_index): partition.partition_error_code
        for result in found.results_by_transaction
        for topic in result.topic_results
        for partition in topic.results_by_partition
    }


@pytest.mark.parametrize("version", [4, 5])
def test_a_brokers_add_partitions_verifies_without_adding(
    view: InProcessBrokerView, transactions: TransactionView, version: int
) -> None:
    pid, epoch = init(view, transactions)
    other = init(view, transactions, "txn-2")
    assert add_partitions(view, transactions, (pid, epoch), {TOPIC: [0]}) == {(TOPIC, 0): ErrorCode.none}
    before = state_log(view)
    verify = [
        (TXN, (pid, epoch), {TOPIC: [0, 1]}, True),
        ("txn-2", other, {TOPIC: [0]}, True),
        ("nobody", (pid, epoch), {TOPIC: [0]}, True),
        ("txn-2", (other[0], other[1] + 1), {TOPIC: [1]}, True),
    ]
    assert broker_add_partitions(view, transactions, verify, version) == (
        ErrorCode.none,
        {
            (TXN, TOPIC, 0): ErrorCode.none,
            (TXN, TOPIC, 1): ErrorCode.transaction_abortable,
            ("txn-2", TOPIC, 0): ErrorCode.transaction_abortable,
            ("nobody", TOPIC, 0): ErrorCode.invalid_producer_id_mapping,
            ("txn-2", TOPIC, 1): ErrorCode.producer_fenced,
        },
    )
    missing = [(TXN, (pid, epoch), {TOPIC: [1], "missing": [0]}, True)]
    assert broker_add_partitions(view, transactions, missing, version)[1] == {
        (TXN, TOPIC, 1): ErrorCode.operation_not_attempted,
        (TXN, "missing", 0): ErrorCode.unknown_topic_or_partition,
    }
    assert state_log(view) == before
    # Without verify_only the partitions are added, as a producer's v3 adds them.
    add = [("txn-2", other, {TOPIC: [1]}, False)]
    assert broker_add_partitions(view, transactions, add, version)[1] == {("txn-2", TOPIC, 1): ErrorCode.none}
    assert broker_add_partitions(view, transactions, [("txn-2", other, {TOPIC: [1]}, True)], version)[1] == {
        ("txn-2", TOPIC, 1): ErrorCode.none
    }
    assert len(state_log(view)) == len(before) + 1


def test_a_brokers_add_partitions_needs_cluster_action(
    view: InProcessBrokerView, transactions: TransactionView, security: SecurityView
) -> None:
    pid, epoch = init(view, transactions)
    batch = [(TXN, (pid, epoch), {TOPIC: [0]}, False)]
    producer_rights = access_with(
        security,
        acl(ResourceType.TOPIC, TOPIC, AclOperation.WRITE),
        acl(ResourceType.TRANSACTIONAL_ID, TXN, AclOperation.WRITE),
    )
    assert broker_add_partitions(view, transactions, batch, access=producer_rights) == (
        ErrorCode.cluster_authorization_failed,
        {},
    )
    broker_rights = access_with(security, on_cluster(AclOperation.CLUSTER_ACTION))
    assert broker_add_partitions(view, transactions, batch, access=broker_rights) == (
        ErrorCode.none,
        {(TXN, TOPIC, 0): ErrorCode.none},
    )


@pytest.mark.parametrize("version", versions(END_TXN_KEY))
def test_end_txn_answers_by_state_and_version(
    view: InProcessBrokerView, transactions: TransactionView, version: int
) -> None:
    pid, epoch = init(view, transactions)
    before = state_log(view)
    assert end_txn(transactions, (pid, epoch), committed=True, version=version) == ErrorCode.invalid_txn_state
    fenced = ErrorCode.producer_fenced if version >= 2 else ErrorCode.invalid_producer_epoch
    assert end_txn(transactions, (pid, epoch - 1), committed=True, version=version) == fenced
    assert end_txn(transactions, (pid + 9, epoch), committed=True, version=version) == (
        ErrorCode.invalid_producer_id_mapping
    )
    assert state_log(view) == before
    add_partitions(view, transactions, (pid, epoch), {TOPIC: [0]})
    assert end_txn(transactions, (pid, epoch), committed=False, version=version) == ErrorCode.none
    assert end_txn(transactions, (pid, epoch), committed=False, version=version) == ErrorCode.none
    assert end_txn(transactions, (pid, epoch), committed=True, version=version) == ErrorCode.invalid_txn_state


def transactional_batch(pid: int, epoch: int, sequence: int = 0) -> bytes:
    builder = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=sequence, is_transactional=True)
    builder.append(b"k", b"v", timestamp=1000)
    return builder.build()


def produce(
    view: InProcessBrokerView, transactions: TransactionView, records: bytes, partition: int, version: int = 9
) -> ErrorCode:
    return produce_partitions(view, transactions, {partition: records}, version)[partition]


def produce_partitions(
    view: InProcessBrokerView, transactions: TransactionView, records: dict[int, bytes], version: int = 9
) -> dict[int, ErrorCode]:
    """One Produce request of `TXN` carrying each partition's records; each partition's answer."""
    values = {
        "transactional_id": TXN,
        "acks": 1,
        "timeout": 1000,
        "topic_data": [
            {
                "name": TOPIC,
                "partition_data": [{"index": partition, "records": batch} for partition, batch in records.items()],
            }
        ],
    }
    found = answer(ProduceHandler(view, transactions), PRODUCE_KEY, version, values)
    return {part.index: part.error_code for part in found.responses[0].partition_responses}


def test_a_transactional_produce_to_a_partition_not_in_the_transaction_is_refused(
    view: InProcessBrokerView, transactions: TransactionView
) -> None:
    pid, epoch = init(view, transactions)
    add_partitions(view, transactions, (pid, epoch), {TOPIC: [0]})
    assert produce(view, transactions, transactional_batch(pid, epoch), 1) == ErrorCode.invalid_txn_state
    # Produce v11+ clients know TRANSACTION_ABORTABLE, which Kafka answers them instead.
    assert produce(view, transactions, transactional_batch(pid, epoch), 1, 11) == ErrorCode.transaction_abortable
    assert leader_log(view, TOPIC, 1).log_end_offset == 0
    assert produce(view, transactions, transactional_batch(pid, epoch - 1), 0) == ErrorCode.invalid_producer_epoch
    assert produce(view, transactions, transactional_batch(pid, epoch), 0) == ErrorCode.none
    assert produce(view, transactions, b"\x00" * 70, 0) == ErrorCode.corrupt_message
    assert leader_log(view, TOPIC, 0).log_end_offset == 1


def test_a_produce_request_is_verified_as_a_whole_and_answered_per_partition(
    view: InProcessBrokerView, transactions: TransactionView
) -> None:
    """One verification for all of a request's transactional partitions, as Kafka's broker sends one: a partition
    in the transaction is appended beside one that is not, and batches of two producers in one request are refused
    INVALID_PRODUCER_ID_MAPPING on every transactional partition, as Kafka refuses them."""
    pid, epoch = init(view, transactions)
    add_partitions(view, transactions, (pid, epoch), {TOPIC: [0]})
    first, second = transactional_batch(pid, epoch), transactional_batch(pid, epoch)
    assert produce_partitions(view, transactions, {0: first, 1: second}, 11) == {
        0: ErrorCode.none,
        1: ErrorCode.transaction_abortable,
    }
    assert [leader_log(view, TOPIC, partition).log_end_offset for partition in (0, 1)] == [1, 0]
    add_partitions(view, transactions, (pid, epoch), {TOPIC: [1]})
    mixed = {0: transactional_batch(pid, epoch, 1), 1: transactional_batch(pid + 1, 0)}
    assert produce_partitions(view, transactions, mixed) == dict.fromkeys(mixed, ErrorCode.invalid_producer_id_mapping)
    assert [leader_log(view, TOPIC, partition).log_end_offset for partition in (0, 1)] == [1, 0]
    assert produce_partitions(view, transactions, {0: mixed[0], 1: transactional_batch(pid, epoch)}) == {
        0: ErrorCode.none,
        1: ErrorCode.none,
    }


def test_txn_offset_commit_is_unstable_until_the_commit_marker(
    view: InProcessBrokerView, transactions: TransactionView, groups: GroupView
) -> None:
    pid, epoch = init(view, transactions)
    commit = {
        "transactional_id": TXN,
        "group_id": "g",
        "producer_id": pid,
        "producer_epoch": epoch,
        "generation_id": -1,
        "member_id": "",
        "group_instance_id": None,
        "topics": [
            {
                "name": TOPIC,
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": 7,
                        "committed_leader_epoch": -1,
                        "committed_metadata": None,
                    }
                ],
            }
        ],
    }
    # The topic's partition count is checked as AddPartitionsToTxn checks it: one question to the controller a second.
    counted = _CountedTopics(view)
    handler = TxnOffsetCommitHandler(counted, groups, transactions)  # type: ignore[arg-type]

    def commit_code() -> ErrorCode:
        code: ErrorCode = answer(handler, TXN_OFFSET_COMMIT_KEY, 3, commit).topics[0].partitions[0].error_code
        return code

    # Not added with AddOffsetsToTxn yet.
    assert commit_code() == ErrorCode.invalid_txn_state
    add_offsets = {"transactional_id": TXN, "producer_id": pid, "producer_epoch": epoch, "group_id": "g"}
    assert answer(AddOffsetsToTxnHandler(transactions, groups), ADD_OFFSETS_TO_TXN_KEY, 3, add_offsets).error_code == (
        ErrorCode.none
    )
    described = view.broker.transaction_coordinator.describe(TXN)
    partition = view.broker.group_coordinator.partition_for("g")
    assert described is not None and described.partitions == ((CONSUMER_OFFSETS_TOPIC, partition),)
    assert commit_code() == ErrorCode.none
    assert counted.calls == 1
    fetch = {"group_id": "g", "topics": [{"name": TOPIC, "partition_indexes": [0]}], "require_stable": True}

    def fetched(require_stable: bool) -> tuple[int, ErrorCode]:
        found = answer(
            OffsetFetchHandler(view, groups), OFFSET_FETCH_KEY, 7, {**fetch, "require_stable": require_stable}
        )
        part = found.topics[0].partitions[0]
        return part.committed_offset, part.error_code

    assert fetched(True) == (-1, ErrorCode.unstable_offset_commit)
    assert fetched(False) == (-1, ErrorCode.none)
    assert end_txn(transactions, (pid, epoch), committed=True) == ErrorCode.none
    assert fetched(True) == (7, ErrorCode.none)


def test_write_txn_markers_writes_each_marker_and_refuses_an_older_epoch(
    view: InProcessBrokerView, transactions: TransactionView
) -> None:
    def markers(pid: int, epoch: int, partitions: list[int]) -> list[ErrorCode]:
        values = {
            "markers": [
                {
                    "producer_id": pid,
                    "producer_epoch": epoch,
                    "transaction_result": True,
                    "coordinator_epoch": 0,
                    "topics": [{"name": TOPIC, "partition_indexes": partitions}],
                }
            ]
        }
        found = answer(WriteTxnMarkersHandler(transactions), WRITE_TXN_MARKERS_KEY, 1, values)
        return [part.error_code for part in found.markers[0].topics[0].partitions]

    leader_log(view, TOPIC, 0).append(transactional_batch(900, 3))
    assert markers(900, 3, [0, 9]) == [ErrorCode.none, ErrorCode.unknown_topic_or_partition]
    log = leader_log(view, TOPIC, 0)
    assert log.log_end_offset == 2 and log.last_stable_offset == 2
    assert markers(900, 2, [0]) == [ErrorCode.invalid_producer_epoch]
    assert log.log_end_offset == 2


def test_write_txn_markers_needs_cluster_action(
    view: InProcessBrokerView, transactions: TransactionView, security: SecurityView
) -> None:
    values = {
        "markers": [
            {
                "producer_id": 1,
                "producer_epoch": 0,
                "transaction_result": False,
                "coordinator_epoch": 0,
                "topics": [{"name": TOPIC, "partition_indexes": [0]}],
            }
        ]
    }
    found = ask(WriteTxnMarkersHandler(transactions, access_with(security)), WRITE_TXN_MARKERS_KEY, values, 1)
    assert found.markers[0].topics[0].partitions[0].error_code == ErrorCode.cluster_authorization_failed
    assert leader_log(view, TOPIC, 0).log_end_offset == 0


def test_transaction_apis_need_write_on_the_transactional_id(
    view: InProcessBrokerView, transactions: TransactionView, security: SecurityView
) -> None:
    pid, epoch = init(view, transactions)
    topic_only = access_with(security, acl(ResourceType.TOPIC, TOPIC, AclOperation.WRITE))
    assert add_partitions(view, transactions, (pid, epoch), {TOPIC: [0]}, access=topic_only) == {
        (TOPIC, 0): ErrorCode.transactional_id_authorization_failed
    }
    values = {"transactional_id": TXN, "producer_id": pid, "producer_epoch": epoch, "committed": True}
    refused = ask(EndTxnHandler(transactions, topic_only), END_TXN_KEY, values, 3)
    assert refused.error_code == ErrorCode.transactional_id_authorization_failed
    both = access_with(
        security,
        acl(ResourceType.TOPIC, TOPIC, AclOperation.WRITE),
        acl(ResourceType.TRANSACTIONAL_ID, TXN, AclOperation.WRITE),
    )
    assert add_partitions(view, transactions, (pid, epoch), {TOPIC: [0]}, access=both) == {(TOPIC, 0): ErrorCode.none}


def test_describe_and_list_transactions_show_the_coordinators_state(
    view: InProcessBrokerView, transactions: TransactionView
) -> None:
    pid, epoch = init(view, transactions)
    init(view, transactions, "idle")
    add_partitions(view, transactions, (pid, epoch), {TOPIC: [1, 0]})
    described = answer(
        DescribeTransactionsHandler(transactions), DESCRIBE_TRANSACTIONS_KEY, 0, {"transactional_ids": [TXN, "nope"]}
    )
    found, missing = described.transaction_states
    assert (found.error_code, found.transaction_state, found.producer_id, found.producer_epoch) == (
        ErrorCode.none,
        "Ongoing",
        pid,
        epoch,
    )
    assert [(topic.topic, sorted(topic.partitions)) for topic in found.topics] == [(TOPIC, [0, 1])]
    assert missing.error_code == ErrorCode.transactional_id_not_found
    for version in versions(LIST_TRANSACTIONS_KEY):
        values = {"state_filters": ["Ongoing", "Bogus"], "producer_id_filters": [], "duration_filter": -1}
        listed = answer(ListTransactionsHandler(transactions), LIST_TRANSACTIONS_KEY, version, values)
        assert list(listed.unknown_state_filters) == ["Bogus"]
        assert [(t.transactional_id, t.transaction_state) for t in listed.transaction_states] == [(TXN, "Ongoing")]
    everything = answer(
        ListTransactionsHandler(transactions),
        LIST_TRANSACTIONS_KEY,
        0,
        {"state_filters": [], "producer_id_filters": []},
    )
    assert sorted(t.transactional_id for t in everything.transaction_states) == ["idle", TXN]


def test_describe_producers_shows_each_partitions_open_transactions(
    view: InProcessBrokerView, transactions: TransactionView, security: SecurityView
) -> None:
    pid, epoch = init(view, transactions)
    assert add_partitions(view, transactions, (pid, epoch), {TOPIC: [1]}) == {(TOPIC, 1): ErrorCode.none}
    builder = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=0, is_transactional=True)
    builder.append(None, b"v", timestamp=1_700_000_000_000)
    view.broker.leader(TOPIC, 1).append(builder.build())
    values = {"topics": [{"name": TOPIC, "partition_indexes": [0, 1, 2]}, {"name": "", "partition_indexes": [0]}]}
    found = ask(DescribeProducersHandler(view), DESCRIBE_PRODUCERS_KEY, values, 0)
    answers = {
        (topic.name, partition.partition_index): (
            partition.error_code,
            [
                (p.producer_id, p.producer_epoch, p.last_sequence, p.last_timestamp, p.current_txn_start_offset)
                for p in partition.active_producers
            ],
        )
        for topic in found.topics
        for partition in topic.partitions
    }
    assert answers == {
        (TOPIC, 0): (ErrorCode.none, []),
        (TOPIC, 1): (ErrorCode.none, [(pid, epoch, 0, 1_700_000_000_000, 0)]),
        (TOPIC, 2): (ErrorCode.unknown_topic_or_partition, []),
        ("", 0): (ErrorCode.invalid_topic_exception, []),
    }
    refused = ask(DescribeProducersHandler(view, access_with(security)), DESCRIBE_PRODUCERS_KEY, values, 0)
    assert refused.topics[0].partitions[1].error_code == ErrorCode.topic_authorization_failed


class _CountedTopics:
    """`view` with its `topics` calls counted (each one asks the controller on Ray)."""

    def __init__(self, view: InProcessBrokerView) -> None:
        self._view = view
        self.calls = 0

    async def topics(self) -> Any:
        self.calls += 1
        return await self._view.topics()


def test_add_partitions_trusts_partition_counts_it_found_for_a_second_as_a_brokers_metadata_cache(
    view: InProcessBrokerView, transactions: TransactionView
) -> None:
    """Kafka's brokers check AddPartitionsToTxn's topics in their metadata cache; here a count found is trusted
    for `TOPIC_CACHE_MS`, and a partition above it, or the time passing, asks again."""
    from storage.clock import MockClock

    producer = init(view, transactions)
    counted, clock = _CountedTopics(view), MockClock()
    handler = AddPartitionsToTxnHandler(counted, transactions, clock=clock)  # type: ignore[arg-type]

    def add(partition: int) -> ErrorCode:
        values = {
            "v3_and_below_transactional_id": TXN,
            "v3_and_below_producer_id": producer[0],
            "v3_and_below_producer_epoch": producer[1],
            "v3_and_below_topics": [{"name": TOPIC, "partitions": [partition]}],
        }
        found = ask(handler, ADD_PARTITIONS_TO_TXN_KEY, values, 3)
        return found.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code

    assert (add(0), add(1), counted.calls) == (ErrorCode.none, ErrorCode.none, 1)
    assert (add(2), counted.calls) == (ErrorCode.unknown_topic_or_partition, 2)
    clock.sleep(TOPIC_CACHE_MS)
    assert (add(0), counted.calls) == (ErrorCode.none, 3)
