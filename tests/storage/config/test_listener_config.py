"""`listeners` / `advertised.listeners` in Kafka's syntax, the limits under Kafka's names and defaults."""

from __future__ import annotations

import pytest

from storage.config.listener_config import Endpoint, ListenerConfig, parse_listeners
from storage.errors import InvalidConfigError


def test_kafkas_defaults() -> None:
    config = ListenerConfig.from_properties({"log.dirs": "/elsewhere", "num.partitions": "3"})
    assert config.endpoints == (Endpoint("PLAINTEXT", "127.0.0.1", 9092),)
    assert (config.socket_request_max_bytes, config.connections_max_idle_ms) == (104857600, 600000)
    assert config.max_connections == config.max_connections_per_ip == 2**31 - 1
    assert config.queued_max_requests == 500


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("PLAINTEXT://:9092", Endpoint("PLAINTEXT", "", 9092)),
        ("plaintext://broker-1.example:19092", Endpoint("PLAINTEXT", "broker-1.example", 19092)),
        (" PLAINTEXT://[::1]:0 ,", Endpoint("PLAINTEXT", "::1", 0)),
        ("PLAINTEXT://0.0.0.0:9092", Endpoint("PLAINTEXT", "0.0.0.0", 9092)),
    ],
)
def test_listener_syntax(value: str, expected: Endpoint) -> None:
    assert parse_listeners(value) == (expected,)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "127.0.0.1:9092",
        "PLAINTEXT://host",
        "PLAINTEXT://h:70000",
        "SSL://h:9093",
        "PLAINTEXT://h:1,PLAINTEXT://h:2",
    ],
)
def test_invalid_or_unserved_listeners_are_refused(value: str) -> None:
    with pytest.raises(InvalidConfigError):
        ListenerConfig.from_properties({"listeners": value})


def test_limits_are_validated() -> None:
    with pytest.raises(InvalidConfigError):
        ListenerConfig.from_properties({"socket.request.max.bytes": "0"})
    with pytest.raises(InvalidConfigError):
        ListenerConfig.from_properties({"max.connections.per.ip": "many"})


def test_advertised_listeners_default_to_the_bound_address() -> None:
    config = ListenerConfig.from_properties({"listeners": "PLAINTEXT://:0"})
    assert config.advertised({"PLAINTEXT": 40001}) == (Endpoint("PLAINTEXT", "127.0.0.1", 40001),)
    advertised = ListenerConfig.from_properties({"advertised.listeners": "PLAINTEXT://kafka.example:9092"})
    assert advertised.advertised({"PLAINTEXT": 40001}) == (Endpoint("PLAINTEXT", "kafka.example", 9092),)
