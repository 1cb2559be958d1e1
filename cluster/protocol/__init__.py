"""Kafka's wire protocol for raybroker: any Kafka client produces to, consumes from and administers the broker.

Layers, each its own module: `server` (sockets, frames, connection limits; knows no API), `router` (decode with
kio, dispatch, encode; the table of served APIs and versions), `handlers/` (one module per API family, from a
decoded request to a response over the views), `views/` (the broker's roles as the handlers see them, over Ray or
in process), `config_entries` (configs as DescribeConfigs reports them), `errors` (the one table from raybroker's
errors to Kafka's codes), `listener` (starting it all in this process), `listener_actor` (the same in actors, as
`raybroker start` runs it). The listener's settings are broker keys (`storage.config.listener_config`).
"""

from cluster.protocol.listener import KafkaListener
from storage.config.listener_config import Endpoint, ListenerConfig, parse_listeners

__all__ = ["Endpoint", "KafkaListener", "ListenerConfig", "parse_listeners"]
