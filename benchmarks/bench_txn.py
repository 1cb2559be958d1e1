"""Transactional produce over the Kafka protocol: the same confluent-kafka client against raybroker's listener and
against Apache Kafka, each beside the same client's idempotent produce into the same broker.

| figure              | what                                                  | baseline                              |
|---------------------|-------------------------------------------------------|---------------------------------------|
| `txn_produce`       | records/s, one transactional Producer into one        | Apache Kafka 3.9 (KRaft, one node on  |
|                     | partition, transactions of 1,000 100-byte records     | loopback), same client and records    |
|                     | (`begin_transaction`, 1,000 `produce`,                |                                       |
|                     | `commit_transaction`), `init_transactions` excluded   |                                       |
| `txn_vs_idempotent` | the same `txn_produce` figure of raybroker            | raybroker, the same client idempotent |
|                     |                                                       | (`enable.idempotence`, acks=all), the |
|                     |                                                       | same records, one flush at the end,   |
|                     |                                                       | its producer id acquired before the   |
|                     |                                                       | clock starts; Kafka's own ratio in    |
|                     |                                                       | the goal text                         |

A transaction costs the client two coordinator round trips on top of its records (AddPartitionsToTxn before the
first record, EndTxn, answered once PrepareCommit is durable) and the verification of its first Produce; the COMMIT
marker and CompleteCommit are written after EndTxn's answer, and the next transaction's AddPartitionsToTxn waits for
them if they are not done yet. With 1,000 records a transaction that is a few ms in each 1,000 records, and librdkafka
itself waits ~1 ms before it sends AddPartitionsToTxn (it registers a transaction's partitions on a 1 ms timer), so
no broker gets this client's transactions near its idempotent rate. The
listener runs in this process over the run's shared broker, with one `__transaction_state` partition (each is an
actor process); Kafka keeps its default of 50. Every client runs in a spawned process of its own, and the sides are
measured alternately, best of N.
"""

from __future__ import annotations

import os
import time
from functools import partial
from typing import Any

from benchmarks.bench_wire import create_topic
from benchmarks.common import BenchContext, Figure, throughput_figure
from benchmarks.kafka_broker import KAFKA_VERSION
from benchmarks.processes import CLIENT_TIMEOUT_S, QUIET, in_process
from benchmarks.side_by_side import beside_kafka

VALUE_BYTES = 100
TRANSACTION_RECORDS = 1_000
KAFKA_GOAL_RATIO = 1.0
# The local queue holds a whole run (see bench_wire): the figure is the broker's pace, not the queue's.
PRODUCER_QUEUE = {"queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 2_097_151}


def run(ctx: BenchContext) -> list[Figure]:
    with beside_kafka(ctx, {"num.partitions": "1", "transaction.state.log.num.partitions": "1"}) as targets:
        return _txn_produce(ctx, targets)


def _values(count: int) -> list[bytes]:
    block = os.urandom(4096 + VALUE_BYTES)
    return [block[i % 4096 : i % 4096 + VALUE_BYTES] for i in range(count)]


def _count(failures: list[Any], error: Any, _message: Any) -> None:
    """A delivery report (`functools.partial` over the run's list): keeps the errors."""
    if error is not None:
        failures.append(error)


def transactional_client(bootstrap: str, topic: str, transactions: int, transactional_id: str) -> float:
    """`transactions` transactions of `TRANSACTION_RECORDS` records each into partition 0; returns records/s from
    the first `begin_transaction` to the last commit's answer."""
    from confluent_kafka import Producer

    values = _values(TRANSACTION_RECORDS)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": transactional_id, **PRODUCER_QUEUE, **QUIET}
    )
    producer.init_transactions(CLIENT_TIMEOUT_S)
    failures: list[Any] = []
    report = partial(_count, failures)
    produce = producer.produce
    start = time.perf_counter()
    for _ in range(transactions):
        producer.begin_transaction()
        for value in values:
            produce(topic, value, partition=0, on_delivery=report)
        producer.commit_transaction(CLIENT_TIMEOUT_S)
    elapsed = time.perf_counter() - start
    if failures:
        raise RuntimeError(f"{len(failures)} records failed, the first with {failures[0]}")
    return transactions * TRANSACTION_RECORDS / elapsed


def idempotent_client(bootstrap: str, topic: str, count: int) -> float:
    """`count` records into partition 0 by an idempotent producer (acks=all), every one acknowledged; records/s.

    The clock starts once a first record, not counted, is acknowledged: the producer has its producer id then, as
    the transactional figure starts after `init_transactions`. The producer's start-up would otherwise be most of
    the run: its first acknowledgement comes 0.55-0.59 s after the first `produce` (5 of 6 runs measured; 0.21 s
    in one), and the 200,000 records 0.05-0.15 s after it."""
    from confluent_kafka import Producer

    values = _values(TRANSACTION_RECORDS)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, **PRODUCER_QUEUE, **QUIET})
    failures: list[Any] = []
    report = partial(_count, failures)
    produce = producer.produce
    produce(topic, values[0], partition=0, on_delivery=report)
    if producer.flush(CLIENT_TIMEOUT_S) or failures:
        raise RuntimeError(f"the warm-up record failed: {failures}")
    start = time.perf_counter()
    for index in range(count):
        produce(
            topic,
            values[index % TRANSACTION_RECORDS],
            partition=0,
            on_delivery=report,
        )
    remaining = producer.flush(CLIENT_TIMEOUT_S)
    elapsed = time.perf_counter() - start
    if remaining or failures:
        raise RuntimeError(f"{len(failures)} records failed, {remaining} unacknowledged")
    return count / elapsed


def _txn_produce(ctx: BenchContext, targets: dict[str, str]) -> list[Figure]:
    transactions = 20 if ctx.quick else 200
    repeats = 2 if ctx.quick else 3
    best = dict.fromkeys(targets, 0.0)
    idempotent = dict.fromkeys(targets, 0.0)
    for attempt in range(repeats):
        for name, bootstrap in targets.items():
            topic = create_topic(bootstrap, "txn")
            rate = in_process(transactional_client, bootstrap, topic, transactions, f"{topic}-producer")
            best[name] = max(best[name], rate)
            topic = create_topic(bootstrap, "idempotent")
            rate = in_process(idempotent_client, bootstrap, topic, transactions * TRANSACTION_RECORDS)
            idempotent[name] = max(idempotent[name], rate)
        ctx.progress(
            f"  txn_produce {attempt + 1}/{repeats}: {best['raybroker']:,.0f} vs Kafka {best['kafka']:,.0f} rec/s "
            f"(idempotent: raybroker {idempotent['raybroker']:,.0f}, Kafka {idempotent['kafka']:,.0f} rec/s)"
        )
    kafka_ratio = best["kafka"] / idempotent["kafka"]
    return [
        throughput_figure(
            "txn_produce",
            best["raybroker"],
            "rec/s",
            f"Apache Kafka {KAFKA_VERSION} transactional (same client)",
            best["kafka"],
            KAFKA_GOAL_RATIO,
            f"ratio >= {KAFKA_GOAL_RATIO:g}",
        ),
        throughput_figure(
            "txn_vs_idempotent",
            best["raybroker"],
            "rec/s",
            "raybroker, the same client idempotent",
            idempotent["raybroker"],
            kafka_ratio,
            f"ratio >= Apache Kafka's own transactional / idempotent ratio with the same client in this run, "
            f"{kafka_ratio:.2f} ({best['kafka']:,.0f} / {idempotent['kafka']:,.0f} rec/s)",
        ),
    ]
