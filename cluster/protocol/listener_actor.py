"""The Kafka-protocol listener of a running broker, as Ray actors: `num.network.threads` processes per node.

`raybroker start`'s process exits while the broker keeps running, so the listener lives in actors: each one a
`KafkaListener` (its own event-loop thread) inside a detached, zero-CPU actor pinned to its node, named
`kafka-listener:<node>:<index>`, built with `actors.options.kafka_listener_options`.

Where this lives, and why: the actor hosts the protocol package, which is `cluster` code, and `actors` may not
import `cluster`. So the class is wrapped with `ray.remote` here and started by `start_kafka_listeners`, which
`raybroker start` calls after `actors.clients.broker.start_broker`; `stop_broker` stops the listeners first by
their names alone, without importing this module. An embedded broker (tests, the demo) starts no listener
actor: it opens one in its own process with `cluster.protocol.listener.KafkaListener` when it wants one.

Processes: listener 0 binds the configured ports (port 0: a free one); with `num.network.threads` > 1 the others
bind the ports it got, every one with SO_REUSEPORT, and the kernel spreads new connections over them. A PLAINTEXT
listener has no authentication, and SO_REUSEPORT lets any process of the same user join the port: keep
listeners on loopback unless the network is trusted. `max.connections` and `max.connections.per.ip` count per
process. A listener that dies is restarted by Ray with the same settings (a port-0 listener then gets a new port).

The listener's broker settings are the broker config's non-default keys: DescribeConfigs reports them as set
in the broker's properties (STATIC_BROKER_CONFIG), every other key as Kafka's default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ray

from actors.calls import call, kill_and_wait
from actors.options import kafka_listener_name, kafka_listener_options
from cluster.protocol.listener import KafkaListener
from cluster.protocol.server import ServerStatistics
from storage.config.broker_config import BrokerConfig
from storage.config.config_values import Password, password_properties
from storage.config.listener_config import Endpoint
from storage.errors import BrokerNotAvailableError, RaybrokerError


class KafkaListenerActor:
    """One listener process: binds in `__init__`; a failure to bind is kept and raised by `ready`, so the starter
    gets one clear error instead of an actor that dies in its constructor."""

    def __init__(self, properties: dict[str, str | Password]) -> None:
        self._listener: KafkaListener | None = None
        self._error = ""
        try:
            self._listener = KafkaListener(properties)
        except (OSError, RaybrokerError) as exc:
            self._error = str(exc)

    def ready(self) -> dict[str, int]:
        """The port bound per listener name; `BrokerNotAvailableError` saying why when nothing could be bound."""
        return self._running().ports

    def statistics(self) -> ServerStatistics:
        return self._running().statistics()

    def stop(self) -> None:
        """Closes the sockets and connections (the actor is killed after)."""
        if self._listener is not None:
            self._listener.stop()

    def _running(self) -> KafkaListener:
        if self._listener is None:
            raise BrokerNotAvailableError(f"the Kafka listener could not start: {self._error}")
        return self._listener


# `ray.remote` is applied here, not in `actors.server.remote`: the class lives in `cluster` (module docstring).
KafkaListenerRemote = ray.remote(KafkaListenerActor)


@dataclass(frozen=True, slots=True)
class StartedListeners:
    """What `raybroker start` reports: the clients' bootstrap servers, the processes serving them, and the
    endpoints other machines can reach without authentication."""

    bootstrap_servers: str
    processes: int
    exposed: tuple[Endpoint, ...]


def start_kafka_listeners(config: BrokerConfig, node_id: str) -> StartedListeners:
    """Starts (or finds) `num.network.threads` listener actors on `node_id` for the broker configured by
    `config`; raises `BrokerNotAvailableError` naming the reason when a port cannot be bound."""
    default = BrokerConfig().to_properties()
    properties: dict[str, str | Password] = {
        key: value for key, value in config.to_properties().items() if default.get(key) != value
    }
    properties.update(password_properties(config))
    ports = _start(node_id, 0, properties)
    listener_config = config.listener_config
    if config.num_network_threads > 1:
        bound = ",".join(_entry(endpoint, ports[endpoint.listener_name]) for endpoint in listener_config.endpoints)
        for index in range(1, config.num_network_threads):
            _start(node_id, index, {**properties, "listeners": bound})
    advertised = listener_config.advertised(ports)
    return StartedListeners(
        ",".join(f"{_host(endpoint.host)}:{endpoint.port}" for endpoint in advertised),
        config.num_network_threads,
        listener_config.exposed_endpoints(config.security_config.ssl_client_auth),
    )


def _start(node_id: str, index: int, properties: dict[str, str | Password]) -> dict[str, int]:
    """One listener actor, ready; killed again (and its error raised) when it could not bind."""
    name = kafka_listener_name(node_id, index)
    handle: Any = KafkaListenerRemote.options(**kafka_listener_options(node_id, index)).remote(properties)
    try:
        ports: dict[str, int] = call(handle.ready.remote())
    except BrokerNotAvailableError:
        kill_and_wait(handle, name)
        raise
    return ports


def _entry(endpoint: Endpoint, port: int) -> str:
    return f"{endpoint.listener_name}://{_host(endpoint.host)}:{port}"


def _host(host: str) -> str:
    """A host as `listeners` and `bootstrap.servers` write it: IPv6 addresses in brackets."""
    return f"[{host}]" if ":" in host else host
