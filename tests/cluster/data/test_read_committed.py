"""`read_topic` and the isolation levels on a real broker: the transaction scenario (`tests.transaction_scenario`:
commits, aborts, interleaved and open transactions on three partitions, written into the partition actors) read by
default (read_committed: up to each last stable offset, aborted records dropped) and at read_uncommitted, compared
with the scenario's model."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import ray

from cluster.data import read_topic
from tests.transaction_scenario import PARTITIONS, Scenario, write_through_actors

pytestmark = [
    pytest.mark.ray,
    # Ray Data's DataContext reads its own deprecated fields when it is copied into a task; the warning is Ray's.
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context"),
]

TOPIC = "data-isolation"


@pytest.fixture(scope="module")
def scenario(start_test_broker: Callable[..., tuple[Any, Any]]) -> Scenario:
    from actors.clients.admin import Admin

    ray.data.DataContext.get_current().enable_progress_bars = False
    broker, _ = start_test_broker(log_dirs_count=1)
    Admin(broker).create_topic(TOPIC, PARTITIONS)
    return write_through_actors(TOPIC)


@pytest.mark.parametrize("isolation", [None, "read_committed", "read_uncommitted"])
def test_read_topic_reads_what_its_isolation_level_allows(scenario: Scenario, isolation: str | None) -> None:
    options = {} if isolation is None else {"isolation": isolation}
    rows = read_topic(TOPIC, columns=["partition", "offset", "value"], **options).take_all()
    expected = scenario.read(isolation or "read_committed")
    assert sorted((row["partition"], row["offset"], row["value"]) for row in rows) == sorted(expected)
