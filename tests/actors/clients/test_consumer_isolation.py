"""The Python `Consumer`'s `isolation_level` on a real broker: the transaction scenario (`tests.transaction_scenario`,
written into the partition actors: commits, aborts, interleaved and open transactions on three partitions) read at
read_committed and read_uncommitted, through the actor and through located reads, compared with the scenario's
model; `seek_to_end` at each level's end; a bad level refused."""

from __future__ import annotations

import time
from typing import Any

import pytest

from storage.errors import InvalidConfigError
from tests.transaction_scenario import PARTITIONS, Scenario, write_through_actors

pytestmark = pytest.mark.ray

TOPIC = "consumer-isolation"
DEADLINE_S = 30.0


@pytest.fixture(scope="module")
def scenario(start_test_broker: Any) -> Scenario:
    from actors import Admin

    broker, _ = start_test_broker(log_dirs_count=1)
    Admin(broker).create_topic(TOPIC, PARTITIONS)
    return write_through_actors(TOPIC)


def read_all(isolation: str, expected: int, local_fetch: bool) -> list[tuple[int, int, bytes]]:
    from actors import Consumer

    with Consumer(isolation_level=isolation, auto_offset_reset="earliest", local_fetch=local_fetch) as consumer:
        consumer.assign([(TOPIC, partition) for partition in range(PARTITIONS)])
        read: list[tuple[int, int, bytes]] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(read) < expected and time.monotonic() < deadline:
            read += [(r.partition, r.offset, r.value) for r in consumer.poll(timeout_ms=200)]
        # Nothing more comes: the rest lies past the level's end, or was aborted.
        read += [(r.partition, r.offset, r.value) for r in consumer.poll(timeout_ms=500)]
        return read


@pytest.mark.parametrize("local_fetch", [True, False])
@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_the_consumer_reads_what_its_isolation_level_allows(
    scenario: Scenario, isolation: str, local_fetch: bool
) -> None:
    expected = scenario.read(isolation)
    assert sorted(read_all(isolation, len(expected), local_fetch)) == sorted(expected)


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_seek_to_end_goes_to_the_level_s_end(scenario: Scenario, isolation: str) -> None:
    from actors import Consumer

    with Consumer(isolation_level=isolation) as consumer:
        consumer.assign([(TOPIC, partition) for partition in range(PARTITIONS)])
        consumer.seek_to_end()
        for partition in range(PARTITIONS):
            assert consumer.position((TOPIC, partition)) == scenario.end(partition, isolation)


def test_a_consumer_refuses_an_unknown_isolation_level(scenario: Scenario) -> None:
    from actors import Consumer

    with pytest.raises(InvalidConfigError, match="isolation_level"):
        Consumer(isolation_level="read_everything")
