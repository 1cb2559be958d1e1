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
    assert config.socket_send_buffer_bytes == 102400


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
        "CLIENT://h:9093",
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
    for refused in ("0", "-2"):
        with pytest.raises(InvalidConfigError):
            ListenerConfig.from_properties({"socket.send.buffer.bytes": refused})
    assert ListenerConfig.from_properties({"socket.send.buffer.bytes": "-1"}).socket_send_buffer_bytes == -1


def test_advertised_listeners_default_to_the_bound_address() -> None:
    config = ListenerConfig.from_properties({"listeners": "PLAINTEXT://:0"})
    assert config.advertised({"PLAINTEXT": 40001}) == (Endpoint("PLAINTEXT", "127.0.0.1", 40001),)
    advertised = ListenerConfig.from_properties({"advertised.listeners": "PLAINTEXT://kafka.example:9092"})
    assert advertised.advertised({"PLAINTEXT": 40001}) == (Endpoint("PLAINTEXT", "kafka.example", 9092),)


def test_a_listener_name_maps_to_its_security_protocol() -> None:
    config = ListenerConfig.from_properties(
        {
            "listeners": "PLAINTEXT://h:1,SASL_SSL://h:2,CLIENT://h:3",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,client:sasl_plaintext",
        }
    )
    assert [(e.listener_name, e.security_protocol) for e in config.endpoints] == [
        ("PLAINTEXT", "PLAINTEXT"),
        ("SASL_SSL", "SASL_SSL"),
        ("CLIENT", "SASL_PLAINTEXT"),
    ]
    assert [e.security_protocol for e in config.advertised({"PLAINTEXT": 1, "SASL_SSL": 2, "CLIENT": 3})] == [
        "PLAINTEXT",
        "SASL_SSL",
        "SASL_PLAINTEXT",
    ]


@pytest.mark.parametrize("mapping", ["CLIENT", "CLIENT:TLS", "CLIENT:", ":SSL"])
def test_a_protocol_map_entry_that_names_no_protocol_is_refused(mapping: str) -> None:
    with pytest.raises(InvalidConfigError, match=r"listener\.security\.protocol\.map"):
        ListenerConfig.from_properties({"listeners": "PLAINTEXT://h:1", "listener.security.protocol.map": mapping})


@pytest.mark.parametrize(
    ("listeners", "client_auth", "exposed"),
    [
        ("PLAINTEXT://0.0.0.0:1,SASL_SSL://0.0.0.0:2,SASL_PLAINTEXT://0.0.0.0:3", "none", ["PLAINTEXT"]),
        ("SSL://0.0.0.0:1", "none", ["SSL"]),
        ("SSL://0.0.0.0:1", "requested", ["SSL"]),
        ("SSL://0.0.0.0:1", "required", []),
        ("SSL://127.0.0.1:1,PLAINTEXT://localhost:2", "none", []),
    ],
)
def test_exposed_endpoints_are_the_reachable_ones_that_authenticate_nobody(
    listeners: str, client_auth: str, exposed: list[str]
) -> None:
    config = ListenerConfig.from_properties({"listeners": listeners})
    assert [endpoint.listener_name for endpoint in config.exposed_endpoints(client_auth)] == exposed
