"""Differential tests of the transaction APIs' error codes: the same hostile or edge request sequences, sent over raw
sockets (`cluster.protocol.client.WireClient`, kio's schemas) to Apache Kafka 3.9.1 and to raybroker's listener over
the in-process broker, must get the same error code at each step. Kafka is the oracle.

Each case builds its own transactional ids and groups (unique per run, so the session's Kafka can be shared), runs
its setup steps (which must succeed on both brokers) and returns the codes of its hostile steps by name; the test
compares the two dicts. The cases: a fenced epoch on each coordinator API and request version (PRODUCER_FENCED or
INVALID_PRODUCER_EPOCH), an unknown transactional id, a producer id that is not the id's, EndTxn with no
transaction, AddPartitionsToTxn naming an unknown topic or partition, transaction timeouts out of range,
TxnOffsetCommit with a bad generation or member or without AddOffsetsToTxn, transactional Produce to a partition
outside the transaction, requests while a transaction is held in PrepareCommit (CONCURRENT_TRANSACTIONS), and
garbage (a frame that does not decode, an unknown API key: the connection is closed, the listener carries on).

Holding PrepareCommit: the transaction holds a partition of a topic with `min.insync.replicas=2` and one replica.
Markers are appended with acks=all, so Kafka's coordinator cannot write that partition's marker and retries it
until the topic's `min.insync.replicas` drops to 1; until then the transaction stays in PrepareCommit.

`test_transaction_state_reloads_after_hostile_requests` then makes raybroker's coordinator load
`__transaction_state` again from its log: every transactional id comes back in the state it had, and a
transaction commits through the listener as before.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from actors.core.in_process_broker import InProcessBroker
from cluster.protocol.client import ConnectionClosedError, WireClient
from cluster.protocol.listener import KafkaListener
from storage.records.record_batch import RecordBatchBuilder
from tests.cluster.protocol.helpers import start_broker, start_local_listener

pytestmark = [pytest.mark.ray, pytest.mark.kafka]

PRODUCE, FIND_COORDINATOR, JOIN_GROUP, CREATE_TOPICS, INIT_PRODUCER_ID = 0, 10, 11, 19, 22
ADD_PARTITIONS, ADD_OFFSETS, END_TXN, TXN_OFFSET_COMMIT, INCREMENTAL_ALTER_CONFIGS = 24, 25, 26, 28, 44
DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 65, 66
TOPIC_RESOURCE = 2
# Codes a coordinator answers while it is elected or loading, or while a transition is pending: setup steps retry.
RETRIED = {
    ErrorCode.coordinator_not_available,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.not_coordinator,
    ErrorCode.concurrent_transactions,
}
DEADLINE_S = 30.0
TIMEOUT_MS = 60000
RUN = uuid.uuid4().hex[:8]
TOPIC = f"txn-errors-{RUN}"


PARTITIONS = 3


class Side:
    """One broker as the cases drive it: a connection, and the setup steps every case needs."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.client = WireClient(address, timeout_s=DEADLINE_S)

    def call(self, api_key: int, version: int, values: dict[str, Any]) -> Any:
        return self.client.request(api_key, version, values)

    def retried(self, api_key: int, version: int, values: dict[str, Any], code: Callable[[Any], ErrorCode]) -> Any:
        """The answer once its code is not one `RETRIED` names (a coordinator still starting, a pending transition)."""
        deadline = time.monotonic() + DEADLINE_S
        while True:
            response = self.call(api_key, version, values)
            if code(response) not in RETRIED:
                return response
            assert time.monotonic() < deadline, response
            time.sleep(0.05)

    def create_topic(self, name: str, partitions: int, configs: dict[str, str] | None = None) -> None:
        topic = {
            "name": name,
            "num_partitions": partitions,
            "replication_factor": 1,
            "assignments": [],
            "configs": [{"name": key, "value": value} for key, value in (configs or {}).items()],
        }
        response = self.call(CREATE_TOPICS, 5, {"topics": [topic], "timeout": 30000})
        assert response.topics[0].error_code in (ErrorCode.none, ErrorCode.topic_already_exists), response

    def set_topic_config(self, topic: str, key: str, value: str) -> None:
        resource = {
            "resource_type": TOPIC_RESOURCE,
            "resource_name": topic,
            "configs": [{"name": key, "config_operation": 0, "value": value}],
        }
        response = self.call(INCREMENTAL_ALTER_CONFIGS, 0, {"resources": [resource], "validate_only": False})
        assert response.responses[0].error_code == ErrorCode.none, response

    def find_transaction_coordinator(self, transactional_id: str) -> None:
        self.retried(FIND_COORDINATOR, 1, {"key": transactional_id, "key_type": 1}, lambda r: r.error_code)

    def init(self, transactional_id: str, version: int = 3) -> tuple[int, int]:
        self.find_transaction_coordinator(transactional_id)
        values = {"transactional_id": transactional_id, "transaction_timeout": TIMEOUT_MS}
        response = self.retried(INIT_PRODUCER_ID, version, values, lambda r: r.error_code)
        assert response.error_code == ErrorCode.none, response
        return response.producer_id, response.producer_epoch

    def add_partitions(
        self, transactional_id: str, producer: tuple[int, int], partitions: list[tuple[str, int]], version: int = 3
    ) -> dict[tuple[str, int], ErrorCode]:
        topics: dict[str, list[int]] = {}
        for topic, partition in partitions:
            topics.setdefault(topic, []).append(partition)
        values = {
            "v3_and_below_transactional_id": transactional_id,
            "v3_and_below_producer_id": producer[0],
            "v3_and_below_producer_epoch": producer[1],
            "v3_and_below_topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
        }
        response = self.call(ADD_PARTITIONS, version, values)
        return {
            (topic.name, result.partition_index): result.partition_error_code
            for topic in response.results_by_topic_v3_and_below
            for result in topic.results_by_partition
        }

    def add(self, transactional_id: str, producer: tuple[int, int], partitions: list[tuple[str, int]]) -> None:
        """AddPartitionsToTxn that must succeed (retried while a transition is pending)."""
        deadline = time.monotonic() + DEADLINE_S
        while True:
            codes = set(self.add_partitions(transactional_id, producer, partitions).values())
            if codes != {ErrorCode.concurrent_transactions}:
                assert codes == {ErrorCode.none}, codes
                return
            assert time.monotonic() < deadline
            time.sleep(0.05)

    def broker_add_partitions(
        self, version: int, batch: list[tuple[str, tuple[int, int], list[tuple[str, int]], bool]]
    ) -> tuple[ErrorCode, dict[tuple[int, str, int], ErrorCode]]:
        """A broker's AddPartitionsToTxn (v4+) of (transactional id, producer, partitions, verify_only)
        transactions, each id once: the top-level code and each partition's, keyed by the transaction's index in
        `batch` (Kafka answers the transactions in no particular order)."""
        transactions = []
        for transactional_id, producer, partitions, verify_only in batch:
            topics: dict[str, list[int]] = {}
            for topic, partition in partitions:
                topics.setdefault(topic, []).append(partition)
            transactions.append(
                {
                    "transactional_id": transactional_id,
                    "producer_id": producer[0],
                    "producer_epoch": producer[1],
                    "verify_only": verify_only,
                    "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
                }
            )
        response = self.call(ADD_PARTITIONS, version, {"transactions": transactions})
        index = {transactional_id: position for position, (transactional_id, _, _, _) in enumerate(batch)}
        return response.error_code, {
            (index[result.transactional_id], topic.name, partition.partition_index): partition.partition_error_code
            for result in response.results_by_transaction
            for topic in result.topic_results
            for partition in topic.results_by_partition
        }

    def end(self, transactional_id: str, producer: tuple[int, int], commit: bool, version: int = 3) -> ErrorCode:
        values = {
            "transactional_id": transactional_id,
            "producer_id": producer[0],
            "producer_epoch": producer[1],
            "committed": commit,
        }
        code: ErrorCode = self.call(END_TXN, version, values).error_code
        return code

    def add_offsets(self, transactional_id: str, producer: tuple[int, int], group: str, version: int = 3) -> ErrorCode:
        values = {
            "transactional_id": transactional_id,
            "producer_id": producer[0],
            "producer_epoch": producer[1],
            "group_id": group,
        }
        code: ErrorCode = self.call(ADD_OFFSETS, version, values).error_code
        return code

    def txn_offset_commit(
        self,
        transactional_id: str,
        producer: tuple[int, int],
        group: str,
        *,
        member_id: str = "",
        generation_id: int = -1,
        version: int = 3,
    ) -> ErrorCode:
        values = {
            "transactional_id": transactional_id,
            "group_id": group,
            "producer_id": producer[0],
            "producer_epoch": producer[1],
            "generation_id": generation_id,
            "member_id": member_id,
            "topics": [
                {"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 0, "committed_metadata": ""}]}
            ],
        }
        response = self.call(TXN_OFFSET_COMMIT, version, values)
        code: ErrorCode = response.topics[0].partitions[0].error_code
        return code

    def produce(
        self,
        transactional_id: str | None,
        producer: tuple[int, int],
        partition: int,
        *,
        transactional: bool = True,
        sequence: int = 0,
        version: int = 9,
    ) -> ErrorCode:
        builder = RecordBatchBuilder(
            producer_id=producer[0], producer_epoch=producer[1], base_sequence=sequence, is_transactional=transactional
        )
        builder.append(b"k", b"v", timestamp=int(time.time() * 1000))
        values = {
            "transactional_id": transactional_id,
            "acks": -1,
            "timeout": 30000,
            "topic_data": [{"name": TOPIC, "partition_data": [{"index": partition, "records": builder.build()}]}],
        }
        response = self.call(PRODUCE, version, values)
        code: ErrorCode = response.responses[0].partition_responses[0].error_code
        return code

    def describe_code(self, transactional_id: str) -> ErrorCode:
        """DescribeTransactions' code for an id with no transaction to show (kio cannot decode the -1 start time
        of an Empty one)."""
        response = self.call(DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [transactional_id]})
        code: ErrorCode = response.transaction_states[0].error_code
        return code

    def state(self, transactional_id: str, producer_id: int) -> str:
        """The id's transaction state, as ListTransactions lists it (filtered by its producer id)."""
        response = self.call(LIST_TRANSACTIONS, 0, {"state_filters": [], "producer_id_filters": [producer_id]})
        states = [
            found.transaction_state
            for found in response.transaction_states
            if found.transactional_id == transactional_id
        ]
        return states[0] if states else "absent"

    def wait_for_state(self, transactional_id: str, producer_id: int, state: str) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while self.state(transactional_id, producer_id) != state:
            assert time.monotonic() < deadline, self.state(transactional_id, producer_id)
            time.sleep(0.05)

    def join(self, group: str) -> tuple[str, int]:
        """A member of `group` (JoinGroup v5, the member id asked for first): its member id and generation."""
        values: dict[str, Any] = {
            "group_id": group,
            "session_timeout": 30000,
            "rebalance_timeout": 30000,
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}],
        }
        self.retried(FIND_COORDINATOR, 1, {"key": group, "key_type": 0}, lambda r: r.error_code)
        first = self.retried(JOIN_GROUP, 5, values, lambda r: r.error_code)
        if first.error_code == ErrorCode.member_id_required:
            first = self.retried(JOIN_GROUP, 5, {**values, "member_id": first.member_id}, lambda r: r.error_code)
        assert first.error_code == ErrorCode.none, first
        return first.member_id, first.generation_id


