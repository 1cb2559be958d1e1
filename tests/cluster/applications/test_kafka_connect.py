"""Kafka Connect's distributed worker (Apache Kafka 3.9.1's `connect-runtime` and `connect-file`, from Maven Central)
against raybroker and against Apache Kafka 3.9.1: the same scenario on each, and the two results compared exactly.

A distributed worker keeps all its state in Kafka: connector configs, source offsets and statuses in three compacted
topics it creates itself, sink progress as its sink tasks' consumer group offsets. The scenario runs one worker at a
time, always with the same worker.properties, and restarts it twice:

1. worker 1: through the REST API, a FileStreamSource connector copies the `BATCHES[0]` lines of a file into a topic
   (one partition) and a FileStreamSink connector copies the topic into a file. Once every line is in both and both
   connectors' offsets are committed, the worker is SIGKILLed: a crash with nothing left to commit, so the result
   does not depend on when the signal lands;
2. worker 2 must find both connectors and their offsets: `BATCHES[1]` more lines appended to the input reach the
   topic and the sink file, the earlier ones are not read again. Then SIGTERM, a clean stop that commits;
3. worker 3, the same with `BATCHES[2]` lines.

The oracle is the list of lines written: each exactly once and in order in the topic and in the sink file, the
configs as posted, the source offset at the input's size, the sink's committed offset at the topic's end, and the
three internal topics compacted with the partition counts of worker.properties. Each broker's run is one worker
sequence shared by the module's tests (a worker starts in ~5-10 s here); the last test compares the runs.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from benchmarks.kafka_broker import free_ports
from tests.cluster.applications.java_programs import JavaProcess, java_classpath

pytestmark = [pytest.mark.kafka, pytest.mark.ray]

CONNECT_VERSION = "3.9.1"
ARTIFACTS = [
    ("org.apache.kafka", "connect-runtime", CONNECT_VERSION),
    ("org.apache.kafka", "connect-file", CONNECT_VERSION),
    # connect-runtime ships slf4j's API only; without a binding the worker logs nothing, and a failed run needs its log.
    ("org.slf4j", "slf4j-reload4j", "1.7.36"),
]
LOG4J_PROPERTIES = """log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.org.reflections=ERROR
"""

TOPIC = "connect-lines"
SOURCE = "file-source"
SINK = "file-sink"
# Internal topics: name -> partitions as worker.properties asks (Connect's defaults are 1, 25 and 5).
CONFIG_TOPIC = "connect-configs"
OFFSET_TOPIC = "connect-offsets"
STATUS_TOPIC = "connect-statuses"
INTERNAL_PARTITIONS = {CONFIG_TOPIC: 1, OFFSET_TOPIC: 3, STATUS_TOPIC: 2}
# Lines appended to the input before each worker's turn: 3 workers, 3 batches.
BATCHES = [300, 200, 100]
WORKER_TIMEOUT_S = 60
REQUEST_TIMEOUT_S = 10
POLL_S = 0.25


def lines(start: int, count: int) -> list[str]:
    """Deterministic input lines, numbered from `start`, of varied lengths (the source's offset is a byte position)."""
    return [f"line-{n:05d} " + "x" * (n % 37) for n in range(start, start + count)]


def worker_properties(bootstrap_servers: str, rest_port: int) -> str:
    """One worker's properties: the internal topics at replication factor 1 (both brokers are single nodes), string
    converters so the topic holds the lines as they are, offsets committed every second, and group session timeouts
    of 6 s (Kafka's minimum) so that the SIGKILLed worker's group members leave quickly."""
    properties = {
        "bootstrap.servers": bootstrap_servers,
        "group.id": "connect-cluster",
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.storage.StringConverter",
        "config.storage.topic": CONFIG_TOPIC,
        "offset.storage.topic": OFFSET_TOPIC,
        "status.storage.topic": STATUS_TOPIC,
        "config.storage.replication.factor": "1",
        "offset.storage.replication.factor": "1",
        "status.storage.replication.factor": "1",
        "offset.storage.partitions": str(INTERNAL_PARTITIONS[OFFSET_TOPIC]),
        "status.storage.partitions": str(INTERNAL_PARTITIONS[STATUS_TOPIC]),
        "offset.flush.interval.ms": "1000",
        "listeners": f"http://127.0.0.1:{rest_port}",
        "session.timeout.ms": "6000",
        "heartbeat.interval.ms": "2000",
        "scheduled.rebalance.max.delay.ms": "0",
        "consumer.session.timeout.ms": "6000",
        "consumer.heartbeat.interval.ms": "2000",
        # The file connectors are on the classpath; no plugin path to scan.
        "plugin.discovery": "only_scan",
    }
    return "".join(f"{key}={value}\n" for key, value in properties.items())


@dataclass(frozen=True)
class ConnectRun:
    """What one broker's scenario left, with the run's folder written as `<folder>` so runs compare."""

    topic_values: list[str]
    sink_lines: list[str]
    # After each restart: the connectors the worker listed, and their configs.
    connectors: list[list[str]]
    configs: list[dict[str, dict[str, str]]]
    # At the end, from the REST API (KIP-875): the source's file position, the sink's committed topic offset.
    source_offsets: list[dict[str, Any]]
    sink_offsets: list[dict[str, Any]]
    # name -> (partitions, cleanup.policy)
    internal_topics: dict[str, tuple[int, str]]
    input_lines: list[str]
    input_size_bytes: int


class Worker:
    """A ConnectDistributed JVM and its REST API."""

    def __init__(self, classpath: str, properties_path: Path, rest_port: int, log_path: Path) -> None:
        self.url = f"http://127.0.0.1:{rest_port}"
        self.java = JavaProcess(
            classpath, "org.apache.kafka.connect.cli.ConnectDistributed", [str(properties_path)], log_path
        )

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")

    def wait_until(self, what: str, condition: Callable[[], bool]) -> None:
        deadline = time.monotonic() + WORKER_TIMEOUT_S
        while not condition():
            if self.java.process.poll() is not None:
                pytest.fail(
                    f"the Connect worker exited ({self.java.process.returncode}) waiting for {what}:\n{self.tail()}"
                )
            if time.monotonic() > deadline:
                pytest.fail(f"no {what} after {WORKER_TIMEOUT_S} s; the worker's log ends:\n{self.tail()}")
            time.sleep(POLL_S)

    def wait_healthy(self) -> None:
        """Until GET /health (KIP-1017) answers 200: the worker joined its group and read its config topic."""

        def healthy() -> bool:
            try:
                return self.request("GET", "/health")[0] == 200
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                return False

        self.wait_until("healthy worker", healthy)

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """The answer of a request that must succeed; retried while the worker rebalances (409) or forwards it."""
        answers: list[tuple[int, Any]] = []

        def succeeded() -> bool:
            answers.append(self.request(method, path, body))
            return answers[-1][0] < 300

        self.wait_until(f"success of {method} {path} (last answer {answers[-1:] or 'none'})", succeeded)
        return answers[-1][1]

    def offsets(self, connector: str, field: str) -> list[int]:
        """The connector's committed offsets (GET /connectors/NAME/offsets, KIP-875), their `field` only."""
        return [entry["offset"][field] for entry in self.call("GET", f"/connectors/{connector}/offsets")["offsets"]]

    def tail(self) -> str:
        return "\n".join(self.java.output().splitlines()[-60:])


def topic_values(bootstrap_servers: str) -> list[str]:
    """The topic's records from offset 0 to its end, as read_committed strings."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap_servers, "group.id": "connect-test-reader", "enable.auto.commit": False}
    )
    try:
        _, end = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=REQUEST_TIMEOUT_S)
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        values: list[str] = []
        deadline = time.monotonic() + WORKER_TIMEOUT_S
        position = 0
        while position < end and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            value, offset = message.value(), message.offset()
            assert message.error() is None and value is not None and offset is not None, message.error()
            values.append(value.decode())
            position = offset + 1
        assert position >= end, f"read {TOPIC} to offset {position} of {end}"
        return values
    finally:
        consumer.close()


def file_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def internal_topics(bootstrap_servers: str) -> dict[str, tuple[int, str]]:
    """Each internal topic's partition count (Metadata) and cleanup.policy (DescribeConfigs)."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    metadata = admin.list_topics(timeout=REQUEST_TIMEOUT_S)
    resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in INTERNAL_PARTITIONS]
    answers: dict[str, tuple[int, str]] = {}
    for resource, future in admin.describe_configs(resources, request_timeout=REQUEST_TIMEOUT_S).items():
        configs = future.result()
        answers[resource.name] = (len(metadata.topics[resource.name].partitions), configs["cleanup.policy"].value)
    return answers


