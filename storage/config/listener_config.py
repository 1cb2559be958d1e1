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
| socket.send.buffer.bytes  | int    | 102400                     | SO_SNDBUF of each connection; -1: the OS's own   |
| listener.security.protocol.map | string | (each protocol to itself) | `NAME:PROTOCOL` for listeners named otherwise |

`socket.send.buffer.bytes` bounds what one connection holds unsent in the kernel (Linux doubles the value). A Fetch
answer's records are `sendfile`d from the page cache: with the OS's autotuned buffer (up to 4 MiB) a whole 1 MiB
answer goes out in one call and overflows a client's receive queue (128 KiB by default), which the kernel then
prunes and collapses, copying; bounded at Kafka's 100 KiB the answer goes out as the client reads it. Measured
on loopback with confluent-kafka reading 512 MiB (median of five, at load average 40): the listener's
kernel time 0.22 s against 0.12 s, its user time 0.17 s against 0.19 s (a few more writability waits per answer),
the client's CPU 0.63 s against 0.61 s.

`listeners` is comma-separated `NAME://host:port`: an empty host binds every interface, port 0 any free port.
A listener's security protocol is its name (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) unless
`listener.security.protocol.map` maps a custom name (`CLIENT:SASL_SSL`); a name mapped to no protocol is refused
with `InvalidConfigError`. What each protocol needs (keystores, SASL mechanisms) is `SecurityConfig`'s to check.
Kafka's own default for `listeners` is `PLAINTEXT://:9092`
(every interface); raybroker binds the loopback interface unless told otherwise, so a broker started for a test
or a demo is not reachable from the network. Other broker keys in the same properties are not this module's and
are left alone. `BrokerConfig` holds these keys (`ListenerKeys`) among its own and derives its `listener_config`
from them, so `server.properties` sets them like any broker key.

PLAINTEXT and SSL listeners without client certificates do not authenticate: `exposed_endpoints` names those
reachable from other machines (any host but a loopback address or `localhost`), which `raybroker start` warns about.
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
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = ",".join(f"{protocol}:{protocol}" for protocol in SECURITY_PROTOCOLS)
DEFAULT_LISTENERS = "PLAINTEXT://127.0.0.1:9092"
# NAME://host:port, host a name, an IPv4 address, [an IPv6 address], or empty.
_ENDPOINT = re.compile(r"^(?P<name>[A-Za-z0-9_]+)://(?P<host>\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]*):(?P<port>\d{1,5})$")
MAX_PORT = 65535
# `socket.send.buffer.bytes` of -1 leaves SO_SNDBUF to the OS, as Kafka's `Selectable.USE_DEFAULT_BUFFER_SIZE`.
OS_DEFAULT_BUFFER_BYTES = -1


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One entry of `listeners` or `advertised.listeners`: `NAME://host:port` and the security protocol the name maps
    to. `host` "" means every interface."""

    listener_name: str
    host: str
    port: int
    security_protocol: str = PLAINTEXT


def parse_protocol_map(value: str) -> dict[str, str]:
    """`listener.security.protocol.map`: comma-separated `NAME:PROTOCOL`, each protocol one Kafka knows."""
    mapping: dict[str, str] = {}
    for entry in (part.strip() for part in value.split(",")):
        if not entry:
            continue
        name, separator, protocol = (item.strip().upper() for item in entry.partition(":"))
        if not separator or not name or protocol not in SECURITY_PROTOCOLS:
            raise InvalidConfigError(
                f"invalid entry {entry!r} in listener.security.protocol.map: expected NAME:PROTOCOL, the protocol "
                f"one of {', '.join(SECURITY_PROTOCOLS)}"
            )
        mapping[name] = protocol
    return mapping


def parse_listeners(
    value: str, key: str = "listeners", protocol_map: str = DEFAULT_PROTOCOL_MAP
) -> tuple[Endpoint, ...]:
    """Kafka's `listeners` syntax: comma-separated `NAME://host:port`, names unique and mapped to a security
    protocol by `protocol_map`; `InvalidConfigError` naming `key` otherwise."""
    protocols = parse_protocol_map(protocol_map)
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
        if name not in protocols:
            raise InvalidConfigError(
                f"listener {name} in {key} has no security protocol: name it after one "
                f"({', '.join(SECURITY_PROTOCOLS)}) or map it in listener.security.protocol.map"
            )
        endpoints.append(Endpoint(name, match["host"].strip("[]"), port, protocols[name]))
    if not endpoints:
        raise InvalidConfigError(f"{key} names no listener")
    names = [endpoint.listener_name for endpoint in endpoints]
    if len(set(names)) != len(names):
        raise InvalidConfigError(f"{key} names a listener more than once: {value!r}")
    return tuple(endpoints)


@dataclass(frozen=True)
class ListenerKeys:
    """The listener's broker keys, each declared here only: `ListenerConfig` checks them, `BrokerConfig` holds them
    among a broker's keys and derives its `listener_config` from them."""

    listeners: str = config_field(DEFAULT_LISTENERS, "string")
    advertised_listeners: str | None = config_field(None, "string")
    socket_request_max_bytes: int = config_field(104857600, "int", low=1)
    connections_max_idle_ms: int = config_field(600000, "long", low=1)
    max_connections: int = config_field(INT_MAX, "int", low=1)
    max_connections_per_ip: int = config_field(INT_MAX, "int", low=1)
    queued_max_requests: int = config_field(500, "int", low=1)
    socket_send_buffer_bytes: int = config_field(102400, "int", low=OS_DEFAULT_BUFFER_BYTES)
    listener_security_protocol_map: str = config_field(DEFAULT_PROTOCOL_MAP, "string")


