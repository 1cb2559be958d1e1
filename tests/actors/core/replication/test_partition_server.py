"""`PartitionServer`, what one replica serves in both hosts, without Ray: a real `Log` and `Replica` in a temporary
folder, the controller's states handed over by the test.

Oracles: Kafka's rules for a partition's leader (only the leader takes appends and client reads; `acks=all` on a
partition with one replica is acknowledged once appended; a retried idempotent batch is not counted twice) and the
long poll's contract (answers once `min_bytes` are there, at once when every slot is taken), which a share fetch
that finds nothing to acquire keeps too (answered once an acknowledgement frees records)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from actors.core.replication.follower import ReplicaSettings
from actors.core.replication.leader_and_isr import LeaderAndIsr
from actors.core.replication.log_changes import LogChanges
from actors.core.replication.partition_server import PartitionServer
from actors.core.replication.replica import ACKS_ALL, Replica
from actors.core.shares.acknowledgements import AcknowledgementBatch, AcknowledgeType
from actors.core.shares.group_share_config import EARLIEST, ResolvedShareConfig
from actors.core.shares.leader_shares import ShareFetched
from storage.clock import MockClock
from storage.errors import BrokerNotAvailableError, InvalidRecordStateError, NotLeaderOrFollowerError
from storage.records.layout import ControlRecordType
from storage.records.share_group_state import ShareGroupState
from tests.storage.builders import START_MS, batch_bytes, open_log, simple_records

TOPIC, PARTITION = "t", 0
# A long poll that should be woken by an append long before this.
WAIT_MS = 5_000


class Produced:
    """The appends the server reports to its metrics (`RoleMetrics`)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, int]] = []

    def produced(self, topic: str, records: int, size_bytes: int) -> None:
        self.records.append((topic, records))

    def isr_changed(self, before: int, after: int) -> None:
        pass

    def share_acknowledged(self, records_by_type: Mapping[str, int]) -> None:
        pass


@pytest.fixture(autouse=True)
def no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """Durability is not under test: every epoch change writes an fsynced checkpoint."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


@pytest.fixture
def metrics() -> Produced:
    return Produced()


@pytest.fixture
def slots() -> threading.BoundedSemaphore:
    return threading.BoundedSemaphore(1)


@pytest.fixture
def server(tmp_path: Path, metrics: Produced, slots: threading.BoundedSemaphore) -> Iterator[PartitionServer]:
    log = open_log(tmp_path / f"{TOPIC}-{PARTITION}", MockClock(START_MS))
    log.become_leader()
    changes = LogChanges()
    replica = Replica(log, "a", ReplicaSettings(), changes)
    served = PartitionServer(log, replica, changes, topic=TOPIC, metrics=metrics, long_poll_slots=slots)
    yield served
    replica.stop(BrokerNotAvailableError("closed"))
    log.close()


def records(count: int, **batch: int) -> bytes:
    return batch_bytes(simple_records(count), **batch)


def test_an_append_is_offsets_metrics_and_a_change_and_acks_all_alone_needs_no_wait(
    server: PartitionServer, metrics: Produced
) -> None:
    seen = server.changes.count
    first = server.append(records(3))
    second = server.append(records(2), ACKS_ALL)
    assert (first.first_offset, first.last_offset, second.first_offset, second.last_offset) == (0, 2, 3, 4)
    assert server.changes.count == seen + 2
    assert server.await_replicated(second, timeout_ms=0) is second
    assert server.offsets() == (0, 5, 5)
    assert metrics.records == [(TOPIC, 3), (TOPIC, 2)]


def test_a_retried_idempotent_batch_is_answered_again_but_counted_once(
    server: PartitionServer, metrics: Produced
) -> None:
    idempotent = records(4, producer_id=7, producer_epoch=0, base_sequence=0)
    first = server.append(idempotent)
    retried = server.append(idempotent)
    assert (retried.first_offset, retried.last_offset) == (first.first_offset, first.last_offset)
    assert metrics.records == [(TOPIC, 4)]
    assert server.offsets()[2] == 4
    assert [producer.producer_id for producer in server.describe_producers()] == [7]


def test_a_follower_refuses_appends_client_reads_and_delete_records(server: PartitionServer) -> None:
    server.append(records(2))
    server.replica.update(LeaderAndIsr(TOPIC, PARTITION, "b", 1, ("a", "b"), ("a", "b")))
    for refused in (
        lambda: server.append(records(1)),
        lambda: server.append_transaction_marker(7, 0, 0, ControlRecordType.ABORT),
        lambda: server.fetch(0, 1 << 20),
        lambda: server.list_offset(-1),
        lambda: server.describe_producers(),
        lambda: server.delete_records(1),
    ):
        with pytest.raises(NotLeaderOrFollowerError):
            refused()
    assert server.offsets()[0] == 0


def test_share_offsets_are_the_leaders_with_its_high_watermark_and_epoch_and_a_follower_refuses_them(
    server: PartitionServer,
) -> None:
    """DescribeShareGroupOffsets' lag is the leader's high watermark less the start offset (nothing done above it;
    an altered start offset is written with leader epoch 0); Alter, Delete and Describe are the leader's only, and a
    follower's refusal changes nothing."""
    server.append(records(5))
    assert server.share_offsets("g") is None
    server.alter_share_offset("g", 2)
    offsets = server.share_offsets("g")
    assert offsets is not None and (offsets.start_offset, offsets.leader_epoch, offsets.lag) == (2, 0, 3)
    assert server.delete_share_state("g") is True
    assert server.share_offsets("g") is None
    server.alter_share_offset("g", 2)
    server.replica.update(LeaderAndIsr(TOPIC, PARTITION, "b", 1, ("a", "b"), ("a", "b")))
    for refused in (
        lambda: server.share_offsets("g"),
        lambda: server.alter_share_offset("g", 0),
        lambda: server.delete_share_state("g"),
    ):
        with pytest.raises(NotLeaderOrFollowerError):
            refused()
    assert server.shares.summary("g", 0) is not None


