"""Writes `tests/fixtures/kafka/kafka-3.9.1__transactions/`: a partition that Apache Kafka 3.9.1 itself wrote
with transactional producers, shut down cleanly (`python -m tests.storage.kafka_transactions_fixture <out>`).

Apache Kafka runs from `benchmarks/kafka_broker.py` (KRaft, one node, on loopback); the producers are
confluent-kafka's (librdkafka) transactional and idempotent producers. Every batch is flushed on its own, so the
batch boundaries below are exact. Topic `txn` has one partition and `segment.bytes=1024`, so the log rolls every
few batches. The scenario, in order (`a`, `b`, `c` are transactional ids; `p` an idempotent producer):

1. `a` commits a-0, a-1;
2. `b` aborts b-0, b-1 (an ABORT with no other transaction open: its last stable offset is its marker + 1);
3. `a` opens a-2, `b` opens b-2, `a` writes a-3 and aborts (ABORT while `b` is open: last stable offset = b-2's
   offset), then `b` writes b-3 and commits;
4. `p` writes p-0, p-1 outside any transaction;
5. `b` writes b-4 .. b-33 in one transaction spanning several segments, and aborts (indexed in the marker's
   segment only);
6. `a` opens a-4; a second producer with transactional id `a` initialises: the coordinator fences the first and
   aborts a-4 with the bumped epoch; the new `a` then commits a-5;
7. `c` writes c-0, c-1 and is left open: the broker stops (SIGTERM, a clean shutdown) with that transaction
   open, so its producer snapshot carries `currentTxnFirstOffset`.

Copied: the `txn-0` folder, and the log dir's `.kafka_cleanshutdown`.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.kafka_broker import KafkaBroker

TOPIC = "txn"
STOP_TIMEOUT_S = 60.0
VALUE_BYTES = 100


def _producer(bootstrap: str, transactional_id: str | None) -> Producer:
    config = {"bootstrap.servers": bootstrap, "linger.ms": 0, "enable.idempotence": True, "log_level": 3}
    if transactional_id is not None:
        config["transactional.id"] = transactional_id
    producer = Producer(config)
    if transactional_id is not None:
        producer.init_transactions(30)
    return producer


def _send(producer: Producer, *values: str) -> None:
    """One batch per record: each is flushed before the next is produced."""
    for value in values:
        producer.produce(TOPIC, key=value.split("-")[0].encode(), value=value.encode().ljust(VALUE_BYTES, b"."))
        if producer.flush(30) != 0:
            raise RuntimeError(f"{value} was not acknowledged")


def write_scenario(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1, config={"segment.bytes": "1024"})])[TOPIC].result(30)
    a, b, c = (_producer(bootstrap, name) for name in ("a", "b", "c"))
    p = _producer(bootstrap, None)

    a.begin_transaction()
    _send(a, "a-0", "a-1")
    a.commit_transaction(30)

    b.begin_transaction()
    _send(b, "b-0", "b-1")
    b.abort_transaction(30)

    a.begin_transaction()
    b.begin_transaction()
    _send(a, "a-2")
    _send(b, "b-2")
    _send(a, "a-3")
    a.abort_transaction(30)
    _send(b, "b-3")
    b.commit_transaction(30)

    _send(p, "p-0", "p-1")

    b.begin_transaction()
    _send(b, *(f"b-{index}" for index in range(4, 34)))
    b.abort_transaction(30)

    a.begin_transaction()
    _send(a, "a-4")
    fenced_by = _producer(bootstrap, "a")
    fenced_by.begin_transaction()
    _send(fenced_by, "a-5")
    fenced_by.commit_transaction(30)

    c.begin_transaction()
    _send(c, "c-0", "c-1")


def main(out: Path) -> None:
    broker = KafkaBroker()
    broker.start()
    try:
        write_scenario(broker.bootstrap_servers)
        assert broker.pid is not None
        data = broker.nodes[0].folder / "data"
        os.kill(broker.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        marker = data / ".kafka_cleanshutdown"
        while not marker.exists():
            if time.monotonic() > deadline:
                raise RuntimeError("Kafka did not shut down cleanly")
            time.sleep(0.1)
        time.sleep(1.0)
        target = out / "kafka-3.9.1__transactions" / "data"
        shutil.rmtree(target.parent, ignore_errors=True)
        shutil.copytree(data / f"{TOPIC}-0", target / f"{TOPIC}-0")
        shutil.copy2(marker, target / marker.name)
    finally:
        broker.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