def ids(prefix: str) -> str:
    return f"{prefix}-{RUN}-{uuid.uuid4().hex[:6]}"


# --- the cases: each returns its hostile steps' codes by name ------------------------------------------------------

Codes = dict[str, Any]


def fenced_epoch(side: Side) -> Codes:
    """A producer fenced by a second InitProducerId of its id, on every coordinator API and version."""
    transactional_id = ids("fenced")
    old = side.init(transactional_id)
    new = side.init(transactional_id)
    codes: Codes = {"bumped": new[1] - old[1], "same_pid": new[0] == old[0]}
    for version in (0, 1, 2, 3):
        codes[f"add_partitions_v{version}"] = side.add_partitions(transactional_id, old, [(TOPIC, 0)], version)
        codes[f"add_offsets_v{version}"] = side.add_offsets(transactional_id, old, ids("group"), version)
        codes[f"end_txn_v{version}"] = side.end(transactional_id, old, True, version)
    for version in (3, 4):
        for name, epoch in (("stale", old[1]), ("no_epoch", -1)):
            values = {
                "transactional_id": transactional_id,
                "transaction_timeout": TIMEOUT_MS,
                "producer_id": old[0],
                "producer_epoch": epoch,
            }
            codes[f"init_resume_{name}_v{version}"] = side.call(INIT_PRODUCER_ID, version, values).error_code
    side.add(transactional_id, new, [(TOPIC, 1)])
    codes["produce_old_epoch"] = side.produce(transactional_id, old, 1)
    for version in (0, 4):
        codes[f"txn_offset_commit_v{version}"] = side.txn_offset_commit(
            transactional_id, old, ids("group"), version=version
        )
    codes["end_new"] = side.end(transactional_id, new, False)
    return codes