def copy_batch(worker: Worker, bootstrap_servers: str, input_path: Path, sink_path: Path, batch: list[str]) -> None:
    """Appends `batch` to the input; returns once its last line is in the topic and in the sink file and both
    connectors committed their offsets past it."""
    with input_path.open("a") as stream:
        stream.writelines(line + "\n" for line in batch)
    last = batch[-1]
    # Earlier lines read again would reach the topic and the sink before the last one, the file being read in order:
    # once the last line is in both, the result is final.
    worker.wait_until(f"line {last!r} in {TOPIC}", lambda: last in topic_values(bootstrap_servers))
    worker.wait_until(f"line {last!r} in the sink file", lambda: last in file_lines(sink_path))
    size = input_path.stat().st_size
    worker.wait_until("the source's offset at the input's end", lambda: worker.offsets(SOURCE, "position") == [size])
    end = len(topic_values(bootstrap_servers))
    worker.wait_until("the sink's offset at the topic's end", lambda: worker.offsets(SINK, "kafka_offset") == [end])


def run_scenario(bootstrap_servers: str, classpath: str, folder: Path) -> ConnectRun:
    """The module docstring's scenario on one broker."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=1)])[TOPIC].result()
    (rest_port,) = free_ports(1)
    properties_path = folder / "worker.properties"
    properties_path.write_text(worker_properties(bootstrap_servers, rest_port))
    input_path, sink_path = folder / "input.txt", folder / "sink.txt"
    input_path.write_text("")
    written: list[str] = []
    connectors: list[list[str]] = []
    configs: list[dict[str, dict[str, str]]] = []
    posted = {
        SOURCE: {"connector.class": "FileStreamSource", "tasks.max": "1", "file": str(input_path), "topic": TOPIC},
        SINK: {"connector.class": "FileStreamSink", "tasks.max": "1", "file": str(sink_path), "topics": TOPIC},
    }
    for turn, count in enumerate(BATCHES):
        worker = Worker(classpath, properties_path, rest_port, folder / f"worker-{turn + 1}.log")
        try:
            worker.wait_healthy()
            if turn == 0:
                for name, config in posted.items():
                    worker.call("POST", "/connectors", {"name": name, "config": config})
            else:
                connectors.append(sorted(worker.call("GET", "/connectors")))
                configs.append({name: worker.call("GET", f"/connectors/{name}/config") for name in posted})
            batch = lines(len(written), count)
            written.extend(batch)
            copy_batch(worker, bootstrap_servers, input_path, sink_path, batch)
            source_offsets = worker.call("GET", f"/connectors/{SOURCE}/offsets")["offsets"]
            sink_offsets = worker.call("GET", f"/connectors/{SINK}/offsets")["offsets"]
        finally:
            # Worker 1 crashes, the others stop cleanly (see the module docstring); a failed turn is stopped too.
            if turn == 0:
                worker.java.kill()
            worker.java.stop()

    def placeholder(value: Any) -> Any:
        return json.loads(json.dumps(value).replace(str(folder), "<folder>"))

    return ConnectRun(
        topic_values=topic_values(bootstrap_servers),
        sink_lines=file_lines(sink_path),
        connectors=connectors,
        configs=placeholder(configs),
        source_offsets=placeholder(source_offsets),
        sink_offsets=sink_offsets,
        internal_topics=internal_topics(bootstrap_servers),
        input_lines=written,
        input_size_bytes=input_path.stat().st_size,
    )


@pytest.fixture(scope="module")
def connect_classpath(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("connect-classpath")
    classpath = java_classpath(ARTIFACTS, {}, folder)
    (folder / "log4j.properties").write_text(LOG4J_PROPERTIES)
    return classpath


@pytest.fixture(scope="module")
def kafka_run(kafka: str, connect_classpath: str, tmp_path_factory: pytest.TempPathFactory) -> ConnectRun:
    return run_scenario(kafka, connect_classpath, tmp_path_factory.mktemp("connect-kafka"))


@pytest.fixture(scope="module")
def raybroker_run(
    raybroker_servers: str, connect_classpath: str, tmp_path_factory: pytest.TempPathFactory
) -> ConnectRun:
    return run_scenario(raybroker_servers, connect_classpath, tmp_path_factory.mktemp("connect-raybroker"))


@pytest.fixture(params=["kafka", "raybroker"])
def run(request: pytest.FixtureRequest) -> Iterator[ConnectRun]:
    yield request.getfixturevalue(f"{request.param}_run")


def test_every_line_reaches_topic_and_sink_once_across_restarts(run: ConnectRun) -> None:
    assert len(run.input_lines) == sum(BATCHES)
    assert run.topic_values == run.input_lines
    assert run.sink_lines == run.input_lines


def test_connector_configs_and_offsets_survive_restarts(run: ConnectRun) -> None:
    expected_configs = {
        SOURCE: {
            "name": SOURCE,
            "connector.class": "FileStreamSource",
            "tasks.max": "1",
            "file": "<folder>/input.txt",
            "topic": TOPIC,
        },
        SINK: {
            "name": SINK,
            "connector.class": "FileStreamSink",
            "tasks.max": "1",
            "file": "<folder>/sink.txt",
            "topics": TOPIC,
        },
    }
    assert run.connectors == [[SINK, SOURCE]] * (len(BATCHES) - 1)
    assert run.configs == [expected_configs] * (len(BATCHES) - 1)
    assert run.source_offsets == [
        {"partition": {"filename": "<folder>/input.txt"}, "offset": {"position": run.input_size_bytes}}
    ]
    assert run.sink_offsets == [
        {"partition": {"kafka_topic": TOPIC, "kafka_partition": 0}, "offset": {"kafka_offset": sum(BATCHES)}}
    ]


def test_internal_topics_are_compacted(run: ConnectRun) -> None:
    assert run.internal_topics == {name: (partitions, "compact") for name, partitions in INTERNAL_PARTITIONS.items()}


def test_raybroker_run_equals_kafka_run(kafka_run: ConnectRun, raybroker_run: ConnectRun) -> None:
    assert raybroker_run == kafka_run