def test_a_long_poll_answers_at_once_when_every_slot_is_taken_else_once_min_bytes_are_there(
    server: PartitionServer, slots: threading.BoundedSemaphore
) -> None:
    def size() -> int:
        return len(server.fetch(0, 1 << 20).records)

    assert slots.acquire(blocking=False)  # every slot taken (there is one), as by other waiting polls
    started = time.monotonic()
    assert server.long_poll(size, lambda found: found, WAIT_MS, 1) == 0
    assert time.monotonic() - started < WAIT_MS / 1000 / 2
    slots.release()

    answered: list[int] = []
    waiting = threading.Thread(target=lambda: answered.append(server.long_poll(size, lambda found: found, WAIT_MS, 1)))
    started = time.monotonic()
    waiting.start()
    server.append(records(2))
    waiting.join(WAIT_MS / 1000)
    assert answered and answered[0] > 0
    assert time.monotonic() - started < WAIT_MS / 1000 / 2


def test_a_share_fetch_that_finds_every_record_locked_waits_until_an_acknowledgement_frees_some(
    server: PartitionServer,
) -> None:
    """As Kafka's delayed share fetch: a member finding nothing to acquire waits up to its `max_wait_ms`, and is
    answered as soon as another member's acknowledgement (here a RELEASE) makes records available again."""
    config = ResolvedShareConfig(auto_offset_reset=EARLIEST)
    server.append(records(5))
    held = server.share_fetch("g", "a", config, 1 << 20, 100)
    assert [(r.first_offset, r.last_offset) for r in held.acquired] == [(0, 4)]

    started = time.monotonic()
    assert server.share_fetch("g", "b", config, 1 << 20, 100, max_wait_ms=200).acquired == ()
    assert time.monotonic() - started >= 0.2

    answered: list[ShareFetched] = []
    waiting = threading.Thread(
        target=lambda: answered.append(server.share_fetch("g", "b", config, 1 << 20, 100, max_wait_ms=WAIT_MS))
    )
    started = time.monotonic()
    waiting.start()
    time.sleep(0.1)
    server.share_acknowledge("g", "a", config, [AcknowledgementBatch(0, 4, (AcknowledgeType.RELEASE,))])
    waiting.join(WAIT_MS / 1000)
    assert [(r.first_offset, r.last_offset) for r in answered[0].acquired] == [(0, 4)]
    assert time.monotonic() - started < WAIT_MS / 1000 / 2


