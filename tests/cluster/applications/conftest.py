"""Fixtures of the real-application tests: raybroker's Kafka listener on the session's Ray (`raybroker_servers`:
the broker of `start_test_broker` with a listener actor on a free port, as `raybroker start` serves it). Apache
Kafka 3.9 is `tests/cluster/conftest.py`'s `kafka` (one KRaft node, started once per session). Each application
runs against both, and the two results are compared."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from benchmarks.kafka_broker import free_ports

# Kafka's internal topics on one broker: replication factor 1, as the single-node Kafka of the fixture has; and a new
# group's first rebalance at once, as that Kafka's (`benchmarks.kafka_broker`).
SINGLE_NODE_PROPERTIES = {
    "group_initial_rebalance_delay_ms": "0",
    "transaction_state_log_replication_factor": "1",
    "transaction_state_log_min_isr": "1",
    "transaction_state_log_num_partitions": "4",
    "offsets_topic_num_partitions": "4",
}


@pytest.fixture(scope="module")
def raybroker_servers(start_test_broker: Callable[..., tuple[Any, Any]]) -> Iterator[str]:
    """The bootstrap address of a raybroker listener actor over a broker started for the module."""
    import ray

    from actors.clients.broker import stop_broker
    from cluster.protocol.listener_actor import start_kafka_listeners
    from storage.config.broker_config import BrokerConfig
    from storage.errors import BrokerNotAvailableError

    start_test_broker(**SINGLE_NODE_PROPERTIES)
    (port,) = free_ports(1)
    # The listener reads the same properties as the broker, as `raybroker start` gives them: it creates
    # `__transaction_state` on the first transactional lookup, with its own `transaction.state.log.num.partitions`.
    dotted = {key.replace("_", "."): value for key, value in SINGLE_NODE_PROPERTIES.items()}
    config = BrokerConfig.from_properties({**dotted, "listeners": f"PLAINTEXT://127.0.0.1:{port}"})
    try:
        yield start_kafka_listeners(config, ray.get_runtime_context().get_node_id()).bootstrap_servers
    finally:
        with contextlib.suppress(BrokerNotAvailableError):
            stop_broker()
