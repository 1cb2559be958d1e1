"""Ending a hanging transaction with either broker's tool on either broker: Apache Kafka's own kafka-transactions.sh
(`org.apache.kafka.tools.TransactionsCommand`, from the jars `benchmarks.kafka_broker` fetches) against raybroker's
listener over the in-process broker, and `raybroker transactions --abort --bootstrap-server` against Apache Kafka
3.9.1 and against the listener.

A hanging transaction is a transactional batch whose coordinator never heard of it, between two plain records: it
holds the partition's last stable offset at its own offset. On raybroker it is appended to the partition's leader
directly, as a late write would land (the listener itself refuses such a Produce, as Kafka does); on Kafka it is
produced over the wire while `transaction.partition.verification.enable` is off (a dynamic broker config, restored
right after). The oracle is the same outcome on both: `find-hanging` lists the same transaction, and after `abort`
the last stable offset reaches the high watermark and a read_committed consumer reads exactly the plain records.

The tests running Java take ~2 s per run of Kafka's tool (a JVM start); the fast ones drive `raybroker transactions`
over the listener alone.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode

from actors.core.in_process_broker import InProcessBroker
from cluster.cli.main import EXIT_DATA_ERROR, EXIT_OK, main
from cluster.protocol.client import WireClient
from cluster.protocol.listener import KafkaListener
from storage.records.record_batch import RecordBatchBuilder
from tests.cluster.protocol.helpers import confluent_consume_all, start_broker, start_local_listener
from tests.cluster.protocol.kafka_tools import TRANSACTIONS, run_kafka_tool

PRODUCE, LIST_OFFSETS, CREATE_TOPICS, INIT_PRODUCER_ID, INCREMENTAL_ALTER_CONFIGS = 0, 2, 19, 22, 44
BROKER_RESOURCE = 4
VERIFICATION = "transaction.partition.verification.enable"
DEADLINE_S = 30.0
RUN = uuid.uuid4().hex[:8]
# The hanging batch's timestamp, this far in the past: `find-hanging --max-transaction-timeout 0` lists the open
# transactions whose last timestamp is older than now.
HANGING_AGE_MS = 120_000
PLAIN = [b"plain-0", b"plain-1"]


def batch(value: bytes, producer_id: int = -1, *, timestamp_ms: int | None = None) -> bytes:
    """One record; transactional (epoch 0, sequence 0) when `producer_id` is given."""
    transactional = producer_id >= 0
    builder = RecordBatchBuilder(
        producer_id=producer_id,
        producer_epoch=0 if transactional else -1,
        base_sequence=0 if transactional else -1,
        is_transactional=transactional,
    )
    builder.append(None, value, timestamp=int(time.time() * 1000) if timestamp_ms is None else timestamp_ms)
    return builder.build()


# Answers to a produce that wrote nothing because the broker does not know yet that it leads the partition.
NOT_LEADER_YET = (ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available)


def hanging_batch(producer_id: int) -> bytes:
    return batch(b"hanging", producer_id, timestamp_ms=int(time.time() * 1000) - HANGING_AGE_MS)


def hang_on_raybroker(broker: InProcessBroker, topic: str) -> int:
    """The plain, hanging, plain records on a new one-partition topic; the hanging transaction's start offset."""
    broker.controller.create_topic(topic, 1)
    leader = broker.leader(topic, 0)
    leader.append(batch(PLAIN[0]))
    start = leader.append(hanging_batch(broker.controller.allocate_producer_id())).first_offset
    leader.append(batch(PLAIN[1]))
    return start


