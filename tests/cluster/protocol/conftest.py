"""Fixtures of the protocol tests: the listener's seams over an in-process broker in a temporary folder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.core.broker import InProcessBroker
from cluster.protocol.local_broker_view import LocalBrokerView
from cluster.protocol.local_group_view import LocalGroupView
from cluster.protocol.security.local_security_view import LocalSecurityView
from tests.cluster.protocol.helpers import start_broker


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
