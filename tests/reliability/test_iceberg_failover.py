"""Iceberg translation through partition leader failovers: three Ray nodes (`ray.cluster_utils.Cluster`: a head and
two workers, each with its broker and log dir), a `key_value` topic of three partitions on all three (replication
factor 3, `min.insync.replicas=2`), the translation driver passing every 100 ms on the head (the controller's node,
where the embedded catalog and its warehouse live), and an idempotent `acks=all` producer writing keyed records
throughout. While rounds run back to back (a target lag of 200 ms), the worker node leading the most partitions is
removed without notice (its raylet and every process on it killed): its partitions fail over to their followers
while a round may be planning from, or reading through, the leaders that just died. Its disks then come back on a
new node, rejoin the ISR and take their preferred leaderships back (a second leader change, the old leaders alive
as followers this time), and the producer keeps writing through all of it.

Once the producer stopped and the table caught up with the log's last stable offsets: the table holds exactly
what a read_committed consumer reads from the topic, each record once by (partition, offset) with its key and
value (0 missing, 0 duplicated), and every record the producer got acknowledged; and no round failed (a round's
read tasks wait out a leader change, also one that starts between two leaders, rather than pausing the topic).
Quick mode: 1 node removal; long mode: 3.

This module owns its Ray cluster (`OWNS_RAY`: it runs after the tests sharing the session's Ray, which it shuts
down first); only worker nodes are removed, as the head holds the controller and the driver. Ray's health checks
are shortened (`tests.actors.three_nodes.HEALTH_CHECKS`) so that a removed node is declared dead within about 2 s
rather than ~15 s.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from actors.clients.admin import Admin
from actors.clients.broker import Broker
from actors.clients.producer import Producer
from cluster.iceberg.translation_driver_actor import iceberg_driver_status, start_iceberg_driver
from storage.config.broker_config import BrokerConfig
from storage.errors import OutOfOrderSequenceError
from tests.actors.three_nodes import Nodes, three_nodes
from tests.reliability.broker_support import Acknowledgements, wait_for
from tests.reliability.iceberg_checks import read_committed, table_rows, wait_for_table
from tests.reliability.modes import scaled

pytestmark = [pytest.mark.reliability, pytest.mark.ray]
OWNS_RAY = True

REMOVALS = scaled(1, 3)
TOPIC = "iceberg-failover"
PARTITIONS = 3
BROKER_SETTINGS = {
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.num.partitions": "1",
    "log.initial.task.delay.ms": "200",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.backoff.ms": "100",
    # A broker silent this long is fenced (Kafka's defaults are 2 s and 9 s).
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "4000",
    # The returning disks take their preferred leaderships back within 2 s of rejoining the ISR.
    "leader.imbalance.check.interval.seconds": "2",
    # No self-healing onto the two nodes left while the removed one is away (it comes back within seconds).
    "raybroker.balancer.node.loss.grace.ms": "60000",
}
# The producer's pace: a few thousand records over the run, so that every round has some to translate.
RECORDS_PER_SECOND = 200.0
# How long the producer writes before the first removal, and after each leader change.
WRITE_S = 2.0
# Bounds on a failover and a rejoin (a node removal is seen within ~2 s, a new node starts in ~5-10 s on 2 cores).
FAILOVER_S = 30.0
REJOIN_S = 90.0
CATCH_UP_S = 90.0


def _identity(data: bytes) -> bytes:
    return data


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    """Three nodes with a broker each, the head's first (it hosts the controller), and the translation driver on
    the head."""
    with three_nodes(tmp_path_factory.mktemp("iceberg-failover"), BROKER_SETTINGS) as state:
        start_iceberg_driver(BrokerConfig.from_properties({"log.dirs": str(state.dirs[state.head][0])}), 0.1)
        yield state


class KeyedWriter:
    """An idempotent `acks=all` producer sending keyed records round-robin over the partitions at
    `RECORDS_PER_SECOND` until stopped; what it got acknowledged (`acks`, by value: record i's key is `k<i>`, its
    value `v<i>`)."""

    def __init__(self) -> None:
        self.acks = Acknowledgements()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="iceberg-failover-writer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(120)
        assert not self._thread.is_alive(), "the writer did not flush its last records within 120 s"

    def _run(self) -> None:
        settings: dict[str, Any] = {"retries": 1_000_000, "retry_backoff_max_ms": 200, "linger_ms": 1}
        with Producer(
            acks="all", enable_idempotence=True, value_serializer=_identity, key_serializer=_identity, **settings
        ) as producer:
            index = 0
            started = time.monotonic()
            try:
                while not self._stop.is_set():
                    key, value = b"k%d" % index, b"v%d" % index
                    self.acks.track(producer.send(TOPIC, value, key=key, partition=index % PARTITIONS), value)
                    index += 1
                    ahead = index / RECORDS_PER_SECOND - (time.monotonic() - started)
                    if ahead > 0:
                        time.sleep(ahead)
            except Exception as exc:
                self.acks.failures.append(exc)
            producer.flush()


def _leaders() -> dict[int, str]:
    return dict(Broker.connect().topic(TOPIC).partitions)


def _full_isr() -> bool:
    return all(len(state.isr) == 3 for state in Broker.connect().topic(TOPIC).states())


def _rounds() -> int:
    statuses = iceberg_driver_status(TOPIC)
    return statuses[0].rounds if statuses else 0


def _fail_over_and_rejoin(nodes: Nodes, writer: KeyedWriter, removal: int) -> str:
    """Once the driver ran a few rounds, removes the worker node leading the most partitions, waits for the
    failover and for writes acknowledged after it, then brings its disks back on a new node and waits until they
    are in every ISR and lead their partitions again; what the failover took."""
    rounds = _rounds()
    time.sleep(WRITE_S)
    wait_for(lambda: _rounds() >= rounds + 3, FAILOVER_S, "three rounds of translation before a removal")
    leaders = _leaders()
    led = {node: sorted(p for p, leader in leaders.items() if leader == node) for node in nodes.workers}
    victim = max(sorted(nodes.workers), key=lambda node: len(led[node]))
    assert led[victim], f"removal {removal}: no worker leads a partition of {TOPIC}: {leaders}"
    # Removed as the driver finishes a round: the next one starts within a poll (100 ms) and its planning and read
    # tasks meet the dead leaders, or the partitions between two leaders, while Ray takes ~1-2 s to see the node gone.
    finished = _rounds()
    wait_for(lambda: _rounds() > finished, FAILOVER_S, "a round to finish")
    acked_before = writer.acks.count()
    in_flight = _rounds()
    removed_at = time.monotonic()
    old_dirs = nodes.remove(victim)
    wait_for(lambda: _rounds() > in_flight, FAILOVER_S, f"removal {removal}: the round in flight to finish")
    round_s = time.monotonic() - removed_at
    wait_for(lambda: victim not in _leaders().values(), FAILOVER_S, f"removal {removal}: {led[victim]} led elsewhere")
    failover_s = time.monotonic() - removed_at
    failover = f"{len(led[victim])} leaders moved in {failover_s:.1f} s, the round in flight ended at {round_s:.1f} s"
    wait_for(
        lambda: writer.acks.count() >= acked_before + int(WRITE_S * RECORDS_PER_SECOND),
        FAILOVER_S,
        f"removal {removal}: writes acknowledged after the failover",
    )
    back = nodes.add(old_dirs)
    wait_for(_full_isr, REJOIN_S, f"removal {removal}: the returning disks in every ISR")
    wait_for(
        lambda: all(_leaders()[partition] == back for partition in led[victim]),
        REJOIN_S,
        f"removal {removal}: the returning disks leading {led[victim]} again",
    )
    return f"{failover}, leading again at {time.monotonic() - removed_at:.1f} s"


def test_leader_failovers_during_translation_lose_and_repeat_nothing(nodes: Nodes) -> None:
    """Slow (~60 s): each removal waits for the failover, then for a new node to start and rejoin the ISR."""
    config = BrokerConfig.from_properties({"log.dirs": str(nodes.dirs[nodes.head][0])})
    Admin().create_topic(
        TOPIC,
        PARTITIONS,
        replication_factor=3,
        config={"min.insync.replicas": "2", "iceberg.mode": "key_value", "iceberg.target.lag.ms": "200"},
    )
    wait_for(_full_isr, REJOIN_S, f"every follower of {TOPIC} in its ISR")
    writer = KeyedWriter()
    try:
        failovers = [_fail_over_and_rejoin(nodes, writer, removal) for removal in range(REMOVALS)]
        time.sleep(WRITE_S)
    finally:
        writer.stop()
    # A send in flight at a leader change may fail with OutOfOrderSequenceError (see
    # tests/actors/test_zz_replication.py): never acknowledged, so in the log at most once, as the oracle reads it.
    assert all(isinstance(error, OutOfOrderSequenceError) for error in writer.acks.failures), writer.acks.failures[:3]
    expected, ends = read_committed(TOPIC, PARTITIONS, CATCH_UP_S)
    wait_for_table(TOPIC, ends, CATCH_UP_S)
    rows = table_rows(config, TOPIC)
    in_table = [(partition, offset) for partition, offset, _, _ in rows]
    duplicated = len(in_table) - len(set(in_table))
    missing = sorted({(p, o) for p, o, _, _ in expected} - set(in_table))
    assert duplicated == 0, f"{duplicated} records are in the table twice"
    assert not missing, f"{len(missing)} records of the log are missing from the table: {missing[:12]}"
    assert rows == expected, "the table's rows differ from the log's read_committed records"
    acked = {(p, o, b"k" + value[1:], value) for p, sent in writer.acks.snapshot().items() for o, value in sent.items()}
    assert acked <= set(rows), f"{len(acked - set(rows))} acknowledged records are not in the table"
    status = iceberg_driver_status(TOPIC)[0]
    print(
        f"{REMOVALS} removals ({'; '.join(failovers)}): {len(rows)} rows, {len(acked)} acknowledged, "
        f"{len(writer.acks.failures)} sends failed; {status.rounds} rounds"
    )
    # The readers wait out a leader change (`cluster.records.range_reading`), so no round fails and pauses the topic.
    assert status.rounds_failed == 0, f"{status.rounds_failed} rounds failed across the failovers"