def hang_on_kafka(bootstrap: str, topic: str) -> int:
    """`hang_on_raybroker` on Kafka, over the wire (see the module docstring)."""
    with WireClient(bootstrap) as kafka:
        created = {"name": topic, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
        assert kafka.request(CREATE_TOPICS, 5, {"topics": [created], "timeout": 30000}).topics[0].error_code == 0
        producer_id = _producer_id(kafka)
        _produce(kafka, topic, None, batch(PLAIN[0]))
        _set_verification(kafka, "false")
        try:
            start = _produce(kafka, topic, f"ghost-{RUN}", hanging_batch(producer_id))
        finally:
            _set_verification(kafka, None)
        _produce(kafka, topic, None, batch(PLAIN[1]))
    return start


def _producer_id(kafka: WireClient) -> int:
    """An idempotent producer id (Kafka answers COORDINATOR_LOAD_IN_PROGRESS until its id block is there)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        found = kafka.request(INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout": 60000})
        if found.error_code == ErrorCode.none:
            producer_id: int = found.producer_id
            return producer_id
        assert time.monotonic() < deadline, found
        time.sleep(0.1)


def _produce(kafka: WireClient, topic: str, transactional_id: str | None, records: bytes) -> int:
    """The records' base offset. Kafka answers CreateTopics before its broker learns it leads the new partition, so
    a produce right after may be answered NOT_LEADER_OR_FOLLOWER or LEADER_NOT_AVAILABLE (nothing written), which
    clients retry; so does this."""
    values = {
        "transactional_id": transactional_id,
        "acks": -1,
        "timeout": 30000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
    }
    deadline = time.monotonic() + DEADLINE_S
    while True:
        answer = kafka.request(PRODUCE, 9, values).responses[0].partition_responses[0]
        if answer.error_code not in NOT_LEADER_YET or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert answer.error_code == ErrorCode.none, answer
    offset: int = answer.base_offset
    return offset


def _set_verification(kafka: WireClient, value: str | None) -> None:
    """Sets the cluster-wide `transaction.partition.verification.enable` (None: back to the default)."""
    operation = 0 if value is not None else 1  # SET, DELETE
    resource = {
        "resource_type": BROKER_RESOURCE,
        "resource_name": "",
        "configs": [{"name": VERIFICATION, "config_operation": operation, "value": value}],
    }
    answer = kafka.request(INCREMENTAL_ALTER_CONFIGS, 0, {"resources": [resource], "validate_only": False})
    assert answer.responses[0].error_code == ErrorCode.none, answer
    # Kafka applies a dynamic broker config when its metadata record reaches the broker, a moment later.
    time.sleep(0.5)


def outcome(bootstrap: str, topic: str) -> tuple[list[bytes], bool]:
    """What a read_committed consumer reads of the partition, and whether its last stable offset reached the high
    watermark (ListOffsets LATEST at read_committed and at read_uncommitted)."""
    committed, _ = confluent_consume_all(bootstrap, topic, 1, "read_committed", len(PLAIN))
    ends = []
    with WireClient(bootstrap) as client:
        for isolation in (1, 0):
            wanted = {
                "name": topic,
                "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}],
            }
            values = {"replica_id": -1, "isolation_level": isolation, "topics": [wanted]}
            ends.append(client.request(LIST_OFFSETS, 5, values).topics[0].partitions[0].offset)
    return [value for _, _, value in committed], ends[0] == ends[1]


def tool(bootstrap: str, *arguments: str) -> tuple[int, list[list[str]], str]:
    """Kafka's kafka-transactions.sh against `bootstrap`: its exit code, the rows of the table it printed (the
    header first), and its error output."""
    ran = run_kafka_tool(TRANSACTIONS, bootstrap, *arguments)
    rows = [line.split() for line in ran.stdout.splitlines() if line.strip()]
    return ran.returncode, rows, ran.stderr


def hanging_rows(rows: list[list[str]]) -> list[dict[str, str]]:
    """`find-hanging`'s rows by column, without what differs between brokers (producer id, timestamps)."""
    header, *found = rows
    kept = ("Topic", "Partition", "ProducerEpoch", "CoordinatorEpoch", "StartOffset")
    return [{name: value for name, value in zip(header, row, strict=True) if name in kept} for row in found]


