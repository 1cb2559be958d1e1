"""Real clients negotiate the topic-id versions against the listener over the in-process broker and read exactly
what was produced (the oracle: the values sent, per partition, in order).

- confluent-kafka (librdkafka 2.16): Metadata v12 and Fetch v16, topics by id; librdkafka keeps no fetch sessions.
- Apache Kafka's Java `kafka-clients` 3.9: its idempotent producer sends Produce v11, its consumer ListOffsets v9
  and Fetch v17 in an incremental fetch session (KIP-227) while the producer adds records to one partition at a time,
  so most answers carry one partition; its `FetchSessionHandler` logs (at DEBUG) the session it got and every
  incremental answer, and at INFO any answer it finds invalid (a partition outside its session, a session error).
  Kafka's own kafka-topics.sh (`TopicCommand`) then describes the topic with its id (through
  DescribeTopicPartitions). The Java program is compiled with javac at test time against the jars of
  `benchmarks.kafka_broker`, so that test needs a JDK and is marked `kafka`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from actors.core.in_process_broker import InProcessBroker
from actors.metrics.names import REQUESTS
from actors.metrics.recorder import MetricsRecorder
from benchmarks.kafka_broker import KafkaUnavailable, kafka_jars, kafka_tools_jar
from cluster.protocol.listener import KafkaListener
from cluster.protocol.views.group_view import GroupView
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from cluster.protocol.views.security_view import SecurityView
from cluster.protocol.views.transaction_view import TransactionView
from storage.kafka_uuid import uuid_text
from tests.cluster.protocol.helpers import confluent_consume_all, start_broker
from tests.conftest import skip_or_fail

PARTITIONS = 3
PYTHON_RECORDS = 30
# Rounds of the Java producer: each sends this many records to one partition, which the consumer then reads.
JAVA_ROUNDS = 6
JAVA_PER_ROUND = 5
JAVA_TIMEOUT_S = 180

JAVA_SOURCE = """
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;

