"""The Kafka-protocol listener's settings: Kafka's broker keys for listeners and socket limits, and their defaults.

| Kafka key                 | type   | default                    | meaning                                          |
|---------------------------|--------|----------------------------|--------------------------------------------------|
| listeners                 | string | PLAINTEXT://127.0.0.1:9092 | where to accept connections (see below)          |
| advertised.listeners      | string | (listeners)                | what Metadata tells clients to connect to        |
| socket.request.max.bytes  | int    | 104857600                  | a larger request frame closes the connection     |
| connections.max.idle.ms   | long   | 600000                     | a connection silent this long is closed          |
| max.connections           | int    | 2147483647                 | connections open at once on the listener         |
| max.connections.per.ip    | int    | 2147483647                 | connections open at once from one address        |
| queued.max.requests       | int    | 500                        | requests read and not yet answered, per process  |

`listeners` is comma-separated `NAME://host:port`: an empty host binds every interface, port 0 any free port.
Only the PLAINTEXT security protocol is served so far; a listener named anything else (`SSL://`, `SASL_SSL://`, a
custom name) is refused with `InvalidConfigError`. Kafka's own default for `listeners` is `PLAINTEXT://:9092`
(every interface); raybroker binds the loopback interface unless told otherwise, so a broker started for a test
or a demo is not reachable from the network. Other broker keys in the same properties are not this module's and
are left alone. `BrokerConfig` declares the same keys with the same defaults and derives its `listener_config`
from them, so `server.properties` sets them like any broker key.

A PLAINTEXT listener has no authentication: `exposed_endpoints` names the ones reachable from other machines (any
host but a loopback address or `localhost`), which `raybroker start` warns about.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from storage.config.config_values import INT_MAX, check_fields, config_field, values_from_properties
from storage.errors import InvalidConfigError

PLAINTEXT = "PLAINTEXT"
DEFAULT_LISTENERS = "PLAINTEXT://127.0.0.1:9092"
# NAME://host:port, host a name, an IPv4 address, [an IPv6 address], or empty.
_ENDPOINT = re.compile(r"^(?P<name>[A-Za-z0-9_]+)://(?P<host>\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]*):(?P<port>\d{1,5})$")
MAX_PORT = 65535


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One entry of `listeners` or `advertised.listeners`: `NAME://host:port`. `host` "" means every interface."""

    listener_name: str
    host: str
    port: int

    @property
    def security_protocol(self) -> str:
        """Without `listener.security.protocol.map`, a listener's name is its security protocol."""
        return self.listener_name


def parse_listeners(value: str, key: str = "listeners") -> tuple[Endpoint, ...]:
    """Kafka's `listeners` syntax: comma-separated `NAME://host:port`, names unique; `InvalidConfigError` naming
    `key` otherwise, or when a listener is not PLAINTEXT."""
    endpoints = []
    for entry in (part.strip() for part in value.split(",")):
        if not entry:
            continue
        match = _ENDPOINT.match(entry)
        if match is None:
            raise InvalidConfigError(f"invalid value {entry!r} in {key}: expected NAME://host:port")
        port = int(match["port"])
        if port > MAX_PORT:
            raise InvalidConfigError(f"invalid port {port} in {key}: must be 0..{MAX_PORT}")
        name = match["name"].upper()
        if name != PLAINTEXT:
            raise InvalidConfigError(f"listener {name} in {key}: only the PLAINTEXT security protocol is served")
        endpoints.append(Endpoint(name, match["host"].strip("[]"), port))
    if not endpoints:
        raise InvalidConfigError(f"{key} names no listener")
    names = [endpoint.listener_name for endpoint in endpoints]
    if len(set(names)) != len(names):
        raise InvalidConfigError(f"{key} names a listener more than once: {value!r}")
    return tuple(endpoints)


@dataclass(frozen=True, slots=True)
class ListenerConfig:
    """The listener's keys (see the module docstring), validated on creation."""

    listeners: str = config_field(DEFAULT_LISTENERS, "string")
    advertised_listeners: str | None = config_field(None, "string")
    socket_request_max_bytes: int = config_field(104857600, "int", low=1)
    connections_max_idle_ms: int = config_field(600000, "long", low=1)
    max_connections: int = config_field(INT_MAX, "int", low=1)
    max_connections_per_ip: int = config_field(INT_MAX, "int", low=1)
    queued_max_requests: int = config_field(500, "int", low=1)

    def __post_init__(self) -> None:
        check_fields(self)
        parse_listeners(self.listeners)
        if self.advertised_listeners is not None:
            parse_listeners(self.advertised_listeners, "advertised.listeners")

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> ListenerConfig:
        """The listener's keys from broker properties (Kafka's dotted names); other keys are ignored."""
        values, _ = values_from_properties(cls, properties)
        return cls(**values)

    @property
    def endpoints(self) -> tuple[Endpoint, ...]:
        return parse_listeners(self.listeners)

    def exposed_endpoints(self) -> tuple[Endpoint, ...]:
        """The listeners bound to an address other machines may reach: every interface (empty host), a
        non-loopback address, or a host name other than `localhost` (which may resolve to anything)."""
        return tuple(endpoint for endpoint in self.endpoints if not _is_loopback(endpoint.host))

    def advertised(self, bound_ports: Mapping[str, int]) -> tuple[Endpoint, ...]:
        """What Metadata reports: `advertised.listeners`, else `listeners` with the ports actually bound (port 0
        asks for any free port) and, for a listener bound to every interface, the loopback address."""
        if self.advertised_listeners is not None:
            return parse_listeners(self.advertised_listeners, "advertised.listeners")
        return tuple(
            Endpoint(endpoint.listener_name, endpoint.host or "127.0.0.1", bound_ports[endpoint.listener_name])
            for endpoint in self.endpoints
        )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