@pytest.fixture(scope="module")
def in_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    running = start_broker(tmp_path_factory.mktemp("broker"), transaction_state_log_num_partitions="1")
    try:
        yield running
    finally:
        running.close()


@pytest.fixture(scope="module")
def listener(in_process: InProcessBroker) -> Iterator[KafkaListener]:
    with start_local_listener(in_process) as started:
        yield started


@pytest.mark.ray
@pytest.mark.kafka
def test_each_brokers_tool_aborts_a_hanging_transaction_on_the_other(
    kafka: str, in_process: InProcessBroker, listener: KafkaListener, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = f"hanging-{RUN}"
    ours, theirs = listener.bootstrap_servers, kafka
    start = hang_on_raybroker(in_process, topic)
    assert hang_on_kafka(theirs, topic) == start == 1
    # Kafka's tool finds the same hanging transaction on both brokers.
    found = {}
    for name, bootstrap in (("raybroker", ours), ("kafka", theirs)):
        code, rows, errors = tool(bootstrap, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0")
        assert code == 0, errors
        found[name] = hanging_rows(rows)
    expected = {"Topic": topic, "Partition": "0", "ProducerEpoch": "0", "CoordinatorEpoch": "-1", "StartOffset": "1"}
    assert found == {"raybroker": [expected], "kafka": [expected]}
    # Kafka's tool aborts it on raybroker; raybroker's on Kafka.
    code, _, errors = tool(ours, "abort", "--topic", topic, "--partition", "0", "--start-offset", str(start))
    assert code == 0, errors
    argv = ["transactions", "--abort", "--bootstrap-server", theirs, "--topic", topic, "--partition", "0"]
    assert main([*argv, "--start-offset", str(start)]) == EXIT_OK
    assert "Aborted the transaction of producer id" in capsys.readouterr().out
    assert outcome(ours, topic) == outcome(theirs, topic) == (PLAIN, True)
    # A second abort of the same start offset finds nothing on either.
    code, _, errors = tool(ours, "abort", "--topic", topic, "--partition", "0", "--start-offset", str(start))
    assert code == 1 and "Could not find any open transactions starting at offset 1" in errors
    assert main([*argv, "--start-offset", str(start)]) == EXIT_DATA_ERROR
    assert "no open transaction of" in capsys.readouterr().err


def test_raybroker_transactions_aborts_over_the_listener(
    in_process: InProcessBroker, listener: KafkaListener, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--bootstrap-server` on raybroker's own listener, without Ray: by start offset, then by producer id, epoch and
    coordinator epoch; refusals are one error line and exit 1."""
    topic = f"wire-abort-{RUN}"
    start = hang_on_raybroker(in_process, topic)
    leader = in_process.leader(topic, 0).log
    argv = ["transactions", "--abort", "--bootstrap-server", listener.bootstrap_servers, "--topic", topic]
    assert main([*argv, "--partition", "0", "--start-offset", str(start + 1)]) == EXIT_DATA_ERROR
    assert "open ones start at 1" in capsys.readouterr().err
    assert main([*argv, "--partition", "3", "--start-offset", str(start)]) == EXIT_DATA_ERROR
    assert "does not exist" in capsys.readouterr().err
    assert leader.last_stable_offset == start
    assert main([*argv, "--partition", "0", "--start-offset", str(start)]) == EXIT_OK
    assert leader.last_stable_offset == leader.high_watermark == 4
    # A second hanging transaction, named by its producer (coordinator epoch -1 is sent as 0, as Kafka's tool does).
    producer_id = in_process.controller.allocate_producer_id()
    second = in_process.leader(topic, 0).append(hanging_batch(producer_id)).first_offset
    named = ["--partition", "0", "--producer-id", str(producer_id), "--coordinator-epoch", "-1"]
    assert main([*argv, *named, "--producer-epoch", "0"]) == EXIT_OK
    assert "coordinator epoch 0" in capsys.readouterr().out
    assert leader.last_stable_offset == leader.high_watermark == second + 2