def unknown_transactional_id(side: Side) -> Codes:
    transactional_id = ids("unknown")
    side.find_transaction_coordinator(transactional_id)
    producer = (12345678, 0)
    return {
        "add_partitions": side.add_partitions(transactional_id, producer, [(TOPIC, 0)]),
        "add_offsets": side.add_offsets(transactional_id, producer, ids("group")),
        "end_txn": side.end(transactional_id, producer, True),
        "txn_offset_commit": side.txn_offset_commit(transactional_id, producer, ids("group")),
        "produce": side.produce(transactional_id, producer, 0),
        "describe": side.describe_code(transactional_id),
    }


def wrong_producer_id(side: Side) -> Codes:
    transactional_id = ids("mapping")
    producer_id, epoch = side.init(transactional_id)
    wrong = (producer_id + 1000, epoch)
    return {
        "add_partitions": side.add_partitions(transactional_id, wrong, [(TOPIC, 0)]),
        "add_offsets": side.add_offsets(transactional_id, wrong, ids("group")),
        "end_txn": side.end(transactional_id, wrong, False),
        "epoch_ahead": side.end(transactional_id, (producer_id, epoch + 1), False),
    }


def end_txn_without_transaction(side: Side) -> Codes:
    transactional_id = ids("empty")
    producer = side.init(transactional_id)
    codes: Codes = {
        "commit_empty": side.end(transactional_id, producer, True),
        "abort_empty": side.end(transactional_id, producer, False),
        "state_empty": side.state(transactional_id, producer[0]),
    }
    side.add(transactional_id, producer, [(TOPIC, 0)])
    codes["commit"] = side.end(transactional_id, producer, True)
    side.wait_for_state(transactional_id, producer[0], "CompleteCommit")
    codes["commit_again"] = side.end(transactional_id, producer, True)
    codes["abort_after_commit"] = side.end(transactional_id, producer, False)
    return codes


