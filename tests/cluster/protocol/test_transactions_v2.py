"""Transactions v2 (KIP-890 part 2) with Kafka's own client: a Java `kafka-clients` 4.2 transactional producer
(`java/TransactionsV2.java`, the client's defaults) against raybroker's listener over the in-process broker and
against Apache Kafka 4.2, both with `transaction.version` 2 finalized (a new cluster's default on both): transactions
writing to three partitions and committing a group offset, every third aborted, then read back at read_committed.

The oracle is the producer's own account of which transactions committed: both brokers must give the read_committed
consumer exactly the records of those, each once, and the group the offset of the last committed one; and the same
lines on both. raybroker's request metrics show the client spoke transactions v2 to it: Produce v12 or newer,
EndTxn v5, and neither AddPartitionsToTxn nor AddOffsetsToTxn (the brokers added the partitions)."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from actors.metrics.names import REQUESTS
from actors.metrics.recorder import MetricsRecorder
from cluster.protocol.client import WireClient
from cluster.protocol.listener import KafkaListener
from cluster.protocol.views.group_view import GroupView
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from cluster.protocol.views.security_view import SecurityView
from cluster.protocol.views.transaction_view import TransactionView
from tests.cluster.applications.java_programs import JavaProcess, java_classpath
from tests.cluster.protocol.helpers import COORDINATOR_RETRIED, TRANSACTION_KEY, coordinator_client, start_broker

pytestmark = pytest.mark.kafka

KAFKA_CLIENTS = ("org.apache.kafka", "kafka-clients", "4.2.2")
SOURCE = Path(__file__).parent / "java" / "TransactionsV2.java"
PARTITIONS = 3
TRANSACTIONS = 12
RUN_TIMEOUT_S = 180
INIT_PRODUCER_ID, END_TXN = 22, 26
# A coordinator still starting, or a transition still pending: the step is asked again.
RETRIED = {*COORDINATOR_RETRIED, ErrorCode.concurrent_transactions}


@pytest.fixture(scope="module")
def classpath(tmp_path_factory: pytest.TempPathFactory) -> str:
    return java_classpath([KAFKA_CLIENTS], {SOURCE.name: SOURCE.read_text()}, tmp_path_factory.mktemp("java"))


@pytest.fixture
def recorded(tmp_path: Path) -> Iterator[tuple[str, MetricsRecorder]]:
    """A raybroker listener over the in-process broker, recording its requests."""
    metrics = MetricsRecorder()
    broker = start_broker(tmp_path / "broker", metrics=metrics)
    try:
        with KafkaListener(
            {"listeners": "PLAINTEXT://127.0.0.1:0"},
            InProcessBrokerView(broker),
            SecurityView.in_process(broker.controller),
            metrics,
            groups=GroupView.in_process(broker),
            transactions=TransactionView.in_process(broker),
        ) as listener:
            yield listener.bootstrap_servers, metrics
    finally:
        broker.close()


def run_program(classpath: str, bootstrap: str, folder: Path) -> list[str]:
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"tv2-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[topic].result(timeout=60)
    arguments = [bootstrap, topic, str(PARTITIONS), f"{topic}-producer", f"{topic}-group", str(TRANSACTIONS)]
    program = JavaProcess(classpath, "TransactionsV2", arguments, folder / "program.log")
    try:
        code = program.wait(RUN_TIMEOUT_S)
    finally:
        program.stop()
    output = program.output()
    assert code == 0 and "DONE" in output, output[-4000:]
    return [
        line for line in output.splitlines() if line.split(" ", 1)[0] in ("COMMITTED", "ABORTED", "VALUE", "OFFSET")
    ]


def test_a_java_4_2_producer_speaks_transactions_v2_and_reads_back_as_on_kafka(
    classpath: str, recorded: tuple[str, MetricsRecorder], kafka4: str, tmp_path: Path
) -> None:
    bootstrap, metrics = recorded
    outputs = {}
    for name, servers in (("kafka", kafka4), ("raybroker", bootstrap)):
        (tmp_path / name).mkdir()
        outputs[name] = run_program(classpath, servers, tmp_path / name)
    for name, lines in outputs.items():
        committed = [int(line.split()[1]) for line in lines if line.startswith("COMMITTED")]
        assert committed == [i for i in range(TRANSACTIONS) if i % 3 != 2], name
        values = Counter(line.split()[1] for line in lines if line.startswith("VALUE"))
        assert values == Counter(f"t{i}-p{p}" for i in committed for p in range(PARTITIONS)), name
        assert [line for line in lines if line.startswith("OFFSET")] == [f"OFFSET 0 {committed[-1] + 1}"], name
    assert sorted(outputs["raybroker"]) == sorted(outputs["kafka"])
    requests = {labels[:2]: value for (spec, labels), value in metrics.snapshot().counters.items() if spec is REQUESTS}
    assert not [key for key in requests if key[0] in ("AddPartitionsToTxn", "AddOffsetsToTxn")], requests
    assert requests.get(("EndTxn", "5"), 0) == TRANSACTIONS, requests
    assert all(int(version) >= 12 for name, version in requests if name == "Produce"), requests
    assert requests.get(("TxnOffsetCommit", "5"), 0) == TRANSACTIONS, requests


def test_end_txn_v5_with_no_partition_answers_as_kafka(recorded: tuple[str, MetricsRecorder], kafka4: str) -> None:
    """EndTxn v5 of a transaction no batch reached (what Kafka's Java client sends when its EndTxn overtakes the
    batches, docs/clients.md): a commit is refused INVALID_TXN_STATE in Empty and CompleteAbort, an abort bumps the
    epoch, on both brokers."""
    bootstrap, _ = recorded
    answers = {name: end_txn_steps(servers) for name, servers in (("kafka", kafka4), ("raybroker", bootstrap))}
    assert answers["raybroker"] == answers["kafka"]
    assert answers["kafka"] == [
        (ErrorCode.invalid_txn_state, None),
        (ErrorCode.none, 1),
        (ErrorCode.invalid_txn_state, None),
        (ErrorCode.none, 2),
    ]


def end_txn_steps(bootstrap: str) -> list[tuple[ErrorCode, int | None]]:
    """Commit, abort, commit, abort with nothing sent: each answer's code and the epoch it gives (None for none)."""
    transactional_id = f"empty-{uuid.uuid4().hex[:8]}"
    with coordinator_client(bootstrap, transactional_id, TRANSACTION_KEY) as client:
        init = {
            "transactional_id": transactional_id,
            "transaction_timeout": 60000,
            "producer_id": -1,
            "producer_epoch": -1,
        }
        initialized = retried(client, INIT_PRODUCER_ID, 5, init)
        assert initialized.error_code == ErrorCode.none, initialized
        producer_id, epoch = initialized.producer_id, initialized.producer_epoch
        steps = []
        for commit in (True, False, True, False):
            values = {
                "transactional_id": transactional_id,
                "producer_id": producer_id,
                "producer_epoch": epoch,
                "committed": commit,
            }
            ended = retried(client, END_TXN, 5, values)
            if ended.error_code == ErrorCode.none:
                epoch = ended.producer_epoch
                steps.append((ended.error_code, epoch - initialized.producer_epoch))
            else:
                steps.append((ended.error_code, None))
        return steps


def retried(client: WireClient, api_key: int, version: int, values: dict[str, object]) -> Any:
    """The answer once its code is not one `RETRIED` names."""
    deadline = time.monotonic() + 30.0
    while True:
        answer = client.request(api_key, version, values)
        if answer.error_code not in RETRIED or time.monotonic() > deadline:
            return answer
        time.sleep(0.05)
