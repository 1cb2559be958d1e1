"""KIP-860 (AlterPartitionReassignments v1, AllowReplicationFactorChange) as Kafka 4's own tool uses it: Kafka
4.2's kafka-reassign-partitions.sh `--execute --disallow-replication-factor-change` against two Apache Kafka 4.2
brokers and against a two-node raybroker (the in-process broker, a Kafka listener per node), the same plans in the
same order: a move to two replicas of a partition with one is refused with Kafka's error, and a move to the other
broker starts. The tool sends v1 only to a broker that
lists it in ApiVersions (else it fails before sending), so the answers also show raybroker announces v1. Each tool
run starts a JVM (~2 s); Kafka's two brokers start in ~10 s."""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.kafka_broker import KAFKA_4_VERSION
from cluster.protocol.listener import KafkaListener
from cluster.protocol.views.group_view import GroupView
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from cluster.protocol.views.security_view import SecurityView
from cluster.protocol.views.transaction_view import TransactionView
from tests.cluster.protocol.helpers import start_broker
from tests.cluster.protocol.kafka_tools import REASSIGN_PARTITIONS, printed_lines, run_kafka_tool

pytestmark = pytest.mark.kafka

DEADLINE_S = 30.0
QUIET = {"log_level": 0}
TOPIC = "rf"
# Each plan of the partition, as --execute --disallow-replication-factor-change is given them: H is the broker
# holding its one replica, O the other.
PLANS = {"one more replica": ["H", "O"], "moved": ["O"]}


@pytest.fixture
def raybroker(tmp_path: Path) -> Iterator[str]:
    """A two-node in-process raybroker, each node served by a Kafka listener of its own (node.id 1 and 2)."""
    broker = start_broker(tmp_path / "two", nodes=2)
    try:
        with contextlib.ExitStack() as listeners:
            bootstrap = []
            for index, node in enumerate(sorted(broker.nodes)):
                properties = {"listeners": "PLAINTEXT://127.0.0.1:0", "node.id": str(index + 1)}
                listener = listeners.enter_context(
                    KafkaListener(
                        properties,
                        InProcessBrokerView(broker, node),
                        SecurityView.in_process(broker.controller),
                        groups=GroupView.in_process(broker),
                        transactions=TransactionView.in_process(broker),
                    )
                )
                bootstrap.append(listener.bootstrap_servers)
            yield ",".join(bootstrap)
    finally:
        broker.close()


def answers(bootstrap: str, folder: Path) -> dict[str, tuple[int, list[str]]]:
    """Each plan of `PLANS` executed by Kafka 4.2's tool against `bootstrap`: its exit code and printed lines, the
    brokers' ids written H and O and the replica's log dir D."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(timeout=DEADLINE_S)
    # Metadata reaches each broker in its own time: the broker asked may not know the new partition yet.
    deadline = time.monotonic() + DEADLINE_S
    while not (metadata := admin.list_topics(TOPIC, timeout=DEADLINE_S)).topics[TOPIC].partitions:
        assert time.monotonic() < deadline, f"{TOPIC}'s partition never showed in Metadata"
        time.sleep(0.1)
    (holder,) = metadata.topics[TOPIC].partitions[0].replicas
    (other,) = [broker for broker in metadata.brokers if broker != holder]
    ids = {"H": holder, "O": other}
    names = {f"[{holder}]": "[H]", f"[{other}]": "[O]", f"[{holder},{other}]": "[H,O]"}
    found: dict[str, tuple[int, list[str]]] = {}
    for name, replicas in PLANS.items():
        plan = folder / f"{name}.json"
        partitions = [{"topic": TOPIC, "partition": 0, "replicas": [ids[replica] for replica in replicas]}]
        plan.write_text(json.dumps({"version": 1, "partitions": partitions}), encoding="utf-8")
        ran = run_kafka_tool(
            REASSIGN_PARTITIONS,
            bootstrap,
            "--execute",
            "--disallow-replication-factor-change",
            "--reassignment-json-file",
            str(plan),
            version=KAFKA_4_VERSION,
        )
        lines = []
        for line in printed_lines(ran):
            for written, name_written in names.items():
                line = line.replace(written, name_written)
            # Kafka 4's tool prints each replica's log dir (DescribeReplicaLogDirs), a path of each broker's own.
            lines.append(re.sub(r'"log_dirs":\["[^"]+"\]', '"log_dirs":["D"]', line))
        found[name] = (ran.returncode, lines)
    return found


def test_kafka4_reassign_partitions_without_replication_factor_change_agrees(
    kafka4: str, raybroker: str, tmp_path: Path
) -> None:
    oracle = answers(kafka4, tmp_path)
    assert oracle["one more replica"][0] == 1 and oracle["moved"][0] == 0, oracle
    assert "rf-0: The replication factor is changed from 1 to 2" in oracle["one more replica"][1], oracle
    ours = answers(raybroker, tmp_path)
    for step, answer in oracle.items():
        assert ours[step] == answer, (step, ours[step], answer)