class _GatedStates:
    """Durable share-partition states by group whose writes wait at `gate` once `held` is set (a slow state write:
    a Ray call and an acks=all append on Ray)."""

    def __init__(self) -> None:
        self.states: dict[str, ShareGroupState] = {}
        self.held = threading.Event()
        self.gate = threading.Event()

    def read_state(self, group_id: str) -> ShareGroupState:
        return self.states.get(group_id, ShareGroupState())

    def write_state(self, group_id: str, state: ShareGroupState) -> None:
        if self.held.is_set():
            assert self.gate.wait(WAIT_MS / 1000)
        self.states[group_id] = state


def test_a_waiting_share_fetch_takes_what_an_acknowledgement_frees_before_its_state_is_durable(
    tmp_path: Path, metrics: Produced
) -> None:
    """An acknowledgement wakes the ShareFetches waiting at the leader once it is applied, not once its state is
    written: another member acquires the records it let through (new records, whose acquisition writes nothing)
    while the acknowledging call still waits for its write, and that call answers once the write is durable."""
    log = open_log(tmp_path / f"{TOPIC}-{PARTITION}", MockClock(START_MS))
    log.become_leader()
    changes = LogChanges()
    replica = Replica(log, "a", ReplicaSettings(), changes)
    states = _GatedStates()
    server = PartitionServer(log, replica, changes, topic=TOPIC, metrics=metrics, share_states=states)
    config = ResolvedShareConfig(auto_offset_reset=EARLIEST, max_record_locks=5)
    try:
        server.append(records(5))
        held = server.share_fetch("g", "a", config, 1 << 20, 100)
        assert [(r.first_offset, r.last_offset) for r in held.acquired] == [(0, 4)]
        server.append(records(5))
        answered: list[ShareFetched] = []
        waiting = threading.Thread(
            target=lambda: answered.append(server.share_fetch("g", "b", config, 1 << 20, 100, max_wait_ms=WAIT_MS))
        )
        waiting.start()
        states.held.set()
        accept = [AcknowledgementBatch(0, 4, (AcknowledgeType.ACCEPT,))]
        acknowledging = threading.Thread(target=server.share_acknowledge, args=("g", "a", config, accept))
        acknowledging.start()
        waiting.join(WAIT_MS / 1000 / 2)
        assert answered, "the waiting fetch was not answered while the acknowledgement's state was being written"
        assert [(r.first_offset, r.last_offset) for r in answered[0].acquired] == [(5, 9)]
        assert acknowledging.is_alive()
        assert states.states["g"].start_offset == 0
        states.gate.set()
        acknowledging.join(WAIT_MS / 1000)
        assert not acknowledging.is_alive()
        assert states.states["g"].start_offset == 5
    finally:
        states.gate.set()
        replica.stop(BrokerNotAvailableError("closed"))
        log.close()


def test_a_share_fetch_applies_the_acknowledgements_it_carries_before_it_acquires(server: PartitionServer) -> None:
    """Kafka's ShareFetch with piggybacked acknowledgements: they are applied first (a RELEASE makes its records
    available to the same fetch, delivered a second time), and one refused (records another member holds) is
    answered in `acknowledge_error` while the fetch still acquires; a refused one changes nothing."""
    config = ResolvedShareConfig(auto_offset_reset=EARLIEST)
    server.append(records(5))
    held = server.share_fetch("g", "a", config, 1 << 20, 100)
    assert [(r.first_offset, r.last_offset, r.delivery_count) for r in held.acquired] == [(0, 4, 1)]
    release = [AcknowledgementBatch(0, 4, (AcknowledgeType.RELEASE,))]
    again = server.share_fetch("g", "a", config, 1 << 20, 100, acknowledgements=release)
    assert again.acknowledge_error is None
    assert [(r.first_offset, r.last_offset, r.delivery_count) for r in again.acquired] == [(0, 4, 2)]

    server.append(records(2))
    accept = [AcknowledgementBatch(0, 4, (AcknowledgeType.ACCEPT,))]
    refused = server.share_fetch("g", "b", config, 1 << 20, 100, acknowledgements=accept)
    assert isinstance(refused.acknowledge_error, InvalidRecordStateError)
    assert [(r.first_offset, r.last_offset, r.delivery_count) for r in refused.acquired] == [(5, 6, 1)]
    assert server.share_fetch("g", "a", config, 1 << 20, 100, acknowledgements=accept).acknowledge_error is None