@dataclass(frozen=True)
class ListenerConfig(ListenerKeys):
    """The listener's keys (see the module docstring), validated on creation."""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.socket_send_buffer_bytes == 0:
            raise InvalidConfigError("invalid value 0 for socket.send.buffer.bytes: must be -1 (the OS's) or >= 1")
        self._parse(self.listeners, "listeners")
        if self.advertised_listeners is not None:
            self._parse(self.advertised_listeners, "advertised.listeners")

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> ListenerConfig:
        """The listener's keys from broker properties (Kafka's dotted names); other keys are ignored."""
        values, _ = values_from_properties(cls, properties)
        return cls(**values)

    @property
    def endpoints(self) -> tuple[Endpoint, ...]:
        return self._parse(self.listeners, "listeners")

    def _parse(self, value: str, key: str) -> tuple[Endpoint, ...]:
        return parse_listeners(value, key, self.listener_security_protocol_map)

    def exposed_endpoints(self, ssl_client_auth: str = "none") -> tuple[Endpoint, ...]:
        """The listeners bound to an address other machines may reach (every interface, an empty host; a
        non-loopback address; a host name other than `localhost`, which may resolve to anything) that do not
        authenticate their clients: PLAINTEXT, and SSL unless `ssl_client_auth` is `required`."""
        unauthenticated = {PLAINTEXT} if ssl_client_auth == "required" else {PLAINTEXT, "SSL"}
        return tuple(
            endpoint
            for endpoint in self.endpoints
            if endpoint.security_protocol in unauthenticated and not _is_loopback(endpoint.host)
        )

    def advertised(self, bound_ports: Mapping[str, int]) -> tuple[Endpoint, ...]:
        """What Metadata reports: `advertised.listeners`, else `listeners` with the ports actually bound (port 0
        asks for any free port) and, for a listener bound to every interface, the loopback address."""
        if self.advertised_listeners is not None:
            return self._parse(self.advertised_listeners, "advertised.listeners")
        return tuple(
            Endpoint(
                endpoint.listener_name,
                endpoint.host or "127.0.0.1",
                bound_ports[endpoint.listener_name],
                endpoint.security_protocol,
            )
            for endpoint in self.endpoints
        )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
