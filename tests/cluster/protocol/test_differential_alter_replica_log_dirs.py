"""AlterReplicaLogDirs against Apache Kafka 3.9.1, both brokers with two log dirs: Kafka's own tools move a written
partition into the other dir of its broker, and the two brokers are compared.

- `kafka-reassign-partitions.sh --execute` with a reassignment JSON that keeps the replica on its broker and names
  the other log dir (`log_dirs`), then `--verify` until the replica's move is complete: the same printed lines (the
  broker id and the dir's path written as placeholders).
- `kafka-log-dirs.sh --describe` afterwards: the replica in the new dir, none in the old one, not a future one, lag 0,
  and the same size on both brokers, equal to its size before the move and to its segment files on disk.
- The records read back identical to those written.
- AlterReplicaLogDirs v2 sent over a socket: a path that is not a log dir, a partition the topic does not have and a
  topic that does not exist, answered with the same codes (LOG_DIR_NOT_FOUND, UNKNOWN_TOPIC_OR_PARTITION: Kafka
  answers REPLICA_NOT_AVAILABLE only for a partition the cluster has on another broker).

raybroker runs on the session's Ray with its listener; Kafka is a broker of this module's own (the session's has one
log dir). Each run of a tool starts a JVM (~2 s); Kafka's start takes ~10 s.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema

from benchmarks.kafka_broker import KafkaBroker, KafkaUnavailable
from cluster.protocol.framing import decode_response, encode_request
from cluster.protocol.listener import KafkaListener
from cluster.protocol.messages import build
from tests.cluster.protocol.helpers import read_frame
from tests.cluster.protocol.kafka_tools import LOG_DIRS, REASSIGN_PARTITIONS, run_kafka_tool
from tests.conftest import skip_or_fail

pytestmark = [pytest.mark.ray, pytest.mark.kafka]

DEADLINE_S = 60.0
QUIET = {"log_level": 0}
TOPIC = "moved"
RECORDS = 200
ALTER_REPLICA_LOG_DIRS_KEY = 34


@pytest.fixture(scope="module")
def kafka_two_dirs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("kafka-dirs")
    broker = KafkaBroker({"log.dirs": f"{root / 'd0'},{root / 'd1'}"})
    try:
        broker.start()
    except KafkaUnavailable as exc:
        skip_or_fail(f"Apache Kafka is not available here: {exc}")
    try:
        yield broker.bootstrap_servers
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def raybroker(start_test_broker: Callable[..., tuple[Any, Any]]) -> Iterator[str]:
    start_test_broker(log_dirs_count=2)
    with KafkaListener({"listeners": "PLAINTEXT://127.0.0.1:0"}) as started:
        yield started.bootstrap_servers


def described(bootstrap: str) -> list[dict[str, Any]]:
    """kafka-log-dirs.sh --describe of `TOPIC`: every log dir of the broker with its replicas of the topic."""
    ran = run_kafka_tool(LOG_DIRS, bootstrap, "--describe", "--topic-list", TOPIC)
    assert ran.returncode == 0, ran.stderr[-2000:]
    (answer,) = [json.loads(line) for line in ran.stdout.splitlines() if line.startswith("{")]
    return [log_dir for broker in answer["brokers"] for log_dir in broker["logDirs"]]


def alter_codes(bootstrap: str, dirs: dict[str, dict[str, list[int]]]) -> dict[str, int]:
    """AlterReplicaLogDirs v2 over a socket: each partition's error code, as `topic-partition`."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    values = {
        "dirs": [
            {"path": path, "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]}
            for path, topics in dirs.items()
        ]
    }
    body = build(load_request_schema(ALTER_REPLICA_LOG_DIRS_KEY, 2), values)
    with socket.create_connection((host, int(port)), timeout=DEADLINE_S) as sock:
        sock.sendall(encode_request(ALTER_REPLICA_LOG_DIRS_KEY, 2, "differential", body))
        answer = decode_response(read_frame(sock), load_response_schema(ALTER_REPLICA_LOG_DIRS_KEY, 2))[1]
    return {
        f"{topic.topic_name}-{result.partition_index}": int(result.error_code)
        for topic in answer.results
        for result in topic.partitions
    }