def unknown_topic_or_partition(side: Side) -> Codes:
    transactional_id = ids("topics")
    producer = side.init(transactional_id)
    return {
        "unknown_topic": side.add_partitions(transactional_id, producer, [(f"no-such-{RUN}", 0), (TOPIC, 0)]),
        "partition_out_of_range": side.add_partitions(transactional_id, producer, [(TOPIC, PARTITIONS), (TOPIC, 1)]),
        "negative_partition": side.add_partitions(transactional_id, producer, [(TOPIC, -1)]),
        "state_after": side.state(transactional_id, producer[0]),
    }


def transaction_timeouts(side: Side) -> Codes:
    transactional_id = ids("timeout")
    side.find_transaction_coordinator(transactional_id)
    codes: Codes = {}
    for name, timeout_ms in (("above_max", 900001), ("zero", 0), ("negative", -1), ("max", 900000)):
        values = {"transactional_id": transactional_id, "transaction_timeout": timeout_ms}
        codes[name] = side.retried(INIT_PRODUCER_ID, 3, values, lambda r: r.error_code).error_code
    codes["empty_id"] = side.call(INIT_PRODUCER_ID, 3, {"transactional_id": "", "transaction_timeout": 1000}).error_code
    return codes


def txn_offset_commit_group_checks(side: Side) -> Codes:
    transactional_id = ids("offsets")
    group = ids("group")
    producer = side.init(transactional_id)
    codes: Codes = {
        f"before_add_offsets_v{version}": side.txn_offset_commit(transactional_id, producer, group, version=version)
        for version in (0, 3, 4)
    }
    member, generation = side.join(group)
    codes["add_offsets"] = side.add_offsets(transactional_id, producer, group)
    codes["bad_generation"] = side.txn_offset_commit(
        transactional_id, producer, group, member_id=member, generation_id=generation + 7
    )
    codes["unknown_member"] = side.txn_offset_commit(
        transactional_id, producer, group, member_id="nobody", generation_id=generation
    )
    codes["no_member_info"] = side.txn_offset_commit(transactional_id, producer, group)
    codes["member_and_generation"] = side.txn_offset_commit(
        transactional_id, producer, group, member_id=member, generation_id=generation
    )
    codes["abort"] = side.end(transactional_id, producer, False)
    return codes


