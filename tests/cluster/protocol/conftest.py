"""Fixtures of the protocol tests: the listener's seams over an in-process broker in a temporary folder (Apache
Kafka for the differential tests, `kafka`, is `tests/cluster/conftest.py`'s)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.core.in_process_broker import InProcessBroker
from cluster.protocol.views.group_view import GroupView
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from cluster.protocol.views.security_view import SecurityView
from tests.cluster.protocol.helpers import run, start_broker


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    running = start_broker(tmp_path / "broker")
    try:
        yield running
    finally:
        running.close()


@pytest.fixture
def view(broker: InProcessBroker) -> InProcessBrokerView:
    return InProcessBrokerView(broker)


@pytest.fixture
def re_elected(tmp_path: Path) -> Iterator[InProcessBrokerView]:
    """A broker on two nodes whose topic `led` has two partitions replicated on both, after the node leading
    partition 0 was lost: partition 0 is led by the other node in leader epoch 1 (the epoch Metadata reports), and
    partition 1, led there from the start, is still in epoch 0. The view is the surviving node's listener's."""
    running = start_broker(tmp_path / "re-elected", nodes=2)
    try:
        run(InProcessBrokerView(running).create_topic("led", 2, replication_factor=2))
        lost = running.controller.partition_state("led", 0).leader
        running.lose_node(lost)
        states = [running.controller.partition_state("led", partition) for partition in range(2)]
        assert [state.leader_epoch for state in states] == [1, 0]
        assert states[0].leader == states[1].leader != lost
        yield InProcessBrokerView(running, states[0].leader)
    finally:
        running.close()


@pytest.fixture
def groups(broker: InProcessBroker) -> GroupView:
    return GroupView.in_process(broker)


@pytest.fixture
def security(broker: InProcessBroker) -> SecurityView:
    return SecurityView.in_process(broker.controller)