def move_answers(bootstrap: str, folder: Path) -> dict[str, Any]:
    """The scenario of the module docstring on one broker."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(timeout=DEADLINE_S)
    (broker,) = admin.list_topics(timeout=DEADLINE_S).brokers
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "enable.idempotence": False, **QUIET})
    values = [b"record-%04d-" % index + b"x" * 100 for index in range(RECORDS)]
    for value in values:
        producer.produce(TOPIC, value=value, partition=0)
        producer.flush(DEADLINE_S)  # one batch per record: the same bytes on both brokers
    before = described(bootstrap)
    (source,) = [d for d in before if d["partitions"]]
    (target,) = [d["logDir"] for d in before if not d["partitions"]]
    (replica,) = source["partitions"]
    size_before = replica["size"]

    def normalized(text: str) -> list[str]:
        return [
            line.replace(target, "<target>")
            .replace(f"broker {broker}", "broker B")
            .replace(f'"replicas":[{broker}]', '"replicas":[B]')
            .replace(f"{TOPIC}-0-{broker}", f"{TOPIC}-0-B")
            .strip()
            for line in text.splitlines()
            if line.strip() and not line.startswith(("SLF4J", "log4j:", "\tat "))
        ]

    folder.mkdir(parents=True, exist_ok=True)
    plan = folder / "plan.json"
    partitions = [{"topic": TOPIC, "partition": 0, "replicas": [broker], "log_dirs": [target]}]
    plan.write_text(json.dumps({"version": 1, "partitions": partitions}), encoding="utf-8")
    executed = run_kafka_tool(REASSIGN_PARTITIONS, bootstrap, "--execute", "--reassignment-json-file", str(plan))
    deadline = time.monotonic() + DEADLINE_S
    while True:
        verified = run_kafka_tool(REASSIGN_PARTITIONS, bootstrap, "--verify", "--reassignment-json-file", str(plan))
        if "completed successfully" in verified.stdout or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    after = described(bootstrap)
    moved = {d["logDir"]: d["partitions"] for d in after}
    (moved_replica,) = moved[target]
    segments = sum(path.stat().st_size for path in (Path(target) / f"{TOPIC}-0").glob("*.log"))
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "reader", "auto.offset.reset": "earliest", **QUIET}
    )
    consumer.subscribe([TOPIC])
    read: list[bytes] = []
    while len(read) < RECORDS and time.monotonic() < deadline + DEADLINE_S:
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            read.append(message.value())
    consumer.close()
    return {
        "execute": (executed.returncode, normalized(f"{executed.stdout}\n{executed.stderr}")),
        "verify": (verified.returncode, normalized(f"{verified.stdout}\n{verified.stderr}")),
        "old dir": moved[source["logDir"]],
        "new dir": {key: value for key, value in moved_replica.items() if key != "size"},
        "size": (moved_replica["size"], size_before, segments),
        "records": read == values,
        "errors": alter_codes(
            bootstrap,
            {str(folder / "not-a-log-dir"): {TOPIC: [0]}, target: {TOPIC: [7], "never-made": [0]}},
        ),
    }


def test_kafka_reassign_partitions_moves_a_replica_between_log_dirs_as_kafka_does(
    kafka_two_dirs: str, raybroker: str, tmp_path: Path
) -> None:
    oracle = move_answers(kafka_two_dirs, tmp_path / "kafka")
    ours = move_answers(raybroker, tmp_path / "raybroker")
    assert oracle["execute"][0] == 0 and oracle["verify"][0] == 0, oracle
    assert "Reassignment of replica moved-0-B completed successfully." in oracle["verify"][1], oracle
    assert oracle["old dir"] == [] and oracle["records"], oracle
    assert oracle["new dir"] == {"partition": "moved-0", "offsetLag": 0, "isFuture": False}, oracle
    assert oracle["errors"] == {"moved-0": 57, "moved-7": 3, "never-made-0": 3}, oracle
    size, size_before, segments = oracle["size"]
    assert size == size_before == segments > 0, oracle
    for key in ("execute", "verify", "old dir", "new dir", "records", "errors", "size"):
        assert ours[key] == oracle[key], (key, ours[key], oracle[key])
