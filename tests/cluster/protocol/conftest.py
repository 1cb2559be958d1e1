"""Fixtures of the protocol tests: a `BrokerView` over real storage logs in a temporary folder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.protocol.support import LogBrokerView


@pytest.fixture
def view(tmp_path: Path) -> Iterator[LogBrokerView]:
    broker_view = LogBrokerView(tmp_path)
    try:
        yield broker_view
    finally:
        broker_view.close()
