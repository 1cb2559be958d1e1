"""Fixtures of the protocol tests: the listener's seams over an in-process broker in a temporary folder, and Apache
Kafka for the differential tests (`kafka`: 3.9 in KRaft mode, `benchmarks.kafka_broker.KafkaBroker`, started once per
session; the first run fetches it from Maven Central into the download cache; a machine where it cannot be fetched
or started skips the tests that need it, with the reason)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.core.broker import InProcessBroker
from benchmarks.kafka_broker import KafkaBroker, KafkaUnavailable
from cluster.protocol.local_broker_view import LocalBrokerView
from cluster.protocol.local_group_view import LocalGroupView
from cluster.protocol.security.local_security_view import LocalSecurityView
from tests.cluster.protocol.helpers import start_broker
from tests.conftest import skip_or_fail


@pytest.fixture(scope="session")
def kafka() -> Iterator[str]:
    """Apache Kafka's bootstrap address (see the module docstring)."""
    broker = KafkaBroker()
    try:
        broker.start()
    except KafkaUnavailable as exc:
        skip_or_fail(f"Apache Kafka is not available here: {exc}")
    try:
        yield broker.bootstrap_servers
    finally:
        broker.stop()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    running = start_broker(tmp_path / "broker")
    try:
        yield running
    finally:
        running.close()


@pytest.fixture
def view(broker: InProcessBroker) -> LocalBrokerView:
    return LocalBrokerView(broker)


@pytest.fixture
def groups(broker: InProcessBroker) -> LocalGroupView:
    return LocalGroupView(broker)


@pytest.fixture
def security(broker: InProcessBroker) -> LocalSecurityView:
    return LocalSecurityView(broker.controller)
