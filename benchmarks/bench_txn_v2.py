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

import os
import shutil
import subprocess
from pathlib import Path

from benchmarks.bench_wire import create_topic
from benchmarks.common import BenchContext, Figure, throughput_figure
from benchmarks.kafka_broker import KAFKA_4_VERSION, KafkaBroker, KafkaUnavailable, artifact_jars

JAVA_SOURCE = Path(__file__).parent / "java" / "TransactionalProducer.java"
MAIN_CLASS = "TransactionalProducer"
ARTIFACTS = [("org.apache.kafka", "kafka-clients", KAFKA_4_VERSION)]
HEAP = "-Xmx512m"
COMPILE_TIMEOUT_S = 180.0
RUN_TIMEOUT_S = 600.0
VALUE_BYTES = 100
TRANSACTION_RECORDS = 1_000
KAFKA_GOAL_RATIO = 1.0


def run(ctx: BenchContext) -> list[Figure]:
    from cluster.protocol.listener import start_listener

    ctx.environment.broker()
    classpath = _compile(ctx)
    ctx.progress(f"  starting Apache Kafka {KAFKA_4_VERSION} (fetched from Maven Central on the first run) ...")
    listener_properties = {
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "num.partitions": "1",
        "transaction.state.log.num.partitions": "1",
    }
    with KafkaBroker(version=KAFKA_4_VERSION) as kafka, start_listener(listener_properties) as ray:
        targets = {"raybroker": ray.bootstrap_servers, "kafka": kafka.bootstrap_servers}
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


def _compile(ctx: BenchContext) -> str:
    """The classpath of the program compiled into the run's scratch folder; `KafkaUnavailable` without a JDK,
    without the jars or when javac fails."""
    if shutil.which("javac") is None or shutil.which("java") is None:
        raise KafkaUnavailable("a JDK (javac and java) is needed to run Kafka's Java producer")
    jars = list(dict.fromkeys(str(jar) for group in ARTIFACTS for jar in artifact_jars(*group)))
    classes = ctx.scratch("txn-v2-classes")
    classpath = os.pathsep.join(jars)
    done = subprocess.run(
        ["javac", "-nowarn", "-cp", classpath, "-d", str(classes), str(JAVA_SOURCE)],
        capture_output=True,
        text=True,
        timeout=COMPILE_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise KafkaUnavailable(f"javac {JAVA_SOURCE.name} failed:\n{done.stderr[-2000:]}")
    return os.pathsep.join([str(classes), classpath])


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
