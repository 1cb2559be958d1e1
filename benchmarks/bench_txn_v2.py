"""Transactional produce with transactions v2 (KIP-890 part 2): Kafka's own Java producer (kafka-clients 4.2, its
defaults) against raybroker's listener and against Apache Kafka 4.2, both finalizing `transaction.version` 2, so the
client adds no partition itself and every EndTxn bumps its epoch.

| figure           | what                                                   | baseline                               |
|------------------|--------------------------------------------------------|----------------------------------------|
| `txn_produce_v2` | records/s, one transactional Java producer into one    | Apache Kafka 4.2 (KRaft, one node on   |
|                  | partition, transactions of 1,000 100-byte records      | loopback), the same program and        |
|                  | (`beginTransaction`, 1,000 `send`,                     | records                                |
|                  | `commitTransaction`), `initTransactions` excluded      |                                        |

A transaction costs the client the EndTxn round trip (answered once PrepareCommit is durable, with the bumped epoch)
and the broker the coordinator's implicit add on the first Produce of each partition; the markers follow the answer.
The program runs in a JVM of its own (`java/TransactionalProducer.java`, compiled into the run's scratch folder); the
listener runs in this process over the run's shared broker with one `__transaction_state` partition; the sides are
measured alternately, best of N.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from benchmarks.bench_wire import create_topic
from benchmarks.common import BenchContext, Figure, throughput_figure
from benchmarks.java_build import compile_java
from benchmarks.kafka_broker import KAFKA_4_VERSION
from benchmarks.side_by_side import beside_kafka

JAVA_SOURCE = Path(__file__).parent / "java" / "TransactionalProducer.java"
MAIN_CLASS = "TransactionalProducer"
ARTIFACTS = [("org.apache.kafka", "kafka-clients", KAFKA_4_VERSION)]
HEAP = "-Xmx512m"
RUN_TIMEOUT_S = 600.0
VALUE_BYTES = 100
TRANSACTION_RECORDS = 1_000
KAFKA_GOAL_RATIO = 1.0


def run(ctx: BenchContext) -> list[Figure]:
    classpath = compile_java(ctx, JAVA_SOURCE, ARTIFACTS, "Kafka's Java producer")
    with beside_kafka(
        ctx, {"num.partitions": "1", "transaction.state.log.num.partitions": "1"}, KAFKA_4_VERSION
    ) as targets:
        transactions = 30 if ctx.quick else 200
        repeats = 1 if ctx.quick else 3
        best = dict.fromkeys(targets, 0.0)
        for attempt in range(repeats):
            for name, bootstrap in targets.items():
                best[name] = max(best[name], _produce(bootstrap, classpath, transactions))
            ctx.progress(
                f"  txn_produce_v2 {attempt + 1}/{repeats}: {best['raybroker']:,.0f} vs Kafka {best['kafka']:,.0f} "
                f"rec/s ({transactions} transactions)"
            )
    return [
        throughput_figure(
            "txn_produce_v2",
            best["raybroker"],
            "rec/s",
            f"Apache Kafka {KAFKA_4_VERSION}, kafka-clients {KAFKA_4_VERSION} on transactions v2 (same program)",
            best["kafka"],
            KAFKA_GOAL_RATIO,
            f"ratio >= {KAFKA_GOAL_RATIO:g}",
        )
    ]


def _produce(bootstrap: str, classpath: str, transactions: int) -> float:
    """One run of the program into a new topic; its records/s."""
    topic = create_topic(bootstrap, "txn-v2")
    arguments = [bootstrap, topic, f"{topic}-producer", str(transactions), str(TRANSACTION_RECORDS), str(VALUE_BYTES)]
    done = subprocess.run(
        ["java", HEAP, "-cp", classpath, MAIN_CLASS, *arguments],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    rates = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("RATE ")]
    if done.returncode != 0 or not rates:
        raise RuntimeError(f"{MAIN_CLASS} failed ({done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
    return float(rates[-1])
