"""Fixtures shared by the storage tests: a mock clock, a partition folder, and logs closed at teardown."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from storage.clock import MockClock
from storage.partition.log import Log
from tests.storage.builders import START_MS


@pytest.fixture
def clock() -> MockClock:
    return MockClock(START_MS)


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "topic-0"


@pytest.fixture
def logs() -> Iterator[list[Log]]:
    """Logs a test opened; closed at teardown if the test did not."""
    opened: list[Log] = []
    yield opened
    for log in opened:
        if not log.closed:
            log.close()