def produce_outside_transaction(side: Side) -> Codes:
    transactional_id = ids("produce")
    producer = side.init(transactional_id)
    codes: Codes = {"before_any_add": side.produce(transactional_id, producer, 0)}
    side.add(transactional_id, producer, [(TOPIC, 0)])
    codes["not_added_partition"] = side.produce(transactional_id, producer, 1)
    codes["added_partition"] = side.produce(transactional_id, producer, 0)
    codes["non_transactional_in_txn"] = side.produce(transactional_id, producer, 0, transactional=False, sequence=1)
    codes["no_transactional_id"] = side.produce(None, producer, 2)
    codes["abort"] = side.end(transactional_id, producer, False)
    return codes


def fencing_an_ongoing_transaction(side: Side) -> Codes:
    """InitProducerId while the id's transaction is Ongoing: the coordinator fences it (epoch bumped, abort started)
    and answers CONCURRENT_TRANSACTIONS until the abort is complete; the old producer is fenced from then on."""
    transactional_id = ids("ongoing")
    producer = side.init(transactional_id)
    side.add(transactional_id, producer, [(TOPIC, 2)])
    codes: Codes = {"produce": side.produce(transactional_id, producer, 2)}
    values = {"transactional_id": transactional_id, "transaction_timeout": TIMEOUT_MS}
    codes["init_while_ongoing"] = side.call(INIT_PRODUCER_ID, 3, values).error_code
    successor = side.init(transactional_id)
    codes["epoch_rise"] = successor[1] - producer[1]
    codes["state"] = side.state(transactional_id, successor[0])
    codes["old_add_partitions"] = side.add_partitions(transactional_id, producer, [(TOPIC, 2)])
    codes["old_end_txn"] = side.end(transactional_id, producer, True)
    codes["old_produce"] = side.produce(transactional_id, producer, 2, sequence=1)
    codes["successor_end_empty"] = side.end(transactional_id, successor, True)
    return codes


def brokers_add_partitions(side: Side) -> Codes:
    """AddPartitionsToTxn v4-5, the brokers' form, sent from a client connection (Kafka without an authorizer allows
    its CLUSTER_ACTION): verify_only answers without adding, verify_only=false adds."""
    ongoing, empty, fenced, mapped = ids("ongoing"), ids("empty"), ids("fenced"), ids("mapped")
    producers = {name: side.init(name) for name in (ongoing, empty, fenced, mapped)}
    side.add(ongoing, producers[ongoing], [(TOPIC, 0)])
    codes: Codes = {}
    for version in (4, 5):
        codes[f"verify_v{version}"] = side.broker_add_partitions(
            version,
            [
                (ongoing, producers[ongoing], [(TOPIC, 0), (TOPIC, 1)], True),
                (empty, producers[empty], [(TOPIC, 0)], True),
                (ids("nobody"), producers[empty], [(TOPIC, 0)], True),
                (fenced, (producers[fenced][0], producers[fenced][1] + 1), [(TOPIC, 1)], True),
                (mapped, (producers[mapped][0] + 1000, producers[mapped][1]), [(TOPIC, 2)], True),
            ],
        )
        codes[f"verify_unknown_topic_v{version}"] = side.broker_add_partitions(
            version, [(ongoing, producers[ongoing], [(TOPIC, 1), (f"no-such-{RUN}", 0)], True)]
        )
    codes["verify_empty_id"] = side.broker_add_partitions(5, [("", producers[empty], [(TOPIC, 0)], True)])
    codes["state_after_verify"] = side.state(empty, producers[empty][0])
    codes["add"] = side.broker_add_partitions(5, [(empty, producers[empty], [(TOPIC, 1)], False)])
    codes["state_after_add"] = side.state(empty, producers[empty][0])
    codes["verify_after_add"] = side.broker_add_partitions(4, [(empty, producers[empty], [(TOPIC, 1)], True)])
    codes["internal_topic_v3"] = side.add_partitions(ongoing, producers[ongoing], [("__consumer_offsets", 0)])
    codes["abort"] = [side.end(name, producers[name], False) for name in (ongoing, empty)]
    return codes


