"""Java kafka-clients (Apache Kafka's own client, 3.9) against the listener over the in-process broker: a
transactional `KafkaProducer` commits, aborts and commits again, a second producer of the same transactional id
fences the first (`ProducerFencedException` on its commit), and `KafkaConsumer`s at read_committed and
read_uncommitted read the partition from offset 0. The oracle is the list of what each transaction sent and how it
ended. The Java program is compiled with javac at test time against the jars of `benchmarks.kafka_broker`
(fetched from Maven Central once), so it needs a JDK and is marked `kafka`."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator

import pytest

from actors.core.in_process_broker import InProcessBroker
from benchmarks.kafka_broker import KafkaUnavailable, kafka_jars
from cluster.protocol.listener import KafkaListener
from cluster.protocol.views.group_view import GroupView
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from cluster.protocol.views.security_view import SecurityView
from cluster.protocol.views.transaction_view import TransactionView
from tests.cluster.protocol.helpers import start_broker
from tests.conftest import skip_or_fail

pytestmark = pytest.mark.kafka

TOPIC = "java-ledger"
PARTITIONS = 2
JAVA_TIMEOUT_S = 180
# What the program sends: (values, committed?) per transaction, in order; then the zombie's fenced transaction.
TRANSACTIONS = [(["c0", "c1", "c2", "c3"], True), (["a0", "a1", "a2", "a3"], False), (["c4", "c5", "c6"], True)]
ZOMBIE_VALUES = ["z0", "z1"]

JAVA_SOURCE = """
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.*;

/** Transactions as the Python test describes them; prints what each consumer read, one "level value" a line. */
public class JavaTransactions {
    static KafkaProducer<String, String> producer(String bootstrap, String id) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("transactional.id", id);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        KafkaProducer<String, String> producer = new KafkaProducer<>(p);
        producer.initTransactions();
        return producer;
    }

    static void send(KafkaProducer<String, String> producer, String topic, int partitions, String[] values) {
        for (int i = 0; i < values.length; i++) {
            producer.send(new ProducerRecord<>(topic, i % partitions, null, values[i]));
        }
        producer.flush();
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        KafkaProducer<String, String> producer = producer(bootstrap, "java-txn");
        for (int t = 3; t < args.length; t++) {
            String[] spec = args[t].split(":");
            producer.beginTransaction();
            send(producer, topic, partitions, spec[1].split(","));
            if (spec[0].equals("commit")) producer.commitTransaction(); else producer.abortTransaction();
        }
        producer.beginTransaction();
        send(producer, topic, partitions, new String[] {ZOMBIE});
        KafkaProducer<String, String> successor = producer(bootstrap, "java-txn");
        try {
            producer.commitTransaction();
            System.out.println("zombie committed");
        } catch (ProducerFencedException e) {
            System.out.println("zombie fenced");
        }
        producer.close();
        successor.close();
        for (String level : new String[] {"read_committed", "read_uncommitted"}) {
            Properties c = new Properties();
            c.put("bootstrap.servers", bootstrap);
            c.put("isolation.level", level);
            c.put("key.deserializer", StringDeserializer.class.getName());
            c.put("value.deserializer", StringDeserializer.class.getName());
            try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
                List<TopicPartition> assigned = new ArrayList<>();
                for (int p = 0; p < partitions; p++) assigned.add(new TopicPartition(topic, p));
                consumer.assign(assigned);
                consumer.seekToBeginning(assigned);
                Map<TopicPartition, Long> ends = consumer.endOffsets(assigned);
                long deadline = System.currentTimeMillis() + 30_000;
                while (System.currentTimeMillis() < deadline) {
                    for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                        System.out.println(level + " " + r.value());
                    }
                    boolean done = true;
                    for (TopicPartition tp : assigned) done &= consumer.position(tp) >= ends.get(tp);
                    if (done) break;
                }
            }
        }
    }
}
"""


@pytest.fixture(scope="module")
def java_classpath(tmp_path_factory: pytest.TempPathFactory) -> str:
    if shutil.which("javac") is None or shutil.which("java") is None:
        skip_or_fail("no JDK (javac, java) on this machine")
    try:
        jars = kafka_jars()
    except KafkaUnavailable as exc:
        skip_or_fail(f"Apache Kafka's jars are not available: {exc}")
    folder = tmp_path_factory.mktemp("java")
    source = folder / "JavaTransactions.java"
    source.write_text(JAVA_SOURCE.replace("ZOMBIE", ", ".join(f'"{value}"' for value in ZOMBIE_VALUES)))
    classpath = ":".join(str(jar) for jar in jars)
    subprocess.run(["javac", "-cp", classpath, "-d", str(folder), str(source)], check=True, timeout=JAVA_TIMEOUT_S)
    return f"{folder}:{classpath}"


@pytest.fixture(scope="module")
def listener(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaListener]:
    broker: InProcessBroker = start_broker(tmp_path_factory.mktemp("broker"), transaction_state_log_num_partitions="1")
    broker.controller.create_topic(TOPIC, PARTITIONS)
    try:
        with KafkaListener(
            {"listeners": "PLAINTEXT://127.0.0.1:0"},
            InProcessBrokerView(broker),
            SecurityView.in_process(broker.controller),
            groups=GroupView.in_process(broker),
            transactions=TransactionView.in_process(broker),
        ) as started:
            yield started
    finally:
        broker.close()


def test_java_transactions_are_read_by_java_consumers_as_kafka_reads_them(
    java_classpath: str, listener: KafkaListener
) -> None:
    specs = [f"{'commit' if commit else 'abort'}:{','.join(values)}" for values, commit in TRANSACTIONS]
    finished = subprocess.run(
        ["java", "-cp", java_classpath, "JavaTransactions", listener.bootstrap_servers, TOPIC, str(PARTITIONS), *specs],
        capture_output=True,
        text=True,
        timeout=JAVA_TIMEOUT_S,
    )
    assert finished.returncode == 0, finished.stderr[-3000:]
    lines = finished.stdout.splitlines()
    assert "zombie fenced" in lines
    read: dict[str, list[str]] = {"read_committed": [], "read_uncommitted": []}
    for line in lines:
        level, _, value = line.partition(" ")
        if level in read:
            read[level].append(value)
    committed = [value for values, commit in TRANSACTIONS if commit for value in values]
    everything = [value for values, _ in TRANSACTIONS for value in values] + ZOMBIE_VALUES
    assert sorted(read["read_committed"]) == sorted(committed)
    assert sorted(read["read_uncommitted"]) == sorted(everything)
