"""What a Kafka listener records in its metrics, over real sockets on 127.0.0.1 with real clients (raw frames,
confluent-kafka): connections and their closing per listener, each answered request under its API's name and
version with its latency, the record bytes Fetch answers carry, failed SASL logins; and what the broker behind it
records of the appends. The broker side is a listener over the in-process broker (`InProcessBrokerView`,
`SecurityView.in_process`), both recording into one `MetricsRecorder`; the oracles are the requests and records
sent, the segment files the consumer read whole, and the server's own statistics."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema

from actors.metrics.names import (
    BYTES_IN,
    BYTES_OUT,
    CONNECTION_COUNT,
    CONNECTION_CREATION,
    FAILED_AUTHENTICATION,
    MESSAGES_IN,
    REQUEST_TOTAL_TIME_MS,
    REQUESTS,
)
from actors.metrics.recorder import MetricsRecorder
from cluster.protocol.framing import decode_response, encode_request
from cluster.protocol.handlers.api_versions import API_VERSIONS_KEY
from cluster.protocol.handlers.metadata import METADATA_KEY
from cluster.protocol.listener import KafkaListener
from cluster.protocol.messages import build
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from cluster.protocol.views.security_view import SecurityView
from tests.cluster.protocol.helpers import add_user, leader_log, read_frame, run, start_broker

DEADLINE_S = 20.0
METADATA = {
    "topics": [],
    "allow_auto_topic_creation": False,
    "include_cluster_authorized_operations": False,
    "include_topic_authorized_operations": False,
}
RECORDS = 300
ALICE_PASSWORD = "alice-pa55-Secret"


@pytest.fixture
def served(tmp_path: Any) -> Iterator[tuple[KafkaListener, InProcessBrokerView, MetricsRecorder]]:
    metrics = MetricsRecorder()
    broker = start_broker(tmp_path, metrics=metrics)
    security = SecurityView.in_process(broker.controller)
    add_user(broker.controller, "alice", ALICE_PASSWORD)
    view = InProcessBrokerView(broker)
    properties = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "connection.failed.authentication.delay.ms": "10",
    }
    try:
        with KafkaListener(properties, view, security, metrics) as listener:
            yield listener, view, metrics
    finally:
        broker.close()


def eventually(check: Callable[[], bool]) -> None:
    """The server records an answer right after writing it, so a client may read it a moment before."""
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        assert time.monotonic() < deadline, "the metric never reached the expected value"
        time.sleep(0.02)


def request_and_answer(sock: socket.socket, api_key: int, version: int, body: dict[str, Any], correlation: int) -> None:
    sock.sendall(encode_request(api_key, correlation, "t", build(load_request_schema(api_key, version), body)))
    assert decode_response(read_frame(sock), load_response_schema(api_key, version))[0] == correlation


def test_connections_and_requests_per_api_and_version(
    served: tuple[KafkaListener, InProcessBrokerView, MetricsRecorder],
) -> None:
    listener, _, metrics = served
    port = listener.ports["PLAINTEXT"]
    sockets = [socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S) for _ in range(3)]
    try:
        eventually(lambda: metrics.value(CONNECTION_COUNT, "PLAINTEXT") == 3)
        versions = {"client_software_name": "t", "client_software_version": "1"}
        for correlation in range(5):
            request_and_answer(sockets[0], API_VERSIONS_KEY, 3, versions, correlation)
        for correlation in range(2):
            request_and_answer(sockets[1], METADATA_KEY, 12, METADATA, correlation)
            request_and_answer(sockets[2], METADATA_KEY, 9, METADATA, correlation)
        eventually(lambda: metrics.value(REQUESTS, "Metadata", "9") == 2)
        assert metrics.value(REQUESTS, "ApiVersions", "3") == 5
        assert metrics.value(REQUESTS, "Metadata", "12") == 2
        assert metrics.value(REQUEST_TOTAL_TIME_MS, "ApiVersions") == 5
        assert metrics.value(REQUEST_TOTAL_TIME_MS, "Metadata") == 4
        assert metrics.value(CONNECTION_COUNT, "SASL_PLAINTEXT") == 0
    finally:
        for sock in sockets:
            sock.close()
    eventually(lambda: metrics.value(CONNECTION_COUNT, "PLAINTEXT") == 0)
    assert metrics.value(CONNECTION_CREATION, "PLAINTEXT") == 3 == listener.statistics().connections_accepted


def test_fetch_answers_count_the_record_bytes_consumers_read(
    served: tuple[KafkaListener, InProcessBrokerView, MetricsRecorder],
) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    listener, view, metrics = served
    bootstrap = f"127.0.0.1:{listener.ports['PLAINTEXT']}"
    run(view.create_topic("clicks", 1))
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for index in range(RECORDS):
        producer.produce("clicks", f"value-{index}".encode() * 10, partition=0)
    assert producer.flush(DEADLINE_S) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "readers", "enable.auto.commit": False})
    consumer.assign([TopicPartition("clicks", 0, 0)])
    received = 0
    deadline = time.monotonic() + DEADLINE_S
    while received < RECORDS and time.monotonic() < deadline:
        received += len([m for m in consumer.consume(RECORDS, 0.5) if m.error() is None])
    consumer.close()
    assert received == RECORDS
    # Read once from offset 0 to the end: every batch of the log, whole, once.
    size_bytes = leader_log(view, "clicks", 0).size_in_bytes
    eventually(lambda: metrics.value(BYTES_OUT, "clicks") == size_bytes)
    assert metrics.value(BYTES_OUT, "") == metrics.value(BYTES_OUT, "clicks")
    # The broker's side: every record appended once, in the log's bytes.
    assert metrics.value(MESSAGES_IN, "clicks") == metrics.value(MESSAGES_IN, "") == RECORDS
    assert metrics.value(BYTES_IN, "clicks") == metrics.value(BYTES_IN, "") == size_bytes
    produces = sum(
        value
        for (spec, labels), value in metrics.snapshot().counters.items()
        if spec is REQUESTS and labels[0] == "Produce"
    )
    assert produces >= 1 and produces == metrics.value(REQUEST_TOTAL_TIME_MS, "Produce")
    # A request's time is observed once its answer's last byte is sent, after the bytes it counted out.
    eventually(lambda: metrics.value(REQUEST_TOTAL_TIME_MS, "FetchConsumer") > 0)
    assert metrics.value(REQUEST_TOTAL_TIME_MS, "Fetch") == metrics.value(REQUEST_TOTAL_TIME_MS, "FetchConsumer")


def test_failed_sasl_logins_are_counted_on_their_listener(
    served: tuple[KafkaListener, InProcessBrokerView, MetricsRecorder],
) -> None:
    from confluent_kafka import Producer

    listener, _, metrics = served
    errors: list[Any] = []
    producer = Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{listener.ports['SASL_PLAINTEXT']}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "alice",
            "sasl.password": "wrong",
            "error_cb": errors.append,
        }
    )
    deadline = time.monotonic() + DEADLINE_S
    while not errors and time.monotonic() < deadline:
        producer.poll(0.1)
    producer.flush(0)
    assert errors
    eventually(lambda: metrics.value(FAILED_AUTHENTICATION, "SASL_PLAINTEXT") >= 1)
    assert metrics.value(FAILED_AUTHENTICATION, "SASL_PLAINTEXT") == listener.statistics().authentication_failures
    assert metrics.value(FAILED_AUTHENTICATION, "PLAINTEXT") == 0