def garbage(side: Side) -> Codes:
    """Frames that are no request: each closes its connection, and the listener answers the next one."""
    codes: Codes = {}
    bodies = {
        "truncated_end_txn": b"\x00\x1a\x00\x03\x00\x00\x00\x07\x00\x04test\x00\x05abc",
        "unknown_api_key": b"\x27\x0f\x00\x00\x00\x00\x00\x07\x00\x04test",
        "short_header": b"\x00\x1a",
    }
    for name, payload in bodies.items():
        with WireClient(side.address, timeout_s=DEADLINE_S) as client:
            client.send_raw(payload)
            try:
                client.read_frame()
                codes[name] = "answered"
            except ConnectionClosedError:
                codes[name] = "closed"
    transactional_id = ids("garbage")
    side.find_transaction_coordinator(transactional_id)
    codes["end_txn_empty_id"] = side.end("", (1, 0), True)
    codes["add_partitions_empty_id"] = side.add_partitions("", (1, 0), [(TOPIC, 0)])
    codes["add_offsets_empty_group"] = side.add_offsets(transactional_id, (1, 0), "")
    codes["end_txn_negative_producer"] = side.end(transactional_id, (-5, -3), True)
    codes["describe_empty_id"] = side.describe_code("")
    codes["still_serving"] = side.describe_code(transactional_id)
    return codes


CASES = [
    fenced_epoch,
    unknown_transactional_id,
    wrong_producer_id,
    end_txn_without_transaction,
    unknown_topic_or_partition,
    transaction_timeouts,
    txn_offset_commit_group_checks,
    produce_outside_transaction,
    fencing_an_ongoing_transaction,
    brokers_add_partitions,
    garbage,
]


# --- fixtures and tests ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def in_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    running = start_broker(tmp_path_factory.mktemp("broker"), transaction_state_log_num_partitions="3")
    try:
        yield running
    finally:
        running.close()


@pytest.fixture(scope="module")
def listener(in_process: InProcessBroker) -> Iterator[KafkaListener]:
    with start_local_listener(in_process) as started:
        yield started


def prepared(address: str) -> Side:
    side = Side(address)
    side.create_topic(TOPIC, PARTITIONS)
    # The first group lookup creates `__consumer_offsets`; until it has a leader, group requests get NOT_COORDINATOR.
    side.retried(FIND_COORDINATOR, 1, {"key": ids("group"), "key_type": 0}, lambda r: r.error_code)
    return side


@pytest.fixture(scope="module")
def sides(kafka: str, listener: KafkaListener) -> Iterator[tuple[Side, Side]]:
    theirs, ours = prepared(kafka), prepared(listener.bootstrap_servers)
    try:
        yield theirs, ours
    finally:
        theirs.client.close()
        ours.client.close()


def _plain(codes: Codes) -> dict[str, Any]:
    """Codes by name, each `ErrorCode` as its name (a dict of them as sorted pairs), for readable diffs."""

    def plain(value: Any) -> Any:
        if isinstance(value, ErrorCode):
            return value.name
        if isinstance(value, dict):
            return sorted((str(key), plain(item)) for key, item in value.items())
        if isinstance(value, (list, tuple)):
            return [plain(item) for item in value]
        return value

    return {name: plain(value) for name, value in codes.items()}


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.__name__)
def test_raybroker_answers_as_kafka(sides: tuple[Side, Side], case: Callable[[Side], Codes]) -> None:
    theirs, ours = sides
    expected = _plain(case(theirs))
    assert _plain(case(ours)) == expected


def committed_by_a_producer(bootstrap: str, transactional_id: str) -> list[bytes]:
    """What a confluent-kafka transactional producer commits to partition 0 of `TOPIC`, read back at
    read_committed from the offset it was written at."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "log_level": 0})
    producer.init_transactions(DEADLINE_S)
    producer.begin_transaction()
    offsets: list[int] = []
    producer.produce(TOPIC, value=b"good", partition=0, on_delivery=lambda _, message: offsets.append(message.offset()))
    producer.commit_transaction(DEADLINE_S)
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": ids("reader"), "isolation.level": "read_committed", "log_level": 0}
    )
    try:
        consumer.assign([TopicPartition(TOPIC, 0, offsets[0])])
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                return [message.value()]
        return []
    finally:
        consumer.close()


def test_transaction_state_reloads_after_hostile_requests(
    sides: tuple[Side, Side], in_process: InProcessBroker
) -> None:
    theirs, ours = sides
    before = in_process.transaction_coordinator.list_transactions()
    assert {found.state for found in before} >= {"Empty", "CompleteCommit", "CompleteAbort"}
    # A new coordinator reads `__transaction_state` from its log start, as a restarted or moved one does.
    in_process.forget_transaction_coordinator()
    assert in_process.transaction_coordinator.list_transactions() == before
    assert committed_by_a_producer(ours.address, ids("good")) == [b"good"]
    assert committed_by_a_producer(theirs.address, ids("good")) == [b"good"]
