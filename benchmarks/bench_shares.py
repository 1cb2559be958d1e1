"""A share group (KIP-932) as a work queue: the same librdkafka share consumers (confluent-kafka's `ShareConsumer`)
against raybroker's listener and against Apache Kafka 4.2.

| figure          | what                                                          | baseline                           |
|-----------------|---------------------------------------------------------------|------------------------------------|
| `share_consume` | records/s that 4 share consumers of one group take from one   | Apache Kafka 4.2 (KRaft, one node  |
|                 | partition, each record acquired and accepted once: `RECORDS`  | on loopback), the same clients and |
|                 | records (100 B values; fewer with --quick) over the time from | workload                           |
|                 | the first record produced to the last one consumed (median of |                                    |
|                 | the runs)                                                     |                                    |

The consumers run implicit acknowledgement (each poll accepts what the one before returned), as threads of one
spawned process; the producer is a thread of the same process writing the records as fast as librdkafka takes them.
A share-partition starts at the end of its partition when its group first fetches (`share.auto.offset.reset`
latest), so before the timed records the producer writes warm-up records until every consumer took one (all four
are in the group and fetching). Both brokers use Kafka's defaults but for the share coordinator's state topic on
Kafka's single node (one replica); the sides are measured alternately.
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from typing import Any

from benchmarks.common import BenchContext, Figure, throughput_figure
from benchmarks.kafka_broker import KAFKA_4_VERSION
from benchmarks.processes import QUIET, in_process
from benchmarks.side_by_side import beside_kafka

CONSUMERS = 4
RECORDS = 200_000
QUICK_RECORDS = 20_000
VALUE = b"v" * 100
GOAL_RATIO = 1.0
DEADLINE_S = 180.0
# Kafka 4.2's share coordinator state topic on a single node.
KAFKA_SHARE_STATE = {
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
}


class _ShareWorker:
    """One share consumer thread counting what it took."""

    def __init__(self, bootstrap: str, topic: str, group: str, index: int) -> None:
        self.taken = 0
        self.warmed = False
        self.last_at = 0.0
        self.failure: BaseException | None = None
        self.stopping = threading.Event()
        self._args = (bootstrap, topic, group, index)
        self._thread = threading.Thread(target=self._run, name=f"share-consumer-{index}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from confluent_kafka import ShareConsumer

        bootstrap, topic, group, index = self._args
        consumer = ShareConsumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "client.id": f"share-{index}", **QUIET}
        )
        try:
            consumer.subscribe([topic])
            while not self.stopping.is_set():
                for record in consumer.poll(0.1):
                    if record.error() is not None:
                        continue
                    if record.value() == b"warmup":
                        self.warmed = True
                    else:
                        self.taken += 1
                        self.last_at = time.monotonic()
        except BaseException as exc:  # reported by the run
            self.failure = exc
        finally:
            consumer.close()

    def stop(self) -> None:
        self.stopping.set()
        self._thread.join(30)


def _wait(condition: Any, what: str, workers: list[_ShareWorker]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        failed = [worker.failure for worker in workers if worker.failure is not None]
        if failed:
            raise RuntimeError(f"a share consumer failed: {failed[0]!r}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not within {DEADLINE_S:g} s")
        time.sleep(0.01)


def consume_client(bootstrap: str, records: int) -> float:
    """One run (see the module docstring): records/s from the first timed record produced to the last consumed."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"bench-shares-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=30)[topic].result(timeout=60)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **QUIET})
    workers = [_ShareWorker(bootstrap, topic, f"{topic}-group", index) for index in range(CONSUMERS)]
    try:

        def warmed() -> bool:
            producer.produce(topic, b"warmup")
            producer.flush(30)
            return all(worker.warmed for worker in workers)

        _wait(warmed, "every consumer's warm-up record", workers)
        started = time.monotonic()
        for _ in range(records):
            while True:
                try:
                    producer.produce(topic, VALUE)
                    break
                except BufferError:
                    producer.poll(0.01)
        producer.flush(60)
        _wait(lambda: sum(worker.taken for worker in workers) >= records, "every record consumed", workers)
        taken = sum(worker.taken for worker in workers)
        if taken != records:
            raise RuntimeError(f"{taken} records consumed of {records}: a record was delivered twice")
        return records / (max(worker.last_at for worker in workers) - started)
    finally:
        for worker in workers:
            worker.stopping.set()
        for worker in workers:
            worker.stop()


def run(ctx: BenchContext) -> list[Figure]:
    records = QUICK_RECORDS if ctx.quick else RECORDS
    repeats = 1 if ctx.quick else 3
    with beside_kafka(ctx, {"num.partitions": "1"}, KAFKA_4_VERSION, KAFKA_SHARE_STATE) as targets:
        runs: dict[str, list[float]] = {name: [] for name in targets}
        for attempt in range(repeats):
            for name, bootstrap in targets.items():
                runs[name].append(in_process(consume_client, bootstrap, records))
            ctx.progress(
                f"  share_consume {attempt + 1}/{repeats}: {runs['raybroker'][-1]:,.0f} records/s vs Kafka "
                f"{runs['kafka'][-1]:,.0f}"
            )
    ours, theirs = statistics.median(runs["raybroker"]), statistics.median(runs["kafka"])
    return [
        throughput_figure(
            "share_consume",
            ours,
            "records/s",
            f"Apache Kafka {KAFKA_4_VERSION}, {CONSUMERS} share consumers (same clients)",
            theirs,
            GOAL_RATIO,
            f"ratio >= {GOAL_RATIO:g}; runs: raybroker {', '.join(f'{r:,.0f}' for r in runs['raybroker'])}, Kafka "
            f"{', '.join(f'{r:,.0f}' for r in runs['kafka'])} records/s",
        )
    ]