/** Reads the topic from the start, then each round a producer sends to one partition; "p offset value" a line. */
public class JavaFetchSessions {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        int partitions = Integer.parseInt(args[2]), expected = Integer.parseInt(args[3]);
        int rounds = Integer.parseInt(args[4]), perRound = Integer.parseInt(args[5]);
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        c.put("fetch.max.wait.ms", "100");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p);
             KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
            List<TopicPartition> assigned = new ArrayList<>();
            for (int i = 0; i < partitions; i++) assigned.add(new TopicPartition(topic, i));
            consumer.assign(assigned);
            consumer.seekToBeginning(assigned);
            int read = 0;
            for (int round = 0; round <= rounds; round++) {
                if (round > 0) {
                    for (int i = 0; i < perRound; i++) {
                        producer.send(new ProducerRecord<>(topic, round % partitions, null, "j" + round + "-" + i));
                    }
                    producer.flush();
                    expected += perRound;
                }
                long deadline = System.currentTimeMillis() + 30_000;
                while (read < expected && System.currentTimeMillis() < deadline) {
                    for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(100))) {
                        System.out.println(r.partition() + " " + r.offset() + " " + r.value());
                        read++;
                    }
                }
            }
            // A few idle polls: incremental fetches whose answers carry no partition.
            for (int i = 0; i < 5; i++) consumer.poll(Duration.ofMillis(100));
        }
    }
}
"""

LOG4J_PROPERTIES = """
log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=%p %c{1} %m%n
log4j.logger.org.apache.kafka.clients.FetchSessionHandler=DEBUG
"""


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[KafkaListener, InProcessBroker, MetricsRecorder]]:
    metrics = MetricsRecorder()
    broker = start_broker(tmp_path)
    try:
        with KafkaListener(
            {"listeners": "PLAINTEXT://127.0.0.1:0"},
            InProcessBrokerView(broker),
            SecurityView.in_process(broker.controller),
            metrics,
            groups=GroupView.in_process(broker),
            transactions=TransactionView.in_process(broker),
        ) as listener:
            yield listener, broker, metrics
    finally:
        broker.close()


def produce_with_confluent(bootstrap: str, topic: str) -> dict[int, list[bytes]]:
    """PYTHON_RECORDS values round-robin over the partitions; what each partition got, in order."""
    producer = Producer({"bootstrap.servers": bootstrap})
    sent: dict[int, list[bytes]] = {partition: [] for partition in range(PARTITIONS)}
    for index in range(PYTHON_RECORDS):
        partition = index % PARTITIONS
        value = b"py-%d" % index
        producer.produce(topic, value, partition=partition)
        sent[partition].append(value)
    assert producer.flush(30) == 0
    return sent


def requests_of(metrics: MetricsRecorder, name: str, version: int) -> float:
    return metrics.value(REQUESTS, name, str(version))


def test_confluent_reads_every_partition_by_topic_id(
    served: tuple[KafkaListener, InProcessBroker, MetricsRecorder],
) -> None:
    listener, broker, metrics = served
    broker.controller.create_topic("by-id", PARTITIONS)
    sent = produce_with_confluent(listener.bootstrap_servers, "by-id")
    received, _ = confluent_consume_all(listener.bootstrap_servers, "by-id", PARTITIONS, "read_uncommitted", 30)
    assert {p: [value for q, _, value in sorted(received) if q == p] for p in range(PARTITIONS)} == sent
    assert requests_of(metrics, "Fetch", 16) > 0 and requests_of(metrics, "Metadata", 12) > 0
    assert all(requests_of(metrics, "Fetch", version) == 0 for version in range(4, 16))


@pytest.fixture(scope="module")
def java_classpath(tmp_path_factory: pytest.TempPathFactory) -> str:
    if shutil.which("javac") is None or shutil.which("java") is None:
        skip_or_fail("no JDK (javac, java) on this machine")
    try:
        jars = [*kafka_jars(), kafka_tools_jar()]
    except KafkaUnavailable as exc:
        skip_or_fail(f"Apache Kafka's jars are not available: {exc}")
    folder = tmp_path_factory.mktemp("java")
    source = folder / "JavaFetchSessions.java"
    source.write_text(JAVA_SOURCE)
    (folder / "log4j.properties").write_text(LOG4J_PROPERTIES)
    classpath = os.pathsep.join(str(jar) for jar in jars)
    subprocess.run(["javac", "-cp", classpath, "-d", str(folder), str(source)], check=True, timeout=JAVA_TIMEOUT_S)
    return f"{folder}{os.pathsep}{classpath}"


@pytest.mark.kafka
def test_the_java_consumer_reads_in_an_incremental_fetch_session_and_kafka_topics_shows_the_id(
    java_classpath: str, served: tuple[KafkaListener, InProcessBroker, MetricsRecorder]
) -> None:
    """~6 s: one JVM for the clients (~3 s to start and connect), one for kafka-topics.sh."""
    listener, broker, metrics = served
    topic_id = broker.controller.create_topic("sessions", PARTITIONS).topic_id
    sent = produce_with_confluent(listener.bootstrap_servers, "sessions")
    arguments = ["sessions", str(PARTITIONS), str(PYTHON_RECORDS), str(JAVA_ROUNDS), str(JAVA_PER_ROUND)]
    finished = subprocess.run(
        ["java", "-cp", java_classpath, "JavaFetchSessions", listener.bootstrap_servers, *arguments],
        capture_output=True,
        text=True,
        timeout=JAVA_TIMEOUT_S,
    )
    assert finished.returncode == 0, finished.stderr[-3000:]
    for round_ in range(1, JAVA_ROUNDS + 1):
        sent[round_ % PARTITIONS].extend(f"j{round_}-{i}".encode() for i in range(JAVA_PER_ROUND))
    read: dict[int, list[tuple[int, bytes]]] = {partition: [] for partition in range(PARTITIONS)}
    for line in finished.stdout.splitlines():
        partition, offset, value = line.split(" ", 2)
        read[int(partition)].append((int(offset), value.encode()))
    assert {p: [value for _, value in found] for p, found in read.items()} == sent
    assert all([offset for offset, _ in found] == list(range(len(found))) for found in read.values())

    log = finished.stderr
    assert "created a new incremental fetch session" in log, log[-3000:]
    incremental = re.findall(r"sent an incremental fetch response with throttleTimeMs = \d+ for session (\d+)", log)
    assert len(incremental) >= JAVA_ROUNDS, log[-3000:]
    assert "unable to process the fetch request" not in log and "invalid" not in log, log[-3000:]
    assert requests_of(metrics, "Fetch", 17) > len(incremental) - 1
    assert requests_of(metrics, "Produce", 11) > 0 and requests_of(metrics, "ListOffsets", 9) > 0

    described = subprocess.run(
        [
            "java",
            "-cp",
            java_classpath,
            "org.apache.kafka.tools.TopicCommand",
            "--bootstrap-server",
            listener.bootstrap_servers,
            "--describe",
            "--topic",
            "sessions",
        ],
        capture_output=True,
        text=True,
        timeout=JAVA_TIMEOUT_S,
    )
    assert described.returncode == 0, described.stderr[-3000:]
    assert f"Topic: sessions\tTopicId: {uuid_text(topic_id)}\tPartitionCount: {PARTITIONS}\t" in described.stdout
    # Kafka 3.7+'s Admin client describes topics with DescribeTopicPartitions where the broker serves it.
    assert requests_of(metrics, "DescribeTopicPartitions", 0) > 0
