"""What the cluster holds once a nemesis run's faults are healed and its clients stopped (`checker.FinalState`): each
partition's records from its leader with whether read_committed sees them, its high watermark and last stable
offset, the replicas that differ from the leader, each group's committed offsets, and the transactions still open.

Collected after `settle`: every partition has a leader with its full ISR and the coordinator lists no open transaction
(an abandoned one is aborted on its `transaction.timeout.ms`), or the time runs out, and what is left open is then an
anomaly of the checker's. Replicas are compared below the smallest high watermark any of them reports, since a
follower learns the leader's high watermark one fetch later.
"""

from __future__ import annotations

import time
from typing import Any

from actors.calls import call
from actors.clients.broker import Broker, transaction_coordinator
from actors.clients.consumer import Consumer
from actors.server.partition_lookup import replica_actor
from storage.errors import RaybrokerError
from storage.records.file_records import iter_any_batches
from storage.records.record_batch import RecordBatch
from tests.reliability.nemesis.checker import FinalState, PartitionLog

OPEN_STATES = {"Ongoing", "PrepareCommit", "PrepareAbort"}
READ_CHUNK = 1 << 24


def open_transactions() -> list[str] | None:
    """The transactional ids the coordinator lists as open; None while it cannot answer (it loads, or restarts)."""
    try:
        ctrl = Broker.connect().controller
        coordinator = transaction_coordinator(call(ctrl.transaction_config.remote()))
        listed = call(coordinator.list_transactions.remote([], [], -1), timeout_s=30)
    except RaybrokerError as exc:
        if not exc.retriable:
            raise
        return None
    return sorted(t.transactional_id for t in listed if t.state in OPEN_STATES)


def settle(topics: dict[str, int], timeout_s: float) -> None:
    """Waits until every partition of `topics` has its whole replica set in sync and its leader's high watermark at
    its log end, and the coordinator lists no open transaction, or `timeout_s` passed. The high watermark is awaited
    because a leader elected late (the preferred one, back in the ISR) starts at the high watermark it knew as a
    follower and raises it only once each follower fetched from it: read then, the log's last records would look
    truncated."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            in_sync = all(
                _settled(topic, partition, state) for topic in topics for partition, state in _states(topic).items()
            )
        except RaybrokerError:
            in_sync = False
        if in_sync and open_transactions() == []:
            return
        time.sleep(0.5)


def _settled(topic: str, partition: int, state: Any) -> bool:
    if state.offline or set(state.isr) != set(state.replicas):
        return False
    _, high_watermark, log_end = call(replica_actor(topic, partition, state.leader).offsets.remote())
    return bool(high_watermark == log_end)


def _states(topic: str) -> dict[int, Any]:
    metadata = Broker.connect().topic(topic)
    return {p: metadata.state(p) for p in metadata.partitions}


def _records(handle: Any, upto: int) -> list[tuple[int, str, int]]:
    """(offset, value, producer id) of every data record below `upto` in a replica."""
    found = []
    offset = 0
    while offset < upto:
        batches = [
            b for b in iter_any_batches(call(handle.read.remote(offset, READ_CHUNK))) if isinstance(b, RecordBatch)
        ]
        if not batches:
            break
        for batch in batches:
            if batch.is_control:
                continue
            found.extend(
                (record.offset, (record.value or b"").decode(), batch.producer_id)
                for record in batch.records()
                if offset <= record.offset < upto
            )
        offset = batches[-1].next_offset
    return found


def _visible(topic: str, partition: int, upto: int) -> set[int]:
    """The offsets below `upto` a read_committed consumer returns."""
    seen: set[int] = set()
    with Consumer(auto_offset_reset="earliest", isolation_level="read_committed") as consumer:
        consumer.assign([(topic, partition)])
        deadline = time.monotonic() + 60
        while consumer.position((topic, partition)) < upto and time.monotonic() < deadline:
            seen.update(record.offset for record in consumer.poll(timeout_ms=200))
    return seen


def collect(topics: dict[str, int], groups: list[str]) -> FinalState:
    """The final state of `topics` (name -> partition count) and `groups`."""
    logs = {}
    for topic, partitions in topics.items():
        for partition, state in sorted(_states(topic).items())[:partitions]:
            leader = replica_actor(topic, partition, state.leader)
            high_watermark = int(call(leader.offsets.remote())[1])
            last_stable = int(call(leader.list_offset.remote(-1, "txn_committed")).offset)
            records = _records(leader, high_watermark)
            visible = _visible(topic, partition, min(high_watermark, last_stable))
            divergent = []
            for node in state.replicas:
                if node == state.leader:
                    continue
                try:
                    replica = replica_actor(topic, partition, node)
                    upto = min(high_watermark, int(call(replica.offsets.remote())[1]))
                    if _records(replica, upto) != [r for r in records if r[0] < upto]:
                        divergent.append(node[:8])
                except RaybrokerError as exc:
                    divergent.append(f"{node[:8]}: {exc}")
            logs[(topic, partition)] = PartitionLog(
                [(offset, value, offset in visible) for offset, value, _ in records],
                high_watermark,
                last_stable,
                divergent,
            )
    group_offsets = {}
    for group in groups:
        with Consumer(group_id=group) as consumer:
            committed = {}
            for topic, partitions in topics.items():
                for partition in range(partitions):
                    offset = consumer.committed((topic, partition))
                    if offset is not None:
                        committed[(topic, partition)] = offset
            group_offsets[group] = committed
    return FinalState(logs, group_offsets, open_transactions() or [])
