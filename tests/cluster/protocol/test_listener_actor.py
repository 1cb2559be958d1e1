"""The listener in the running broker: `start_kafka_listeners` starts `num.network.threads` listener actors on the
node, sharing one port; a confluent-kafka client produces and consumes through it; new connections reach both
processes; a port already taken is one clear error and leaves no actor behind; `stop_broker` stops the listeners
first, closing the port.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import ray
from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from actors.calls import call, get_actor
from actors.clients.broker import stop_broker
from actors.options import KAFKA_LISTENER_PREFIX, NAMESPACE, kafka_listener_name
from cluster.protocol.listener_actor import StartedListeners, start_kafka_listeners
from storage.config.broker_config import BrokerConfig
from storage.errors import BrokerNotAvailableError
from tests.cluster.protocol.helpers import exchange

pytestmark = pytest.mark.ray

PROCESSES = 2
# SO_REUSEPORT spreads connections by a hash of their addresses: with this many, all landing in one of two
# processes has a chance of 2**-23.
CONNECTIONS = 24
RECORDS = 200
TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def listener_names() -> list[str]:
    return sorted(
        actor["name"]
        for actor in ray.util.list_named_actors(all_namespaces=True)
        if actor["namespace"] == NAMESPACE and actor["name"].startswith(KAFKA_LISTENER_PREFIX)
    )


@pytest.fixture(scope="module")
def started(start_test_broker: Callable[..., tuple[Any, Any]]) -> Iterator[tuple[StartedListeners, int]]:
    start_test_broker()
    port = free_port()
    config = BrokerConfig.from_properties(
        {"listeners": f"PLAINTEXT://127.0.0.1:{port}", "num.network.threads": str(PROCESSES)}
    )
    node_id = ray.get_runtime_context().get_node_id()
    try:
        yield start_kafka_listeners(config, node_id), port
    finally:
        # The tests after these start brokers of their own, which stops this one first.
        with contextlib.suppress(BrokerNotAvailableError):
            stop_broker()


def test_listener_processes_share_the_configured_port(started: tuple[StartedListeners, int]) -> None:
    listeners, port = started
    node_id = ray.get_runtime_context().get_node_id()
    assert (listeners.bootstrap_servers, listeners.processes, listeners.exposed) == (f"127.0.0.1:{port}", 2, ())
    assert listener_names() == [kafka_listener_name(node_id, index) for index in range(PROCESSES)]
    handles = [get_actor(name) for name in listener_names()]
    assert [call(handle.ready.remote()) for handle in handles] == [{"PLAINTEXT": port}] * PROCESSES
    # Starting them again finds the running ones, as `start_broker` finds its actors.
    config = BrokerConfig.from_properties({"listeners": f"PLAINTEXT://127.0.0.1:{port}", "num.network.threads": "2"})
    assert start_kafka_listeners(config, node_id) == listeners

    async def connect_many() -> None:
        for correlation_id in range(CONNECTIONS):
            answered, _ = await exchange(
                port, ApiVersionsRequest(client_software_name="test", client_software_version="1"), correlation_id
            )
            assert answered == correlation_id

    asyncio.run(connect_many())
    accepted = [call(handle.statistics.remote()).connections_accepted for handle in handles]
    assert sum(accepted) >= CONNECTIONS
    assert all(count > 0 for count in accepted), accepted


def test_a_kafka_client_produces_and_consumes_through_the_port(started: tuple[StartedListeners, int]) -> None:
    listeners, _ = started
    producer = Producer({"bootstrap.servers": listeners.bootstrap_servers, "enable.idempotence": True})
    delivered: list[tuple[int, bytes]] = []

    def report(error: Any, message: Any) -> None:
        assert error is None, error
        delivered.append((message.offset(), message.value()))

    for index in range(RECORDS):
        producer.produce("actor-wire", value=b"value-%d" % index, partition=0, on_delivery=report)
    assert producer.flush(TIMEOUT_S) == 0
    assert [value for _, value in sorted(delivered)] == [b"value-%d" % index for index in range(RECORDS)]

    consumer = Consumer({"bootstrap.servers": listeners.bootstrap_servers, "group.id": "unused"})
    consumer.assign([TopicPartition("actor-wire", 0, 0)])
    read: list[tuple[int, bytes]] = []
    try:
        while len(read) < RECORDS:
            messages = consumer.consume(num_messages=RECORDS, timeout=TIMEOUT_S)
            assert messages, f"nothing more after {len(read)} records"
            read.extend((message.offset(), message.value()) for message in messages)
    finally:
        consumer.close()
    assert read == sorted(delivered)


def test_a_port_in_use_is_one_error_and_leaves_no_listener(start_test_broker: Callable[..., tuple[Any, Any]]) -> None:
    start_test_broker()
    node_id = ray.get_runtime_context().get_node_id()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        config = BrokerConfig.from_properties({"listeners": f"PLAINTEXT://127.0.0.1:{taken.getsockname()[1]}"})
        with pytest.raises(BrokerNotAvailableError, match=r"the Kafka listener could not start: .*in use"):
            start_kafka_listeners(config, node_id)
    assert listener_names() == []


def test_stop_broker_stops_the_listeners_first(start_test_broker: Callable[..., tuple[Any, Any]]) -> None:
    start_test_broker()
    port = free_port()
    node_id = ray.get_runtime_context().get_node_id()
    start_kafka_listeners(BrokerConfig.from_properties({"listeners": f"PLAINTEXT://127.0.0.1:{port}"}), node_id)
    assert listener_names() == [kafka_listener_name(node_id, 0)]
    stop_broker()
    assert listener_names() == []
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0
